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
	"os"
	"os/exec"
	"strings"
)

// commitDate is the author and committer date of every commit the tool makes,
// so that the same inputs always give the same commit IDs.
const commitDate = "2026-01-01T00:00:00+0000"

// Identity is the author of the commits the tool makes in a tree.
type Identity struct {
	Name  string
	Email string
}

// DefaultIdentity signs the series' commits; an exported series can be re-signed
// by its submitter with `git am` or `git commit --amend --reset-author`.
var DefaultIdentity = Identity{Name: "Kube Carry Maintainers", Email: "maintainers@kube-carry.invalid"}

// git runs git commands in one work tree with a fixed, hermetic configuration.
type git struct {
	dir   string
	ident Identity
	env   []string // extra environment, e.g. GIT_INDEX_FILE
}

func (g git) with(env ...string) git {
	g.env = append(append([]string(nil), g.env...), env...)
	return g
}

func (g git) cmd(args ...string) *exec.Cmd {
	base := []string{
		"-c", "core.autocrlf=false", "-c", "core.safecrlf=false",
		"-c", "gc.auto=0", "-c", "advice.detachedHead=false",
		"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false",
		"-c", "core.hooksPath=/dev/null", "-c", "rebase.autoStash=false",
	}
	c := exec.Command("git", append(base, args...)...)
	c.Dir = g.dir
	c.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME="+g.ident.Name, "GIT_AUTHOR_EMAIL="+g.ident.Email,
		"GIT_COMMITTER_NAME="+g.ident.Name, "GIT_COMMITTER_EMAIL="+g.ident.Email,
		"GIT_AUTHOR_DATE="+commitDate, "GIT_COMMITTER_DATE="+commitDate,
		"GIT_TERMINAL_PROMPT=0", "GIT_EDITOR=true", "GIT_SEQUENCE_EDITOR=true",
	)
	c.Env = append(c.Env, g.env...)
	return c
}

// GitError is a failed git command with what it printed.
type GitError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *GitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Stderr))
}

// run runs git and returns its standard output with the trailing newline removed.
func (g git) run(args ...string) (string, error) {
	out, err := g.runBytes(nil, args...)
	return strings.TrimRight(string(out), "\n"), err
}

// runBytesTrim runs git with stdin and returns its output with the trailing newline removed.
func (g git) runBytesTrim(stdin []byte, args ...string) (string, error) {
	out, err := g.runBytes(stdin, args...)
	return strings.TrimRight(string(out), "\n"), err
}

func (g git) runBytes(stdin []byte, args ...string) ([]byte, error) {
	c := g.cmd(args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	if err := c.Run(); err != nil {
		return stdout.Bytes(), &GitError{Args: args, Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// lines splits git output into non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// nulFields splits -z output.
func nulFields(b []byte) []string {
	var out []string
	for _, f := range bytes.Split(b, []byte{0}) {
		if len(f) > 0 {
			out = append(out, string(f))
		}
	}
	return out
}

// Change is one path that differs between two trees.
type Change struct {
	Status byte // A, M, D or T, as git diff --name-status
	Path   string
}

// diffTrees lists the paths that differ between two tree-ish objects, without rename detection.
func (g git) diffTrees(from, to string) ([]Change, error) {
	out, err := g.runBytes(nil, "diff-tree", "-r", "-z", "--no-renames", "--name-status", from, to)
	if err != nil {
		return nil, err
	}
	f := nulFields(out)
	var changes []Change
	for i := 0; i+1 < len(f); i += 2 {
		changes = append(changes, Change{Status: f[i][0], Path: f[i+1]})
	}
	return changes, nil
}

// binaryPaths lists the paths added or changed between two tree-ish objects
// whose new content git takes for binary.
func (g git) binaryPaths(from, to string) ([]string, error) {
	out, err := g.runBytes(nil, "diff-tree", "-r", "-z", "--no-renames", "--numstat", "--diff-filter=AMT", from, to)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range nulFields(out) {
		// Each record is "added\tdeleted\tpath"; both counts are "-" for a binary file.
		if rest, ok := strings.CutPrefix(f, "-\t-\t"); ok {
			paths = append(paths, rest)
		}
	}
	return paths, nil
}

// worktreeTree writes the state of the work tree (tracked and untracked, not ignored
// files) as a tree object without touching the real index, and returns its ID.
func (g git) worktreeTree() (string, error) {
	idx, err := os.CreateTemp("", "kube-carry-index-")
	if err != nil {
		return "", err
	}
	idx.Close()
	defer os.Remove(idx.Name())
	// Start from the real index so that stat data makes `add -A` fast on big trees.
	real, err := g.run("rev-parse", "--git-path", "index")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(real, "/") {
		real = g.dir + "/" + real
	}
	if data, err := os.ReadFile(real); err == nil {
		if err := os.WriteFile(idx.Name(), data, 0o600); err != nil {
			return "", err
		}
		// The copy keeps the index's time: git trusts an entry's stat data only when
		// the file is older than the index, and a copy made now would make an edit of
		// the same size in the second of the checkout look unchanged.
		fi, err := os.Stat(real)
		if err != nil {
			return "", err
		}
		if err := os.Chtimes(idx.Name(), fi.ModTime(), fi.ModTime()); err != nil {
			return "", err
		}
	} else {
		os.Remove(idx.Name())
	}
	tg := g.with("GIT_INDEX_FILE=" + idx.Name())
	if _, err := tg.run("add", "-A", "."); err != nil {
		return "", err
	}
	return tg.run("write-tree")
}
