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
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ReleasesSum is the file of go.sum lines that vouch for the module zips of the
// Kubernetes releases the project builds without pinning them: the releases a
// cluster lane starts from (make kind-upgrade starts at v1.36.3). Its lines are
// those of go.sum on the commit that pinned the release.
const ReleasesSum = "hack/pins/releases.sum"

// MaterializeRelease builds pristine Kubernetes at version, with the staging
// modules of that release, in dir: a git tree of one commit tagged version, as
// the base of _output/kubernetes is, but of a release go.mod does not pin.
// Every module zip is verified against go.sum or ReleasesSum. A tree of that
// release already in dir, without edits, is kept; anything else in dir is an
// error, and left alone.
func MaterializeRelease(root, version, dir string, log io.Writer) error {
	src := GoSource{Root: root, Sums: []string{filepath.Join(root, ReleasesSum)}}
	t := &Tree{Repo: Repo{Root: root}, Up: Kubernetes, Src: src, Log: log, Path: dir}
	switch err := t.releaseTreeKept(version); {
	case err == nil:
		t.logf("%s: pristine %s, kept", dir, version)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	moduleDir, err := src.ModuleDir(Kubernetes.Module, version)
	if err != nil {
		return err
	}
	staging, err := stagingModules(moduleDir)
	if err != nil {
		return err
	}
	// The staging modules the release published are those the sums vouch
	// for; the others leave go.work, as on the pinned tree.
	var sums []byte
	for _, f := range append([]string{filepath.Join(root, "go.sum")}, src.Sums...) {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		sums = append(sums, data...)
	}
	t.Pins = map[string]string{Kubernetes.Module: version}
	for _, m := range staging {
		if v := StagingVersion(version); bytes.Contains(sums, []byte(m+" "+v+" h1:")) {
			t.Pins[m] = v
		}
	}
	if _, err := t.materializeBase(); err != nil {
		// The folder did not exist: what is in it is this call's, half made.
		return errors.Join(fmt.Errorf("%s: %w", dir, err), os.RemoveAll(dir))
	}
	return nil
}

// releaseTreeKept returns nil when the tree's directory holds pristine
// version without edits, an error wrapping fs.ErrNotExist when it does not
// exist, and another error for anything else there.
func (t *Tree) releaseTreeKept(version string) error {
	if _, err := os.Stat(t.Dir()); err != nil {
		return err
	}
	g := t.git()
	tag, err := g.run("describe", "--exact-match", "--tags", "HEAD")
	if err != nil || strings.TrimSpace(tag) != version {
		return fmt.Errorf("%s is not a tree of Kubernetes %s (its HEAD is not tagged %s): remove it to build one", t.Dir(), version, version)
	}
	status, err := g.run("status", "--porcelain")
	if err != nil {
		return err
	}
	if strings.TrimSpace(status) != "" {
		return fmt.Errorf("%s has edits (git status): they are kept; remove the folder to build %s again", t.Dir(), version)
	}
	return nil
}
