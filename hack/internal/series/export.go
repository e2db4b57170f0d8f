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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// placeholderOwner is the owner the series' feature gates name in their "// owner:"
// comments; the export replaces it with the handle of whoever submits it.
const placeholderOwner = "@kube-carry"

var (
	githubHandle = regexp.MustCompile(`^@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$`)
	ownerLine    = regexp.MustCompile(`(?m)^([ \t]*//[ \t]*owner:[^\n]*?)` + regexp.QuoteMeta(placeholderOwner) + `([ \t]|$)`)
)

// ownerPattern is ownerLine for git grep -E.
const ownerPattern = `^[[:space:]]*//[[:space:]]*owner:.*` + placeholderOwner + `([[:space:]]|$)`

// ExportOptions say how the series is exported.
type ExportOptions struct {
	// Owner replaces the placeholder in the feature gates' owner comments: one or
	// more GitHub handles separated by spaces ("@alice @bob"); "" keeps the placeholder.
	Owner string
}

// ExportedGroup is one group's pull request: its patches and its text.
type ExportedGroup struct {
	Name    string
	Dir     string   // where its patches and PR.md are
	Patches []string // git format-patch files, in order
	PR      string   // PR.md
}

// Exported is what Export wrote.
type Exported struct {
	Groups []ExportedGroup
	// Placeholders are the owner comments ("path:line") that still name the placeholder.
	Placeholders []string
}

// exportedSeries is the export as commits in a scratch repository.
type exportedSeries struct {
	g            git
	base, tip    string // the pristine commit and the export's last commit
	groups       []exportGroup
	placeholders []string
}

type exportGroup struct {
	group    Group
	from, to string // the group's commits are from..to
	pr       PRText
}

