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

// Package nodee2e is the machine side of make node-e2e: the registries of the
// images upstream's node e2e specs pull and a containerd with a pod network of
// its own, run with the local cluster's process handling and node configuration
// (package cluster).
package nodee2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/images"
	"github.com/kube-carry/kube-carry/hack/internal/sysshim"
)

// Addresses of make node-e2e's registries: the images upstream's node e2e specs
// pull, and the same through a SlowRegistry without delay, which serves
// "<tag>--<anything>" as "<tag>" so that a spec pulls an image the node has never
// seen (KUBE_TEST_SLOW_REGISTRY). Not 5000: upstream's credential specs run
// their fake registry there.
const (
	NodeE2ERegistryAddr       = "127.0.0.1:5002"
	NodeE2EUniqueRegistryAddr = "127.0.0.1:5003"
)

// nodeE2EPorts are the host ports upstream's node e2e suite listens on: its
// in-process kube-apiserver, the kubelet's, and agnhost's fake registry (a
// host-network pod of the credential specs). The local cluster uses them too.
var nodeE2EPorts = []string{"127.0.0.1:6443", ":10250", ":10248", ":10255", ":5000"}

// NodeE2EPackages are the Debian packages make node-e2e runs on, by the command
// or file each provides: the local cluster's but etcd (the suite embeds its own),
// conntrack and gcc.
var NodeE2EPackages = map[string]string{
	"containerd":          "containerd",
	"runc":                "runc",
	"docker-registry":     "docker-registry",
	"busybox":             "busybox-static",
	"ip":                  "iproute2",
	"iptables":            "iptables",
	"/usr/lib/cni/bridge": "containernetworking-plugins",
}

// NodeE2E is what make node-e2e runs upstream's node e2e suite on (test/e2e_node,
// docs/kubelet-image-pull-gate-node-e2e.md): a registry of the specs' images and
// a containerd with a pod network of its own, all under _output/node-e2e. The
// suite starts the apiserver and the kubelet itself.
type NodeE2E struct {
	c *cluster.Cluster
	n cluster.Node
}

// NewNodeE2E describes make node-e2e's machine side in a repository checkout.
func NewNodeE2E(root string, log io.Writer) *NodeE2E {
	c := cluster.New(root, log)
	c.Dir = filepath.Join(root, "_output", "node-e2e")
	return &NodeE2E{c: c, n: cluster.Node{
		Name: cluster.NodeName(), Dir: c.Dir, Port: 10250, HealthzPort: 10248,
		Bridge: "carry-ne2e", Subnet: "10.88.8.0/24",
	}}
}

// Path is a file of the run's folder.
func (e *NodeE2E) Path(elem ...string) string { return e.c.Path(elem...) }

// ContainerdSocket is the CRI endpoint the suite's kubelet and CRI proxy use.
func (e *NodeE2E) ContainerdSocket() string { return e.n.ContainerdSocket() }

// Units is the folder of the transient units the sysshim systemd-run starts.
func (e *NodeE2E) Units() sysshim.Units { return sysshim.Units{Dir: e.c.Path("units")} }

