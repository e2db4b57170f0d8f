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
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// untar unpacks a .tar.gz into dir and returns the names in it.
func untar(t *testing.T, path, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
		if h.Typeflag == tar.TypeReg {
			data, _ := io.ReadAll(tr)
			p := filepath.Join(dir, h.Name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, data, 0o644)
		}
	}
}

// TestServerTarballHasTheLayoutKindReads checks the layout that kind's tarball
// builder (pkg/build/nodeimage/internal/kube/builder_tarball.go) opens.
func TestServerTarballHasTheLayoutKindReads(t *testing.T) {
	bin := t.TempDir()
	for _, b := range append(append([]string{}, ReleaseBinaries...), ControlPlaneImages...) {
		os.WriteFile(filepath.Join(bin, b), []byte("binary "+b), 0o755)
	}
	out := filepath.Join(t.TempDir(), "kubernetes-server-linux-amd64.tar.gz")
	version := "v1.36.3-carry.4+0123456789ab"
	if err := ServerTarball(out, bin, version, []File{{Path: "usr/sbin/iptables", Mode: 0o755, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names := untar(t, out, dir)
	for _, want := range []string{"kubernetes/version", "kubernetes/server/bin/kubeadm", "kubernetes/server/bin/kubelet", "kubernetes/server/bin/kubectl"} {
		if !names[want] {
			t.Errorf("missing %s", want)
		}
	}
	if v, _ := os.ReadFile(filepath.Join(dir, "kubernetes/version")); strings.TrimSpace(string(v)) != version {
		t.Errorf("version file %q", v)
	}
	for _, c := range ControlPlaneImages {
		p := filepath.Join(dir, "kubernetes/server/bin", c+".tar")
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		want := "registry.k8s.io/" + c + "-amd64:v1.36.3-carry.4_0123456789ab"
		if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != want {
			t.Errorf("%s tags: %+v, want %s", c, m, want)
		}
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := entries(t, img)
		if e["usr/local/bin/"+c] == nil {
			t.Errorf("%s image lacks its binary", c)
		}
		if c == "kube-proxy" && e["usr/sbin/iptables"] == nil {
			t.Errorf("kube-proxy image lacks iptables")
		}
	}
}

func TestHostFilesBringTheirLibraries(t *testing.T) {
	files, err := HostFiles([]string{"ls"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	all := strings.Join(names, " ")
	if !strings.Contains(all, "libc.so") || !strings.Contains(all, "ld-linux") {
		t.Errorf("ls without its libraries: %v", names)
	}
}
