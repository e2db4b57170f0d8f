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
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// Kubernetes is k8s.io/kubernetes with its staging modules at staging/src/k8s.io.
var Kubernetes = Upstream{
	Name:         "kubernetes",
	Module:       "k8s.io/kubernetes",
	Tag:          func(v string) string { return v },
	OverlayRoots: []string{"cluster", "cmd", "pkg", "plugin", "staging", "test"},
	Symlinks:     map[string]string{"Makefile": "build/root/Makefile"},
	Nested: func(m *materializer) error {
		if err := addStagingModules(m); err != nil {
			return err
		}
		return addHackTools(m)
	},
	PRTemplate: "kubernetes.md",
	Generators: []Generator{
		{Command: "hack/update-codegen.sh", Paths: []string{
			"zz_generated.*", "generated.pb.go", "generated.proto", "api.pb.go", "types_swagger_doc_generated.go",
			"staging/src/k8s.io/client-go/applyconfigurations/", "staging/src/k8s.io/client-go/kubernetes/",
			"staging/src/k8s.io/client-go/listers/", "staging/src/k8s.io/client-go/informers/",
		}},
		{Command: "hack/update-openapi-spec.sh", Paths: []string{"api/openapi-spec/", "api/discovery/"}},
		{Command: "hack/update-featuregates.sh", Paths: []string{
			"test/compatibility_lifecycle/reference/feature_list.md",
			"test/compatibility_lifecycle/reference/versioned_feature_list.yaml",
		}},
		{Command: "(cd staging/src/k8s.io/api && UPDATE_COMPATIBILITY_FIXTURE_DATA=true go test k8s.io/api -run //HEAD)",
			Paths: []string{"staging/src/k8s.io/api/testdata/HEAD/"}},
	},
}

// Autoscaler is the Vertical Pod Autoscaler, in its place in the kubernetes/autoscaler repository.
var Autoscaler = Upstream{
	Name:         "autoscaler",
	Module:       "k8s.io/autoscaler/vertical-pod-autoscaler",
	Subdir:       "vertical-pod-autoscaler",
	Tag:          func(v string) string { return "vertical-pod-autoscaler-" + strings.TrimPrefix(v, "v") },
	OverlayRoots: []string{"vertical-pod-autoscaler"},
	PRTemplate:   "autoscaler.md",
	Generators: []Generator{
		{Command: "vertical-pod-autoscaler/hack/update-codegen.sh", Paths: []string{
			"zz_generated.*", "vertical-pod-autoscaler/pkg/client/",
		}},
		{Command: "vertical-pod-autoscaler/hack/generate-crd-yaml.sh", Paths: []string{
			"vertical-pod-autoscaler/deploy/vpa-v1-crd-gen.yaml",
			"vertical-pod-autoscaler/charts/vertical-pod-autoscaler/templates/crds/vpa-v1-crd-gen.yaml",
		}},
		{Command: "vertical-pod-autoscaler/hack/generate-flags.sh", Paths: []string{"vertical-pod-autoscaler/docs/flags.md"}},
		{Command: "vertical-pod-autoscaler/hack/generate-api-docs.sh", Paths: []string{"vertical-pod-autoscaler/docs/api.md"}},
		{Command: "helm-docs (the charts' pre-commit hook, from README.md.gotmpl)",
			Paths: []string{"vertical-pod-autoscaler/charts/vertical-pod-autoscaler/README.md"}},
	},
}

// Upstreams are all the upstreams this repository carries, in build order.
var Upstreams = []Upstream{Kubernetes, Autoscaler}

// publishedOnly are files of staging modules' zips that are not in upstream's git tree,
// by module, relative to its root. The zips are made from the publishing bot's
// repositories, which keep a few files of their own from before the bot synchronized
// them from staging: added in February 2017 by commits without a Kubernetes-commit
// trailer and never touched by a synchronized commit since (git log of
// github.com/kubernetes/{kube-aggregator,sample-apiserver}), and at no path of
// upstream's git. The tree leaves them out, as upstream's git tree does: they are
// GOPATH-era scripts that verify-shellcheck.sh, which checks every *.sh, rejects.
var publishedOnly = map[string][]string{
	"k8s.io/kube-aggregator":  {"hack/godep-deps.sh", "hack/sync-from-kubernetes.sh"},
	"k8s.io/sample-apiserver": {"hack/godep-deps.sh", "hack/sync-from-kubernetes.sh"},
}

// addStagingModules adds every module that go.work uses from staging/src/k8s.io, at
// its pinned version, and drops from go.work the ones that are not published.
func addStagingModules(m *materializer) error {
	path := filepath.Join(m.tree, "go.work")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork(path, data, nil)
	if err != nil {
		return err
	}
	dropped := false
	for _, u := range append([]*modfile.Use(nil), wf.Use...) {
		dir, ok := strings.CutPrefix(u.Path, "./staging/src/")
		if !ok {
			continue
		}
		version, ok := m.pins[dir]
		if !ok {
			if err := wf.DropUse(u.Path); err != nil {
				return err
			}
			m.notef("%s is not published as a module at this version: dropped from go.work", dir)
			dropped = true
			continue
		}
		dest := strings.TrimPrefix(u.Path, "./")
		if err := m.addModule(dir, version, dest); err != nil {
			return err
		}
		for _, f := range publishedOnly[dir] {
			err := os.Remove(filepath.Join(m.tree, dest, f))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			m.notef("%s/%s is left out: the publishing bot's repository %s has it, upstream's git tree does not", dest, f, dir)
		}
	}
	m.notef("staging/src/k8s.io holds the published staging modules; vendor/ is not populated (builds use module mode)")
	if !dropped {
		return nil
	}
	wf.Cleanup()
	return os.WriteFile(path, modfile.Format(wf.Syntax), 0o644)
}

