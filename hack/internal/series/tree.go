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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// materializeVersion changes whenever the way a base tree is built changes, so that
// existing trees are rebuilt.
const materializeVersion = "5"

// Source finds the extracted source of a Go module version.
type Source interface {
	ModuleDir(path, version string) (string, error)
}

// Tree is the materialized git tree of one upstream: pristine upstream tagged with
// its release tag, then one commit per group.
type Tree struct {
	Repo  Repo
	Up    Upstream
	Src   Source
	Pins  map[string]string // module path -> version
	Ident Identity
	Log   io.Writer
	// Path is the tree's directory when it is not the repository's
	// _output/NAME: a release tree (MaterializeRelease).
	Path string
}

// State is what the tool recorded about the tree it built; it lives in the tree's .git.
type State struct {
	Base       string       `json:"base"`
	BaseCommit string       `json:"baseCommit"`
	Groups     []GroupState `json:"groups"`
}

// GroupState records the inputs and the commit of one applied group.
type GroupState struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
	Commit      string `json:"commit"`
	// Header is the commit message the group's commit was made with, so that save
	// can tell an edit of the message (which it never writes) from one of the code.
	Header string `json:"header,omitempty"`
}

// Tip is the commit the series ends at.
func (s *State) Tip() string {
	if len(s.Groups) == 0 {
		return s.BaseCommit
	}
	return s.Groups[len(s.Groups)-1].Commit
}

// Dir is the tree's directory.
func (t *Tree) Dir() string {
	if t.Path != "" {
		return t.Path
	}
	return t.Repo.TreeDir(t.Up)
}

func (t *Tree) git() git {
	ident := t.Ident
	if ident.Name == "" {
		ident = DefaultIdentity
	}
	return git{dir: t.Dir(), ident: ident}
}

func (t *Tree) statePath() string { return filepath.Join(t.Dir(), ".git", "kube-carry-state.json") }

func (t *Tree) logf(format string, args ...any) {
	if t.Log != nil {
		fmt.Fprintf(t.Log, format+"\n", args...)
	}
}

// Version is the pinned version of the upstream module.
func (t *Tree) Version() (string, error) {
	v, ok := t.Pins[t.Up.Module]
	if !ok {
		return "", fmt.Errorf("go.mod pins no version of %s", t.Up.Module)
	}
	return v, nil
}

// LoadState reads the recorded state; it returns nil when no tree was built.
func (t *Tree) LoadState() (*State, error) {
	data, err := os.ReadFile(t.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", t.statePath(), err)
	}
	return &s, nil
}

func (t *Tree) saveState(s *State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(t.statePath(), append(data, '\n'), 0o644)
}

// UnsavedError lists the edits in a tree that are not saved into the repository.
type UnsavedError struct {
	Tree    string
	Commits []string // commits on top of the recorded series, one line each
	Paths   []string // git status lines
}

