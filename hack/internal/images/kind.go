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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images a node image of kind v0.33.0 for Kubernetes v1.36 holds beyond the
// release's own: kubeadm's etcd and CoreDNS, containerd's sandbox image and kind's
// CNI and storage images (TestKindNamesMatchKindAndTheTree checks them against
// kind's module and the tree).
const (
	KindEtcd                 = "registry.k8s.io/etcd:3.6.8-0"
	KindCoreDNS              = "registry.k8s.io/coredns/coredns:v1.14.2"
	KindPause                = "registry.k8s.io/pause:3.10"
	KindKindnetd             = "docker.io/kindest/kindnetd:v20260820-69b56db7"
	KindLocalPathProvisioner = "docker.io/kindest/local-path-provisioner:v20260820-69b56db7"
	KindLocalPathHelper      = "docker.io/kindest/local-path-helper:v20260131-7181c60a"
	// Flannel is the CNI of the fork's kind clusters (kindnetd cannot be built
	// here, docs/kind.md), loaded into the nodes after they start.
	Flannel = "ghcr.io/flannel-io/flannel:v0.28.10"
)

// The Go programs of those images, at the versions of the images.
const (
	coreDNSModule   = "github.com/coredns/coredns@v1.14.2"
	localPathModule = "github.com/rancher/local-path-provisioner@v0.0.30"
	flannelModule   = "github.com/flannel-io/flannel@v0.28.10"
	// etcd's server module has replace directives, so it is built from a module of
	// this repository that requires it: build/kind/etcd.
	etcdModuleDir = "build/kind/etcd"
	etcdPackage   = "go.etcd.io/etcd/server/v3"
)

// kindnetdMessage is what the stand-in for kindnetd says: kindnetd's source is not
// served by the Go module proxy, so clusters of this node image run flannel.
const kindnetdMessage = "kindnetd is not in this node image: its source cannot be built offline. " +
	"Create clusters of this image with networking.disableDefaultCNI: true and a CNI of your own " +
	"(the fork's kind clusters run flannel, docs/kind.md)."

// KindNode builds the images of KindNode's names: root is this repository, tree the
// patched Kubernetes tree (for pause), work a scratch directory.
func KindNode(root, tree, work string) (Set, error) {
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	pause, err := Pause(tree, work)
	if err != nil {
		return nil, err
	}
	etcd, err := goProgram(work, "etcd", filepath.Join(root, etcdModuleDir), etcdPackage)
	if err != nil {
		return nil, err
	}
	coreDNS, err := goProgram(work, "coredns", "", coreDNSModule)
	if err != nil {
		return nil, err
	}
	localPath, err := goProgram(work, "local-path-provisioner", "", localPathModule)
	if err != nil {
		return nil, err
	}
	set := Set{KindPause: pause, KindLocalPathHelper: busybox}
	// As upstream's etcd image: the programs in /usr/local/bin, kubeadm's manifest
	// names the command.
	if set[KindEtcd], err = programImage(nil, "usr/local/bin/etcd", etcd, v1.Config{}); err != nil {
		return nil, err
	}
	// As CoreDNS's image, but as root: kubeadm's Deployment drops every capability
	// but NET_BIND_SERVICE, which a non-root user would need as a file capability.
	if set[KindCoreDNS], err = programImage(nil, "coredns", coreDNS, v1.Config{Entrypoint: []string{"/coredns"}}); err != nil {
		return nil, err
	}
	// kind's manifest runs local-path-provisioner from PATH.
	if set[KindLocalPathProvisioner], err = programImage(nil, "usr/local/bin/local-path-provisioner", localPath, v1.Config{}); err != nil {
		return nil, err
	}
	if set[KindKindnetd], err = Image(busybox, v1.Config{Entrypoint: []string{"/bin/sh", "-c", "echo \"$0\" >&2; exit 1", kindnetdMessage}}); err != nil {
		return nil, err
	}
	return set, nil
}

// FlannelImage is flanneld on the busybox image: the DaemonSet of build/kind
// (flannel.yaml) runs flanneld with the host-gw back end, and a busybox container
// beside it writes the node's CNI configuration from flanneld's subnet file.
func FlannelImage(work string) (v1.Image, error) {
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	flanneld, err := goProgram(work, "flannel", "", flannelModule,
		"-X github.com/flannel-io/flannel/pkg/version.Version=v0.28.10")
	if err != nil {
		return nil, err
	}
	return programImage(busybox, "opt/bin/flanneld", flanneld, v1.Config{Entrypoint: []string{"/opt/bin/flanneld"}})
}

// goProgram builds a static program as release images do (no cgo, -trimpath): the
// main package of a module at a version (go install pkg@version), or, with dir, the
// package pkg as the module in dir requires it.
func goProgram(work, program, dir, pkg string, ldflags ...string) ([]byte, error) {
	bin := filepath.Join(work, "bin", program)
	flags := []string{"-trimpath", "-ldflags", strings.Join(append([]string{"-s -w"}, ldflags...), " ")}
	args := append(append([]string{"install"}, flags...), pkg)
	if dir != "" {
		args = append(append([]string{"build", "-C", dir}, flags...), "-o", bin, pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOBIN="+filepath.Dir(bin), "GOFLAGS=-mod=readonly")
	if dir == "" {
		cmd.Dir = work // outside this repository's module
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s (go %v): %v\n%s", program, args, err, out)
	}
	return os.ReadFile(bin)
}

// programImage is one program at path on base (nil: an empty image).
func programImage(base v1.Image, path string, data []byte, cfg v1.Config) (v1.Image, error) {
	l, err := Layer([]File{{Path: path, Mode: 0o755, Data: data}})
	if err != nil {
		return nil, err
	}
	return Image(base, cfg, l)
}
