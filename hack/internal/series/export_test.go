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
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// prSection returns the text under a "#### heading" of a PR.md.
func prSection(t *testing.T, pr, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(pr, "\n#### "+heading)
	if !ok {
		t.Fatalf("PR.md has no section %q:\n%s", heading, pr)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	body, _, _ := strings.Cut(rest, "\n#### ")
	return strings.TrimSpace(body)
}

func (f *fixture) export(t *testing.T, opts ExportOptions) *Exported {
	t.Helper()
	ex, err := f.tree.Export(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	return ex
}

func TestPRTextFillsEachSectionFromItsSource(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{
		"patches/fake/10-first/HEADER": "first: add a new package\n\nWhy it matters.\n\n- what it does\n\nKEP: https://kep.k8s.io/1\n\n```release-note\nAdded package b.\n```\n",
		"patches/fake/10-first/pr":     "kind: feature api-change\nissue: #123\ndoc: - [Usage]: https://example.io/b\n\nLook at b.go first.\n\nIt is short.\n",
	})
	pr := readFile(t, f.export(t, ExportOptions{}).Groups[0].PR)
	if first, _, _ := strings.Cut(pr, "\n"); first != "first: add a new package" {
		t.Errorf("title line: %q", first)
	}
	for heading, want := range map[string]string{
		"What type of PR is this?":                     "/kind feature\n/kind api-change",
		"What this PR does / why we need it:":          "Why it matters.\n\n- what it does",
		"Which issue(s) this PR is related to:":        "#123\nKEP: https://kep.k8s.io/1",
		"Special notes for your reviewer:":             "Look at b.go first.\n\nIt is short.",
		"Does this PR introduce a user-facing change?": "```release-note\nAdded package b.\n```",
		"Additional documentation e.g., KEPs (Kubernetes Enhancement Proposals), usage docs, etc.:": "```docs\n- [KEP]: https://kep.k8s.io/1\n- [Usage]: https://example.io/b\n```",
	} {
		if got := prSection(t, pr, heading); got != want {
			t.Errorf("section %q:\ngot  %q\nwant %q", heading, got, want)
		}
	}
	if _, err := os.Stat(f.tree.Dir()); err == nil {
		t.Errorf("the export materialized the tree; it builds its base in a scratch directory")
	}
	if strings.Contains(pr, "<!--") {
		t.Errorf("the template's comments are left in PR.md:\n%s", pr)
	}
	// The second group has no KEP, issue or notes.
	pr = readFile(t, f.export(t, ExportOptions{}).Groups[1].PR)
	if got := prSection(t, pr, "Which issue(s) this PR is related to:"); got != "N/A" {
		t.Errorf("issues without any: %q", got)
	}
}

func TestPRTextNeedsItsInputs(t *testing.T) {
	for name, c := range map[string]struct {
		file, content, want string
	}{
		"no release note":    {"HEADER", "second: change the answer\n\nWhy.\n", "patches/fake/20-second/HEADER: no ```release-note block"},
		"empty release note": {"HEADER", "second: x\n\n```release-note\n\n```\n", "patches/fake/20-second/HEADER: the ```release-note block is empty"},
		"unknown kind":       {"pr", "kind: feature sparkle\n", `patches/fake/20-second/pr:1: kind "sparkle" is not in upstream's template`},
		"no kind":            {"pr", "issue: #1\n", `patches/fake/20-second/pr: no "kind:" line`},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			writeFiles(t, f.repo.Root, map[string]string{"patches/fake/20-second/" + c.file: c.content})
			if _, err := f.tree.Export(t.TempDir(), ExportOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
		})
	}
	f := newFixture(t)
	os.Remove(filepath.Join(f.repo.Root, "patches/fake/20-second/pr"))
	if _, err := f.tree.Export(t.TempDir(), ExportOptions{}); err == nil || !strings.Contains(err.Error(), "patches/fake/20-second/pr: missing") {
		t.Fatalf("a group without a pr file: %v", err)
	}
}