// Up checks that the suite's ports are free, installs the missing Debian packages,
// writes the configurations, starts the registries (pushing the images on the
// first run) and containerd.
func (e *NodeE2E) Up(ctx context.Context) error {
	if err := e.Preflight(); err != nil {
		return err
	}
	if err := cluster.InstallPackages(e.c.Log, NodeE2EPackages); err != nil {
		return err
	}
	for _, d := range []string{"run", "logs", "etc", "registry", "containerd", "cni/net.d", "cni/ipam", "units"} {
		if err := os.MkdirAll(e.c.Path(d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		e.c.Path("etc", "registry.yml"):               cluster.RegistryConfig(e.c.Path("registry"), NodeE2ERegistryAddr),
		e.c.Path("etc", "image-repos.yaml"):           cluster.RepoList(NodeE2ERegistryAddr),
		e.c.Path("etc", "containerd.toml"):            cluster.ContainerdConfigWith(e.n, NodeE2ERegistryAddr, NodeE2EUniqueRegistryAddr),
		e.c.Path("cni", "net.d", "10-carry.conflist"): cluster.CNIConfig(e.n),
		e.c.Path("etc", "kubelet-config.yaml"):        nodeE2EKubeletConfig,
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, d := range e.daemons() {
		if err := e.c.Start(ctx, d); err != nil {
			return err
		}
		if d.Name == "registry" {
			pushed, err := e.pushImages(ctx)
			if err != nil {
				return err
			}
			if pushed {
				// containerd would keep running the images of an earlier version
				// under the same names (the specs pull agnhost IfNotPresent).
				if err := cluster.UnmountUnder(e.c.Path("containerd")); err != nil {
					return err
				}
				if err := os.RemoveAll(e.c.Path("containerd", "root")); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Preflight fails when the suite cannot run here now: not root, or its ports in
// use (by the local cluster, or an earlier run).
func (e *NodeE2E) Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the node e2e suite runs containerd and a kubelet and needs root")
	}
	for _, addr := range nodeE2EPorts {
		if err := cluster.PortFree(addr); err != nil {
			return fmt.Errorf("the node e2e suite needs port %s: %w\nrun make cluster-down first", addr, err)
		}
	}
	if pid, ok := e.c.Running("containerd"); ok {
		return fmt.Errorf("containerd of an earlier node e2e run still runs (pid %d): run %s node-e2e-down", pid, e.c.Rel(e.c.Tool("cluster")))
	}
	return nil
}

func (e *NodeE2E) daemons() []cluster.Daemon {
	return []cluster.Daemon{
		{
			Name: "registry", Port: NodeE2ERegistryAddr,
			Args:    []string{"docker-registry", "serve", e.c.Path("etc", "registry.yml")},
			Healthy: cluster.HTTPOK("http://" + NodeE2ERegistryAddr + "/v2/"),
		},
		{
			Name: "unique-registry", Port: NodeE2EUniqueRegistryAddr,
			Args:    []string{e.c.Tool("cluster"), "slow-registry", "-listen", NodeE2EUniqueRegistryAddr, "-upstream", NodeE2ERegistryAddr, "-delay", "0s"},
			Healthy: cluster.HTTPOK("http://" + NodeE2EUniqueRegistryAddr + "/v2/"),
		},
		{
			Name:    "containerd",
			Args:    []string{"containerd", "--config", e.c.Path("etc", "containerd.toml")},
			Healthy: cluster.ContainerdReady(e.n),
		},
	}
}

// nodeE2EImagesMarker is pushed last: the registry holds the images of this
// version of pushImages (a change to them changes the marker's tag).
const nodeE2EImagesMarker = "carry/node-e2e-images:2"

// pushImages builds the images the specs pull (test/utils/image): pause (also
// containerd's sandbox image), busybox, agnhost with the fake registry's
// /var/registry (upstream's credential specs), and that agnhost again as
// AgnhostPrev, which the parallel pull specs pull as an image other than agnhost.
// It tells whether it pushed them.
func (e *NodeE2E) pushImages(ctx context.Context) (bool, error) {
	marker, tag, _ := strings.Cut(nodeE2EImagesMarker, ":")
	if cluster.ManifestIn(ctx, NodeE2ERegistryAddr, marker, tag) {
		return false, nil // pushed by an earlier run
	}
	e.c.Logf("%-24s building pause, busybox and agnhost", "images")
	return true, e.buildAndPush(ctx)
}

func (e *NodeE2E) buildAndPush(ctx context.Context) error {
	work, err := os.MkdirTemp("", "kube-carry-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	n := images.Names{Registry: NodeE2ERegistryAddr}
	set, err := images.Standard(e.c.Tree, work, n, nil)
	if err != nil {
		return err
	}
	e2e, err := images.E2E(e.c.Tree, work, n)
	if err != nil {
		return err
	}
	agnhost, err := images.WithFakeRegistry(e2e[n.Agnhost()], set[n.Pause()])
	if err != nil {
		return err
	}
	set[n.Agnhost()] = agnhost
	set[n.E2E("agnhost", images.AgnhostPrevTag)] = agnhost
	if err := set.Push(ctx); err != nil {
		return err
	}
	if err := (images.Set{NodeE2ERegistryAddr + "/" + nodeE2EImagesMarker: set[n.Pause()]}).Push(ctx); err != nil {
		return err
	}
	e.c.Logf("%-24s pushed %d images to %s", "images", len(set), NodeE2ERegistryAddr)
	return nil
}

// Down stops what the suite may have left running (the kubelet units of the
// shim), then what Up started, and removes pod sandboxes, containerd shims,
// mounts under the run's folder and the kubelet's root dir, the bridge and the
// kubelet's cgroup. It reports what it could not remove.
func (e *NodeE2E) Down(ctx context.Context) error {
	var errs []error
	units := e.Units()
	_, names := units.List()
	for _, u := range names {
		if err := units.Stop(u); err != nil {
			errs = append(errs, err)
		} else {
			e.c.Logf("%-24s stopped", u)
		}
	}
	if _, ok := e.c.Running("containerd"); ok {
		errs = append(errs, e.c.RemoveSandboxes(ctx, e.n))
	}
	errs = append(errs, e.c.Stop("containerd", 10*time.Second))
	errs = append(errs, e.c.KillShims(e.n))
	for _, name := range []string{"unique-registry", "registry"} {
		errs = append(errs, e.c.Stop(name, 10*time.Second))
	}
	// The suite's kubelet keeps its pods' volumes under its fixed root dir.
	errs = append(errs, cluster.UnmountUnder(nodeE2EKubeletRoot), cluster.UnmountUnder(e.c.Dir))
	if cluster.LinkExists(e.n.Bridge) {
		if out, err := exec.Command("ip", "link", "delete", e.n.Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", e.n.Bridge, err, out))
		}
	}
	errs = append(errs, cluster.RemoveCgroupRoot(nodeE2EKubeletCgroup))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if left := e.Leftovers(); len(left) > 0 {
		return fmt.Errorf("the node e2e run left these behind:\n  %s", strings.Join(left, "\n  "))
	}
	e.c.Logf("node e2e: nothing is left running, mounted or linked")
	return nil
}

// Leftovers lists what of a node e2e run is still on the machine.
func (e *NodeE2E) Leftovers() []string {
	var left []string
	for _, name := range []string{"registry", "unique-registry"} {
		if pid, ok := e.c.Running(name); ok {
			left = append(left, fmt.Sprintf("process %s (pid %d)", name, pid))
		}
	}
	states, names := e.Units().List()
	for _, u := range names {
		if states[u] {
			left = append(left, "unit "+u)
		}
	}
	left = append(left, e.c.NodeLeftovers(e.n)...)
	for _, mp := range append(cluster.MountsUnder(nodeE2EKubeletRoot), cluster.MountsUnder(e.c.Dir)...) {
		left = append(left, "mount "+mp)
	}
	return left
}

// The kubelet's root dir and cgroup under upstream's node e2e suite
// (test/e2e_node/services/kubelet.go, the systemd branch).
const (
	nodeE2EKubeletRoot   = "/var/lib/kubelet"
	nodeE2EKubeletCgroup = "/kubelet.slice"
)

// nodeE2EKubeletConfig is the suite's base kubelet configuration
// (--kubelet-config-file): upstream's jenkins/default-kubelet-config.yaml for
// this machine. cgroup v1 is allowed; the eviction thresholds are absolute,
// as a large disk that is mostly full would be under DiskPressure at upstream's
// 10%; image garbage collection is off, so that the pushed images stay. The suite
// adds its ports, authorization, static pod path and feature gates.
const nodeE2EKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /
failCgroupV1: false
failSwapOn: false
podCIDR: "10.100.0.0/24"
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard:
  memory.available: 250Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
serializeImagePulls: false
`
