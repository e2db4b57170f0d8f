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
	"slices"
	"strings"
	"testing"
)

// portFixture is the fixture with a third file in group 10 and an upstream v2.0.0
// that changes the context of group 10's README hunk (a three-way merge resolves
// it) and the line group 20 changes (a conflict).
func portFixture(t *testing.T) (*fixture, Backup) {
	t.Helper()
	f := newFixture(t)
	f.sync(t)
	writeFiles(t, f.tree.Dir(), map[string]string{"hack/run.sh": "#!/bin/sh\necho run by first\n"})
	if _, err := f.tree.Save("10-first"); err != nil {
		t.Fatal(err)
	}
	f.sync(t)

	v1 := f.tree.Src.(fakeSource)["example.io/fake@v1.0.0"]
	v2 := filepath.Join(t.TempDir(), "upstream-v2")
	if err := os.CopyFS(v2, os.DirFS(v1)); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, v2, map[string]string{
		"README":     "fake upstream, second release\nsecond line\n",
		"pkg/a/a.go": strings.Replace(upstreamGo, "return 42", "return 44", 1),
	})
	f.tree.Src.(fakeSource)["example.io/fake@v2.0.0"] = v2
	f.tree.Pins = map[string]string{"example.io/fake": "v2.0.0", "example.io/lib": "v0.0.1"}
	return f, Backup{Dir: filepath.Join(t.TempDir(), "backup")}
}

func TestPortMergesGroupsAndStopsAtAConflict(t *testing.T) {
	f, backup := portFixture(t)
	if needs, err := f.tree.NeedsPort(); err != nil || !needs {
		t.Fatalf("NeedsPort = %v, %v; want true: the pins changed", needs, err)
	}
	err := f.tree.StartPort(backup)
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("StartPort: %v, want a conflict in group 20", err)
	}
	if ce.Group != "20-second" || !slices.Equal(ce.Hand, []string{"pkg/a/a.go"}) {
		t.Errorf("conflict in %s %v, want 20-second [pkg/a/a.go]", ce.Group, ce.Hand)
	}
	if got := f.treeFile(t, "pkg/a/a.go"); conflictMarker([]byte(got)) == 0 || !strings.Contains(got, "return 44") || !strings.Contains(got, "return 43") {
		t.Errorf("a.go should hold both sides between conflict markers:\n%s", got)
	}
	// Group 10 is written back against the new base already.
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/10-first/upstream.patch")); !strings.Contains(got, " fake upstream, second release") {
		t.Errorf("group 10's patch is not against v2.0.0:\n%s", got)
	}
	if _, err := f.tree.Sync(); err == nil || !strings.Contains(err.Error(), "make pin ABORT=1") {
		t.Errorf("Sync during a port: %v, want a refusal that names the way out", err)
	}
	if _, err := f.tree.Save(""); err == nil || !strings.Contains(err.Error(), "being moved") {
		t.Errorf("Save during a port: %v, want a refusal", err)
	}
	if err := f.tree.ContinuePort(backup); err == nil || !strings.Contains(err.Error(), "pkg/a/a.go:") {
		t.Errorf("ContinuePort with the markers left: %v, want a refusal naming the file", err)
	}

	// The fix, and a file the group needs on the new base: both written by hand.
	writeFiles(t, f.tree.Dir(), map[string]string{
		"pkg/a/a.go":                     strings.Replace(upstreamGo, "return 42", "return 45", 1),
		"pkg/a/extra.go":                 "package a\n",
		"pkg/a/zz_generated.deepcopy.go": "package a\n",
	})
	if err := f.tree.ContinuePort(backup); err != nil {
		t.Fatalf("ContinuePort after the fix: %v", err)
	}
	if p, _ := f.tree.LoadPort(); p != nil {
		t.Errorf("the port is still recorded after it finished")
	}
	st := f.sync(t)
	subjects, _ := f.tree.git().run("log", "--format=%s", "HEAD")
	if want := "second: change the answer\nfirst: add a new package\nfake v2.0.0"; subjects != want {
		t.Errorf("commits after the port:\n%s\nwant:\n%s", subjects, want)
	}
	if got := readFile(t, filepath.Join(f.repo.Root, "patches/fake/20-second/upstream.patch")); !strings.Contains(got, "-\treturn 44\n+\treturn 45") {
		t.Errorf("group 20's patch does not carry the fix against v2.0.0:\n%s", got)
	}
	record := readFile(t, filepath.Join(f.repo.Root, "_output", "port-fake-v1.0.0-v2.0.0.md"))
	for _, row := range []string{"| 10-first | 1 | 1 | 0 | 0 | 1 |", "| 20-second | 0 | 0 | 2 | 1 | 0 |", "- regenerated: pkg/a/zz_generated.deepcopy.go", "- merged: README", "- by hand: pkg/a/a.go", "- by hand: pkg/a/extra.go"} {
		if !strings.Contains(record, row) {
			t.Errorf("the record lacks %q:\n%s", row, record)
		}
	}

	// What was written back is the series: a tree made afresh from the repository
	// is the tree the port left.
	tip, _ := f.tree.git().run("rev-parse", st.Tip()+"^{tree}")
	if err := os.RemoveAll(f.tree.Dir()); err != nil {
		t.Fatal(err)
	}
	fresh := f.sync(t)
	if again, _ := f.tree.git().run("rev-parse", fresh.Tip()+"^{tree}"); again != tip {
		t.Errorf("a fresh tree from the ported repository differs from the port's tree")
	}
}

