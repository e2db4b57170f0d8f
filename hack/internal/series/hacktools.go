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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// hackTool is one tool of upstream's hack/tools modules: the package its `tool`
// directive names, the module that carries it and that module's version. An empty
// version is taken from the release (fromRelease).
type hackTool struct {
	pkg, module, version string
}

// The tools of upstream's two tool modules, hack/tools and hack/tools/golangci-lint,
// as their `tool` directives name them: what hack/verify-*.sh and hack/update-*.sh
// install with `go -C hack/tools install` (misspell, yamlfmt, mockery, gotestsum,
// ...) and verify-golangci-lint.sh builds (golangci-lint and its logcheck and
// kube-api-linter plugins). Not github.com/aojea/sloppy-netparser, which only
// hack/update-netparse-cve.sh uses: the checksum database does not serve its version
// here, so go mod tidy cannot verify it. Versions: those the release's own
// go.mod selects where it requires the module (goimports, modfile, yamlfmt), those
// that generated the release's CRI code (the protoc plugins), and otherwise upstream's
// hack/tools pins, all served by the Go module proxy. Upstream's git history was not
// reachable when these were set, so the pins of v1.36.3's hack/tools/go.mod could not
// be read: these are the nearest ones known (docs/testing.md, verify-upstream).
var (
	hackToolsTools = []hackTool{
		{"github.com/cespare/prettybench", "github.com/cespare/prettybench", "v0.0.0-20150116022406-03b8cfe5406c"},
		{"github.com/golangci/misspell/cmd/misspell", "github.com/golangci/misspell", "v0.6.0"},
		{"github.com/jcchavezs/porto/cmd/porto", "github.com/jcchavezs/porto", "v0.6.0"},
		{"github.com/vektra/mockery/v3", "github.com/vektra/mockery/v3", "v3.5.4"},
		{"golang.org/x/mod/modfile", "golang.org/x/mod", ""},
		{"golang.org/x/tools/cmd/goimports", "golang.org/x/tools", ""},
		{"google.golang.org/grpc/cmd/protoc-gen-go-grpc", "google.golang.org/grpc/cmd/protoc-gen-go-grpc", ""},
		{"google.golang.org/protobuf/cmd/protoc-gen-go", "google.golang.org/protobuf", ""},
		{"gotest.tools/gotestsum", "gotest.tools/gotestsum", "v1.12.0"},
		{"honnef.co/go/tools/cmd/staticcheck", "honnef.co/go/tools", "v0.6.1"},
		{"k8s.io/publishing-bot/cmd/publishing-bot/config", "k8s.io/publishing-bot", "v0.5.0"},
		{"sigs.k8s.io/yaml/yamlfmt", "sigs.k8s.io/yaml", ""},
	}
	golangciLintTools = []hackTool{
		{"github.com/golangci/golangci-lint/v2/cmd/golangci-lint", "github.com/golangci/golangci-lint/v2", "v2.11.2"},
		{"sigs.k8s.io/kube-api-linter/pkg/plugin", "sigs.k8s.io/kube-api-linter", "v0.0.0-20260716143926-092fe0c72997"},
		{"sigs.k8s.io/logtools/logcheck", "sigs.k8s.io/logtools", "v0.10.1"},
	}
)

// hackToolsModule is one nested tool module: its directory in the tree and the
// files written there before go mod tidy completes them.
type hackToolsModule struct {
	dir   string // relative to the tree
	files map[string]string
}