func (e *UnsavedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s holds edits that are not saved into the repository:\n", e.Tree)
	for _, c := range e.Commits {
		fmt.Fprintf(&b, "  commit %s\n", c)
	}
	for _, p := range e.Paths {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	b.WriteString("Save them with 'make save' (GROUP=<group> for files no group touches yet), or discard them in the tree yourself.")
	return b.String()
}

// Unsaved returns an *UnsavedError when the tree differs from the recorded series, nil otherwise.
func (t *Tree) Unsaved(s *State) error {
	g := t.git()
	e := &UnsavedError{Tree: t.Dir()}
	head, err := g.run("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if head != s.Tip() {
		out, err := g.run("log", "--oneline", "--no-decorate", s.Tip()+".."+head)
		if err != nil || out == "" {
			e.Commits = append(e.Commits, fmt.Sprintf("HEAD is at %.12s, not at the series tip %.12s", head, s.Tip()))
		} else {
			e.Commits = lines(out)
		}
	}
	st, err := g.runBytes(nil, "status", "--porcelain=v1", "-z", "-uall")
	if err != nil {
		return err
	}
	for _, f := range nulFields(st) {
		if len(f) > 3 && f[2] == ' ' {
			e.Paths = append(e.Paths, f)
		}
	}
	if len(e.Commits) == 0 && len(e.Paths) == 0 {
		return nil
	}
	return e
}

// baseFingerprint identifies the pristine base: the materialization and every pin.
func (t *Tree) baseFingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "materialize %s %s %s %s\n", materializeVersion, t.Up.Name, t.Up.Module, t.Up.Subdir)
	var mods []string
	for m := range t.Pins {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		fmt.Fprintf(h, "pin %s %s\n", m, t.Pins[m])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Sync brings the tree up to date with the repository: it builds the pristine base
// when missing or when the pins changed, and re-applies the groups from the first
// one whose inputs changed. It refuses to touch a tree that holds unsaved edits.
func (t *Tree) Sync() (*State, error) {
	if err := t.errPortInProgress(); err != nil {
		return nil, err
	}
	groups, err := t.Repo.Groups(t.Up)
	if err != nil {
		return nil, err
	}
	fps := make([]string, len(groups))
	for i, g := range groups {
		if fps[i], err = t.Repo.Fingerprint(g); err != nil {
			return nil, err
		}
	}
	st, err := t.LoadState()
	if err != nil {
		return nil, err
	}
	if st == nil {
		if entries, err := os.ReadDir(t.Dir()); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("%s exists but was not made by this tool: move it away, then run 'make tree' again", t.Dir())
		}
	} else if err := t.Unsaved(st); err != nil {
		return nil, err
	}

	base := t.baseFingerprint()
	if st == nil || st.Base != base {
		if st != nil {
			t.logf("%s: the pristine base changed (pins or how it is made); rebuilding the tree", t.Up.Name)
			if err := os.RemoveAll(t.Dir()); err != nil {
				return nil, err
			}
		}
		commit, err := t.materializeBase()
		if err != nil {
			// The folder was empty or absent (checked above): leave nothing half made.
			if rerr := os.RemoveAll(t.Dir()); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			return nil, err
		}
		st = &State{Base: base, BaseCommit: commit}
		if err := t.saveState(st); err != nil {
			return nil, err
		}
	}

	keep := 0
	for keep < len(groups) && keep < len(st.Groups) &&
		st.Groups[keep].Name == groups[keep].Name && st.Groups[keep].Fingerprint == fps[keep] {
		keep++
	}
	if keep == len(groups) && keep == len(st.Groups) {
		t.logf("%s: tree is up to date (%d groups)", t.Up.Name, len(groups))
		return st, nil
	}
	g := t.git()
	st.Groups = st.Groups[:keep]
	if _, err := g.run("reset", "-q", "--hard", st.Tip()); err != nil {
		return nil, err
	}
	for i := keep; i < len(groups); i++ {
		commit, err := t.applyGroup(groups[i])
		if err != nil {
			// Leave the tree at the last good group so that nothing half-applied stays.
			if _, rerr := g.run("reset", "-q", "--hard", st.Tip()); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			g.run("clean", "-q", "-fd")
			if serr := t.saveState(st); serr != nil {
				return nil, errors.Join(err, serr)
			}
			return nil, err
		}
		st.Groups = append(st.Groups, GroupState{Name: groups[i].Name, Fingerprint: fps[i], Commit: commit, Header: groups[i].Header})
		t.logf("%s: applied %s", t.Up.Name, groups[i].Name)
	}
	return st, t.saveState(st)
}

// applyGroup applies one group on top of the tree's HEAD and commits it.
func (t *Tree) applyGroup(gr Group) (string, error) {
	g := t.git()
	if gr.Patch != "" {
		if _, err := g.run("apply", "--index", "--whitespace=nowarn", gr.Patch); err != nil {
			return "", t.patchError(gr, err)
		}
	}
	for _, f := range gr.Files {
		dst := filepath.Join(t.Dir(), f)
		if _, err := os.Lstat(dst); err == nil {
			return "", fmt.Errorf("group %s adds %s, but the tree already has it (upstream or an earlier group): change it through %s instead", gr.Name, f, patchFile)
		}
		if err := copyFile(filepath.Join(t.Repo.Root, f), dst); err != nil {
			return "", err
		}
	}
	if len(gr.Files) > 0 {
		if _, err := g.run(append([]string{"add", "-f", "--"}, gr.Files...)...); err != nil {
			return "", err
		}
	}
	if _, err := g.runBytes([]byte(gr.Header), "commit", "-q", "--allow-empty", "--no-verify", "-F", "-"); err != nil {
		return "", err
	}
	return g.run("rev-parse", "HEAD")
}

// PatchError says which file and hunk of a group's patch failed to apply.
type PatchError struct {
	Patch string
	Hunks []string
	Git   string
}

func (e *PatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s does not apply on top of upstream and the groups before it:\n", e.Patch)
	for _, h := range e.Hunks {
		fmt.Fprintf(&b, "  %s\n", h)
	}
	fmt.Fprintf(&b, "git apply said:\n  %s\n", strings.ReplaceAll(strings.TrimSpace(e.Git), "\n", "\n  "))
	b.WriteString("Rebase the group onto the new base (see docs/development.md, 'Moving to a new upstream version').")
	return b.String()
}

func (t *Tree) patchError(gr Group, err error) error {
	rel, _ := filepath.Rel(t.Repo.Root, gr.Patch)
	pe := &PatchError{Patch: rel}
	var ge *GitError
	if !errors.As(err, &ge) {
		return err
	}
	pe.Git = ge.Stderr
	data, _ := os.ReadFile(gr.Patch)
	for _, e := range applyErrors(ge.Stderr) {
		switch {
		case e.line != "":
			pe.Hunks = append(pe.Hunks, fmt.Sprintf("%s: hunk %s does not apply", e.file, findHunk(data, e.file, e.line)))
		case e.why != "patch does not apply": // said with the hunk above
			pe.Hunks = append(pe.Hunks, fmt.Sprintf("%s: %s", e.file, e.why))
		}
	}
	return pe
}

