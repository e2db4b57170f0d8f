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
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ControlPlaneImages are the component images of a Kubernetes server release.
var ControlPlaneImages = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// ReleaseBinaries are the binaries a server release ships beside its images.
var ReleaseBinaries = []string{"kubeadm", "kubelet", "kubectl"}

// DockerTag turns a Kubernetes version into an image tag, as upstream's release
// build and kubeadm do: '+' is not allowed in tags.
func DockerTag(version string) string { return strings.ReplaceAll(version, "+", "_") }

// ServerTarball writes the layout of kubernetes-server-linux-amd64.tar.gz that
// `kind build node-image --type file` reads: kubernetes/version,
// kubernetes/server/bin/{kubeadm,kubelet,kubectl} and one docker-archive image per
// control plane component (registry.k8s.io/NAME-amd64:TAG, with NAME.docker_tag).
func ServerTarball(out, binDir, version string, proxyExtras []File) error {
	tag := DockerTag(version)
	type entry struct {
		name string
		mode int64
		data []byte
	}
	entries := []entry{{"kubernetes/version", 0o644, []byte(version + "\n")}}
	for _, b := range ReleaseBinaries {
		data, err := os.ReadFile(filepath.Join(binDir, b))
		if err != nil {
			return fmt.Errorf("%w (build it: make WHAT=cmd/%s)", err, b)
		}
		entries = append(entries, entry{"kubernetes/server/bin/" + b, 0o755, data})
	}
	for _, component := range ControlPlaneImages {
		data, err := os.ReadFile(filepath.Join(binDir, component))
		if err != nil {
			return fmt.Errorf("%w (build it: make WHAT=cmd/%s)", err, component)
		}
		files := []File{{Path: "usr/local/bin/" + component, Mode: 0o755, Data: data}}
		if component == "kube-proxy" {
			files = append(files, proxyExtras...)
		}
		l, err := Layer(files)
		if err != nil {
			return err
		}
		img, err := Image(nil, v1.Config{Entrypoint: []string{"/usr/local/bin/" + component}}, l)
		if err != nil {
			return err
		}
		ref, err := name.NewTag(fmt.Sprintf("registry.k8s.io/%s-amd64:%s", component, tag))
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := tarball.Write(ref, img, &buf); err != nil {
			return err
		}
		entries = append(entries,
			entry{"kubernetes/server/bin/" + component + ".tar", 0o644, buf.Bytes()},
			entry{"kubernetes/server/bin/" + component + ".docker_tag", 0o644, []byte(tag + "\n")})
	}

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	dirs := map[string]bool{}
	for _, e := range entries {
		for d := filepath.Dir(e.name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: e.mode, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	for _, c := range []io.Closer{tw, gz, f} {
		if err := c.Close(); err != nil {
			return err
		}
	}
	return os.Rename(tmp, out)
}

var lddPath = regexp.MustCompile(`(/\S+) \(0x[0-9a-f]+\)`)

// HostFiles copies programs of this machine with the shared libraries they load (as
// ldd lists them), the files and directories named in extra, and the symlinks on the
// way, for an image that runs them: kube-proxy's iptables, nft and conntrack.
func HostFiles(programs, extra []string) ([]File, error) {
	seen := map[string]bool{}
	var files []File
	var add func(p string) error
	add = func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			files = append(files, File{Path: p, Link: target})
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			return add(target)
		case info.IsDir():
			entries, err := os.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := add(filepath.Join(p, e.Name())); err != nil {
					return err
				}
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: p, Mode: int64(info.Mode().Perm()), Data: data})
		if info.Mode().Perm()&0o111 == 0 && !strings.Contains(filepath.Base(p), ".so") {
			return nil
		}
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			return nil // static, or not a program
		}
		for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
			if err := add(m[1]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if err := add(path); err != nil {
			return nil, err
		}
	}
	for _, p := range extra {
		if err := add(p); err != nil {
			return nil, err
		}
	}
	return files, nil
}
