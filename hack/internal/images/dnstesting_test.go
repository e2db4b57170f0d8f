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

package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The DNS specs' tools run from the image's files alone: dig, and glibc's getent
// resolving through the image's nsswitch.conf.
func TestGlibcDNSTestingFilesRunOnTheirOwn(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Skip("no dig on this machine (apt-get install bind9-dnsutils; make kind-e2e installs it)")
	}
	files, err := dnsTestingFiles()
	if err != nil {
		t.Fatal(err)
	}
	root := chrootOf(t, append(files, File{Path: "etc/hosts", Data: []byte("10.1.2.3 probe.example\n")}))
	if out := runIn(t, root, "/usr/bin/getent", "hosts", "probe.example"); !strings.HasPrefix(out, "10.1.2.3") {
		t.Errorf("getent hosts in the image: %s", out)
	}
	if out := runIn(t, root, "/usr/bin/dig", "-v"); !strings.Contains(out, "DiG") {
		t.Errorf("dig -v in the image: %s", out)
	}
}

// chrootOf writes files into a new directory to chroot into; it skips the test
// when it does not run as root.
func chrootOf(t *testing.T, files []File) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, strings.TrimPrefix(f.Path, "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// A later file of the same path wins, as in a layer.
		if !f.Dir {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		switch {
		case f.Link != "":
			err = os.Symlink(f.Link, p)
		case f.Dir:
			err = os.MkdirAll(p, 0o755)
		default:
			mode := os.FileMode(f.Mode)
			if mode == 0 {
				mode = 0o644
			}
			err = os.WriteFile(p, f.Data, mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// runIn runs a program chrooted into root and returns its output.
func runIn(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
	if err != nil {
		t.Errorf("%s in the image: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
