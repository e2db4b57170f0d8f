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
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// A port moves a tree's groups from the base they were made on to a new base (a
// newer upstream release) with git's three-way merge, one group at a time. It
// stops at the first group that conflicts, leaving the conflict markers in the
// tree; ContinuePort saves the fixed group and goes on, AbortPort puts the tree
// and the repository back as they were before the port.

// PortState is what a port in progress recorded; it lives in the tree's .git.
type PortState struct {
	From    string      `json:"from"` // upstream tag of the old base
	To      string      `json:"to"`   // upstream tag of the new base
	OldTip  string      `json:"oldTip"`
	NewBase string      `json:"newBase"`
	Base    string      `json:"base"` // fingerprint of the new base
	Groups  []PortGroup `json:"groups"`
	// Materialize is how long building the new pristine base took.
	Materialize time.Duration `json:"materialize"`
	// Collisions are the names the series takes that the new base takes too:
	// the series must choose others while it moves (make verify fails until then).
	Collisions []string `json:"collisions,omitempty"`
}

// PortGroup is one group's progress: its commit on the old base and, once moved,
// on the new one, with how its files came across.
type PortGroup struct {
	Name string `json:"name"`
	Old  string `json:"old"`
	New  string `json:"new,omitempty"`
	// Clean files took the group's diff as it is; Merged ones needed the three-way
	// merge (their context changed upstream) and it resolved them; ByHand ones a
	// person wrote: conflicts, and files edited or added while the group was
	// stopped. Added are the group's new files that came across as they were.
	Clean  []string `json:"clean,omitempty"`
	Merged []string `json:"merged,omitempty"`
	ByHand []string `json:"byHand,omitempty"`
	// Regenerated are files an upstream generator writes that differ from the
	// merge: the generator's output on the new base, not a person's.
	Regenerated []string      `json:"regenerated,omitempty"`
	Added       []string      `json:"added,omitempty"`
	Took        time.Duration `json:"took"`
}

