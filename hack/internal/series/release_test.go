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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A release tree is kept only while it is that release, untouched: anything
// else in its folder is named, and left as it is.
func TestReleaseTreeKeptOnlyWhenPristine(t *testing.T) {
	f := newFixture(t)
	f.tree.Path = filepath.Join(t.TempDir(), "releases", "v1.0.0", "fake")
	if err := f.tree.releaseTreeKept("v1.0.0"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no tree yet: err = %v, want one of fs.ErrNotExist", err)
	}
	if _, err := f.tree.materializeBase(); err != nil {
		t.Fatal(err)
	}
	if err := f.tree.releaseTreeKept("v1.0.0"); err != nil {
		t.Errorf("the release's tree: %v", err)
	}
	if err := f.tree.releaseTreeKept("v1.0.1"); err == nil || !strings.Contains(err.Error(), "not a tree of Kubernetes v1.0.1") {
		t.Errorf("another release's tree: err = %v", err)
	}
	edited := filepath.Join(f.tree.Dir(), "pkg", "a", "a.go")
	if err := os.WriteFile(edited, []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.tree.releaseTreeKept("v1.0.0"); err == nil || !strings.Contains(err.Error(), "has edits") {
		t.Errorf("an edited tree: err = %v", err)
	}
	if got := readFile(t, edited); got != "package a\n" {
		t.Errorf("the edit was not kept: %q", got)
	}
}
