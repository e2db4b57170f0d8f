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

// The nginx image carries Debian's nginx with every library it loads, and Debian's
// nginx accepts its configuration.
func TestNginxFromDebiansPackage(t *testing.T) {
	if err := exec.Command("apt-cache", "show", "nginx").Run(); err != nil {
		t.Skip("apt-cache show nginx: no Debian package lists (apt-get update)")
	}
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		t.Skip(err)
	}
	work := t.TempDir()
	img, err := Nginx(t.Context(), work, busybox)
	if err != nil {
		t.Fatal(err)
	}
	e := entries(t, img)
	for _, want := range []string{"usr/sbin/nginx", "etc/nginx/nginx.conf", "usr/share/nginx/html/index.html", "lib64/ld-linux-x86-64.so.2", "bin/sh"} {
		if e[want] == nil {
			t.Errorf("no %s in the image", want)
		}
	}
	out, err := exec.Command("ldd", filepath.Join(work, "nginx", "root", "usr", "sbin", "nginx")).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		if e[strings.TrimPrefix(m[1], "/")] == nil {
			t.Errorf("nginx loads %s, which the image lacks", m[1])
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Config.Cmd, " "); got != "nginx -g daemon off;" || cfg.Config.StopSignal != "SIGQUIT" {
		t.Errorf("runs %q, stopped by %q", got, cfg.Config.StopSignal)
	}

	conf := filepath.Join(t.TempDir(), "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = exec.Command(filepath.Join(work, "nginx", "root", "usr", "sbin", "nginx"), "-t", "-c", conf, "-e", "stderr").CombinedOutput()
	if !strings.Contains(string(out), "syntax is ok") {
		t.Errorf("nginx -t: %s", out)
	}
}
