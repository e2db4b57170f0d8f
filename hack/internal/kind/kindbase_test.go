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

package kind

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The modes of kind's base Dockerfile: scripts in usr/local/bin and kind/bin 0755,
// every other file 0644, whatever the source's modes.
func TestCopyKindBaseFiles(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	files := map[string]fs.FileMode{
		"usr/local/bin/entrypoint":                  0o755,
		"kind/bin/mount-product-files.sh":           0o755,
		"kind/README.txt":                           0o644,
		"etc/containerd/config.toml":                0o644,
		"etc/systemd/system/kubelet.service.d/a.cf": 0o644,
	}
	for name := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// The module cache's files are read-only.
		if err := os.WriteFile(p, []byte(name), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyKindBaseFiles(src, dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		st, err := os.Stat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
		if data, _ := os.ReadFile(filepath.Join(dst, name)); string(data) != name {
			t.Errorf("%s: content %q", name, data)
		}
	}
}

func TestDebianMirrorIsAURL(t *testing.T) {
	if m := debianMirror(); len(m) < len("http://x") || (m[:7] != "http://" && m[:8] != "https://") {
		t.Errorf("debianMirror() = %q, want a URL", m)
	}
}
