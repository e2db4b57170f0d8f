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
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// VersionSuffix marks builds of this fork: v1.36.3-carry.N+COMMIT.
const VersionSuffix = "carry"

// BuildVersion is the semantic version of a build of the tree: the upstream tag,
// the number of groups on top of it and the tree's commit, e.g.
// v1.36.3-carry.4+0123456789ab. Unsaved edits add ".dirty" to the build metadata.
func (t *Tree) BuildVersion() (string, error) {
	st, err := t.LoadState()
	if err != nil {
		return "", err
	}
	if st == nil {
		return "", fmt.Errorf("no tree at %s; run 'make tree' first", t.Dir())
	}
	version, err := t.Version()
	if err != nil {
		return "", err
	}
	v := fmt.Sprintf("%s-%s.%d+%.12s", t.Up.Tag(version), VersionSuffix, len(st.Groups), st.Tip())
	if t.Unsaved(st) != nil {
		v += ".dirty"
	}
	return v, nil
}

// Pin moves go.mod to another Kubernetes and/or VPA release: k8s.io/kubernetes, every
// staging module the release publishes, and the VPA module. It regenerates
// hack/pins/pins.go and lets `go mod tidy` record the checksums in go.sum.
func Pin(root, k8s, vpa string, log io.Writer) error {
	if k8s == "" && vpa == "" {
		return fmt.Errorf("name a release: -k8s v1.X.Y and/or -vpa vX.Y.Z")
	}
	edit := []string{"mod", "edit"}
	if vpa != "" {
		edit = append(edit, "-require="+Autoscaler.Module+"@"+vpa)
	}
	if k8s != "" {
		dir, err := downloadUnchecked(root, Kubernetes.Module, k8s)
		if err != nil {
			return err
		}
		staging, err := stagingModules(dir)
		if err != nil {
			return err
		}
		old, err := ReadPins(root)
		if err != nil {
			return err
		}
		for m := range old.Replaced {
			if strings.HasPrefix(m, "k8s.io/") {
				edit = append(edit, "-dropreplace="+m, "-droprequire="+m)
			}
		}
		edit = append(edit, "-require="+Kubernetes.Module+"@"+k8s)
		sv := StagingVersion(k8s)
		for _, m := range staging {
			if _, err := downloadUnchecked(root, m, sv); err != nil {
				fmt.Fprintf(log, "%s@%s is not published; the tree will go without it\n", m, sv)
				continue
			}
			edit = append(edit, "-require="+m+"@"+sv, "-replace="+m+"="+m+"@"+sv)
		}
	}
	if err := goCmd(root, log, edit...); err != nil {
		return err
	}
	if err := writePinsFile(root); err != nil {
		return err
	}
	return goCmd(root, log, "mod", "tidy")
}

// stagingModules lists the modules k8s.io/kubernetes replaces with its staging directories.
func stagingModules(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, r := range f.Replace {
		if strings.HasPrefix(r.New.Path, "./staging/") {
			mods = append(mods, r.Old.Path)
		}
	}
	sort.Strings(mods)
	return mods, nil
}

// writePinsFile imports one package of every pinned module so that `go mod tidy`
// keeps their requirements and checksums.
func writePinsFile(root string) error {
	p, err := ReadPins(root)
	if err != nil {
		return err
	}
	mods := []string{Autoscaler.Module, Kubernetes.Module}
	for m := range p.Replaced {
		if strings.HasPrefix(m, "k8s.io/") {
			mods = append(mods, m)
		}
	}
	sort.Strings(mods)
	var b bytes.Buffer
	b.WriteString(`//go:build pins

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

// Package pins imports one small package of every upstream module this project
// patches, so that ` + "`go mod tidy`" + ` keeps their pins and checksums in go.mod and go.sum.
// Nothing builds it: the build tag is never set. 'series pin' writes it.
package pins

import (
`)
	for _, m := range mods {
		version := p.Require[m]
		if v, ok := p.Replaced[m]; ok {
			version = v
		}
		dir, err := downloadUnchecked(root, m, version)
		if err != nil {
			return err
		}
		pkg, err := smallestPackage(dir)
		if err != nil {
			return fmt.Errorf("%s@%s: %w", m, version, err)
		}
		fmt.Fprintf(&b, "\t_ %q\n", strings.TrimSuffix(m+"/"+pkg, "/"))
	}
	b.WriteString(")\n")
	if err := os.MkdirAll(filepath.Join(root, "hack", "pins"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "hack", "pins", "pins.go"), b.Bytes(), 0o644)
}

// smallestPackage picks the package of a module with the fewest imports, preferring
// shallow ones, so that the pins pull in as little as possible.
func smallestPackage(dir string) (string, error) {
	best, bestScore := "", -1
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (name == "testdata" || name == "internal" || name == "vendor" || strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil || f.Name.Name == "main" || strings.HasSuffix(f.Name.Name, "_test") || len(f.Comments) > 0 && strings.Contains(f.Comments[0].Text(), "+build") {
			return nil
		}
		if data, err := os.ReadFile(p); err != nil || bytes.Contains(data, []byte("//go:build")) {
			return err
		}
		rel, _ := filepath.Rel(dir, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		score := len(f.Imports)*4 + strings.Count(rel, "/")
		if bestScore < 0 || score < bestScore || (score == bestScore && rel < best) {
			best, bestScore = rel, score
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if bestScore < 0 {
		return "", fmt.Errorf("no Go package")
	}
	return best, nil
}

// downloadUnchecked fetches a module version that go.sum may not pin yet.
func downloadUnchecked(root, path, version string) (string, error) {
	d, err := download(root, path, version)
	return d.Dir, err
}

func goCmd(root string, log io.Writer, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args[:2], " "), err)
	}
	return nil
}
