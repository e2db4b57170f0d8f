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
	"path/filepath"
	"sort"
	"strings"
)

// Export writes the series as `git format-patch` files, one per group, into dir
// (which it empties of earlier patches) and returns their paths in order.
func (t *Tree) Export(st *State, dir string) ([]string, error) {
	if err := t.Unsaved(st); err != nil {
		return nil, err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.patch"))
	for _, o := range old {
		if err := os.Remove(o); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i, gs := range st.Groups {
		parent := st.BaseCommit
		if i > 0 {
			parent = st.Groups[i-1].Commit
		}
		if changes, err := t.git().diffTrees(parent, gs.Commit); err != nil {
			return nil, err
		} else if len(changes) == 0 {
			return nil, fmt.Errorf("group %s changes nothing; it cannot be exported as a patch", gs.Name)
		}
	}
	if len(st.Groups) == 0 {
		return nil, nil
	}
	if _, err := t.git().run("format-patch", "-q", "--no-signature", "--zero-commit", "--no-renames", "--binary",
		"-o", dir, st.BaseCommit+".."+st.Tip()); err != nil {
		return nil, err
	}
	return filepath.Glob(filepath.Join(dir, "*.patch"))
}

// RoundTrip proves that the exported series applies with `git am` onto a fresh
// checkout of the pristine upstream tag and yields exactly the materialized tree.
func (t *Tree) RoundTrip(st *State, work string) error {
	patches, err := t.Export(st, filepath.Join(work, "patches"))
	if err != nil {
		return err
	}
	version, err := t.Version()
	if err != nil {
		return err
	}
	clone := filepath.Join(work, "pristine")
	if err := os.RemoveAll(clone); err != nil {
		return err
	}
	g := git{dir: work, ident: t.git().ident}
	if _, err := g.run("clone", "-q", "--shared", "--no-checkout", t.Dir(), clone); err != nil {
		return err
	}
	c := git{dir: clone, ident: g.ident}
	if err := os.WriteFile(filepath.Join(clone, ".git", "info", "attributes"), []byte("* -text\n"), 0o644); err != nil {
		return err
	}
	if _, err := c.run("checkout", "-q", t.Up.Tag(version)); err != nil {
		return err
	}
	if len(patches) > 0 {
		if _, err := c.run(append([]string{"am", "-q", "--keep-cr"}, patches...)...); err != nil {
			c.run("am", "--abort")
			return fmt.Errorf("the exported series does not apply to pristine %s: %w", t.Up.Tag(version), err)
		}
	}
	got, err := c.run("rev-parse", "HEAD^{tree}")
	if err != nil {
		return err
	}
	want, err := t.git().run("rev-parse", st.Tip()+"^{tree}")
	if err != nil {
		return err
	}
	if got != want {
		diff, _ := c.run("diff", "--stat", want, got)
		return fmt.Errorf("the exported series applied to pristine %s gives another tree than the materialized one:\n%s", t.Up.Tag(version), diff)
	}
	return nil
}

// TouchedPackages lists the Go package directories the series changes, relative to
// the upstream module's root ("./pkg/kubelet/images").
func (t *Tree) TouchedPackages(st *State) ([]string, error) {
	changes, err := t.git().diffTrees(st.BaseCommit, st.Tip())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var dirs []string
	for _, c := range changes {
		if c.Status == 'D' || !strings.HasSuffix(c.Path, ".go") {
			continue
		}
		dir := filepath.ToSlash(filepath.Dir(c.Path))
		if t.Up.Subdir != "" {
			rel, ok := strings.CutPrefix(dir+"/", t.Up.Subdir+"/")
			if !ok {
				continue
			}
			dir = strings.TrimSuffix(rel, "/")
		}
		if strings.Contains("/"+dir+"/", "/testdata/") || seen[dir] {
			continue
		}
		seen[dir] = true
		dirs = append(dirs, "./"+dir)
	}
	sort.Strings(dirs)
	return dirs, nil
}