// ConflictError stops a port at a group whose merge conflicts.
type ConflictError struct {
	Tree, Group, To string
	Hand, Generated []string // conflicted files, the generated ones with their generator
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "group %s does not merge onto %s by itself; %s is in the middle of its merge.\n", e.Group, e.To, e.Tree)
	if len(e.Hand) > 0 {
		b.WriteString("Fix the conflict markers in:\n")
		for _, p := range e.Hand {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	if len(e.Generated) > 0 {
		b.WriteString("Regenerate, once the files above are fixed (hack/in-tree.sh COMMAND in the tree):\n")
		for _, p := range e.Generated {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	b.WriteString("Then run 'make pin' to save the group and go on, or 'make pin ABORT=1' to go back to the old base.")
	return b.String()
}

func (t *Tree) portPath() string { return filepath.Join(t.Dir(), ".git", "kube-carry-port.json") }

// LoadPort returns the port in progress, nil when there is none.
func (t *Tree) LoadPort() (*PortState, error) {
	data, err := os.ReadFile(t.portPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p PortState
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", t.portPath(), err)
	}
	return &p, nil
}

func (t *Tree) savePort(p *PortState) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(t.portPath(), append(data, '\n'), 0o644)
}

// errPortInProgress is what tree and save say while a port is under way: both
// would work from the old base and undo it.
func (t *Tree) errPortInProgress() error {
	p, err := t.LoadPort()
	if err != nil || p == nil {
		return err
	}
	return fmt.Errorf("%s is being moved from %s to %s: finish the port with 'make pin', or go back with 'make pin ABORT=1'", t.Dir(), p.From, p.To)
}

// NeedsPort says whether the tree was built on another base than its pins give.
func (t *Tree) NeedsPort() (bool, error) {
	st, err := t.LoadState()
	if err != nil || st == nil {
		return false, err
	}
	return st.Base != t.baseFingerprint(), nil
}

// StartPort builds the new pristine base from the tree's pins beside the old
// series and moves the groups onto it. The tree must hold the old series, built
// and saved. Files of the repository the port rewrites are kept in backup first.
func (t *Tree) StartPort(backup Backup) error {
	st, err := t.LoadState()
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("no tree at %s to move; run 'make tree' at the old pins first", t.Dir())
	}
	if err := t.Unsaved(st); err != nil {
		return err
	}
	groups, err := t.Repo.Groups(t.Up)
	if err != nil {
		return err
	}
	if err := t.checkCurrent(st, groups); err != nil {
		return err
	}
	g := t.git()
	from, err := g.run("describe", "--tags", "--exact-match", st.BaseCommit)
	if err != nil {
		from = st.BaseCommit[:12]
	}
	version, err := t.Version()
	if err != nil {
		return err
	}
	p := &PortState{From: from, To: t.Up.Tag(version), OldTip: st.Tip(), Base: t.baseFingerprint()}
	for _, gs := range st.Groups {
		p.Groups = append(p.Groups, PortGroup{Name: gs.Name, Old: gs.Commit})
	}

	start := time.Now()
	if p.NewBase, err = t.materializeBeside(); err != nil {
		return err
	}
	p.Materialize = time.Since(start)
	cs, err := Collisions(g, st.BaseCommit, st.Tip(), p.NewBase)
	if err != nil {
		return err
	}
	for _, c := range cs {
		p.Collisions = append(p.Collisions, c.String())
		t.logf("%s: %s takes a name the series takes: %s", t.Up.Name, p.To, c)
	}
	// The old series stays reachable (and gc-safe) while the port runs and after.
	if _, err := g.run("update-ref", "refs/kube-carry/"+from, st.Tip()); err != nil {
		return err
	}
	if _, err := g.run("checkout", "-q", "--detach", p.NewBase); err != nil {
		return err
	}
	if err := t.savePort(p); err != nil {
		return err
	}
	t.logf("%s: new base %s in %s; moving %d groups", t.Up.Name, p.To, p.Materialize.Round(time.Second), len(groups))
	return t.movePort(p, backup)
}

// materializeBeside builds the pristine base of the tree's pins in a scratch
// repository and fetches it into the tree, whose work tree it leaves alone.
func (t *Tree) materializeBeside() (string, error) {
	parent := filepath.Join(t.Repo.Root, "_output")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	scratchRoot, err := os.MkdirTemp(parent, ".port-"+t.Up.Name+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratchRoot)
	scratch := *t
	scratch.Repo = Repo{Root: scratchRoot}
	commit, err := scratch.materializeBase()
	if err != nil {
		return "", err
	}
	g := t.git()
	if _, err := g.run("fetch", "-q", "--no-tags", scratch.Dir(), "HEAD"); err != nil {
		return "", err
	}
	version, _ := t.Version()
	if _, err := g.run("tag", "-f", t.Up.Tag(version), commit); err != nil {
		return "", err
	}
	return commit, nil
}

// ContinuePort saves the group the port stopped at, once its conflicts are fixed
// in the tree, and moves the groups after it.
func (t *Tree) ContinuePort(backup Backup) error {
	p, err := t.LoadPort()
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("no port in progress in %s", t.Dir())
	}
	return t.movePort(p, backup)
}

// movePort moves the groups not moved yet, the one a conflict stopped at first.
func (t *Tree) movePort(p *PortState, backup Backup) error {
	groups, err := t.Repo.Groups(t.Up)
	if err != nil {
		return err
	}
	g := t.git()
	for i := range p.Groups {
		pg := &p.Groups[i]
		if pg.New != "" {
			continue
		}
		gr, err := FindGroup(groups, pg.Name)
		if err != nil {
			return err
		}
		if pg.Took == 0 { // not merged yet; otherwise a conflict stopped it
			if err := t.mergeGroup(pg); err != nil {
				return err
			}
			if err := t.savePort(p); err != nil {
				return err
			}
			if len(pg.ByHand) > 0 {
				return t.conflict(p, pg)
			}
		} else if err := t.checkResolved(pg); err != nil {
			return err
		}
		if _, err := g.run("add", "-A", "."); err != nil {
			return err
		}
		if _, err := g.runBytes([]byte(gr.Header), "commit", "-q", "--allow-empty", "--no-verify", "-F", "-"); err != nil {
			return err
		}
		if pg.New, err = g.run("rev-parse", "HEAD"); err != nil {
			return err
		}
		g.run("cherry-pick", "--quit")
		if err := t.backupGroup(backup, gr, pg.New); err != nil {
			return err
		}
		if err := t.writeBack(gr, pg.New); err != nil {
			return err
		}
		if err := t.savePort(p); err != nil {
			return err
		}
		t.logf("%s: moved %s: %d clean, %d merged, %d by hand, %d new files", t.Up.Name, pg.Name, len(pg.Clean), len(pg.Merged), len(pg.ByHand), len(pg.Added))
	}
	return t.finishPort(p)
}

