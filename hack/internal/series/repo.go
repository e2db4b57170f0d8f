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

// Package series keeps a fork of an upstream project as overlay files and an ordered
// series of patch groups, and materializes them into a git tree that upstream
// tooling accepts.
package series

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Upstream describes one upstream project the fork carries.
type Upstream struct {
	// Name names the patch directory (patches/NAME) and the tree (_output/NAME).
	Name string
	// Module is the Go module whose zip carries the upstream source.
	Module string
	// Subdir is where the module sits in the upstream repository ("" for its root).
	Subdir string
	// Tag turns the module version into upstream's release tag.
	Tag func(version string) string
	// OverlayRoots are the top-level directories of this repository whose files are
	// new files of this upstream, at their in-tree path.
	OverlayRoots []string
	// Symlinks that module zips drop: in-tree path -> link target.
	Symlinks map[string]string
	// Nested adds the nested modules that module zips drop; it may edit the tree.
	Nested func(m *materializer) error
	// PRTemplate names upstream's pull request template in prtemplate/.
	PRTemplate string
	// Generators are upstream's code generators and the files they write; the
	// export puts those files in a commit of their own.
	Generators []Generator
}

// Generator is one of upstream's generators and the paths it writes: "dir/" is
// everything under dir, a path with a slash is that file, and a name without one
// is a glob on the file's base name anywhere in the tree.
type Generator struct {
	Command string // how upstream runs it, from the repository's root
	Paths   []string
}

// generatorIndex orders generators' commands as the upstream lists them.
func (u Upstream) generatorIndex(command string) int {
	return slices.IndexFunc(u.Generators, func(g Generator) bool { return g.Command == command })
}

// generator returns the generator that writes p, or nil for a hand-written file.
func (u Upstream) generator(p string) *Generator {
	for i, g := range u.Generators {
		for _, pat := range g.Paths {
			var ok bool
			switch {
			case strings.HasSuffix(pat, "/"):
				ok = strings.HasPrefix(p, pat)
			case strings.Contains(pat, "/"):
				ok = p == pat
			default:
				ok, _ = path.Match(pat, path.Base(p))
			}
			if ok {
				return &u.Generators[i]
			}
		}
	}
	return nil
}

// Group is one feature's patch group: a commit message, the new files it adds and
// one patch of the upstream files it changes.
type Group struct {
	Name   string // directory name, e.g. 10-kubelet-image-pull-gate
	Dir    string // absolute path of the group directory
	Header string // the commit message
	Files  []string
	Patch  string // absolute path of upstream.patch, "" when the group changes no upstream file
}

// CheckNoBinaries fails when the group's upstream.patch carries a binary file:
// the series is source, and save refuses binaries, so one there was put in by
// hand or by an older save.
func (g Group) CheckNoBinaries() error {
	if g.Patch == "" {
		return nil
	}
	data, err := os.ReadFile(g.Patch)
	if err != nil {
		return err
	}
	var paths []string
	var current string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			current, _, _ = strings.Cut(rest, " b/")
		}
		if line == "GIT binary patch" || (strings.HasPrefix(line, "Binary files ") && strings.HasSuffix(line, " differ")) {
			paths = append(paths, current)
		}
	}
	if len(paths) > 0 {
		return fmt.Errorf("%s carries binary files, which are not source: %s", g.Patch, strings.Join(paths, ", "))
	}
	return nil
}

const (
	headerFile = "HEADER"
	filesFile  = "files"
	patchFile  = "upstream.patch"
)

var groupName = regexp.MustCompile(`^[0-9]{2}-[a-z0-9][a-z0-9-]*$`)

// Subject is the first line of the group's commit message.
func (g Group) Subject() string {
	s, _, _ := strings.Cut(g.Header, "\n")
	return s
}

// Repo is a checkout of this project.
type Repo struct {
	Root string
}

// PatchDir is where the groups of an upstream live.
func (r Repo) PatchDir(u Upstream) string { return filepath.Join(r.Root, "patches", u.Name) }

// TreeDir is where an upstream's tree is materialized.
func (r Repo) TreeDir(u Upstream) string { return filepath.Join(r.Root, "_output", u.Name) }

