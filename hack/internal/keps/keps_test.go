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

package keps

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is this repository's root (the test runs in hack/internal/keps).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no repository root at %s: %v", dir, err)
	}
	return dir
}

var (
	sigDir = regexp.MustCompile(`^sig-[a-z]+(-[a-z]+)*$`)
	kepDir = regexp.MustCompile(`^(\d+|NNNN)-[a-z0-9]+(-[a-z0-9]+)*$`)
)

// kepDirs are the directories docs/keps/<sig>/<NNNN-name>/, relative to the root.
func kepDirs(t *testing.T, root string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(root, "docs", "keps", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() {
			rel, _ := filepath.Rel(root, m)
			dirs = append(dirs, filepath.ToSlash(rel))
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no KEP directories under docs/keps/<sig>/<NNNN-name>/")
	}
	return dirs
}

// TestTemplateHeadings keeps TemplateHeadings equal to the template's section
// headings, when the template is next to this repository (../shared/keps).
func TestTemplateHeadings(t *testing.T) {
	path := filepath.Join(root(t), "..", "shared", "keps", "kep-template.md")
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		t.Skipf("no KEP template at %s to compare TemplateHeadings with", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := Headings(string(data)); !slices.Equal(got, TemplateHeadings) {
		t.Errorf("the template's headings are\n%v\nTemplateHeadings are\n%v", got, TemplateHeadings)
	}
}

// TestKEPDocuments checks every docs/keps/<sig>/<NNNN-name>/: its name, README.md
// with every section of the template in order and none of its comments, and a
// kep.yaml that parses strictly and agrees with its directory.
func TestKEPDocuments(t *testing.T) {
	r := root(t)
	for _, dir := range kepDirs(t, r) {
		t.Run(dir, func(t *testing.T) {
			sig, name := filepath.Split(dir)
			if !sigDir.MatchString(filepath.Base(sig)) {
				t.Errorf("%s: the SIG directory is named sig-<name>", sig)
			}
			if !kepDir.MatchString(name) {
				t.Errorf("%s: a KEP directory is named NNNN-short-descriptive-title (the enhancement issue's number, or NNNN until there is one)", name)
			}
			number, _, _ := strings.Cut(name, "-")
			readme, err := os.ReadFile(filepath.Join(r, dir, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range CheckHeadings(string(readme), number) {
				t.Errorf("%s/README.md: %s", dir, p)
			}
			for _, p := range CheckComments(string(readme)) {
				t.Errorf("%s/README.md: %s", dir, p)
			}
			data, err := os.ReadFile(filepath.Join(r, dir, "kep.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			_, problems, err := ParseKEP(data, dir)
			if err != nil {
				t.Fatalf("%s/kep.yaml: %v", dir, err)
			}
			for _, p := range problems {
				t.Errorf("%s/kep.yaml: %s", dir, p)
			}
		})
	}
}

// trees are the materialized trees (make tree), by name.
func trees(t *testing.T, root string) map[string]Tree {
	t.Helper()
	out := map[string]Tree{
		"kubernetes": {Dir: filepath.Join(root, "_output", "kubernetes"), ImportPath: func(dir string) string {
			if rest, ok := strings.CutPrefix(dir, "staging/src/"); ok {
				return rest
			}
			return "k8s.io/kubernetes/" + dir
		}},
		"autoscaler": {Dir: filepath.Join(root, "_output", "autoscaler"), ImportPath: func(dir string) string {
			return "k8s.io/autoscaler/" + dir
		}},
	}
	for name, tr := range out {
		if _, err := os.Stat(filepath.Join(tr.Dir, ".git")); err != nil {
			t.Skipf("no %s tree at %s (make tree): the KEPs' feature gates, metrics and flags are checked against the trees", name, tr.Dir)
		}
		// git grep reads the tree behind go test's back; these reads put the tree's
		// state in the test cache's key, so that a pass is not reused for another
		// tree (a new materialization or commit changes the index).
		_, _ = os.ReadFile(filepath.Join(tr.Dir, ".git", "kube-carry-state.json"))
		_, _ = os.Stat(filepath.Join(tr.Dir, ".git", "index"))
	}
	return out
}

// TestKEPsMatchTheCode checks every KEP against the materialized trees: each
// feature gate of kep.yaml is defined, each component it names is a known one whose
// code uses the gate (directly, or through a package it imports that does), and
// every component whose own code uses the gate is named; every metric of kep.yaml
// and every metric and flag the README names in inline code is defined in the code.
func TestKEPsMatchTheCode(t *testing.T) {
	r := root(t)
	dirs := kepDirs(t, r)
	trs := trees(t, r)

	keps := map[string]*KEP{}
	metricsOf, flagsOf := map[string][]string{}, map[string][]string{}
	var wanted []string
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(r, dir, "kep.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := ParseKEP(data, dir)
		if err != nil {
			t.Fatalf("%s/kep.yaml: %v", dir, err)
		}
		keps[dir] = k
		readme, err := os.ReadFile(filepath.Join(r, dir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		ms, fs := Names(string(readme))
		ms = append(ms, k.Metrics...)
		slices.Sort(ms)
		metricsOf[dir], flagsOf[dir] = slices.Compact(ms), fs
		for _, m := range metricsOf[dir] {
			wanted = append(wanted, MetricParts(m)...)
		}
		wanted = append(wanted, fs...)
	}
	slices.Sort(wanted)
	wanted = slices.Compact(wanted)

	// The literals of both trees, their directories prefixed with the tree's name.
	literals := map[string][]string{}
	for name, tr := range trs {
		lits, err := tr.Literals(wanted)
		if err != nil {
			t.Fatal(err)
		}
		for lit, ds := range lits {
			for _, d := range ds {
				literals[lit] = append(literals[lit], name+":"+d)
			}
		}
	}

	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			k := keps[dir]
			t.Logf("feature gates %v; metrics %v; flags %v", k.FeatureGates, metricsOf[dir], flagsOf[dir])
			for _, g := range k.FeatureGates {
				checkGate(t, trs, g)
			}
			for _, m := range metricsOf[dir] {
				if !MetricDefined(m, literals) {
					t.Errorf("metric %s: not defined in the code of either tree", m)
				}
			}
			for _, f := range flagsOf[dir] {
				if len(literals[f]) == 0 {
					t.Errorf("flag --%s: no flag of that name in the code of either tree", f)
				}
			}
		})
	}
}

func checkGate(t *testing.T, trs map[string]Tree, g FeatureGate) {
	t.Helper()
	var treeName string
	for name, tr := range trs {
		ok, err := tr.GateDefined(g.Name)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			treeName = name
		}
	}
	if treeName == "" {
		t.Errorf("feature gate %s: not defined in either tree (%s featuregate.Feature = %q)", g.Name, g.Name, g.Name)
		return
	}
	tr := trs[treeName]
	users, err := tr.GateUsers(g.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The packages that use the gate, for the components that reach it through them.
	var pkgs []string
	for _, f := range users {
		pkgs = append(pkgs, tr.ImportPath(filepath.ToSlash(filepath.Dir(f))))
	}
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)

	var listed []string
	for _, c := range g.Components {
		comp, ok := Components[c]
		if !ok {
			t.Errorf("feature gate %s: unknown component %q (known: %s)", g.Name, c, strings.Join(sortedComponents(), ", "))
			continue
		}
		if comp.Tree != treeName {
			t.Errorf("feature gate %s: component %s is not in the %s tree, which defines the gate", g.Name, c, treeName)
			continue
		}
		listed = append(listed, comp.Prefixes...)
		if len(underAny(users, comp.Prefixes)) > 0 {
			continue
		}
		importers, err := tr.Importers(pkgs, comp.Prefixes)
		if err != nil {
			t.Fatal(err)
		}
		if len(importers) == 0 {
			t.Errorf("feature gate %s: component %s neither uses it (under %s) nor imports a package that does (%s)", g.Name, c, strings.Join(comp.Prefixes, ", "), strings.Join(pkgs, ", "))
		}
	}
	for _, c := range sortedComponents() {
		comp := Components[c]
		if comp.Tree != treeName {
			continue
		}
		for _, f := range underAny(users, comp.Prefixes) {
			if len(underAny([]string{f}, listed)) == 0 {
				t.Errorf("feature gate %s: %s uses it in %s, but kep.yaml does not name that component", g.Name, c, f)
				break
			}
		}
	}
}

func sortedComponents() []string {
	var out []string
	for c := range Components {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

func TestHeadingsLeaveOutCommentsAndCode(t *testing.T) {
	doc := "# KEP-1: A\n<!--\n## Hidden\n-->\n## Summary <!-- note -->\n```\n## Code\n```\n<!-- one line --> \n### Goals\n"
	want := []Heading{{1, "KEP-1: A"}, {2, "Summary"}, {3, "Goals"}}
	if got := Headings(doc); !slices.Equal(got, want) {
		t.Errorf("Headings = %v, want %v", got, want)
	}
}

func TestCheckHeadings(t *testing.T) {
	var b strings.Builder
	for _, h := range TemplateHeadings {
		if h.Level == 1 {
			b.WriteString("# KEP-42: Title\n")
			continue
		}
		text := h.Text
		if text == "Story 1" {
			text += ": a story"
		}
		b.WriteString(h.String()[:h.Level] + " " + text + "\n#### Extra\n")
	}
	full := b.String()
	if p := CheckHeadings(full, "42"); len(p) != 0 {
		t.Errorf("a README with every heading: %v", p)
	}
	if p := CheckHeadings(full, "43"); len(p) != 1 || !strings.Contains(p[0], "KEP-43") {
		t.Errorf("another number: %v", p)
	}
	missing := strings.Replace(full, "###### What are other known failure modes?\n", "", 1)
	if p := CheckHeadings(missing, "42"); len(p) != 1 || !strings.Contains(p[0], "known failure modes") {
		t.Errorf("a missing section: %v", p)
	}
	relevelled := strings.Replace(full, "### Scalability\n", "## Scalability\n", 1)
	if p := CheckHeadings(relevelled, "42"); len(p) != 1 || !strings.Contains(p[0], "Scalability") {
		t.Errorf("a section at another level: %v", p)
	}
	swapped := strings.Replace(strings.Replace(full, "## Drawbacks\n", "## X\n", 1), "## Alternatives\n", "## Alternatives\n## Drawbacks\n", 1)
	if p := CheckHeadings(swapped, "42"); len(p) != 1 || !strings.Contains(p[0], "out of the template's order") {
		t.Errorf("sections out of order: %v", p)
	}
}

func TestCheckComments(t *testing.T) {
	if p := CheckComments("<!-- toc -->\n- [A](#a)\n<!-- /toc -->\n"); len(p) != 0 {
		t.Errorf("the table of contents' markers: %v", p)
	}
	if p := CheckComments("text\n<!--\nThis is the title of your KEP.\n-->\n"); len(p) != 1 {
		t.Errorf("a template comment left: %v", p)
	}
}

func TestParseKEP(t *testing.T) {
	good := `title: A
kep-number: 42
authors: ["@a"]
owning-sig: sig-node
status: implementable
creation-date: 2026-11-24
reviewers: [TBD]
approvers: [TBD]
stage: alpha
latest-milestone: "v1.37"
milestone:
  alpha: "v1.37"
feature-gates:
  - name: A
    components: [kubelet]
disable-supported: true
metrics: [kubelet_a]
`
	if _, p, err := ParseKEP([]byte(good), "docs/keps/sig-node/42-a"); err != nil || len(p) != 0 {
		t.Errorf("a good kep.yaml: %v %v", err, p)
	}
	if _, p, err := ParseKEP([]byte(strings.Replace(good, "42", "NNNN", 1)), "docs/keps/sig-node/NNNN-a"); err != nil || len(p) != 0 {
		t.Errorf("kep-number NNNN: %v %v", err, p)
	}
	if _, _, err := ParseKEP([]byte(good+"feature-gate: []\n"), "docs/keps/sig-node/42-a"); err == nil {
		t.Error("an unknown field parsed")
	}
	bad := strings.NewReplacer("kep-number: 42", "kep-number: 41", "sig-node", "sig-apps", "status: implementable", "status: done",
		"latest-milestone: \"v1.37\"", "latest-milestone: 1.37", "disable-supported: true\n", "").Replace(good)
	_, p, err := ParseKEP([]byte(bad), "docs/keps/sig-node/42-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kep-number", "owning-sig", "status", "latest-milestone", "disable-supported"} {
		if !slices.ContainsFunc(p, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no problem about %s in %v", want, p)
		}
	}
}

func TestNames(t *testing.T) {
	doc := "The gauge `kubelet_a_b{resource,unit}` and `apiserver_x_total`, not `image_pull_config` nor `kubelet`.\n" +
		"Run `kubectl balloon set-size NODE [--cpu Q] [--rollback-on-failure]` or `--register-with-taints=a=:NoSchedule`;\n" +
		"not `-o json`, not a--b.\n```\n--not-this `kubelet_not_this`\n```\n"
	ms, fs := Names(doc)
	if want := []string{"apiserver_x_total", "kubelet_a_b"}; !slices.Equal(ms, want) {
		t.Errorf("metrics = %v, want %v", ms, want)
	}
	if want := []string{"cpu", "register-with-taints", "rollback-on-failure"}; !slices.Equal(fs, want) {
		t.Errorf("flags = %v, want %v", fs, want)
	}
}

func TestMetricDefined(t *testing.T) {
	lits := map[string][]string{
		"kubelet":                   {"k:pkg/kubelet/metrics"},
		"image_pull_queue_length":   {"k:pkg/kubelet/metrics"},
		"balloon_resource_requests": {"k:pkg/kubelet/metrics/collectors"},
		"apiserver":                 {"k:pkg/a", "k:pkg/b"},
		"feature_lifecycle":         {"k:pkg/a"},
		"features":                  {"k:pkg/a", "k:pkg/c"},
		"whole_metric_name":         {"k:pkg/d"},
		"wait_seconds":              {"k:pkg/kubelet/metrics"},
	}
	for m, want := range map[string]bool{
		"kubelet_image_pull_queue_length":         true,
		"kubelet_balloon_resource_requests":       true, // the subsystem from another package
		"apiserver_feature_lifecycle_features":    true, // three literals of one directory
		"whole_metric_name":                       true,
		"kubelet_wait_seconds_count":              true,
		"kubelet_image_pull_queue_lenght":         false,
		"apiserver_features":                      true,  // "apiserver" and "features" in pkg/a
		"kubelet_features":                        false, // a one-word name needs its prefix in its directory
		"kubelet_balloon_resource_requests_total": false,
	} {
		if got := MetricDefined(m, lits); got != want {
			t.Errorf("MetricDefined(%s) = %v, want %v", m, got, want)
		}
	}
}
