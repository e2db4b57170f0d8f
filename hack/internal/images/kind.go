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
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images a node image of kind v0.33.0 holds beyond the release's own and
// kubeadm's etcd and CoreDNS (KubeadmImages): containerd's sandbox image and
// kind's CNI and storage images (TestKindNamesMatchKindAndTheTree checks them
// against kind's module and the tree).
const (
	KindPause                = "registry.k8s.io/pause:3.10"
	KindKindnetd             = "docker.io/kindest/kindnetd:v20260820-69b56db7"
	KindLocalPathProvisioner = "docker.io/kindest/local-path-provisioner:v20260820-69b56db7"
	KindLocalPathHelper      = "docker.io/kindest/local-path-helper:v20260131-7181c60a"
	// KindLoadBalancer is the image kind runs as the load balancer of clusters with
	// several control-plane nodes: envoy, which is C++ and not packaged by Debian,
	// so it is served by hack/cmd/kind-lb, which reads the configuration kind
	// writes for envoy (docs/kind.md).
	KindLoadBalancer = "docker.io/envoyproxy/envoy:v1.36.2"
	// PodNetwork is the image of the fork's kind clusters' pod network
	// (build/kind/pod-network.yaml; kindnetd cannot be built here, docs/kind.md),
	// loaded into the nodes after they start.
	PodNetwork = "kube-carry/kind-pod-network:latest"
)

// The Go programs of those images, at the versions of the images.
const (
	coreDNSModule, coreDNSVersion     = "github.com/coredns/coredns", "v1.14.6"
	localPathModule, localPathVersion = "github.com/rancher/local-path-provisioner", "v0.0.30"
	etcdPackage                       = "go.etcd.io/etcd/server/v3"
)

// etcdModuleDirs are the modules of this repository that etcd is built from,
// by etcd's minor version: etcd's server module has replace directives, so each
// requires it at the release kubeadm names and pins the whole graph in go.sum.
// 3.7 is kubeadm's for v1.37 (the pinned tree), 3.6 for v1.36 (the release
// the upgrade lane starts from).
var etcdModuleDirs = map[string]string{
	"3.7": "build/kind/etcd",
	"3.6": "build/kind/etcd-3.6",
}

// KubeadmImages are the etcd and CoreDNS images a tree's kubeadm runs, read from
// its constants, with the module etcd is built from and CoreDNS's version.
type KubeadmImages struct {
	Etcd, EtcdModuleDir, CoreDNS, CoreDNSVersion, Pause string
}

// ReadKubeadmImages reads the images the tree's kubeadm runs
// (cmd/kubeadm/app/constants: DefaultEtcdVersion, CoreDNSVersion); it fails for
// an etcd no module of etcdModuleDirs builds.
func ReadKubeadmImages(tree string) (KubeadmImages, error) {
	path := filepath.Join(tree, "cmd", "kubeadm", "app", "constants", "constants.go")
	data, err := os.ReadFile(path)
	if err != nil {
		return KubeadmImages{}, err
	}
	constant := func(name string) (string, error) {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=\s*"([^"]+)"`).FindSubmatch(data)
		if m == nil {
			return "", fmt.Errorf("%s has no %s", path, name)
		}
		return string(m[1]), nil
	}
	etcd, err := constant("DefaultEtcdVersion")
	if err != nil {
		return KubeadmImages{}, err
	}
	coreDNS, err := constant("CoreDNSVersion")
	if err != nil {
		return KubeadmImages{}, err
	}
	pause, err := constant("PauseVersion")
	if err != nil {
		return KubeadmImages{}, err
	}
	major, rest, _ := strings.Cut(etcd, ".")
	minor, _, _ := strings.Cut(rest, ".")
	dir, ok := etcdModuleDirs[major+"."+minor]
	if !ok {
		return KubeadmImages{}, fmt.Errorf("the tree's kubeadm runs etcd %s, which no module of this repository builds (images.etcdModuleDirs)", etcd)
	}
	return KubeadmImages{
		Etcd: "registry.k8s.io/etcd:" + etcd, EtcdModuleDir: dir,
		CoreDNS: "registry.k8s.io/coredns/coredns:" + coreDNS, CoreDNSVersion: coreDNS,
		Pause: "registry.k8s.io/pause:" + pause,
	}, nil
}

// kindnetdMessage is what the stand-in for kindnetd says: kindnetd's source is not
// served by the Go module proxy, so clusters of this node image run
// build/kind/pod-network.yaml instead.
const kindnetdMessage = "kindnetd is not in this node image: its source cannot be built offline. " +
	"Create clusters of this image with networking.disableDefaultCNI: true and a CNI of your own " +
	"(the fork's kind clusters apply build/kind/pod-network.yaml, docs/kind.md)."