// hackToolsModules returns upstream's tool modules as the tree gets them: go.mod with
// `tool` directives and go.work (each its own workspace, as upstream's: the tree's
// go.work does not use them). No tools.go: upstream replaced it with the `tool`
// directives, and a Go file would need the license header.
func hackToolsModules(tree string) ([]hackToolsModule, string, error) {
	data, err := os.ReadFile(filepath.Join(tree, "go.mod"))
	if err != nil {
		return nil, "", err
	}
	root, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return nil, "", err
	}
	if root.Go == nil {
		return nil, "", fmt.Errorf("go.mod of the release has no go line")
	}
	release := map[string]string{}
	for _, r := range root.Require {
		release[r.Mod.Path] = r.Mod.Version
	}
	const cri = "staging/src/k8s.io/cri-api/pkg/apis/runtime/v1/"
	if release["google.golang.org/protobuf/cmd/protoc-gen-go"], err = generatorVersion(tree, cri+"api.pb.go", "protoc-gen-go"); err != nil {
		return nil, "", err
	}
	if release["google.golang.org/grpc/cmd/protoc-gen-go-grpc"], err = generatorVersion(tree, cri+"api_grpc.pb.go", "protoc-gen-go-grpc"); err != nil {
		return nil, "", err
	}
	var pinned []string
	gomod := func(module string, tools []hackTool) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "module %s\n\ngo %s\n\ntool (\n", module, root.Go.Version)
		for _, t := range tools {
			fmt.Fprintf(&b, "\t%s\n", t.pkg)
		}
		b.WriteString(")\n\nrequire (\n")
		seen := map[string]bool{}
		for _, t := range tools {
			if seen[t.module] {
				continue
			}
			seen[t.module] = true
			v := t.version
			if v == "" {
				key := t.module
				if key == "google.golang.org/protobuf" {
					key = t.pkg // the plugin's version, not the runtime's
				}
				if v = release[key]; v == "" {
					return "", fmt.Errorf("go.mod of the release requires no %s (for %s in hack/tools)", t.module, t.pkg)
				}
				pinned = append(pinned, fmt.Sprintf("%s %s", t.module, v))
			}
			fmt.Fprintf(&b, "\t%s %s\n", t.module, v)
		}
		b.WriteString(")\n")
		return b.String(), nil
	}
	work := "go " + root.Go.Version + "\n\nuse .\n"
	var mods []hackToolsModule
	for _, m := range []struct {
		dir, module string
		tools       []hackTool
	}{
		{"hack/tools", "k8s.io/kubernetes/hack/tools", hackToolsTools},
		{"hack/tools/golangci-lint", "k8s.io/kubernetes/hack/tools/golangci-lint", golangciLintTools},
	} {
		mod, err := gomod(m.module, m.tools)
		if err != nil {
			return nil, "", err
		}
		mods = append(mods, hackToolsModule{dir: m.dir, files: map[string]string{"go.mod": mod, "go.work": work}})
	}
	sort.Strings(pinned)
	note := fmt.Sprintf("hack/tools and hack/tools/golangci-lint (nested modules the zip lacks) hold upstream's tools as `tool` directives (%s from the release's pins; the rest at upstream's hack/tools versions); their source directories (golangci-lint's sorted plugin, publishing-verifier, ...) are not in any module and are missing",
		strings.Join(pinned, ", "))
	return mods, note, nil
}

// WriteHackTools writes upstream's tool modules into the kubernetes tree at tree and
// completes their go.mod and go.sum with go mod tidy (through the Go module proxy).
// make tree calls it for the pristine base; it can be run against a clone of the
// tree as well. It returns the note for the base commit's message.
func WriteHackTools(tree string) (string, error) {
	mods, note, err := hackToolsModules(tree)
	if err != nil {
		return "", err
	}
	// The reduced module of earlier versions of this tool had a tools.go.
	if err := os.Remove(filepath.Join(tree, "hack", "tools", "tools.go")); err != nil && !os.IsNotExist(err) {
		return "", err
	}
	for _, m := range mods {
		dir := filepath.Join(tree, m.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		for name, content := range m.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return "", err
			}
		}
		tidy := exec.Command("go", "mod", "tidy")
		tidy.Dir = dir
		tidy.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := tidy.CombinedOutput(); err != nil {
			return "", explainDownload(m.dir, "", fmt.Sprintf("go mod tidy in %s: %v: %s", m.dir, err, out))
		}
		if err := checkTidied(filepath.Join(dir, "go.mod"), m.files["go.mod"]); err != nil {
			return "", err
		}
	}
	return note, nil
}

// addHackTools writes the hack/tools modules that the module zip lacks (WriteHackTools).
func addHackTools(m *materializer) error {
	note, err := WriteHackTools(m.tree)
	if err != nil {
		return err
	}
	m.notef("%s", note)
	return nil
}

// checkTidied fails when go mod tidy moved a tool off its pin: another tool of the
// module needs a newer version of it (the protoc plugins' versions decide the headers
// of the generated code, so they must stay what generated the release's).
func checkTidied(path, written string) error {
	want, err := modfile.Parse(path, []byte(written), nil)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	got, err := modfile.Parse(path, data, nil)
	if err != nil {
		return err
	}
	have := map[string]string{}
	for _, r := range got.Require {
		have[r.Mod.Path] = r.Mod.Version
	}
	var moved []string
	for _, r := range want.Require {
		if have[r.Mod.Path] != r.Mod.Version {
			moved = append(moved, fmt.Sprintf("%s %s (pinned %s)", r.Mod.Path, have[r.Mod.Path], r.Mod.Version))
		}
	}
	if len(moved) > 0 {
		return fmt.Errorf("go mod tidy in %s moved tools off their pins: %s", filepath.Dir(path), strings.Join(moved, ", "))
	}
	return nil
}

// generatorVersion reads the version of a protoc plugin from the header of a file it
// generated in the release ("// - protoc-gen-go-grpc v1.5.1", "// \tprotoc-gen-go v1.36.4").
func generatorVersion(tree, file, plugin string) (string, error) {
	data, err := os.ReadFile(filepath.Join(tree, file))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimLeft(line, "/ -\t"))
		if len(f) == 2 && f[0] == plugin {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s does not name the %s that generated it", file, plugin)
}