func TestExportPutsGeneratedFilesInTheirOwnCommit(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{
		"patches/fake/10-first/files":        "pkg/b/b.go\npkg/b/zz_generated.deepcopy.go\nstaging/src/example.io/client/c.go\n",
		"pkg/b/zz_generated.deepcopy.go":     "package b\n\n// generated\n",
		"staging/src/example.io/client/c.go": "package client\n",
	})
	f.sync(t)
	ex := f.export(t, ExportOptions{})
	first, second := ex.Groups[0], ex.Groups[1]
	if len(first.Patches) != 2 || len(second.Patches) != 1 {
		t.Fatalf("want 2 patches for the group with generated files and 1 for the other: %+v", ex.Groups)
	}
	hand, gen := readFile(t, first.Patches[0]), readFile(t, first.Patches[1])
	for _, p := range []string{"pkg/b/b.go", "README"} {
		if !strings.Contains(hand, "b/"+p) || strings.Contains(gen, "b/"+p) {
			t.Errorf("%s belongs in the hand-written commit only", p)
		}
	}
	for _, p := range []string{"pkg/b/zz_generated.deepcopy.go", "staging/src/example.io/client/c.go"} {
		if strings.Contains(hand, "b/"+p) || !strings.Contains(gen, "b/"+p) {
			t.Errorf("%s belongs in the generated commit only", p)
		}
	}
	for _, want := range []string{"Subject: [PATCH 2/2] first: update generated files", "for the previous commit,\n\"first: add a new package\"; nothing", "    hack/update-codegen.sh\n"} {
		if !strings.Contains(gen, want) {
			t.Errorf("generated commit lacks %q:\n%s", want, gen)
		}
	}
	if !strings.Contains(hand, "Subject: [PATCH 1/2] first: add a new package") {
		t.Errorf("hand-written commit's subject:\n%s", hand)
	}
	notes := prSection(t, readFile(t, first.PR), "Special notes for your reviewer:")
	if !strings.Contains(notes, `"first: update generated files"`) || !strings.Contains(notes, "hack/update-codegen.sh") {
		t.Errorf("the PR text does not point the reviewer at the generated commit: %q", notes)
	}
	if inSync, err := f.tree.RoundTrip(t.TempDir()); err != nil || !inSync {
		t.Fatalf("round trip of the split export: %v (compared with the materialized tree: %v)", err, inSync)
	}
}

const featuresGo = "package b\n\nconst (\n\t// owner: @kube-carry\n\tGateB = \"GateB\"\n\n\t// owner: @other\n\t// Maintained with @kube-carry in mind.\n\tGateC = \"GateC\"\n)\n"

