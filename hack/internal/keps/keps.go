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

// Package keps checks the KEP documents in docs/keps/<sig>/<NNNN-name>/ against
// upstream's KEP template and against the code of the materialized trees.
package keps

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Heading is a Markdown ATX heading.
type Heading struct {
	Level int
	Text  string
}

func (h Heading) String() string { return strings.Repeat("#", h.Level) + " " + h.Text }

// TemplateHeadings are the section headings of kubernetes/enhancements' KEP template
// (keps/NNNN-kep-template/README.md, kept as ../shared/keps/kep-template.md next to
// this repository), in order, without those inside its HTML comments (the example
// Alpha/Beta/GA/Deprecation headings of "Graduation Criteria" are in one). The first
// is the title, "KEP-NNNN: Your short, descriptive title", which a KEP replaces.
var TemplateHeadings = []Heading{
	{1, "KEP-NNNN: Your short, descriptive title"},
	{2, "Release Signoff Checklist"},
	{2, "Summary"},
	{2, "Motivation"},
	{3, "Goals"},
	{3, "Non-Goals"},
	{2, "Proposal"},
	{3, "User Stories (Optional)"},
	{4, "Story 1"},
	{4, "Story 2"},
	{3, "Notes/Constraints/Caveats (Optional)"},
	{3, "Risks and Mitigations"},
	{2, "Design Details"},
	{3, "Test Plan"},
	{5, "Prerequisite testing updates"},
	{5, "Unit tests"},
	{5, "Integration tests"},
	{5, "e2e tests"},
	{3, "Graduation Criteria"},
	{3, "Upgrade / Downgrade Strategy"},
	{3, "Version Skew Strategy"},
	{2, "Production Readiness Review Questionnaire"},
	{3, "Feature Enablement and Rollback"},
	{6, "How can this feature be enabled / disabled in a live cluster?"},
	{6, "Does enabling the feature change any default behavior?"},
	{6, "Can the feature be disabled once it has been enabled (i.e. can we roll back the enablement)?"},
	{6, "What happens if we reenable the feature if it was previously rolled back?"},
	{6, "Are there any tests for feature enablement/disablement?"},
	{3, "Rollout, Upgrade and Rollback Planning"},
	{6, "How can a rollout or rollback fail? Can it impact already running workloads?"},
	{6, "What specific metrics should inform a rollback?"},
	{6, "Were upgrade and rollback tested? Was the upgrade->downgrade->upgrade path tested?"},
	{6, "Is the rollout accompanied by any deprecations and/or removals of features, APIs, fields of API types, flags, etc.?"},
	{3, "Monitoring Requirements"},
	{6, "How can an operator determine if the feature is in use by workloads?"},
	{6, "How can someone using this feature know that it is working for their instance?"},
	{6, "What are the reasonable SLOs (Service Level Objectives) for the enhancement?"},
	{6, "What are the SLIs (Service Level Indicators) an operator can use to determine the health of the service?"},
	{6, "Are there any missing metrics that would be useful to have to improve observability of this feature?"},
	{3, "Dependencies"},
	{6, "Does this feature depend on any specific services running in the cluster?"},
	{3, "Scalability"},
	{6, "Will enabling / using this feature result in any new API calls?"},
	{6, "Will enabling / using this feature result in introducing new API types?"},
	{6, "Will enabling / using this feature result in any new calls to the cloud provider?"},
	{6, "Will enabling / using this feature result in increasing size or count of the existing API objects?"},
	{6, "Will enabling / using this feature result in increasing time taken by any operations covered by existing SLIs/SLOs?"},
	{6, "Will enabling / using this feature result in non-negligible increase of resource usage (CPU, RAM, disk, IO, ...) in any components?"},
	{6, "Can enabling / using this feature result in resource exhaustion of some node resources (PIDs, sockets, inodes, etc.)?"},
	{3, "Troubleshooting"},
	{6, "How does this feature react if the API server and/or etcd is unavailable?"},
	{6, "What are other known failure modes?"},
	{6, "What steps should be taken if SLOs are not being met to determine the problem?"},
	{2, "Implementation History"},
	{2, "Drawbacks"},
	{2, "Alternatives"},
	{2, "Infrastructure Needed (Optional)"},
}