// KindNode builds the images of a kind node image beyond the release's own: root
// is this repository, tree the Kubernetes tree (its kubeadm's etcd and CoreDNS,
// and pause), work a scratch directory.
func KindNode(ctx context.Context, root, tree, work string) (Set, error) {
	kubeadm, err := ReadKubeadmImages(tree)
	if err != nil {
		return nil, err
	}
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	pause, err := Pause(tree, work)
	if err != nil {
		return nil, err
	}
	etcd, err := GoProgram{Pkg: etcdPackage, ModuleDir: filepath.Join(root, kubeadm.EtcdModuleDir)}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	coreDNS, err := GoProgram{Pkg: coreDNSModule, Version: kubeadm.CoreDNSVersion}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	localPath, err := GoProgram{Pkg: localPathModule, Version: localPathVersion}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	// kind's containerd runs its sandbox image; kubeadm checks for its own.
	set := Set{KindPause: pause, kubeadm.Pause: pause, KindLocalPathHelper: busybox}
	// As upstream's etcd image: the programs in /usr/local/bin, kubeadm's manifest
	// names the command.
	if set[kubeadm.Etcd], err = programImage(nil, "usr/local/bin/etcd", etcd, v1.Config{}); err != nil {
		return nil, err
	}
	// As CoreDNS's image, but as root: kubeadm's Deployment drops every capability
	// but NET_BIND_SERVICE, which a non-root user would need as a file capability.
	if set[kubeadm.CoreDNS], err = programImage(nil, "coredns", coreDNS, v1.Config{Entrypoint: []string{"/coredns"}}); err != nil {
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

// XtablesModules are iptables' extension modules (-m addrtype, -j MASQUERADE),
// which an image that runs iptables needs beside the programs.
const XtablesModules = "/usr/lib/x86_64-linux-gnu/xtables"

// podNetworkTools are what the pod network masquerades pod egress with: this
// machine's iptables, the back end (nft) the node image's kube-proxy uses too.
var podNetworkTools = []string{"iptables", "iptables-restore"}

// PodNetworkImage is the fork's kubectl and this machine's iptables on the
// busybox image: the DaemonSet of build/kind/pod-network.yaml lists the nodes
// with kubectl, sets their routes and CNI configuration with busybox, and the
// masquerading of pod egress with iptables.
func PodNetworkImage(kubectl string) (v1.Image, error) {
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(kubectl)
	if err != nil {
		return nil, err
	}
	tools, err := HostFiles(podNetworkTools, []string{XtablesModules})
	if err != nil {
		return nil, fmt.Errorf("the pod network's iptables (apt-get install iptables): %w", err)
	}
	l, err := Layer(append(tools, File{Path: "usr/local/bin/kubectl", Mode: 0o755, Data: data}))
	if err != nil {
		return nil, err
	}
	return Image(busybox, v1.Config{
		Env: []string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"sh"},
	}, l)
}

// BalloonAgentImage is a static kubectl-balloon (built without cgo), alone at
// /kubectl-balloon: the image of the node-balloon addon's resize agent
// (cluster/addons/node-balloon/balloon-resizer-deployment.yaml).
func BalloonAgentImage(kubectlBalloon string) (v1.Image, error) {
	data, err := os.ReadFile(kubectlBalloon)
	if err != nil {
		return nil, err
	}
	return programImage(nil, "kubectl-balloon", data, v1.Config{Entrypoint: []string{"/kubectl-balloon"}})
}

// LoadBalancerImage is hack/cmd/kind-lb of the repository at root, as envoy, on
// busybox, with this machine's bash, which kind's start command names.
func LoadBalancerImage(ctx context.Context, root, work string) (v1.Image, error) {
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	lb, err := GoProgram{Pkg: "./hack/cmd/kind-lb", ModuleDir: root}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	bash, err := HostFiles([]string{"bash"}, nil)
	if err != nil {
		return nil, fmt.Errorf("bash and its libraries: %w", err)
	}
	l, err := Layer(append(bash, File{Path: "usr/local/bin/envoy", Mode: 0o755, Data: lb}))
	if err != nil {
		return nil, err
	}
	return Image(busybox, v1.Config{}, l)
}

// GoProgram is a program built from its Go module, trimmed and stripped as
// release builds are.
type GoProgram struct {
	Pkg     string // the main package
	Version string // its module's version: go install Pkg@Version, the module's own go.mod
	// ModuleDir, instead of Version: Pkg as the module in this directory requires it.
	ModuleDir string
	Tags      string
	Ldflags   string
	CGO       bool
}

// String names the program and the module graph it is built from.
func (p GoProgram) String() string {
	if p.ModuleDir != "" {
		return p.Pkg + " (as " + p.ModuleDir + "/go.mod requires it)"
	}
	return p.Pkg + "@" + p.Version
}

// Build builds the program into dir, named after its package, and returns its path.
func (p GoProgram) Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, path.Base(p.Pkg))
	flags := []string{"-trimpath", "-tags", p.Tags, "-ldflags", strings.TrimSpace("-s -w " + p.Ldflags)}
	args := append(append([]string{"install"}, flags...), p.Pkg+"@"+p.Version)
	if p.ModuleDir != "" {
		args = append(append([]string{"build", "-C", p.ModuleDir}, flags...), "-o", bin, p.Pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cgo := "0"
	if p.CGO {
		cgo = "1"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOOS=linux", "GOARCH=amd64", "GOBIN="+dir, "GOFLAGS=")
	if p.ModuleDir == "" {
		cmd.Dir = dir // outside any module
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// build builds the program into work/bin and reads it.
func (p GoProgram) build(ctx context.Context, work string) ([]byte, error) {
	dir := filepath.Join(work, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin, err := p.Build(ctx, dir)
	if err != nil {
		return nil, err
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