// applyError is a file git apply's errors name: the old line of a hunk that
// failed, or why the file does not apply.
type applyError struct{ file, line, why string }

func applyErrors(stderr string) []applyError {
	var out []applyError
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimPrefix(l, "error: ")
		if rest, ok := strings.CutPrefix(l, "patch failed: "); ok {
			if i := strings.LastIndex(rest, ":"); i > 0 {
				out = append(out, applyError{file: rest[:i], line: rest[i+1:]})
			}
		} else if file, why, ok := strings.Cut(l, ": "); ok && file != "" && !strings.Contains(file, " ") {
			out = append(out, applyError{file: file, why: why})
		}
	}
	return out
}

// findHunk returns the header (and line in the patch) of the hunk of file that
// starts at old line oldStart.
func findHunk(patch []byte, file, oldStart string) string {
	cur := ""
	for i, l := range strings.Split(string(patch), "\n") {
		switch {
		case strings.HasPrefix(l, "diff --git "):
			cur = ""
		case strings.HasPrefix(l, "--- a/"):
			cur = strings.TrimPrefix(l, "--- a/")
		case strings.HasPrefix(l, "+++ b/") && cur == "":
			cur = strings.TrimPrefix(l, "+++ b/")
		case strings.HasPrefix(l, "@@ -") && cur == file:
			start, _, _ := strings.Cut(strings.TrimPrefix(l, "@@ -"), ",")
			start, _, _ = strings.Cut(start, " ")
			if start == oldStart {
				return fmt.Sprintf("%q (patch line %d)", l, i+1)
			}
		}
	}
	return "at old line " + oldStart
}

// materializeBase builds the pristine tree from module zips and returns its commit.
func (t *Tree) materializeBase() (string, error) {
	version, err := t.Version()
	if err != nil {
		return "", err
	}
	t.logf("%s: materializing %s@%s", t.Up.Name, t.Up.Module, version)
	if err := os.MkdirAll(t.Dir(), 0o755); err != nil {
		return "", err
	}
	g := t.git()
	if _, err := g.run("init", "-q"); err != nil {
		return "", err
	}
	// Byte-exact content: no end-of-line conversion whatever upstream's .gitattributes say.
	if err := os.WriteFile(filepath.Join(t.Dir(), ".git", "info", "attributes"), []byte("* -text\n"), 0o644); err != nil {
		return "", err
	}
	m := &materializer{tree: t.Dir(), src: t.Src, pins: t.Pins}
	if err := m.addModule(t.Up.Module, version, t.Up.Subdir); err != nil {
		return "", err
	}
	if t.Up.Nested != nil {
		if err := t.Up.Nested(m); err != nil {
			return "", err
		}
	}
	for link, target := range t.Up.Symlinks {
		p := filepath.Join(t.Dir(), link)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.Symlink(target, p); err != nil {
			return "", err
		}
		m.notef("restored the symlink %s -> %s", link, target)
	}
	if _, err := g.run("add", "-A", "-f", "."); err != nil {
		return "", err
	}
	tag := t.Up.Tag(version)
	msg := fmt.Sprintf("%s %s\n\nPristine upstream as published in the Go module zip of %s@%s.\n", t.Up.Name, tag, t.Up.Module, version)
	if len(m.notes) > 0 {
		msg += "\nDifferences from upstream's git tree (what the module zips lack or carry beyond it):\n"
		for _, n := range m.notes {
			msg += "- " + n + "\n"
		}
	}
	if _, err := g.runBytes([]byte(msg), "commit", "-q", "--no-verify", "-F", "-"); err != nil {
		return "", err
	}
	if _, err := g.run("tag", "-f", tag); err != nil {
		return "", err
	}
	return g.run("rev-parse", "HEAD")
}

// materializer writes module sources into a tree.
type materializer struct {
	tree  string
	src   Source
	pins  map[string]string
	notes []string
}

func (m *materializer) notef(format string, args ...any) {
	m.notes = append(m.notes, fmt.Sprintf(format, args...))
}

// addModule copies a module's source to dest (relative to the tree), making files
// writable and scripts (files that start with "#!") executable, as in upstream's git.
func (m *materializer) addModule(module, version, dest string) error {
	dir, err := m.src.ModuleDir(module, version)
	if err != nil {
		return err
	}
	root := filepath.Join(m.tree, dest)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if bytes.HasPrefix(data, []byte("#!")) {
			mode = 0o755
		}
		return os.WriteFile(out, data, mode)
	})
}

// copyFile copies a file with its executable bit.
func copyFile(src, dst string) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if info.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