var (
	headingLine   = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineComment = regexp.MustCompile(`<!--.*?-->`)
)

// Headings returns the headings of a Markdown document outside fenced code blocks
// and HTML comments.
func Headings(doc string) []Heading {
	var out []Heading
	inComment, fence := false, ""
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if inComment {
			if _, after, ok := strings.Cut(line, "-->"); ok {
				inComment = false
				line = after
				trimmed = strings.TrimSpace(line)
			} else {
				continue
			}
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		line = inlineComment.ReplaceAllString(line, "")
		if i := strings.Index(line, "<!--"); i >= 0 {
			inComment = true
			line = line[:i]
		}
		if m := headingLine.FindStringSubmatch(line); m != nil {
			out = append(out, Heading{Level: len(m[1]), Text: m[2]})
		}
	}
	return out
}

// CheckHeadings reports the template's headings that doc lacks: each must appear at
// its level and in the template's order. A heading matches when its text is the
// template's, or the template's followed by ": " and more ("Story 1: Autoscaling
// driven VM resizing"). The title must read "KEP-<number>: <title>". Other headings
// may come in between.
func CheckHeadings(doc, number string) []string {
	got := Headings(doc)
	var problems []string
	i := 0
	for _, want := range TemplateHeadings {
		match := func(h Heading) bool {
			if h.Level != want.Level {
				return false
			}
			if want.Level == 1 {
				rest, ok := strings.CutPrefix(h.Text, "KEP-"+number+": ")
				return ok && strings.TrimSpace(rest) != ""
			}
			return h.Text == want.Text || strings.HasPrefix(h.Text, want.Text+": ")
		}
		j := slices.IndexFunc(got[i:], match)
		if j < 0 {
			if want.Level == 1 {
				problems = append(problems, fmt.Sprintf("no title %q", "# KEP-"+number+": ..."))
			} else if slices.ContainsFunc(got, match) {
				problems = append(problems, fmt.Sprintf("section %q is out of the template's order", want.String()))
			} else {
				problems = append(problems, fmt.Sprintf("no section %q", want.String()))
			}
			continue
		}
		i += j + 1
	}
	return problems
}

// CheckComments reports HTML comments left in doc: the template asks for its
// comment blocks to be removed; only the table of contents' markers stay.
func CheckComments(doc string) []string {
	var problems []string
	for n, line := range strings.Split(doc, "\n") {
		rest := line
		for {
			i := strings.Index(rest, "<!--")
			if i < 0 {
				break
			}
			rest = rest[i:]
			if !strings.HasPrefix(rest, "<!-- toc -->") && !strings.HasPrefix(rest, "<!-- /toc -->") {
				problems = append(problems, fmt.Sprintf("line %d: an HTML comment (the template's comments are to be removed): %s", n+1, strings.TrimSpace(line)))
				break
			}
			rest = rest[4:]
		}
	}
	return problems
}

// KEP is kep.yaml, with the fields of the template's kep.yaml
// (keps/NNNN-kep-template/kep.yaml) and last-updated.
type KEP struct {
	Title             string            `json:"title"`
	Number            any               `json:"kep-number"`
	Authors           []string          `json:"authors"`
	OwningSIG         string            `json:"owning-sig"`
	ParticipatingSIGs []string          `json:"participating-sigs"`
	Status            string            `json:"status"`
	CreationDate      string            `json:"creation-date"`
	LastUpdated       string            `json:"last-updated"`
	Reviewers         []string          `json:"reviewers"`
	Approvers         []string          `json:"approvers"`
	SeeAlso           []string          `json:"see-also"`
	Replaces          []string          `json:"replaces"`
	Stage             string            `json:"stage"`
	LatestMilestone   string            `json:"latest-milestone"`
	Milestone         map[string]string `json:"milestone"`
	FeatureGates      []FeatureGate     `json:"feature-gates"`
	DisableSupported  *bool             `json:"disable-supported"`
	Metrics           []string          `json:"metrics"`
}

// FeatureGate is one entry of kep.yaml's feature-gates.
type FeatureGate struct {
	Name       string   `json:"name"`
	Components []string `json:"components"`
}

