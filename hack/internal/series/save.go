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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Save writes the edits made in the tree (uncommitted changes and commits on top of
// the series) back into the repository. Each changed path goes to the last group
// that touches it, or to the group named by into. The tree's series is rewritten
// with git's autosquash; when that fails, the tree is left exactly as it was.
func (t *Tree) Save(into string) ([]string, error) {
	if err := t.errPortInProgress(); err != nil {
		return nil, err
	}
	st, err := t.LoadState()
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("%s: no tree to save from; run 'make tree' first", t.Dir())
	}
	groups, err := t.Repo.Groups(t.Up)
	if err != nil {
		return nil, err
	}
	if err := t.checkCurrent(st, groups); err != nil {
		return nil, err
	}
	g := t.git()
	head, err := g.run("rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	work, err := g.worktreeTree()
	if err != nil {
		return nil, err
	}
	changes, err := g.diffTrees(st.Tip(), work)
	if err != nil {
		return nil, err
	}
	if len(changes) == 0 {
		if head != st.Tip() {
			if _, err := g.run("reset", "-q", "--mixed", st.Tip()); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}

	if bin, err := g.binaryPaths(st.Tip(), work); err != nil {
		return nil, err
	} else if bin = uncarried(bin, groups); len(bin) > 0 {
		return nil, fmt.Errorf("binary files are not source and the series does not carry them (a build output in the tree?); remove them from the tree, nothing was saved:\n  %s", strings.Join(bin, "\n  "))
	}

	var target *Group
	if into != "" {
		gr, err := FindGroup(groups, into)
		if err != nil {
			return nil, err
		}
		target = &gr
	}
	owner, err := t.lastToucher(st)
	if err != nil {
		return nil, err
	}
	byGroup := map[string][]string{}
	var homeless []string
	for _, c := range changes {
		switch name, ok := owner[c.Path]; {
		case target != nil:
			byGroup[target.Name] = append(byGroup[target.Name], c.Path)
		case ok:
			byGroup[name] = append(byGroup[name], c.Path)
		default:
			homeless = append(homeless, c.Path)
		}
	}
	if len(homeless) > 0 {
		return nil, fmt.Errorf("no group touches these paths yet; name the group with GROUP=<group>:\n  %s", strings.Join(homeless, "\n  "))
	}

	// From here on the tree is rewritten; on any failure it returns to head with the
	// work tree untouched, so the edits stay where they were.
	restore := func(cause error) error {
		g.run("rebase", "--abort")
		if _, err := g.run("reset", "-q", "--mixed", head); err != nil {
			return errors.Join(cause, fmt.Errorf("restoring %s to %s: %w", t.Dir(), head, err))
		}
		return cause
	}
	if _, err := g.run("reset", "-q", "--mixed", st.Tip()); err != nil {
		return nil, restore(err)
	}
	var saved []string
	for i, gr := range groups {
		paths := byGroup[gr.Name]
		if len(paths) == 0 {
			continue
		}
		if _, err := g.run(append([]string{"add", "-A", "-f", "--"}, paths...)...); err != nil {
			return nil, restore(err)
		}
		// "fixup! <commit>" names the group's commit, whatever its subject.
		if _, err := g.runBytes([]byte("fixup! "+st.Groups[i].Commit+"\n"), "commit", "-q", "--no-verify", "-F", "-"); err != nil {
			return nil, restore(err)
		}
		saved = append(saved, gr.Name)
	}
	if _, err := g.run("rebase", "-q", "-i", "--autosquash", "--keep-empty", st.BaseCommit); err != nil {
		return nil, restore(fmt.Errorf("the edits do not fit into the series (a later group conflicts with them); nothing was changed:\n%w", err))
	}
	if tip, err := g.run("rev-parse", "HEAD^{tree}"); err != nil || tip != work {
		return nil, restore(fmt.Errorf("the rewritten series does not end at the edited tree (%s != %s)", tip, work))
	}
	// The rebase kept the group order; record the new commits and write them back.
	log, err := g.run("rev-list", "--reverse", st.BaseCommit+"..HEAD")
	if err != nil {
		return nil, restore(err)
	}
	commits := lines(log)
	if len(commits) != len(groups) {
		return nil, restore(fmt.Errorf("the series has %d commits after saving, want one per group (%d)", len(commits), len(groups)))
	}
	for i, gr := range groups {
		if err := t.writeBack(gr, commits[i]); err != nil {
			return nil, err
		}
	}
	// Reload: writing back may have changed the groups' file lists.
	if groups, err = t.Repo.Groups(t.Up); err != nil {
		return nil, err
	}
	built := slices.Clone(st.Groups)
	st.Groups = st.Groups[:0]
	for i, gr := range groups {
		// The commits keep the messages they were made with: the next sync makes
		// them again where a HEADER changed meanwhile.
		if h := built[i].Header; h != "" {
			gr.Header = h
		}
		fp, err := t.Repo.Fingerprint(gr)
		if err != nil {
			return nil, err
		}
		st.Groups = append(st.Groups, GroupState{Name: gr.Name, Fingerprint: fp, Commit: commits[i], Header: gr.Header})
	}
	return saved, t.saveState(st)
}

// uncarried returns the paths that no group carries as a file of its own. A
// file the series adds (a group's files) is written back as it is, so a binary
// one, such as the protobuf fixture of a new API in staging/src/k8s.io/api/testdata,
// which upstream's generator writes, is carried like any other; a binary that
// would go into an upstream.patch, or that is new to the series (a build
// output), is not.
func uncarried(paths []string, groups []Group) []string {
	carried := map[string]bool{}
	for _, gr := range groups {
		for _, f := range gr.Files {
			carried[f] = true
		}
	}
	var out []string
	for _, p := range paths {
		if !carried[p] {
			out = append(out, p)
		}
	}
	return out
}

// checkCurrent refuses to save from a tree whose groups were built from other
// repository contents: saving would overwrite the repository's newer edits. A new
// base (pins, materialization) does not matter: the groups are diffs against the
// tree's own base, and the next 'make tree' rebuilds it. Nor does a new HEADER,
// which saving never writes: the groups are compared under the headers their
// commits were made with (trees made before the state recorded them compare the
// HEADERs too).
func (t *Tree) checkCurrent(st *State, groups []Group) error {
	if len(st.Groups) != len(groups) {
		return fmt.Errorf("the tree was built from other groups than the repository has now; saving would overwrite them. Run 'make tree' first")
	}
	for i, gr := range groups {
		if h := st.Groups[i].Header; h != "" {
			gr.Header = h
		}
		fp, err := t.Repo.Fingerprint(gr)
		if err != nil {
			return err
		}
		if st.Groups[i].Name != gr.Name || st.Groups[i].Fingerprint != fp {
			return fmt.Errorf("group %s changed in the repository since the tree was built; saving would overwrite it. Run 'make tree' first", gr.Name)
		}
	}
	return nil
}

// lastToucher maps every path a group changes to the last group that changes it.
func (t *Tree) lastToucher(st *State) (map[string]string, error) {
	g := t.git()
	owner := map[string]string{}
	parent := st.BaseCommit
	for _, gs := range st.Groups {
		changes, err := g.diffTrees(parent, gs.Commit)
		if err != nil {
			return nil, err
		}
		for _, c := range changes {
			owner[c.Path] = gs.Name
		}
		parent = gs.Commit
	}
	return owner, nil
}

// writeBack writes one group commit into the repository: the files it adds become
// overlay files listed in the group's files, everything else its upstream.patch.
func (t *Tree) writeBack(gr Group, commit string) error {
	g := t.git()
	changes, err := g.diffTrees(commit+"^", commit)
	if err != nil {
		return err
	}
	var added, changed []string
	for _, c := range changes {
		if c.Status == 'A' && t.Up.ownsPath(c.Path) {
			added = append(added, c.Path)
		} else {
			changed = append(changed, c.Path)
		}
	}
	sort.Strings(added)
	for _, f := range added {
		if err := t.exportFile(commit, f); err != nil {
			return err
		}
	}
	keep := map[string]bool{}
	for _, f := range added {
		keep[f] = true
	}
	for _, f := range gr.Files {
		if !keep[f] {
			if err := os.Remove(filepath.Join(t.Repo.Root, f)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	filesPath := filepath.Join(gr.Dir, filesFile)
	if len(added) > 0 {
		if err := os.WriteFile(filesPath, []byte(strings.Join(added, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	} else if err := os.Remove(filesPath); err != nil && !os.IsNotExist(err) {
		return err
	}
	patchPath := filepath.Join(gr.Dir, patchFile)
	if len(changed) == 0 {
		if err := os.Remove(patchPath); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	patch, err := g.runBytes(nil, append([]string{"diff", "--no-renames", "--binary", "--no-color", "--no-ext-diff", "--abbrev=8", commit + "^", commit, "--"}, changed...)...)
	if err != nil {
		return err
	}
	return os.WriteFile(patchPath, patch, 0o644)
}

// exportFile writes a file of a tree commit to its in-tree path in the repository.
func (t *Tree) exportFile(commit, path string) error {
	g := t.git()
	mode, err := g.run("ls-tree", commit, "--", path)
	if err != nil {
		return err
	}
	data, err := g.runBytes(nil, "cat-file", "blob", commit+":"+path)
	if err != nil {
		return err
	}
	dst := filepath.Join(t.Repo.Root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	perm := os.FileMode(0o644)
	if strings.HasPrefix(mode, "100755") {
		perm = 0o755
	}
	if err := os.WriteFile(dst, data, perm); err != nil {
		return err
	}
	return os.Chmod(dst, perm)
}
