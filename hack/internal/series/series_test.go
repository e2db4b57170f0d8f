/*
Copyright The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package series

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeSource serves module directories from a map.
type fakeSource map[string]string

func (f fakeSource) ModuleDir(path, version string) (string, error) {
	if d, ok := f[path+"@"+version]; ok {
		return d, nil
	}
	return "", errors.New("not published: " + path + "@" + version)
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var fakeUpstream = Upstream{
	Name:         "fake",
	Module:       "example.io/fake",
	Tag:          func(v string) string { return v },
	OverlayRoots: []string{"pkg", "staging"},
	Symlinks:     map[string]string{"Makefile": "build/root/Makefile"},
	Nested:       addStagingModules,
	PRTemplate:   "kubernetes.md",
	Generators: []Generator{
		{Command: "hack/update-codegen.sh", Paths: []string{"zz_generated.*", "staging/src/example.io/client/"}},
		{Command: "hack/update-openapi-spec.sh", Paths: []string{"api/openapi-spec/"}},
	},
}

const upstreamGo = `package a

// Answer is the answer.
func Answer() int {
	return 42
}
`

// fixture is a repository with two groups over a small fake upstream.
type fixture struct {
	repo Repo
	tree *Tree
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	up := filepath.Join(base, "upstream")
	writeFiles(t, up, map[string]string{
		"README":              "fake upstream\nsecond line\n",
		"pkg/a/a.go":          upstreamGo,
		"hack/run.sh":         "#!/bin/sh\necho run\n",
		"build/root/Makefile": "all:\n\techo built\n",
		"go.work":             "go 1.26.0\n\nuse (\n\t.\n\t./staging/src/example.io/lib\n\t./staging/src/example.io/missing\n)\n",
	})
	lib := filepath.Join(base, "lib")
	writeFiles(t, lib, map[string]string{"go.mod": "module example.io/lib\n", "lib.go": "package lib\n"})

	root := filepath.Join(base, "repo")
	writeFiles(t, root, map[string]string{
		"patches/fake/10-first/HEADER": "first: add a new package\n\nWhy it matters.\n\n```release-note\nNONE\n```\n",
		"patches/fake/10-first/files":  "pkg/b/b.go\n",
		"patches/fake/10-first/upstream.patch": `diff --git a/README b/README
--- a/README
+++ b/README
@@ -1,2 +1,3 @@
 fake upstream
 second line
+changed by first
`,
		"pkg/b/b.go":                    "package b\n",
		"patches/fake/10-first/pr":      "kind: feature\n",
		"patches/fake/20-second/HEADER": "second: change the answer\n\n```release-note\nThe answer is 43.\n```\n",
		"patches/fake/20-second/pr":     "kind: bug\n",
		"patches/fake/20-second/upstream.patch": `diff --git a/pkg/a/a.go b/pkg/a/a.go
--- a/pkg/a/a.go
+++ b/pkg/a/a.go
@@ -2,5 +2,5 @@ package a
 
 // Answer is the answer.
 func Answer() int {
-	return 42
+	return 43
 }
`,
	})
	repo := Repo{Root: root}
	tree := &Tree{
		Repo: repo, Up: fakeUpstream,
		Src:  fakeSource{"example.io/fake@v1.0.0": up, "example.io/lib@v0.0.1": lib},
		Pins: map[string]string{"example.io/fake": "v1.0.0", "example.io/lib": "v0.0.1"},
	}
	return &fixture{repo: repo, tree: tree}
}

func (f *fixture) sync(t *testing.T) *State {
	t.Helper()
	st, err := f.tree.Sync()
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return st
}

func (f *fixture) treeFile(t *testing.T, p string) string {
	return readFile(t, filepath.Join(f.tree.Dir(), p))
}

func TestSyncBuildsPristineBaseAndOneCommitPerGroup(t *testing.T) {
	f := newFixture(t)
	st := f.sync(t)
	g := f.tree.git()

	subjects, err := g.run("log", "--reverse", "--format=%s", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	want := "fake v1.0.0\nfirst: add a new package\nsecond: change the answer"
	if subjects != want {
		t.Errorf("commits:\n%s\nwant:\n%s", subjects, want)
	}
	if tag, _ := g.run("rev-parse", "v1.0.0^{commit}"); tag != st.BaseCommit {
		t.Errorf("tag v1.0.0 is at %s, want the base commit %s", tag, st.BaseCommit)
	}
	if got := f.treeFile(t, "README"); !strings.Contains(got, "changed by first") {
		t.Errorf("README not patched: %q", got)
	}
	if got := f.treeFile(t, "pkg/a/a.go"); !strings.Contains(got, "return 43") {
		t.Errorf("a.go not patched: %q", got)
	}
	if got := f.treeFile(t, "pkg/b/b.go"); got != "package b\n" {
		t.Errorf("overlay file: %q", got)
	}
	if got := f.treeFile(t, "staging/src/example.io/lib/lib.go"); got != "package lib\n" {
		t.Errorf("nested module: %q", got)
	}
	if got := f.treeFile(t, "go.work"); strings.Contains(got, "missing") || !strings.Contains(got, "example.io/lib") {
		t.Errorf("go.work should drop only the unpublished module:\n%s", got)
	}
	if link, err := os.Readlink(filepath.Join(f.tree.Dir(), "Makefile")); err != nil || link != "build/root/Makefile" {
		t.Errorf("Makefile symlink: %q %v", link, err)
	}
	if info, err := os.Stat(filepath.Join(f.tree.Dir(), "hack/run.sh")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("scripts must be executable: %v %v", info.Mode(), err)
	}
	if err := f.tree.Unsaved(st); err != nil {
		t.Errorf("a fresh tree has no unsaved edits: %v", err)
	}
}

func TestSyncIsIncrementalAndDeterministic(t *testing.T) {
	f := newFixture(t)
	first := f.sync(t)
	again := f.sync(t)
	if again.Tip() != first.Tip() {
		t.Fatalf("an unchanged repository rebuilt the tree: %s != %s", again.Tip(), first.Tip())
	}
	// Change only the second group: the first group's commit is kept as is.
	writeFiles(t, f.repo.Root, map[string]string{"patches/fake/20-second/HEADER": "second: change the answer again\n"})
	third := f.sync(t)
	if third.Groups[0].Commit != first.Groups[0].Commit {
		t.Errorf("group 10 was re-applied although it did not change")
	}
	if third.Groups[1].Commit == first.Groups[1].Commit {
		t.Errorf("group 20 was not re-applied after its header changed")
	}
	// The same inputs give the same commits in a new tree.
	other := newFixture(t)
	if st := other.sync(t); st.Groups[0].Commit != first.Groups[0].Commit {
		t.Errorf("commits are not deterministic: %s != %s", st.Groups[0].Commit, first.Groups[0].Commit)
	}
}

func TestSyncRefusesToDestroyUnsavedEdits(t *testing.T) {
	f := newFixture(t)
	f.sync(t)
	edited := filepath.Join(f.tree.Dir(), "README")
	writeFiles(t, f.tree.Dir(), map[string]string{"README": "my unsaved edit\n", "pkg/new.go": "package pkg\n"})
	writeFiles(t, f.repo.Root, map[string]string{"patches/fake/20-second/HEADER": "second: something else\n"})

	_, err := f.tree.Sync()
	var ue *UnsavedError
	if !errors.As(err, &ue) {
		t.Fatalf("Sync over unsaved edits: got %v, want an UnsavedError", err)
	}
	if !strings.Contains(err.Error(), "README") || !strings.Contains(err.Error(), "pkg/new.go") || !strings.Contains(err.Error(), "make save") {
		t.Errorf("the error should list the edits and say how to save them:\n%v", err)
	}
	if got := readFile(t, edited); got != "my unsaved edit\n" {
		t.Errorf("the edit was lost: %q", got)
	}

	// A commit made in the tree is unsaved work too.
	g := f.tree.git()
	g.run("add", "-A")
	g.run("commit", "-q", "-m", "local work")
	if _, err := f.tree.Sync(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "local work") {
		t.Errorf("Sync over a tree commit: %v", err)
	}
}

func TestBrokenPatchNamesFileAndHunk(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{"patches/fake/20-second/upstream.patch": `diff --git a/pkg/a/a.go b/pkg/a/a.go
--- a/pkg/a/a.go
+++ b/pkg/a/a.go
@@ -2,5 +2,5 @@ package a
 
 // Answer is not what upstream says.
 func Answer() int {
-	return 42
+	return 43
 }
`})
	_, err := f.tree.Sync()
	var pe *PatchError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a PatchError", err)
	}
	msg := err.Error()
	for _, want := range []string{"patches/fake/20-second/upstream.patch", "pkg/a/a.go", "@@ -2,5 +2,5 @@ package a", "patch line 4"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error should name %q:\n%s", want, msg)
		}
	}
	// The tree stays at the last group that applied, clean, and a fixed patch resumes there.
	st, _ := f.tree.LoadState()
	if len(st.Groups) != 1 || f.tree.Unsaved(st) != nil {
		t.Fatalf("after a failed group the tree should be clean at group 10: %+v %v", st, f.tree.Unsaved(st))
	}
	fresh := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{"patches/fake/20-second/upstream.patch": readFile(t, filepath.Join(fresh.repo.Root, "patches/fake/20-second/upstream.patch"))})
	if st := f.sync(t); len(st.Groups) != 2 {
		t.Errorf("fixed patch did not apply: %+v", st)
	}
}

func TestSaveWritesEditsIntoTheirGroups(t *testing.T) {
	f := newFixture(t)
	f.sync(t)
	writeFiles(t, f.tree.Dir(), map[string]string{
		"README":     "fake upstream\nsecond line\nchanged by first, edited in the tree\n",
		"pkg/b/b.go": "package b\n\n// B is new.\nconst B = 1\n",
		"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 44", 1),
	})
	saved, err := f.tree.Save("")
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if strings.Join(saved, ",") != "10-first,20-second" {
		t.Errorf("saved into %v", saved)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "pkg/b/b.go")); !strings.Contains(got, "const B = 1") {
		t.Errorf("overlay file not written back: %q", got)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/10-first/upstream.patch")); !strings.Contains(got, "+changed by first, edited in the tree") {
		t.Errorf("group 10's patch not updated:\n%s", got)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/20-second/upstream.patch")); !strings.Contains(got, "+\treturn 44") {
		t.Errorf("group 20's patch not updated:\n%s", got)
	}
	// Index lines have eight digits, whatever the size of the tree's
	// repository (git's own choice would be seven in one this small).
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/10-first/upstream.patch")); !regexp.MustCompile(`(?m)^index [0-9a-f]{8}\.\.[0-9a-f]{8} `).MatchString(got) {
		t.Errorf("group 10's patch has no eight-digit index line:\n%s", got)
	}
	st, _ := f.tree.LoadState()
	if err := f.tree.Unsaved(st); err != nil {
		t.Errorf("after saving the tree is clean: %v", err)
	}
	if again := f.sync(t); again.Tip() != st.Tip() {
		t.Errorf("the saved repository rebuilds another tree: %s != %s", again.Tip(), st.Tip())
	}
	// A new file needs a group; with one it joins that group's files.
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/c/c.go": "package c\n"})
	if _, err := f.tree.Save(""); err == nil || !strings.Contains(err.Error(), "pkg/c/c.go") || !strings.Contains(err.Error(), "GROUP=") {
		t.Fatalf("saving a path no group touches needs GROUP: %v", err)
	}
	if got := f.treeFile(t, "pkg/c/c.go"); got != "package c\n" {
		t.Errorf("the refused edit was lost: %q", got)
	}
	if _, err := f.tree.Save("second"); err != nil {
		t.Fatalf("Save into second: %v", err)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/20-second/files")); got != "pkg/c/c.go\n" {
		t.Errorf("files of group 20: %q", got)
	}
	f.sync(t)
	if inSync, err := f.tree.RoundTrip(t.TempDir()); err != nil || !inSync {
		t.Errorf("round trip after saving: %v (compared with the materialized tree: %v)", err, inSync)
	}
}

// A build output left in the tree (a compiled kubelet at its root once went
// into a group's upstream.patch this way) is refused, and nothing is saved.
func TestSaveRefusesBinaryFiles(t *testing.T) {
	f := newFixture(t)
	st := f.sync(t)
	writeFiles(t, f.tree.Dir(), map[string]string{
		"kubelet":    "\x7fELF\x02\x01\x01\x00\x00\x00binary",
		"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 44", 1),
	})
	_, err := f.tree.Save("10-first")
	if err == nil || !strings.Contains(err.Error(), "binary") || !strings.Contains(err.Error(), "kubelet") || strings.Contains(err.Error(), "a.go") {
		t.Fatalf("got %v, want a refusal naming kubelet only", err)
	}
	if head, _ := f.tree.git().run("rev-parse", "HEAD"); head != st.Tip() {
		t.Errorf("HEAD moved to %s", head)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/10-first/upstream.patch")); strings.Contains(got, "kubelet") || strings.Contains(got, "return 44") {
		t.Errorf("the repository changed:\n%s", got)
	}
	if got := f.treeFile(t, "pkg/a/a.go"); !strings.Contains(got, "return 44") {
		t.Errorf("the edit was lost: %q", got)
	}
}

// A binary file the series carries as a file of its own (upstream's protobuf
// fixture of a new API) is saved like any other; before, every change of it was
// refused as a build output.
func TestSaveWritesBackABinaryFileTheSeriesCarries(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{
		"patches/fake/10-first/files": "pkg/b/b.go\npkg/b/testdata/b.pb\n",
		"pkg/b/testdata/b.pb":         "\n\x04b\x00\x01",
	})
	f.sync(t)
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/b/testdata/b.pb": "\n\x04b\x00\x02"})
	if _, err := f.tree.Save(""); err != nil {
		t.Fatalf("saving a carried binary file: %v", err)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "pkg/b/testdata/b.pb")); got != "\n\x04b\x00\x02" {
		t.Errorf("the repository holds %q, want the tree's", got)
	}
}

// A group's commit message edited after the tree was built does not stop a save:
// saving writes patches and files, never a HEADER. The next sync still rebuilds the
// group, so that its commit carries the new message. Before, the save was refused
// as if the group's code had changed.
func TestSaveAfterAHeaderEdit(t *testing.T) {
	f := newFixture(t)
	f.sync(t)
	header := filepath.Join(f.repo.Root, "patches/fake/10-first/HEADER")
	writeFiles(t, f.repo.Root, map[string]string{"patches/fake/10-first/HEADER": "first: a better subject\n\nWhy it changes.\n"})
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 44", 1)})
	if _, err := f.tree.Save(""); err != nil {
		t.Fatalf("Save after a HEADER edit: %v", err)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/20-second/upstream.patch")); !strings.Contains(got, "+\treturn 44") {
		t.Errorf("the edit was not saved:\n%s", got)
	}
	if got := readFile(t, header); got != "first: a better subject\n\nWhy it changes.\n" {
		t.Errorf("the HEADER edit was lost: %q", got)
	}
	st := f.sync(t)
	if msg, _ := f.tree.git().run("log", "-1", "--format=%s", st.Groups[0].Commit); msg != "first: a better subject" {
		t.Errorf("after the next sync group 10's commit says %q", msg)
	}
	if got := f.treeFile(t, "pkg/a/a.go"); !strings.Contains(got, "return 44") {
		t.Errorf("the rebuilt tree lost the saved edit: %q", got)
	}
	// A change of a group's code is still refused.
	writeFiles(t, f.repo.Root, map[string]string{"pkg/b/b.go": "package b\n\n// B changed in the repository.\nconst B = 2\n"})
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 46", 1)})
	if _, err := f.tree.Save(""); err == nil || !strings.Contains(err.Error(), "changed in the repository") {
		t.Errorf("saving over a group whose files changed: %v", err)
	}
}

// An edit that keeps a file's size and stat times, as one made in the second of the
// checkout does, is saved: git tells such a file from an unchanged one only by the
// index's own time, which the save's copy of the index must keep. Before, the copy
// had the time it was made, git trusted the stale stat data and the edit was left
// unsaved (TestSaveAfterAHeaderEdit failed that way in a fresh clone).
func TestSaveFindsAnEditWithTheStatDataOfTheCheckout(t *testing.T) {
	f := newFixture(t)
	f.sync(t)
	g := f.tree.git()
	// ctime cannot be set; git ignores it here as it does where core.trustctime is off.
	if _, err := g.run("config", "core.trustctime", "false"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(f.tree.Dir(), "pkg/a/a.go")
	index := filepath.Join(f.tree.Dir(), ".git", "index")
	checkout := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(file, checkout, checkout); err != nil {
		t.Fatal(err)
	}
	if _, err := g.run("update-index", "--refresh"); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 44", 1)})
	for _, p := range []string{file, index} {
		if err := os.Chtimes(p, checkout, checkout); err != nil {
			t.Fatal(err)
		}
	}
	saved, err := f.tree.Save("")
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if strings.Join(saved, ",") != "20-second" {
		t.Errorf("saved into %v, want 20-second", saved)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/20-second/upstream.patch")); !strings.Contains(got, "+\treturn 44") {
		t.Errorf("the edit was not saved:\n%s", got)
	}
}

func TestSaveConflictLeavesTheTreeAsItWas(t *testing.T) {
	f := newFixture(t)
	st := f.sync(t)
	// Put into group 10 a change to the line group 20 changes: group 20 no longer applies.
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 45", 1)})
	before := f.treeFile(t, "pkg/a/a.go")
	_, err := f.tree.Save("10-first")
	if err == nil || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("got %v, want a conflict", err)
	}
	if got := f.treeFile(t, "pkg/a/a.go"); got != before {
		t.Errorf("the edit changed: %q", got)
	}
	if head, _ := f.tree.git().run("rev-parse", "HEAD"); head != st.Tip() {
		t.Errorf("HEAD moved to %s", head)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/10-first/upstream.patch")); strings.Contains(got, "a.go") {
		t.Errorf("the repository changed:\n%s", got)
	}
}

func TestRoundTripAndExport(t *testing.T) {
	f := newFixture(t)
	st := f.sync(t)
	out := t.TempDir()
	ex, err := f.tree.Export(out, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Groups) != 2 || len(ex.Groups[0].Patches) != 1 ||
		ex.Groups[0].Patches[0] != filepath.Join(out, "10-first", "0001-first-add-a-new-package.patch") {
		t.Fatalf("export: %+v", ex.Groups)
	}
	p := readFile(t, ex.Groups[0].Patches[0])
	for _, want := range []string{"Subject: [PATCH] first: add a new package", "Why it matters.", "```release-note", "new file mode 100644", "pkg/b/b.go"} {
		if !strings.Contains(p, want) {
			t.Errorf("exported patch lacks %q:\n%s", want, p)
		}
	}
	if inSync, err := f.tree.RoundTrip(t.TempDir()); err != nil || !inSync {
		t.Fatalf("round trip: %v (compared with the materialized tree: %v)", err, inSync)
	}
	// The export reads patches/ only: a tree with unsaved edits is left alone.
	writeFiles(t, f.tree.Dir(), map[string]string{"README": "edited in the tree\n"})
	if _, err := f.tree.Export(out, ExportOptions{}); err != nil {
		t.Fatalf("export with an edited tree: %v", err)
	}
	if got := f.treeFile(t, "README"); got != "edited in the tree\n" {
		t.Errorf("the export touched the tree: README is %q", got)
	}
	if again, _ := f.tree.LoadState(); again.Tip() != st.Tip() {
		t.Errorf("the export moved the tree's series")
	}
}

func TestOverlayFilesNeedExactlyOneGroup(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{"pkg/stray/stray.go": "package stray\n"})
	_, err := f.tree.Sync()
	if err == nil || !strings.Contains(err.Error(), "pkg/stray/stray.go belongs to no group") {
		t.Errorf("an unclaimed overlay file: %v", err)
	}
	writeFiles(t, f.repo.Root, map[string]string{"patches/fake/20-second/files": "pkg/b/b.go\npkg/stray/stray.go\n"})
	if _, err := f.tree.Sync(); err == nil || !strings.Contains(err.Error(), "claimed by both 10-first and 20-second") {
		t.Errorf("a file claimed twice: %v", err)
	}
}

func TestBuildVersion(t *testing.T) {
	f := newFixture(t)
	st := f.sync(t)
	v, err := f.tree.BuildVersion()
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1.0.0-carry.2+" + st.Tip()[:12]; v != want {
		t.Errorf("version %q, want %q", v, want)
	}
	writeFiles(t, f.tree.Dir(), map[string]string{"README": "dirty\n"})
	if v, _ := f.tree.BuildVersion(); !strings.HasSuffix(v, ".dirty") {
		t.Errorf("a tree with unsaved edits builds %q, want a .dirty suffix", v)
	}
}

func TestPinsCheck(t *testing.T) {
	p := &Pins{
		Require:  map[string]string{Kubernetes.Module: "v1.36.3", Autoscaler.Module: "v1.8.1"},
		Replaced: map[string]string{"k8s.io/api": "v0.36.3", "k8s.io/client-go": "v0.36.2"},
	}
	err := p.Check()
	if err == nil || !strings.Contains(err.Error(), "k8s.io/client-go is pinned at v0.36.2") || strings.Contains(err.Error(), "k8s.io/api ") {
		t.Errorf("Check: %v", err)
	}
	p.Replaced["k8s.io/client-go"] = "v0.36.3"
	if err := p.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestRepositoryPinsAreConsistent(t *testing.T) {
	p, err := ReadPins("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err != nil {
		t.Error(err)
	}
	pins := p.For(Kubernetes)
	if pins["k8s.io/kubernetes"] == "" || pins["k8s.io/cri-api"] == "" || pins[Autoscaler.Module] != "" {
		t.Errorf("kubernetes pins: %v", pins)
	}
}

func TestTouchedPackages(t *testing.T) {
	f := newFixture(t)
	st := f.sync(t)
	all, err := f.tree.TouchedPackages(st)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(all, " ") != "./pkg/a ./pkg/b" {
		t.Errorf("touched: %v", all)
	}
}

func TestAFailedMaterializationLeavesNoTree(t *testing.T) {
	f := newFixture(t)
	src := f.tree.Src
	f.tree.Src = fakeSource{} // the module cannot be downloaded
	if _, err := f.tree.Sync(); err == nil || !strings.Contains(err.Error(), "not published") {
		t.Fatalf("Sync without the module: %v", err)
	}
	if _, err := os.Stat(f.tree.Dir()); !os.IsNotExist(err) {
		t.Errorf("a half-made tree was left at %s", f.tree.Dir())
	}
	f.tree.Src = src
	if _, err := f.tree.Sync(); err != nil {
		t.Errorf("Sync once the module is there: %v", err)
	}
}

func TestCheckNoBinaries(t *testing.T) {
	dir := t.TempDir()
	patch := filepath.Join(dir, "upstream.patch")
	text := "diff --git a/pkg/a/a.go b/pkg/a/a.go\n--- a/pkg/a/a.go\n+++ b/pkg/a/a.go\n@@ -1 +1 @@\n-a\n+b\n"
	writeFiles(t, dir, map[string]string{"upstream.patch": text})
	if err := (Group{Name: "10-first", Patch: patch}).CheckNoBinaries(); err != nil {
		t.Errorf("a text patch: %v", err)
	}
	writeFiles(t, dir, map[string]string{"upstream.patch": text + "diff --git a/kubelet b/kubelet\nnew file mode 100755\nindex 0000000..1234567\nGIT binary patch\nliteral 10\nzcmV\n\n"})
	if err := (Group{Name: "10-first", Patch: patch}).CheckNoBinaries(); err == nil || !strings.Contains(err.Error(), ": kubelet") {
		t.Errorf("a patch with a binary kubelet: %v, want an error naming kubelet", err)
	}
}

func TestStagingModulesLeaveOutThePublishedRepositoriesOwnFiles(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	writeFiles(t, tree, map[string]string{"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./staging/src/example.io/lib\n)\n"})
	lib := filepath.Join(base, "lib")
	writeFiles(t, lib, map[string]string{
		"go.mod":                       "module example.io/lib\n",
		"hack/update-codegen.sh":       "#!/bin/sh\n",
		"hack/godep-deps.sh":           "#!/bin/bash\necho ${GOPATH}\n",
		"hack/sync-from-kubernetes.sh": "#!/bin/bash\n",
	})
	old := publishedOnly
	t.Cleanup(func() { publishedOnly = old })
	publishedOnly = map[string][]string{"example.io/lib": {"hack/godep-deps.sh", "hack/sync-from-kubernetes.sh", "hack/gone-since.sh"}}
	m := &materializer{tree: tree, src: fakeSource{"example.io/lib@v0.1.0": lib}, pins: map[string]string{"example.io/lib": "v0.1.0"}}
	if err := addStagingModules(m); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tree, "staging/src/example.io/lib/hack")
	for _, f := range []string{"godep-deps.sh", "sync-from-kubernetes.sh"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s should be left out of the tree (stat: %v)", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "update-codegen.sh")); err != nil {
		t.Errorf("the module's other files should be in the tree: %v", err)
	}
	notes := strings.Join(m.notes, "\n")
	for _, want := range []string{"staging/src/example.io/lib/hack/godep-deps.sh is left out", "staging/src/example.io/lib/hack/sync-from-kubernetes.sh is left out"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the base commit's notes should say %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "gone-since") {
		t.Errorf("a listed file the zip does not have needs no note:\n%s", notes)
	}
}
