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
	"slices"
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
	// The kubelet mounts /etc/hosts into the pod.
	root := chrootOf(t, append(files, File{Path: "etc/hosts", Data: []byte("10.1.2.3 probe.example\n")}))
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
	if out := runIn(t, root, "/usr/bin/getent", "hosts", "probe.example"); !strings.HasPrefix(out, "10.1.2.3") {
		t.Errorf("getent hosts probe.example: %q", out)
	}
}

// A shell in agnhost finds OpenBSD's nc before busybox's: the image sets
// Alpine's PATH, as upstream's inherits it.
func TestAgnhostFindsItsToolsFirst(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no busybox (apt-get install busybox-static)")
	}
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	img, err := withAlpinePath(busybox)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Env, []string{agnhostPath}) {
		t.Errorf("env %v, want only %s", cfg.Config.Env, agnhostPath)
	}
	path := strings.Split(strings.TrimPrefix(agnhostPath, "PATH="), ":")
	if slices.Index(path, "/usr/bin") > slices.Index(path, "/bin") {
		t.Errorf("PATH %s looks in /bin, where busybox's nc is, before /usr/bin", agnhostPath)
	}
}

// agnhost's shell runs OpenBSD's nc for `sh -c 'nc ...'`, as Alpine's does; the
// shell of Debian's busybox-static would run its own applet whatever PATH says.
func TestAgnhostShellLooksInPath(t *testing.T) {
	if err := exec.Command("apt-cache", "show", "busybox").Run(); err != nil {
		t.Skip("apt-cache show busybox: no Debian package lists (apt-get update)")
	}
	if _, err := exec.LookPath("nc.openbsd"); err != nil {
		t.Skip("no nc.openbsd on this machine (apt-get install netcat-openbsd; make kind-e2e installs it)")
	}
	tools, err := agnhostToolFiles()
	if err != nil {
		t.Fatal(err)
	}
	shell, err := agnhostShell(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := chrootOf(t, append(tools, shell...))
	cmd := exec.Command("chroot", root, "/bin/sh", "-c", "type nc")
	cmd.Env = []string{agnhostPath}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "nc is /usr/bin/nc" {
		t.Errorf("type nc in agnhost's shell: %q, %v; want /usr/bin/nc", out, err)
	}
}