func TestExportFillsTheOwner(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{
		"patches/fake/10-first/files": "pkg/b/b.go\npkg/b/features.go\n",
		"pkg/b/features.go":           featuresGo,
		// The second group adds a gate next to the first one's: its context names the placeholder too.
		"patches/fake/20-second/upstream.patch": readFile(t, filepath.Join(f.repo.Root, "patches/fake/20-second/upstream.patch")) +
			"diff --git a/pkg/b/features.go b/pkg/b/features.go\n--- a/pkg/b/features.go\n+++ b/pkg/b/features.go\n" +
			"@@ -1,6 +1,9 @@\n package b\n \n const (\n+\t// owner: @kube-carry\n+\tGateA = \"GateA\"\n+\n \t// owner: @kube-carry\n \tGateB = \"GateB\"\n \n",
	})
	f.sync(t)

	ex := f.export(t, ExportOptions{})
	if got := strings.Join(ex.Placeholders, " "); got != "pkg/b/features.go:4 pkg/b/features.go:7" {
		t.Errorf("placeholders left without an owner: %q", got)
	}

	ex = f.export(t, ExportOptions{Owner: "@alice  @bob"})
	if len(ex.Placeholders) != 0 {
		t.Errorf("placeholders left with an owner: %v", ex.Placeholders)
	}
	var patches []string
	for _, g := range ex.Groups {
		patches = append(patches, g.Patches...)
	}
	first, second := readFile(t, patches[0]), readFile(t, patches[1])
	if !strings.Contains(first, "+\t// owner: @alice @bob\n+\tGateB") || !strings.Contains(first, "+\t// Maintained with @kube-carry in mind.") {
		t.Errorf("first group's owner comment:\n%s", first)
	}
	if !strings.Contains(second, "+\t// owner: @alice @bob\n+\tGateA") || !strings.Contains(second, " \t// owner: @alice @bob\n \tGateB") {
		t.Errorf("second group's owner comments:\n%s", second)
	}
	// The export with an owner applies to pristine upstream like the other.
	work := t.TempDir()
	if _, err := (git{dir: work, ident: DefaultIdentity}).run("clone", "-q", f.tree.Dir(), "c"); err != nil {
		t.Fatal(err)
	}
	c := git{dir: filepath.Join(work, "c"), ident: DefaultIdentity}
	if _, err := c.run("checkout", "-q", "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.run(append([]string{"am", "-q"}, patches...)...); err != nil {
		t.Fatalf("git am of the export with an owner: %v", err)
	}
	want := strings.ReplaceAll(featuresGo, "// owner: @kube-carry", "// owner: @alice @bob")
	want = strings.Replace(want, "const (\n", "const (\n\t// owner: @alice @bob\n\tGateA = \"GateA\"\n\n", 1)
	if got := readFile(t, filepath.Join(work, "c", "pkg/b/features.go")); got != want {
		t.Errorf("features.go after git am:\n%s\nwant:\n%s", got, want)
	}

	for _, bad := range []string{"alice", "@kube-carry", "@al ice!"} {
		if _, err := f.tree.Export(t.TempDir(), ExportOptions{Owner: bad}); err == nil || !strings.Contains(err.Error(), "GitHub handles") {
			t.Errorf("owner %q: %v", bad, err)
		}
	}
}

func TestGeneratedFilesOfTheUpstreams(t *testing.T) {
	for _, c := range []struct {
		up        Upstream
		path      string
		generated bool
	}{
		{Kubernetes, "pkg/apis/features/v1alpha1/zz_generated.conversion.go", true},
		{Kubernetes, "staging/src/k8s.io/api/features/v1alpha1/generated.pb.go", true},
		{Kubernetes, "staging/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.pb.go", true},
		{Kubernetes, "staging/src/k8s.io/api/features/v1alpha1/types_swagger_doc_generated.go", true},
		{Kubernetes, "staging/src/k8s.io/client-go/listers/features/v1alpha1/feature.go", true},
		{Kubernetes, "api/openapi-spec/v3/apis__features.k8s.io_openapi.json", true},
		{Kubernetes, "staging/src/k8s.io/api/testdata/HEAD/features.k8s.io.v1alpha1.Feature.pb", true},
		{Kubernetes, "test/compatibility_lifecycle/reference/versioned_feature_list.yaml", true},
		{Kubernetes, "staging/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto", false},
		{Kubernetes, "staging/src/k8s.io/api/features/v1alpha1/types.go", false},
		{Kubernetes, "pkg/features/kube_features.go", false},
		{Kubernetes, "plugin/pkg/auth/authorizer/rbac/bootstrappolicy/testdata/cluster-roles-featuregates.yaml", false},
		{Autoscaler, "vertical-pod-autoscaler/pkg/client/listers/autoscaling.k8s.io/v1alpha1/expansion_generated.go", true},
		{Autoscaler, "vertical-pod-autoscaler/deploy/vpa-v1-crd-gen.yaml", true},
		{Autoscaler, "vertical-pod-autoscaler/docs/flags.md", true},
		{Autoscaler, "vertical-pod-autoscaler/docs/features.md", false},
		{Autoscaler, "vertical-pod-autoscaler/deploy/vpa-rbac.yaml", false},
	} {
		if got := c.up.generator(c.path) != nil; got != c.generated {
			t.Errorf("%s %s: generated %v, want %v", c.up.Name, c.path, got, c.generated)
		}
	}
	for _, u := range Upstreams {
		if _, err := u.prTemplate(); err != nil {
			t.Errorf("%s: %v", u.Name, err)
		}
	}
}