func TestPortAbortPutsEverythingBack(t *testing.T) {
	f, backup := portFixture(t)
	before := map[string]string{}
	for _, p := range []string{"patches/fake/10-first/upstream.patch", "patches/fake/20-second/upstream.patch", "pkg/b/b.go"} {
		before[p] = readFile(t, filepath.Join(f.repo.Root, p))
	}
	old, err := f.tree.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tree.StartPort(backup); err == nil {
		t.Fatal("StartPort: want a conflict")
	}
	writeFiles(t, f.tree.Dir(), map[string]string{"pkg/a/a.go": "half a fix\n"})

	if err := f.tree.AbortPort(); err != nil {
		t.Fatal(err)
	}
	if err := backup.Restore(f.repo.Root); err != nil {
		t.Fatal(err)
	}
	for p, want := range before {
		if got := readFile(t, filepath.Join(f.repo.Root, p)); got != want {
			t.Errorf("%s after the abort:\n%s\nwant:\n%s", p, got, want)
		}
	}
	if head, _ := f.tree.git().run("rev-parse", "HEAD"); head != old.Tip() {
		t.Errorf("the tree is at %s after the abort, want the old tip %s", head, old.Tip())
	}
	if kept, _ := f.tree.git().run("show", "refs/kube-carry/aborted-port:pkg/a/a.go"); kept != "half a fix" {
		t.Errorf("the half-fixed file is not kept: %q", kept)
	}
	if _, err := os.Stat(backup.Dir); !os.IsNotExist(err) {
		t.Errorf("the backup is still there after restoring it: %v", err)
	}
	f.tree.Pins = map[string]string{"example.io/fake": "v1.0.0", "example.io/lib": "v0.0.1"}
	if st := f.sync(t); st.Tip() != old.Tip() {
		t.Errorf("the tree was rebuilt after the abort; it should be up to date")
	}
}

func TestBackupRestoresFilesAndRemovesNewOnes(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"a": "first\n"})
	b := Backup{Dir: filepath.Join(t.TempDir(), "b")}
	for _, p := range []string{"a", "new/file"} {
		if err := b.Save(root, p); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, root, map[string]string{"a": "second\n", "new/file": "x"})
	if err := b.Save(root, "a"); err != nil { // a second save keeps the first copy
		t.Fatal(err)
	}
	if err := b.Restore(root); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "a")); got != "first\n" {
		t.Errorf("a = %q, want the first copy", got)
	}
	if _, err := os.Stat(filepath.Join(root, "new/file")); !os.IsNotExist(err) {
		t.Errorf("a file that was absent is still there: %v", err)
	}
}