// Groups loads and checks the ordered groups of an upstream.
func (r Repo) Groups(u Upstream) ([]Group, error) {
	entries, err := os.ReadDir(r.PatchDir(u))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var groups []Group
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(r.PatchDir(u), e.Name())
		rel, _ := filepath.Rel(r.Root, dir)
		if !groupName.MatchString(e.Name()) {
			return nil, fmt.Errorf("%s: a group directory is named NN-name (two digits, then lower-case words joined by '-')", rel)
		}
		g := Group{Name: e.Name(), Dir: dir}
		h, err := os.ReadFile(filepath.Join(dir, headerFile))
		if err != nil {
			return nil, fmt.Errorf("%s: every group needs a %s file with its commit message: %w", rel, headerFile, err)
		}
		g.Header = strings.TrimSpace(string(h)) + "\n"
		if strings.TrimSpace(g.Subject()) == "" {
			return nil, fmt.Errorf("%s/%s: the first line (the commit subject) is empty", rel, headerFile)
		}
		if f, err := os.ReadFile(filepath.Join(dir, filesFile)); err == nil {
			for i, l := range strings.Split(string(f), "\n") {
				l = strings.TrimSpace(l)
				if l == "" || strings.HasPrefix(l, "#") {
					continue
				}
				if !u.ownsPath(l) || filepath.Clean(l) != l {
					return nil, fmt.Errorf("%s/%s:%d: %q is not a clean path under %s", rel, filesFile, i+1, l, strings.Join(u.OverlayRoots, ", "))
				}
				g.Files = append(g.Files, l)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(dir, patchFile)); err == nil {
			g.Patch = filepath.Join(dir, patchFile)
		}
		others, _ := filepath.Glob(filepath.Join(dir, "*.patch"))
		for _, o := range others {
			if o != g.Patch {
				return nil, fmt.Errorf("%s: a group keeps its changes to upstream files in one %s; found %s", rel, patchFile, filepath.Base(o))
			}
		}
		groups = append(groups, g)
	}
	return groups, r.checkClaims(u, groups)
}

func (u Upstream) ownsPath(p string) bool {
	for _, root := range u.OverlayRoots {
		if strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// OverlayFiles lists the files of this repository under the upstream's overlay roots.
func (r Repo) OverlayFiles(u Upstream) ([]string, error) {
	var files []string
	for _, root := range u.OverlayRoots {
		err := filepath.WalkDir(filepath.Join(r.Root, root), func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(r.Root, p)
			files = append(files, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	return files, nil
}

// checkClaims makes sure every overlay file is claimed by exactly one group and
// every claimed file exists.
func (r Repo) checkClaims(u Upstream, groups []Group) error {
	owner := map[string]string{}
	var problems []string
	for _, g := range groups {
		for _, f := range g.Files {
			if o, ok := owner[f]; ok {
				problems = append(problems, fmt.Sprintf("%s is claimed by both %s and %s", f, o, g.Name))
			}
			owner[f] = g.Name
			if _, err := os.Lstat(filepath.Join(r.Root, f)); err != nil {
				problems = append(problems, fmt.Sprintf("%s (claimed by %s/%s) does not exist", f, g.Name, filesFile))
			}
		}
	}
	files, err := r.OverlayFiles(u)
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, ok := owner[f]; !ok {
			problems = append(problems, fmt.Sprintf("%s belongs to no group: list it in patches/%s/<group>/%s", f, u.Name, filesFile))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("overlay files of %s:\n  %s", u.Name, strings.Join(problems, "\n  "))
	}
	return nil
}

// Fingerprint identifies a group's inputs: its header, patch and new files.
func (r Repo) Fingerprint(g Group) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "header %q\n", g.Header)
	if g.Patch != "" {
		p, err := os.ReadFile(g.Patch)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "patch %d\n", len(p))
		h.Write(p)
	}
	for _, f := range g.Files {
		info, err := os.Lstat(filepath.Join(r.Root, f))
		if err != nil {
			return "", err
		}
		data, err := os.ReadFile(filepath.Join(r.Root, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %q %v %d\n", f, info.Mode().Perm()&0o111 != 0, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FindGroup resolves a group by its directory name, with or without the number.
func FindGroup(groups []Group, name string) (Group, error) {
	var names []string
	for _, g := range groups {
		if g.Name == name || g.Name[3:] == name {
			return g, nil
		}
		names = append(names, g.Name)
	}
	return Group{}, fmt.Errorf("no group %q; the groups are: %s (a new group starts as a directory with a %s)", name, strings.Join(names, ", "), headerFile)
}