// mergeGroup merges one group's commit onto HEAD and sorts its files: those its
// diff applies to as it is, those the three-way merge resolved, those in conflict.
func (t *Tree) mergeGroup(pg *PortGroup) error {
	start := time.Now()
	g := t.git()
	changes, err := g.diffTrees(pg.Old+"^", pg.Old)
	if err != nil {
		return err
	}
	diff, err := g.runBytes(nil, "diff", "--no-renames", "--binary", "--no-color", "--no-ext-diff", "--abbrev=8", pg.Old+"^", pg.Old)
	if err != nil {
		return err
	}
	failing := map[string]bool{}
	if len(diff) > 0 {
		if _, err := g.runBytes(diff, "apply", "--check", "-"); err != nil {
			var ge *GitError
			if !errors.As(err, &ge) {
				return err
			}
			for _, e := range applyErrors(ge.Stderr) {
				failing[e.file] = true
			}
		}
	}
	// A conflicting merge exits non-zero; the unmerged paths say which files.
	_, mergeErr := g.run("-c", "merge.conflictStyle=diff3", "cherry-pick", "--no-commit", pg.Old)
	out, err := g.runBytes(nil, "diff", "--name-only", "--diff-filter=U", "-z")
	if err != nil {
		return err
	}
	unmerged := map[string]bool{}
	for _, p := range nulFields(out) {
		unmerged[p] = true
	}
	if mergeErr != nil && len(unmerged) == 0 {
		return fmt.Errorf("merging %s: %w", pg.Name, mergeErr)
	}
	for _, c := range changes {
		switch {
		case unmerged[c.Path]:
			pg.ByHand = append(pg.ByHand, c.Path)
		case failing[c.Path]:
			pg.Merged = append(pg.Merged, c.Path)
		case c.Status == 'A' && t.Up.ownsPath(c.Path):
			pg.Added = append(pg.Added, c.Path)
		default:
			pg.Clean = append(pg.Clean, c.Path)
		}
	}
	pg.Took = time.Since(start)
	return nil
}

func (t *Tree) conflict(p *PortState, pg *PortGroup) error {
	e := &ConflictError{Tree: t.Dir(), Group: pg.Name, To: p.To}
	for _, f := range pg.ByHand {
		if gen := t.Up.generator(f); gen != nil {
			e.Generated = append(e.Generated, f+" ("+gen.Command+")")
		} else {
			e.Hand = append(e.Hand, f)
		}
	}
	return e
}