var (
	kepStatuses = []string{"provisional", "implementable", "implemented", "deferred", "rejected", "withdrawn", "replaced"}
	kepStages   = []string{"alpha", "beta", "stable"}
	isoDate     = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	milestone   = regexp.MustCompile(`^v\d+\.\d+$`)
	sigName     = regexp.MustCompile(`^sig-[a-z-]+$`)
)

// ParseKEP parses kep.yaml strictly (an unknown field is an error) and checks its
// values: the number and owning SIG of its directory (sig/NNNN-name), the
// template's statuses and stages, dates and milestones in upstream's form, and, for
// a KEP with feature gates, their components and disable-supported.
func ParseKEP(data []byte, dir string) (*KEP, []string, error) {
	var k KEP
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, nil, err
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	sig, base := path.Split(path.Clean(dir))
	number, _, _ := strings.Cut(base, "-")
	if got := k.NumberString(); got != number {
		bad("kep-number %q is not the directory's number %q", got, number)
	}
	if k.Title == "" {
		bad("no title")
	}
	if len(k.Authors) == 0 {
		bad("no authors")
	}
	if k.OwningSIG != path.Base(sig) {
		bad("owning-sig %q is not the directory's SIG %q", k.OwningSIG, path.Base(sig))
	}
	for _, s := range k.ParticipatingSIGs {
		if !sigName.MatchString(s) {
			bad("participating-sigs: %q is not a SIG (sig-...)", s)
		}
	}
	if !slices.Contains(kepStatuses, k.Status) {
		bad("status %q is not one of %s", k.Status, strings.Join(kepStatuses, ", "))
	}
	if !isoDate.MatchString(k.CreationDate) {
		bad("creation-date %q is not yyyy-mm-dd", k.CreationDate)
	}
	if k.LastUpdated != "" && !isoDate.MatchString(k.LastUpdated) {
		bad("last-updated %q is not yyyy-mm-dd", k.LastUpdated)
	}
	if len(k.Reviewers) == 0 || len(k.Approvers) == 0 {
		bad("reviewers and approvers are required (TBD until known)")
	}
	if !slices.Contains(kepStages, k.Stage) {
		bad("stage %q is not one of %s", k.Stage, strings.Join(kepStages, ", "))
	}
	if !milestone.MatchString(k.LatestMilestone) {
		bad("latest-milestone %q is not vX.Y", k.LatestMilestone)
	}
	if k.Milestone[k.Stage] == "" {
		bad("milestone has no %s (the KEP's stage)", k.Stage)
	}
	for stage, m := range k.Milestone {
		if !slices.Contains(kepStages, stage) || !milestone.MatchString(m) {
			bad("milestone %s: %q is not a stage and a vX.Y", stage, m)
		}
	}
	if len(k.FeatureGates) == 0 {
		bad("no feature-gates")
	}
	for _, g := range k.FeatureGates {
		if g.Name == "" || len(g.Components) == 0 {
			bad("feature gate %q needs a name and components", g.Name)
		}
	}
	if len(k.FeatureGates) > 0 && k.DisableSupported == nil {
		bad("disable-supported is required with feature gates")
	}
	return &k, problems, nil
}

// NumberString is kep-number as the directory spells it: digits, or NNNN for a KEP
// without an enhancement issue yet.
func (k *KEP) NumberString() string {
	switch n := k.Number.(type) {
	case string:
		return n
	case float64:
		return fmt.Sprintf("%.0f", n)
	case nil:
		return ""
	default:
		return fmt.Sprint(n)
	}
}

var (
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	metricRE  = regexp.MustCompile(`^([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?:\{[^}]*\})?$`)
	flagRE    = regexp.MustCompile(`(?:^|[\s\[(])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:[=\s\])]|$)`)
	fencedRE  = regexp.MustCompile("(?ms)^\\s*(```|~~~).*?^\\s*(```|~~~)\\s*$")
	namespace = []string{"kubelet_", "apiserver_", "scheduler_", "vpa_", "kubernetes_", "workqueue_", "rest_client_", "etcd_", "kubeproxy_", "kube_controller_manager_", "node_collector_"}
)