// Export writes the series into dir as one directory per group, holding its
// `git format-patch` files and its pull request's text (PR.md). It reads patches/
// and the overlay only: the series is rebuilt in a scratch repository that borrows
// the pristine base from the materialized tree (or materializes its own), so the
// trees are never touched. A group whose changes include files upstream's
// generators write exports as two commits: the hand-written files, then those.
func (t *Tree) Export(dir string, opts ExportOptions) (*Exported, error) {
	work, err := os.MkdirTemp("", "kube-carry-export-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	s, err := t.buildExport(work, opts)
	if err != nil {
		return nil, err
	}
	return s.write(t.Repo.Root, dir)
}

// RoundTrip proves that the exported series applies with `git am` onto the pristine
// upstream tag and yields the series' tree. When the materialized tree is built from
// the same inputs, it also proves that tree equal; inSync says whether it was.
func (t *Tree) RoundTrip(work string) (inSync bool, err error) {
	s, err := t.buildExport(work, ExportOptions{})
	if err != nil {
		return false, err
	}
	ex, err := s.write(t.Repo.Root, filepath.Join(work, "patches"))
	if err != nil {
		return false, err
	}
	version, err := t.Version()
	if err != nil {
		return false, err
	}
	tag := t.Up.Tag(version)
	if _, err := s.g.run("checkout", "-q", "-f", s.base); err != nil {
		return false, err
	}
	var patches []string
	for _, g := range ex.Groups {
		patches = append(patches, g.Patches...)
	}
	if len(patches) > 0 {
		if _, err := s.g.run(append([]string{"am", "-q", "--keep-cr"}, patches...)...); err != nil {
			s.g.run("am", "--abort")
			return false, fmt.Errorf("the exported series does not apply to pristine %s: %w", tag, err)
		}
	}
	got, err := s.g.run("rev-parse", "HEAD^{tree}")
	if err != nil {
		return false, err
	}
	want, err := s.g.run("rev-parse", s.tip+"^{tree}")
	if err != nil {
		return false, err
	}
	if got != want {
		diff, _ := s.g.run("diff", "--stat", want, got)
		return false, fmt.Errorf("the exported series applied to pristine %s gives another tree than the series:\n%s", tag, diff)
	}
	st, err := t.LoadState()
	if err != nil || st == nil || st.Base != t.baseFingerprint() || len(st.Groups) != len(s.groups) {
		return false, err
	}
	for i, eg := range s.groups {
		fp, err := t.Repo.Fingerprint(eg.group)
		if err != nil {
			return false, err
		}
		if st.Groups[i].Name != eg.group.Name || st.Groups[i].Fingerprint != fp {
			return false, nil
		}
	}
	tree, err := t.git().run("rev-parse", st.Tip()+"^{tree}")
	if err != nil {
		return false, err
	}
	if tree != want {
		diff, _ := s.g.run("diff", "--stat", tree, want)
		return true, fmt.Errorf("the export applied to pristine %s gives another tree than the materialized one, built from the same inputs:\n%s", tag, diff)
	}
	return true, nil
}

// checkOwner validates the submitter's handles.
func checkOwner(owner string) error {
	for _, h := range strings.Fields(owner) {
		if !githubHandle.MatchString(h) || h == placeholderOwner {
			return fmt.Errorf("OWNER %q: want GitHub handles such as @alice, separated by spaces, not the placeholder %s", owner, placeholderOwner)
		}
	}
	return nil
}

// buildExport rebuilds the series from patches/ in a scratch repository under work,
// with temporary indexes only (no checkout), and makes the export's commits there.
func (t *Tree) buildExport(work string, opts ExportOptions) (*exportedSeries, error) {
	if err := checkOwner(opts.Owner); err != nil {
		return nil, err
	}
	owner := strings.Join(strings.Fields(opts.Owner), " ")
	groups, err := t.Repo.Groups(t.Up)
	if err != nil {
		return nil, err
	}
	prs := make([]PRText, len(groups))
	for i, gr := range groups {
		in, err := ReadPRInput(t.Repo.Root, t.Up, gr)
		if err != nil {
			return nil, err
		}
		if _, err := parseHeader(t.Repo.Root, gr); err != nil {
			return nil, err
		}
		prs[i] = PRText{Upstream: t.Up, Group: gr, Input: in}
	}
	g, base, err := t.scratchBase(work)
	if err != nil {
		return nil, err
	}
	s := &exportedSeries{g: g, base: base, tip: base}
	// One index follows the series as `make tree` builds it, the other the export.
	series := g.with("GIT_INDEX_FILE="+filepath.Join(work, "series.index"), "GIT_LITERAL_PATHSPECS=1")
	out := g.with("GIT_INDEX_FILE="+filepath.Join(work, "export.index"), "GIT_LITERAL_PATHSPECS=1")
	for _, x := range []git{series, out} {
		if _, err := x.run("read-tree", base); err != nil {
			return nil, err
		}
	}
	prev, err := g.run("rev-parse", base+"^{tree}")
	if err != nil {
		return nil, err
	}
	var goPaths []string
	for i, gr := range groups {
		tree, err := t.seriesTree(series, gr)
		if err != nil {
			return nil, err
		}
		changes, err := rawDiff(g, prev, tree)
		if err != nil {
			return nil, err
		}
		if len(changes) == 0 {
			return nil, fmt.Errorf("group %s changes nothing; it cannot be exported as a patch", gr.Name)
		}
		prev = tree
		if owner != "" {
			if err := substituteOwner(g, tree, changes, owner); err != nil {
				return nil, err
			}
		}
		var hand, gen []rawChange
		var cmds []string
		for _, c := range changes {
			if strings.HasSuffix(c.Path, ".go") && c.Status != 'D' {
				goPaths = append(goPaths, c.Path)
			}
			if gt := t.Up.generator(c.Path); gt != nil {
				gen = append(gen, c)
				if !slices.Contains(cmds, gt.Command) {
					cmds = append(cmds, gt.Command)
				}
				continue
			}
			hand = append(hand, c)
			if strings.Contains("/"+c.Path, "/docs/") && c.Status != 'D' {
				prs[i].DocsInThisPR = append(prs[i].DocsInThisPR, c.Path)
			}
		}
		type commit struct {
			changes []rawChange
			msg     string
		}
		commits := []commit{{changes, gr.Header}}
		if len(hand) > 0 && len(gen) > 0 {
			msg := generatedMessage(gr.Subject(), cmds)
			commits = []commit{{hand, gr.Header}, {gen, msg}}
			prs[i].Generated, _, _ = strings.Cut(msg, "\n")
			prs[i].GeneratedBy = cmds
		}
		slices.SortFunc(cmds, func(a, b string) int { return t.Up.generatorIndex(a) - t.Up.generatorIndex(b) })
		from := s.tip
		for _, c := range commits {
			if s.tip, err = commitChanges(out, s.tip, c.changes, c.msg); err != nil {
				return nil, err
			}
		}
		s.groups = append(s.groups, exportGroup{group: gr, from: from, to: s.tip, pr: prs[i]})
	}
	if owner == "" && len(goPaths) > 0 {
		found, err := grepOwner(g, s.tip, goPaths, "-n")
		if err != nil {
			return nil, err
		}
		for _, l := range found {
			// "<commit>:<path>:<line>:<text>"
			if f := strings.SplitN(l, ":", 4); len(f) == 4 {
				s.placeholders = append(s.placeholders, f[1]+":"+f[2])
			}
		}
	}
	return s, nil
}

// scratchBase makes a repository under work holding the pristine base and returns
// it with the base commit. The materialized tree lends its objects when its base is
// current; it is only read.
func (t *Tree) scratchBase(work string) (git, string, error) {
	ident := t.git().ident
	st, err := t.LoadState()
	if err != nil {
		return git{}, "", err
	}
	if st == nil || st.Base != t.baseFingerprint() {
		s := *t
		s.Repo = Repo{Root: work}
		commit, err := s.materializeBase()
		return git{dir: s.Dir(), ident: ident}, commit, err
	}
	clone := filepath.Join(work, "series")
	if _, err := (git{dir: work, ident: ident}).run("clone", "-q", "--shared", "--no-checkout", t.Dir(), clone); err != nil {
		return git{}, "", err
	}
	if err := os.WriteFile(filepath.Join(clone, ".git", "info", "attributes"), []byte("* -text\n"), 0o644); err != nil {
		return git{}, "", err
	}
	return git{dir: clone, ident: ident}, st.BaseCommit, nil
}

// seriesTree applies a group to the index as applyGroup does to the tree, and
// returns the resulting tree object.
func (t *Tree) seriesTree(idx git, gr Group) (string, error) {
	if gr.Patch != "" {
		if _, err := idx.run("apply", "--cached", "--whitespace=nowarn", gr.Patch); err != nil {
			return "", t.patchError(gr, err)
		}
	}
	if len(gr.Files) > 0 {
		have, err := idx.run(append([]string{"ls-files", "--"}, gr.Files...)...)
		if err != nil {
			return "", err
		}
		if have != "" {
			return "", fmt.Errorf("group %s adds %s, but upstream or an earlier group already has it: change it through %s instead", gr.Name, lines(have)[0], patchFile)
		}
		abs := make([]string, len(gr.Files))
		for i, f := range gr.Files {
			abs[i] = filepath.Join(t.Repo.Root, f)
		}
		shas, err := idx.run(append([]string{"hash-object", "-w", "--no-filters", "--"}, abs...)...)
		if err != nil {
			return "", err
		}
		var info bytes.Buffer
		for i, sha := range lines(shas) {
			fi, err := os.Stat(abs[i])
			if err != nil {
				return "", err
			}
			mode := "100644"
			if fi.Mode().Perm()&0o111 != 0 {
				mode = "100755"
			}
			fmt.Fprintf(&info, "%s %s\t%s\x00", mode, sha, gr.Files[i])
		}
		if _, err := idx.runBytes(info.Bytes(), "update-index", "--add", "-z", "--index-info"); err != nil {
			return "", err
		}
	}
	return idx.run("write-tree")
}

// rawChange is one changed path with its new mode and blob.
type rawChange struct {
	Mode, SHA string
	Status    byte
	Path      string
}

func rawDiff(g git, from, to string) ([]rawChange, error) {
	out, err := g.runBytes(nil, "diff-tree", "-r", "-z", "--no-renames", from, to)
	if err != nil {
		return nil, err
	}
	f := nulFields(out)
	var changes []rawChange
	for i := 0; i+1 < len(f); i += 2 {
		// ":<old mode> <new mode> <old blob> <new blob> <status>"
		meta := strings.Fields(strings.TrimPrefix(f[i], ":"))
		if len(meta) != 5 {
			return nil, fmt.Errorf("git diff-tree: unexpected line %q", f[i])
		}
		changes = append(changes, rawChange{Mode: meta[1], SHA: meta[3], Status: meta[4][0], Path: f[i+1]})
	}
	return changes, nil
}

// substituteOwner points the changes whose Go files name the placeholder owner at
// blobs that name owner instead.
func substituteOwner(g git, tree string, changes []rawChange, owner string) error {
	var paths []string
	for _, c := range changes {
		if strings.HasSuffix(c.Path, ".go") && c.Status != 'D' {
			paths = append(paths, c.Path)
		}
	}
	found, err := grepOwner(g, tree, paths, "-l")
	if err != nil {
		return err
	}
	for _, l := range found {
		p := strings.TrimPrefix(l, tree+":")
		for i := range changes {
			if changes[i].Path != p {
				continue
			}
			data, err := g.runBytes(nil, "cat-file", "blob", changes[i].SHA)
			if err != nil {
				return err
			}
			data = ownerLine.ReplaceAll(data, []byte("${1}"+owner+"${2}"))
			if changes[i].SHA, err = g.runBytesTrim(data, "hash-object", "-w", "--no-filters", "--stdin"); err != nil {
				return err
			}
		}
	}
	return nil
}

// grepOwner lists git grep's matches of the placeholder owner comment in paths of a tree.
func grepOwner(g git, tree string, paths []string, flag string) ([]string, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out, err := g.with("GIT_LITERAL_PATHSPECS=1").run(append([]string{"grep", flag, "-E", "-e", ownerPattern, tree, "--"}, paths...)...)
	var ge *GitError
	if errors.As(err, &ge) && ge.Stderr == "" {
		return nil, nil // exit status 1: no match
	}
	return lines(out), err
}

// commitChanges sets the changes in the index and commits it on parent.
func commitChanges(idx git, parent string, changes []rawChange, msg string) (string, error) {
	var info bytes.Buffer
	for _, c := range changes {
		if c.Status == 'D' {
			fmt.Fprintf(&info, "0 %s\t%s\x00", strings.Repeat("0", len(c.SHA)), c.Path)
		} else {
			fmt.Fprintf(&info, "%s %s\t%s\x00", c.Mode, c.SHA, c.Path)
		}
	}
	if _, err := idx.runBytes(info.Bytes(), "update-index", "--add", "--remove", "-z", "--index-info"); err != nil {
		return "", err
	}
	tree, err := idx.run("write-tree")
	if err != nil {
		return "", err
	}
	// The message as `git commit` cleans it up, so that the export's messages are the tree's.
	clean, err := idx.runBytes([]byte(msg), "stripspace")
	if err != nil {
		return "", err
	}
	return idx.runBytesTrim(clean, "commit-tree", tree, "-p", parent, "-F", "-")
}

// generatedMessage is the commit message of a group's generated files.
func generatedMessage(subject string, cmds []string) string {
	s := "update generated files"
	if area, _, ok := strings.Cut(subject, ": "); ok {
		s = area + ": " + s
	}
	return fmt.Sprintf("%s\n\nWhat upstream's generators write for the previous commit,\n%q; nothing in this commit is\nedited by hand. To reproduce, run from the repository's root:\n\n    %s\n",
		s, subject, strings.Join(cmds, "\n    "))
}

// write exports the series into dir: one directory per group with its format-patch
// files and PR.md, replacing what an earlier export wrote there.
func (s *exportedSeries) write(root, dir string) (*Exported, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, o := range old {
		if groupName.MatchString(filepath.Base(o)) || strings.HasSuffix(o, ".patch") {
			if err := os.RemoveAll(o); err != nil {
				return nil, err
			}
		}
	}
	ex := &Exported{Placeholders: s.placeholders}
	for _, eg := range s.groups {
		gdir := filepath.Join(dir, eg.group.Name)
		if _, err := s.g.run("format-patch", "-q", "--no-signature", "--zero-commit", "--no-renames", "--binary",
			"-o", gdir, eg.from+".."+eg.to); err != nil {
			return nil, err
		}
		patches, err := filepath.Glob(filepath.Join(gdir, "*.patch"))
		if err != nil {
			return nil, err
		}
		text, err := eg.pr.Render(root)
		if err != nil {
			return nil, err
		}
		pr := filepath.Join(gdir, "PR.md")
		if err := os.WriteFile(pr, []byte(text), 0o644); err != nil {
			return nil, err
		}
		ex.Groups = append(ex.Groups, ExportedGroup{Name: eg.group.Name, Dir: gdir, Patches: patches, PR: pr})
	}
	return ex, nil
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