// checkResolved refuses to save a group while a file it conflicted in still
// holds a conflict marker.
func (t *Tree) checkResolved(pg *PortGroup) error {
	var left []string
	for _, f := range pg.ByHand {
		data, err := os.ReadFile(filepath.Join(t.Dir(), f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted on purpose
		}
		if err != nil {
			return err
		}
		if n := conflictMarker(data); n > 0 {
			left = append(left, fmt.Sprintf("%s:%d", f, n))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("group %s still has conflict markers, nothing was saved:\n  %s", pg.Name, strings.Join(left, "\n  "))
	}
	return nil
}

// conflictMarker returns the line of the first conflict marker git writes, 0 if none.
func conflictMarker(data []byte) int {
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(nil, 16<<20)
	for n := 1; s.Scan(); n++ {
		l := s.Bytes()
		for _, m := range []string{"<<<<<<< ", "||||||| ", ">>>>>>> "} {
			if bytes.HasPrefix(l, []byte(m)) {
				return n
			}
		}
		if bytes.Equal(l, []byte("=======")) {
			return n
		}
	}
	return 0
}

// editedAfterMerge lists the files of a moved group that differ from what git's
// three-way merge alone made of it (conflicts fixed, files edited or added while
// the group was stopped): the files a person wrote.
func (t *Tree) editedAfterMerge(pg PortGroup, parent string) ([]string, error) {
	g := t.git()
	// The cherry-pick's merge as merge-tree sees it: two commits on a common root
	// that has the tree of the group's old parent (git 2.39 has no --merge-base).
	commit := func(tree string, parents ...string) (string, error) {
		args := []string{"commit-tree", tree + "^{tree}", "-m", "merge"}
		for _, p := range parents {
			args = append(args, "-p", p)
		}
		return g.run(args...)
	}
	base, err := commit(pg.Old + "^")
	if err != nil {
		return nil, err
	}
	ours, err := commit(parent, base)
	if err != nil {
		return nil, err
	}
	theirs, err := commit(pg.Old, base)
	if err != nil {
		return nil, err
	}
	// With conflicts, merge-tree exits 1 and still writes the tree, markers and all.
	out, err := g.run("merge-tree", "--write-tree", "--no-messages", ours, theirs)
	var ge *GitError
	if err != nil && !(errors.As(err, &ge) && out != "") {
		return nil, err
	}
	merged, _, _ := strings.Cut(out, "\n")
	changes, err := g.diffTrees(merged, pg.New)
	if err != nil {
		return nil, err
	}
	var edited []string
	for _, c := range changes {
		edited = append(edited, c.Path)
	}
	return edited, nil
}

// countEdits moves the files a person wrote into ByHand, whatever the merge said of them.
func (t *Tree) countEdits(p *PortState) error {
	parent := p.NewBase
	for i := range p.Groups {
		pg := &p.Groups[i]
		edited, err := t.editedAfterMerge(*pg, parent)
		if err != nil {
			return err
		}
		byHand := map[string]bool{}
		for _, f := range append(pg.ByHand, edited...) {
			byHand[f] = true
		}
		keep := func(files []string) []string {
			var out []string
			for _, f := range files {
				if !byHand[f] {
					out = append(out, f)
				}
			}
			return out
		}
		pg.Clean, pg.Merged, pg.Added = keep(pg.Clean), keep(pg.Merged), keep(pg.Added)
		pg.ByHand, pg.Regenerated = pg.ByHand[:0], nil
		for f := range byHand {
			if t.Up.generator(f) != nil {
				pg.Regenerated = append(pg.Regenerated, f)
			} else {
				pg.ByHand = append(pg.ByHand, f)
			}
		}
		sort.Strings(pg.ByHand)
		sort.Strings(pg.Regenerated)
		parent = pg.New
	}
	return nil
}

// finishPort records the moved series as the tree's state and ends the port.
func (t *Tree) finishPort(p *PortState) error {
	if err := t.countEdits(p); err != nil {
		return err
	}
	groups, err := t.Repo.Groups(t.Up)
	if err != nil {
		return err
	}
	st, err := t.LoadState()
	if err != nil {
		return err
	}
	if st == nil || len(groups) != len(p.Groups) {
		return fmt.Errorf("the repository's groups changed during the port of %s; abort it with 'make pin ABORT=1'", t.Dir())
	}
	st = &State{Base: p.Base, BaseCommit: p.NewBase}
	for i, gr := range groups {
		if gr.Name != p.Groups[i].Name {
			return fmt.Errorf("the repository's groups changed during the port of %s; abort it with 'make pin ABORT=1'", t.Dir())
		}
		fp, err := t.Repo.Fingerprint(gr)
		if err != nil {
			return err
		}
		st.Groups = append(st.Groups, GroupState{Name: gr.Name, Fingerprint: fp, Commit: p.Groups[i].New, Header: gr.Header})
	}
	if err := t.saveState(st); err != nil {
		return err
	}
	record := filepath.Join(t.Repo.Root, "_output", fmt.Sprintf("port-%s-%s-%s.md", t.Up.Name, p.From, p.To))
	if err := os.WriteFile(record, []byte(p.Record()), 0o644); err != nil {
		return err
	}
	t.logf("%s: the series is on %s; the record of the move is in %s", t.Up.Name, p.To, record)
	return os.Remove(t.portPath())
}

// Record is the port's account: per group, how its files came across and the
// machine time it took, as a Markdown table for docs/.
func (p *PortState) Record() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Moving the series from %s to %s: the new pristine base in %s.\n\n", p.From, p.To, p.Materialize.Round(time.Second))
	b.WriteString("| group | clean | merged | by hand | regenerated | new files | merge time |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, g := range p.Groups {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s |\n", g.Name, len(g.Clean), len(g.Merged), len(g.ByHand), len(g.Regenerated), len(g.Added), g.Took.Round(100*time.Millisecond))
	}
	if len(p.Collisions) > 0 {
		fmt.Fprintf(&b, "\nNames %s takes that the series took on %s:\n", p.To, p.From)
		for _, c := range p.Collisions {
			fmt.Fprintf(&b, "- %s\n", c)
		}
	}
	for _, g := range p.Groups {
		if len(g.Merged)+len(g.ByHand)+len(g.Regenerated) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s:\n", g.Name)
		for _, f := range g.Merged {
			fmt.Fprintf(&b, "- merged: %s\n", f)
		}
		for _, f := range g.ByHand {
			fmt.Fprintf(&b, "- by hand: %s\n", f)
		}
		for _, f := range g.Regenerated {
			fmt.Fprintf(&b, "- regenerated: %s\n", f)
		}
	}
	return b.String()
}