// Names returns the metric names and command-line flags a KEP's README names in
// inline code spans (fenced code blocks are examples and left out): a metric is a
// snake_case name with the prefix of a Kubernetes or VPA component's metrics
// (kubelet_, apiserver_, scheduler_, vpa_, ...), optionally with its labels in
// braces; a flag is --name, alone or in a command line.
func Names(doc string) (metrics, flags []string) {
	doc = fencedRE.ReplaceAllString(doc, "")
	ms, fs := map[string]bool{}, map[string]bool{}
	for _, m := range codeSpan.FindAllStringSubmatch(doc, -1) {
		span := strings.TrimSpace(m[1])
		if mm := metricRE.FindStringSubmatch(span); mm != nil {
			for _, ns := range namespace {
				if strings.HasPrefix(mm[1], ns) {
					ms[mm[1]] = true
				}
			}
		}
		for _, f := range flagRE.FindAllStringSubmatch(span, -1) {
			fs[f[1]] = true
		}
	}
	return sortedKeys(ms), sortedKeys(fs)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Tree is a materialized upstream tree, searched with git grep in its Go files
// outside tests.
type Tree struct {
	Dir string
	// ImportPath maps a directory of the tree to its Go import path.
	ImportPath func(dir string) string
}

func (t Tree) grep(args ...string) ([]string, error) {
	cmd := exec.Command("git", append(append([]string{"-C", t.Dir, "grep", "-I"}, args...), "--", "*.go", ":!*_test.go")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && stderr.Len() == 0 {
			return nil, nil // no match
		}
		return nil, fmt.Errorf("git grep in %s: %v: %s", t.Dir, err, stderr.String())
	}
	return strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n"), nil
}

// Literals returns, for each of the wanted strings, the directories of the files
// in which it appears as a Go string literal ("s").
func (t Tree) Literals(wanted []string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(wanted) == 0 {
		return out, nil
	}
	args := []string{"-o", "-F"}
	for _, w := range wanted {
		args = append(args, "-e", `"`+w+`"`)
	}
	lines, err := t.grep(args...)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, l := range lines {
		file, lit, ok := strings.Cut(l, ":")
		if !ok || seen[l] {
			continue
		}
		seen[l] = true
		out[strings.Trim(lit, `"`)] = append(out[strings.Trim(lit, `"`)], path.Dir(file))
	}
	return out, nil
}

// GateDefined reports whether the tree defines the feature gate name
// (`Name featuregate.Feature = "Name"`).
func (t Tree) GateDefined(name string) (bool, error) {
	lines, err := t.grep("-l", "-E", `\b`+regexp.QuoteMeta(name)+`\s+featuregate\.Feature\s*=\s*"`+regexp.QuoteMeta(name)+`"`)
	return len(lines) > 0, err
}

// GateUsers returns the files that use the feature gate name in code: as a
// selector (features.Name) or a string literal, not in comments, its definition or
// the keys of the gate tables.
func (t Tree) GateUsers(name string) ([]string, error) {
	q := regexp.QuoteMeta(name)
	lines, err := t.grep("-E", `\.`+q+`\b|"`+q+`"`)
	if err != nil {
		return nil, err
	}
	definition := regexp.MustCompile(`\b` + q + `\s+featuregate\.Feature\s*=`)
	var files []string
	for _, l := range lines {
		file, text, ok := strings.Cut(l, ":")
		if !ok || definition.MatchString(text) {
			continue
		}
		if len(files) == 0 || files[len(files)-1] != file {
			files = append(files, file)
		}
	}
	return files, nil
}

// Importers returns the files under the prefixes that import one of the packages.
func (t Tree) Importers(pkgs []string, prefixes []string) ([]string, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	args := []string{"-l", "-F"}
	for _, p := range pkgs {
		args = append(args, "-e", `"`+p+`"`)
	}
	files, err := t.grep(args...)
	if err != nil {
		return nil, err
	}
	return underAny(files, prefixes), nil
}

func underAny(files, prefixes []string) []string {
	var out []string
	for _, f := range files {
		for _, p := range prefixes {
			if strings.HasPrefix(f, p) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// Component is a component a kep.yaml may name, with the tree and the directories
// whose code is that component's own.
type Component struct {
	Tree     string // "kubernetes" or "autoscaler"
	Prefixes []string
}

// Components are the components kep.yaml's feature-gates may name. Shared code
// (pkg/util, component-base, component-helpers, ...) belongs to none: a component
// that reaches a gate through it is found by its imports.
var Components = map[string]Component{
	"kube-apiserver": {"kubernetes", []string{"cmd/kube-apiserver/", "pkg/controlplane/", "pkg/kubeapiserver/", "pkg/registry/", "pkg/apis/", "pkg/api/",
		"plugin/pkg/admission/", "plugin/pkg/auth/", "staging/src/k8s.io/apiserver/", "staging/src/k8s.io/kube-aggregator/", "staging/src/k8s.io/apiextensions-apiserver/"}},
	"kube-controller-manager":  {"kubernetes", []string{"cmd/kube-controller-manager/", "pkg/controller/", "staging/src/k8s.io/controller-manager/"}},
	"kube-scheduler":           {"kubernetes", []string{"cmd/kube-scheduler/", "pkg/scheduler/", "staging/src/k8s.io/kube-scheduler/"}},
	"kubelet":                  {"kubernetes", []string{"cmd/kubelet/", "pkg/kubelet/", "staging/src/k8s.io/kubelet/"}},
	"kube-proxy":               {"kubernetes", []string{"cmd/kube-proxy/", "pkg/proxy/"}},
	"kubectl":                  {"kubernetes", []string{"cmd/kubectl/", "staging/src/k8s.io/kubectl/"}},
	"kubeadm":                  {"kubernetes", []string{"cmd/kubeadm/"}},
	"cloud-controller-manager": {"kubernetes", []string{"cmd/cloud-controller-manager/", "staging/src/k8s.io/cloud-provider/"}},
	"recommender":              {"autoscaler", []string{"vertical-pod-autoscaler/pkg/recommender/"}},
	"updater":                  {"autoscaler", []string{"vertical-pod-autoscaler/pkg/updater/"}},
	"admission-controller":     {"autoscaler", []string{"vertical-pod-autoscaler/pkg/admission-controller/"}},
	"vpa-recommender":          {"autoscaler", []string{"vertical-pod-autoscaler/pkg/recommender/"}},
	"vpa-updater":              {"autoscaler", []string{"vertical-pod-autoscaler/pkg/updater/"}},
	"vpa-admission-controller": {"autoscaler", []string{"vertical-pod-autoscaler/pkg/admission-controller/"}},
}

// MetricParts are the strings whose literals can make up a metric's name: the
// name itself, and every run of its _-separated words (namespace, subsystem, name).
func MetricParts(metric string) []string {
	words := strings.Split(metric, "_")
	var out []string
	for i := range words {
		for j := i + 1; j <= len(words); j++ {
			out = append(out, strings.Join(words[i:j], "_"))
		}
	}
	return out
}

// MetricDefined reports whether literals (as Literals returns them) make up the
// metric: the whole name as one literal, or namespace, subsystem and name as two or
// three literals (metrics.BuildFQName, or Opts' Namespace/Subsystem/Name). The last
// part, the metric's own name, must be a literal of a directory; the parts before it
// must be literals of the same directory, or, when that name has two words or more,
// of any (a subsystem constant such as the kubelet's "kubelet" lives in one package
// and is used by others). A histogram's or summary's _bucket, _sum and _count series
// are their metric's.
func MetricDefined(metric string, literals map[string][]string) bool {
	if len(literals[metric]) > 0 {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(metric, suffix); ok && MetricDefined(base, literals) {
			return true
		}
	}
	words := strings.Split(metric, "_")
	n := len(words)
	join := func(a, b int) string { return strings.Join(words[a:b], "_") }
	has := func(s, dir string) bool {
		dirs := literals[s]
		return len(dirs) > 0 && (dir == "" || slices.Contains(dirs, dir))
	}
	for k := 1; k < n; k++ { // the name is words[k:]
		name := join(k, n)
		for _, dir := range literals[name] {
			scope := dir
			if n-k >= 2 {
				scope = ""
			}
			if has(join(0, k), scope) || has(join(0, k), dir) {
				return true
			}
			for s := 1; s < k; s++ {
				if (has(join(0, s), scope) || has(join(0, s), dir)) && (has(join(s, k), scope) || has(join(s, k), dir)) {
					return true
				}
			}
		}
	}
	return false
}
