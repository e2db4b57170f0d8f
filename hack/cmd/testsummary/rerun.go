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

package main

// The flake rule of make test: a failing upstream test is rerun once on its own;
// one that passes then is flaky, not a failure. The project's own tests are never
// rerun. A test is upstream when its function is declared, with the same source,
// in the same package of the tree's first commit (pristine upstream); one the
// series adds or changes is the project's own.

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// maxReruns bounds the reruns of one stream: more failing upstream tests than this
// is a broken change or machine, not flakiness.
const maxReruns = 10

// rerunName is where the reruns of stream name go: beside it, but not matched by
// the *.json that make test summarizes; the summary reads it with its stream.
func rerunName(name string) string {
	return strings.TrimSuffix(name, ".json") + ".rerun"
}

// rootTest is the top-level test of a test or subtest name.
func rootTest(name string) string {
	root, _, _ := strings.Cut(name, "/")
	return root
}

// failedRoots returns, per package, the top-level tests of a go test -json stream
// that failed, leaving out packages whose test binary crashed (a panic or a
// timeout ends the tests after it, which a rerun of one test would not run).
func failedRoots(events []event) map[string][]string {
	failed := map[string]map[string]bool{}
	crashed := map[string]bool{}
	for _, e := range events {
		switch {
		case e.Action == "output" && (strings.HasPrefix(e.Output, "panic: ") || strings.Contains(e.Output, "test timed out after")):
			crashed[e.Package] = true
		case e.Action == "fail" && e.Test != "":
			if failed[e.Package] == nil {
				failed[e.Package] = map[string]bool{}
			}
			failed[e.Package][rootTest(e.Test)] = true
		}
	}
	out := map[string][]string{}
	for pkg, roots := range failed {
		if crashed[pkg] {
			continue
		}
		for root := range roots {
			out[pkg] = append(out[pkg], root)
		}
		sort.Strings(out[pkg])
	}
	return out
}

// tree answers which tests of a git work tree are upstream's.
type tree struct {
	dir  string // where go test ran
	top  string // the work tree's top
	base string // its first commit: pristine upstream
}

func newTree(dir string) (*tree, error) {
	top, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	roots, err := git(dir, "rev-list", "--max-parents=0", "HEAD")
	if err != nil {
		return nil, err
	}
	base := strings.Fields(roots)
	if len(base) != 1 {
		return nil, fmt.Errorf("%s: want one root commit (pristine upstream), found %d", dir, len(base))
	}
	return &tree{dir: dir, top: strings.TrimSpace(top), base: base[0]}, nil
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// packageDirs maps import paths to their directories, as go list sees them from dir.
func packageDirs(dir string, pkgs []string) (map[string]string, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-f", "{{.ImportPath}} {{.Dir}}"}, pkgs...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v", err)
	}
	dirs := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, d, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			dirs[path] = d
		}
	}
	return dirs, nil
}

// isUpstream tells whether test function name is declared in pkgDir's test files
// with the same source as in pristine upstream.
func (t *tree) isUpstream(pkgDir, name string) (bool, error) {
	rel, err := filepath.Rel(t.top, pkgDir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return false, fmt.Errorf("%s is not in the tree %s", pkgDir, t.top)
	}
	now, err := testFuncSource(name, func() (map[string][]byte, error) {
		files := map[string][]byte{}
		matches, err := filepath.Glob(filepath.Join(pkgDir, "*_test.go"))
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil {
				return nil, err
			}
			files[m] = b
		}
		return files, err
	})
	if err != nil || now == nil {
		return false, err
	}
	then, err := testFuncSource(name, func() (map[string][]byte, error) {
		files := map[string][]byte{}
		list, err := git(t.top, "ls-tree", "--name-only", t.base, "--", filepath.ToSlash(rel)+"/")
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(list) {
			if !strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := git(t.top, "show", t.base+":"+f)
			if err != nil {
				return nil, err
			}
			files[f] = []byte(b)
		}
		return files, nil
	})
	return then != nil && bytes.Equal(now, then), err
}

// testFuncSource returns the source of the top-level function name in the files
// that read returns, or nil when none declares it.
func testFuncSource(name string, read func() (map[string][]byte, error)) ([]byte, error) {
	files, err := read()
	if err != nil {
		return nil, err
	}
	for path, src := range files {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == name {
				return src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset], nil
			}
		}
	}
	return nil, nil
}

// rerun applies the flake rule to the stream in name: it reruns each failed
// upstream test on its own with goTest (a go test command with -json, without
// packages) in dir, and writes the reruns' streams to rerunName(name). It reports
// what it did on w.
func rerun(w io.Writer, dir, name string, goTest []string) error {
	events, err := readEventsFile(name)
	if err != nil {
		return err
	}
	failed := failedRoots(events)
	os.Remove(rerunName(name))
	if len(failed) == 0 {
		return nil
	}
	t, err := newTree(dir)
	if err != nil {
		return err
	}
	var pkgs []string
	for pkg := range failed {
		pkgs = append(pkgs, pkg)
	}
	sort.Strings(pkgs)
	dirs, err := packageDirs(dir, pkgs)
	if err != nil {
		return err
	}
	type test struct{ pkg, name string }
	var upstream []test
	for _, pkg := range pkgs {
		for _, name := range failed[pkg] {
			ok, err := t.isUpstream(dirs[pkg], name)
			if err != nil {
				return fmt.Errorf("%s %s: %v", pkg, name, err)
			}
			if ok {
				upstream = append(upstream, test{pkg, name})
			} else {
				fmt.Fprintf(w, "not rerun (the project's own test): %s %s\n", pkg, name)
			}
		}
	}
	if len(upstream) > maxReruns {
		fmt.Fprintf(w, "not rerun: %d upstream tests failed, more than the %d that flakes would explain\n", len(upstream), maxReruns)
		return nil
	}
	if len(upstream) == 0 {
		return nil
	}
	out, err := os.Create(rerunName(name))
	if err != nil {
		return err
	}
	defer out.Close()
	for _, tc := range upstream {
		args := append(append([]string{}, goTest[1:]...), "-run", "^"+tc.name+"$", tc.pkg)
		cmd := exec.Command(goTest[0], args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = out, out
		verdict := "passed"
		if cmd.Run() != nil {
			verdict = "failed again"
		}
		fmt.Fprintf(w, "rerun on its own: %s %s: %s\n", tc.pkg, tc.name, verdict)
	}
	return out.Close()
}