// AbortPort puts the tree back at the old series. Whatever the tree held (a
// half-fixed conflict) is committed under refs/kube-carry/aborted-port first,
// so that nothing typed into it is lost.
func (t *Tree) AbortPort() error {
	p, err := t.LoadPort()
	if err != nil || p == nil {
		return err
	}
	g := t.git()
	g.run("cherry-pick", "--quit")
	if _, err := g.run("add", "-A", "."); err != nil {
		return err
	}
	if _, err := g.runBytes([]byte("kube-carry: the port to "+p.To+" as it was when aborted\n"), "commit", "-q", "--allow-empty", "--no-verify", "-F", "-"); err != nil {
		return err
	}
	if _, err := g.run("update-ref", "refs/kube-carry/aborted-port", "HEAD"); err != nil {
		return err
	}
	if _, err := g.run("reset", "-q", "--hard", p.OldTip); err != nil {
		return err
	}
	g.run("tag", "-d", p.To)
	t.logf("%s: back at %s; the aborted port's work tree is kept at refs/kube-carry/aborted-port", t.Up.Name, p.From)
	return os.Remove(t.portPath())
}

// backupGroup keeps the repository files writing back the group's commit changes.
func (t *Tree) backupGroup(b Backup, gr Group, commit string) error {
	rel := func(p string) string { r, _ := filepath.Rel(t.Repo.Root, p); return r }
	paths := []string{rel(filepath.Join(gr.Dir, patchFile)), rel(filepath.Join(gr.Dir, filesFile))}
	paths = append(paths, gr.Files...)
	changes, err := t.git().diffTrees(commit+"^", commit)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if c.Status == 'A' && t.Up.ownsPath(c.Path) {
			paths = append(paths, c.Path)
		}
	}
	for _, p := range paths {
		if err := b.Save(t.Repo.Root, p); err != nil {
			return err
		}
	}
	return nil
}

// Backup keeps copies of repository files, each as it was the first time it was
// saved, so that they can be put back.
type Backup struct{ Dir string }

const absentList = "absent"

// Save keeps rel (relative to root) unless it is kept already; a file that does
// not exist is remembered as absent.
func (b Backup) Save(root, rel string) error {
	kept := filepath.Join(b.Dir, "files", rel)
	if _, err := os.Lstat(kept); err == nil {
		return nil
	}
	absent, err := b.absent()
	if err != nil {
		return err
	}
	if absent[rel] {
		return nil
	}
	if _, err := os.Stat(filepath.Join(root, rel)); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(b.Dir, 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(b.Dir, absentList), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, werr := fmt.Fprintln(f, rel)
		return errors.Join(werr, f.Close())
	}
	return copyFile(filepath.Join(root, rel), kept)
}

func (b Backup) absent() (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(b.Dir, absentList))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, l := range lines(string(data)) {
		m[l] = true
	}
	return m, nil
}

// Restore puts every kept file back under root, removes those that were absent,
// and then the backup.
func (b Backup) Restore(root string) error {
	absent, err := b.absent()
	if err != nil {
		return err
	}
	var gone []string
	for p := range absent {
		gone = append(gone, p)
	}
	sort.Strings(gone)
	for _, p := range gone {
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	files := filepath.Join(b.Dir, "files")
	err = filepath.WalkDir(files, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == files {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(files, p)
		return copyFile(p, filepath.Join(root, rel))
	})
	if err != nil {
		return err
	}
	return os.RemoveAll(b.Dir)
}
