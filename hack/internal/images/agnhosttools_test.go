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
	"os/exec"
	"strings"
	"testing"
)

// agnhost's tools run from the image's files alone, with the options the Services
// specs give nc (busybox's nc rejects -v, -z and -t).
func TestAgnhostToolsRunOnTheirOwn(t *testing.T) {
	for program, pkg := range AgnhostPackages {
		if _, err := exec.LookPath(program); err != nil {
			t.Skipf("no %s on this machine (apt-get install %s; make kind-e2e installs it)", program, pkg)
		}
	}
	files, err := agnhostToolFiles()
	if err != nil {
		t.Fatal(err)
	}
	root := chrootOf(t, files)
	// Nothing listens on port 1 of the loopback: nc must parse the options and fail to connect.
	out, _ := exec.Command("chroot", root, "/usr/bin/nc", "-v", "-z", "-w", "2", "127.0.0.1", "1").CombinedOutput()
	if strings.Contains(string(out), "invalid option") || strings.Contains(string(out), "usage") || !strings.Contains(string(out), "127.0.0.1") {
		t.Errorf("nc -v -z -w 2 in the image: %s", out)
	}
	if out := runIn(t, root, "/usr/bin/curl", "--version"); !strings.HasPrefix(out, "curl ") {
		t.Errorf("curl --version: %s", out)
	}
	if out := runIn(t, root, "/usr/bin/bash", "-c", "echo ok"); out != "ok\n" {
		t.Errorf("bash: %q", out)
	}
	runIn(t, root, "/usr/bin/dig", "-v")
	runIn(t, root, "/usr/sbin/ip", "-V")
}