// Pins are the upstream versions go.mod pins: require lines, overridden by replace
// lines that point at a module version (the staging modules).
type Pins struct {
	Require  map[string]string
	Replaced map[string]string
}

// ReadPins reads go.mod at the repository root.
func ReadPins(root string) (*Pins, error) {
	path := filepath.Join(root, "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		return nil, err
	}
	p := &Pins{Require: map[string]string{}, Replaced: map[string]string{}}
	for _, r := range f.Require {
		p.Require[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		if r.New.Version != "" {
			p.Replaced[r.Old.Path] = r.New.Version
		}
	}
	return p, nil
}

// For returns the pins that make up an upstream's tree.
func (p *Pins) For(u Upstream) map[string]string {
	out := map[string]string{}
	if v, ok := p.Require[u.Module]; ok {
		out[u.Module] = v
	}
	if u.Nested != nil {
		for m, v := range p.Replaced {
			if strings.HasPrefix(m, "k8s.io/") {
				out[m] = v
			}
		}
	}
	return out
}

// Check verifies that the staging modules are pinned at the version that matches
// k8s.io/kubernetes (v1.X.Y -> v0.X.Y).
func (p *Pins) Check() error {
	kv, ok := p.Require[Kubernetes.Module]
	if !ok {
		return fmt.Errorf("go.mod does not require %s", Kubernetes.Module)
	}
	if _, ok := p.Require[Autoscaler.Module]; !ok {
		return fmt.Errorf("go.mod does not require %s", Autoscaler.Module)
	}
	want := StagingVersion(kv)
	var bad []string
	for m, v := range p.Replaced {
		if strings.HasPrefix(m, "k8s.io/") && v != want {
			bad = append(bad, fmt.Sprintf("%s is pinned at %s", m, v))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return fmt.Errorf("%s is at %s, so every staging module must be at %s:\n  %s\nRun 'make pin K8S=%s' to align them", Kubernetes.Module, kv, want, strings.Join(bad, "\n  "), kv)
	}
	return nil
}

// StagingVersion maps a Kubernetes release (v1.36.3) to its staging modules' version (v0.36.3).
func StagingVersion(k string) string {
	return "v0." + strings.TrimPrefix(k, "v1.")
}

// GoSource downloads modules through the go command, checking every zip against go.sum.
type GoSource struct {
	Root string // the repository root, whose go.sum is authoritative
	// Sums are more files of go.sum lines that vouch for a zip: those of
	// releases the project builds but does not pin (hack/pins/releases.sum).
	Sums []string
}

type moduleDownload struct {
	Path, Version, Dir, Sum, Error string
}

// ModuleDir returns the extracted module, verified against the repository's go.sum;
// an empty version is the one the repository's go.mod selects.
func (s GoSource) ModuleDir(path, version string) (string, error) {
	d, err := download(s.Root, path, version)
	if err != nil {
		return "", err
	}
	version = d.Version
	line := path + " " + version + " " + d.Sum
	for _, f := range append([]string{filepath.Join(s.Root, "go.sum")}, s.Sums...) {
		sums, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if bytes.Contains(sums, []byte(line+"\n")) {
			return d.Dir, nil
		}
	}
	return "", fmt.Errorf("go.sum has no checksum %q for %s@%s: pin it with 'make pin' so that it is verified", d.Sum, path, version)
}

// download runs `go mod download -json` for one module version in root (the version
// root's go.mod selects when version is empty).
func download(root, path, version string) (moduleDownload, error) {
	query := path
	if version != "" {
		query += "@" + version
	}
	cmd := exec.Command("go", "mod", "download", "-json", query)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var d moduleDownload
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil || d.Error != "" || runErr != nil {
		msg := strings.TrimSpace(d.Error + " " + stderr.String())
		if msg == "" && runErr != nil {
			msg = runErr.Error()
		}
		return d, explainDownload(path, version, msg)
	}
	return d, nil
}

func explainDownload(path, version, msg string) error {
	for _, s := range []string{"dial tcp", "no such host", "connection refused", "i/o timeout", "TLS handshake", "proxyconnect"} {
		if strings.Contains(msg, s) {
			proxy, _ := exec.Command("go", "env", "GOPROXY").Output()
			return fmt.Errorf("the Go module proxy (GOPROXY=%s) is unreachable while fetching %s@%s:\n  %s", strings.TrimSpace(string(proxy)), path, version, msg)
		}
	}
	return fmt.Errorf("downloading %s@%s: %s", path, version, msg)
}
