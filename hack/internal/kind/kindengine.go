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
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/dropcaps"
)

// EnginePackages are the Debian packages of the kind engine and its images, by the
// command each provides: Docker's engine (with Debian's containerd and runc),
// debootstrap, which makes the base image's root file system, the tools the
// kube-proxy image of the release tarball carries from this machine, and what the
// images built here are made of (busybox; gcc for pause).
var EnginePackages = map[string]string{
	"dockerd":     "docker.io",
	"debootstrap": "debootstrap",
	"busybox":     "busybox-static",
	"gcc":         "gcc",
	"iptables":    "iptables",
	"conntrack":   "conntrack",
	"nft":         "nftables",
}

// The engine's default bridge, which the engine's containers without a network of
// their own use (kind's node image build container): created by the engine's start
// and deleted by its stop, so that the engine never shares docker0 with another.
const (
	engineBridge     = "carry-docker0"
	engineBridgeAddr = "172.29.254.1"
	engineBridgeCIDR = engineBridgeAddr + "/24"
)

// Kind is the project's own Docker engine, kind's base and node images built into
// it, and a kind cluster on it. Its files are in c's folder (_output/kind), and
// c's process handling runs the engine.
type Kind struct {
	c    *cluster.Cluster
	root string // the repository root
	// Pristine makes the kind methods work on the pristine side of the parity runs
	// (docs/kind.md): upstream's release with no group applied, in a kind cluster of
	// its own (PristineKindClusterName) created without the series' gates and APIs.
	Pristine bool
	// Release, with Pristine, makes them work on a release side: pristine
	// upstream at a release the pins do not name (series release), built in
	// _output/releases/RELEASE, in a kind cluster of its own: the release an
	// upgrade lane starts from.
	Release string
	// KindWorkers, when more than the config's workers, is how many worker nodes the
	// kind cluster gets: Conformance needs two schedulable nodes, as kind's CI has.
	KindWorkers int
}

// NewKind describes the kind clusters of a repository checkout: the engine and the
// images live under _output/kind.
func NewKind(root string, log io.Writer) *Kind {
	c := cluster.New(root, log)
	c.Dir = filepath.Join(root, "_output", "kind")
	return &Kind{c: c, root: root}
}

// NewPristineKind describes the pristine side of the parity runs: the same engine,
// upstream's binaries and tree (hack/lib.sh: _output/pristine), and a cluster of its
// own whose state lives in _output/kind/pristine.
func NewPristineKind(root string, log io.Writer) *Kind {
	k := NewKind(root, log)
	k.c.Bin = filepath.Join(root, "_output", "pristine", "bin")
	k.c.Tree = filepath.Join(root, "_output", "pristine", "kubernetes")
	k.Pristine = true
	return k
}

// NewReleaseKind describes a release side (hack/lib.sh: RELEASE): upstream's
// release, its binaries and tree in _output/releases/RELEASE, and a cluster of
// its own whose state lives in _output/kind/releases/RELEASE.
func NewReleaseKind(root, release string, log io.Writer) *Kind {
	k := NewKind(root, log)
	k.c.Bin = filepath.Join(root, "_output", "releases", release, "bin")
	k.c.Tree = filepath.Join(root, "_output", "releases", release, "kubernetes")
	k.Pristine, k.Release = true, release
	return k
}

// NewUpgradedKind describes a release side's cluster after make kind-upgrade
// took it to the fork: the release side's cluster and state (NewReleaseKind),
// with the fork's binaries and tree, which its nodes run now and whose e2e
// tests need their images.
func NewUpgradedKind(root, release string, log io.Writer) *Kind {
	k := NewReleaseKind(root, release, log)
	k.c.Bin = filepath.Join(root, "_output", "bin")
	k.c.Tree = filepath.Join(root, "_output", "kubernetes")
	return k
}

// SideKinds describes every side whose cluster may be on the engine: the
// pristine side, each release side that has a folder under
// _output/kind/releases, then the fork's.
func SideKinds(root string, log io.Writer) ([]*Kind, error) {
	kinds := []*Kind{NewPristineKind(root, log)}
	entries, err := os.ReadDir(filepath.Join(root, "_output", "kind", "releases"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() {
			kinds = append(kinds, NewReleaseKind(root, e.Name(), log))
		}
	}
	return append(kinds, NewKind(root, log)), nil
}

// DockerHost is the engine's address, for DOCKER_HOST.
func (k *Kind) DockerHost() string { return "unix://" + k.dockerSocket() }

func (k *Kind) dockerSocket() string { return k.c.Path("docker.sock") }

// StartEngine starts the project's own Docker engine (Debian's dockerd), whose data,
// state and socket are under the kind folder, so that it shares nothing with any
// other engine on the machine. It leaves the host's iptables alone (kind's nodes
// talk on their own bridge, and published ports go through docker-proxy).
func (k *Kind) StartEngine(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the kind engine runs dockerd, which needs root")
	}
	// containerd's socket, in the exec root, has the longest path.
	if sock := k.c.Path("exec", "containerd", "containerd.sock"); len(sock) >= 108 {
		return fmt.Errorf("the engine's containerd socket path %s is longer than a unix socket allows; clone the repository to a shorter path", sock)
	}
	if err := cluster.InstallPackages(k.c.Log, EnginePackages); err != nil {
		return err
	}
	if err := ensureBridge(engineBridge, engineBridgeCIDR); err != nil {
		return err
	}
	if err := k.ensureLibModules(); err != nil {
		return err
	}
	config := map[string]any{
		"hosts":          []string{k.DockerHost()},
		"data-root":      k.c.Path("docker"),
		"exec-root":      k.c.Path("exec"),
		"pidfile":        k.c.Path("exec", "dockerd.pid"),
		"storage-driver": "overlay2",
		"bridge":         engineBridge,
		"iptables":       false,
		"ip-masq":        false,
		"log-driver":     "json-file",
	}
	missing, err := dropcaps.Missing()
	if err != nil {
		return fmt.Errorf("reading this process's capability bounding set: %w", err)
	}
	if len(missing) > 0 {
		wrapper := k.c.Tool("runc-dropcaps")
		if _, err := os.Stat(wrapper); err != nil {
			return fmt.Errorf("this machine's capability bounding set lacks %s, so privileged containers need the runc-dropcaps runtime: %w (make kind-up builds it)", strings.Join(missing, ", "), err)
		}
		k.c.Logf("this machine's capability bounding set lacks %s: the engine's containers run with runc-dropcaps, which removes them from each container's spec (docs/kind.md)", strings.Join(missing, ", "))
		config["runtimes"] = map[string]any{"runc-dropcaps": map[string]string{"path": wrapper}}
		config["default-runtime"] = "runc-dropcaps"
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(k.c.Path("run"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(k.c.Path("daemon.json"), data, 0o644); err != nil {
		return err
	}
	return k.c.Start(ctx, cluster.Daemon{
		Name:    "dockerd",
		Args:    []string{"dockerd", "--config-file", k.c.Path("daemon.json")},
		Healthy: func(ctx context.Context, _ time.Time) error { return dockerPing(ctx, k.dockerSocket()) },
	})
}

// StopEngine stops the engine and removes what it mounted and the bridges of its
// networks. Containers still running are stopped by dockerd as it shuts down.
func (k *Kind) StopEngine(ctx context.Context) error {
	var bridges []string
	if _, ok := k.c.Running("dockerd"); ok {
		// The networks' bridges (kind's): dockerd keeps them when it stops.
		out, err := k.docker(ctx, "network", "ls", "--filter", "driver=bridge", "--format", "{{.ID}} {{.Name}}").Output()
		if err != nil {
			return fmt.Errorf("listing the engine's networks: %w", err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if id, name, ok := strings.Cut(line, " "); ok && name != "bridge" {
				bridges = append(bridges, "br-"+id[:min(12, len(id))])
			}
		}
	}
	if err := k.c.Stop("dockerd", time.Minute); err != nil {
		return err
	}
	// The engine's containerd and shims outlive dockerd when it is killed.
	for _, pid := range cluster.ProcessesWith(k.c.Dir + "/") {
		if err := cluster.KillAndWait(pid, 10*time.Second); err != nil {
			return err
		}
	}
	if _, err := os.Stat(k.c.Path(libModulesMarker)); err == nil {
		// Only while empty: something else may have put modules there since.
		if err := os.Remove(libModules); err != nil && !os.IsNotExist(err) {
			k.c.Logf("%-24s left %s, which engine-up created: %v", "engine", libModules, err)
		}
		os.Remove(k.c.Path(libModulesMarker))
	}
	for _, b := range append(bridges, engineBridge) {
		if cluster.LinkExists(b) {
			if out, err := exec.Command("ip", "link", "delete", b).CombinedOutput(); err != nil {
				return fmt.Errorf("ip link delete %s: %v: %s", b, err, out)
			}
		}
	}
	if err := cluster.UnmountUnder(k.c.Dir); err != nil {
		return err
	}
	if left := k.EngineLeftovers(); len(left) > 0 {
		return fmt.Errorf("the engine left these behind:\n  %s", strings.Join(left, "\n  "))
	}
	return nil
}

// EngineLeftovers lists what of the engine is still on the machine: its processes
// (dockerd, its containerd and shims), mounts, bridge and the /lib/modules it made.
func (k *Kind) EngineLeftovers() []string {
	var left []string
	for _, pid := range cluster.ProcessesWith(k.c.Dir + "/") {
		left = append(left, fmt.Sprintf("process %d of the kind engine", pid))
	}
	for _, mp := range cluster.MountsUnder(k.c.Dir) {
		left = append(left, "mount "+mp)
	}
	if cluster.LinkExists(engineBridge) {
		left = append(left, "network device "+engineBridge)
	}
	if _, err := os.Stat(k.c.Path(libModulesMarker)); err == nil {
		left = append(left, libModules+" (made by engine-up)")
	}
	return left
}

// kind mounts the host's kernel modules into its nodes, read-only; a machine
// without them (a container, as this one) gets an empty folder while the engine
// runs, and a marker that the engine's stop removes it.
const (
	libModules       = "/lib/modules"
	libModulesMarker = "created-lib-modules"
)

func (k *Kind) ensureLibModules() error {
	if _, err := os.Stat(libModules); err == nil {
		return nil
	}
	if err := os.MkdirAll(k.c.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(k.c.Path(libModulesMarker), nil, 0o644); err != nil {
		return err
	}
	k.c.Logf("%-24s this machine has no %s; kind mounts it into its nodes: an empty one until engine-down", "engine", libModules)
	return os.Mkdir(libModules, 0o755)
}

// ensureBridge creates a bridge with an address, unless it exists.
func ensureBridge(name, cidr string) error {
	if cluster.LinkExists(name) {
		return nil
	}
	for _, args := range [][]string{
		{"link", "add", "name", name, "type", "bridge"},
		{"addr", "add", cidr, "dev", name},
		{"link", "set", name, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// dockerPing asks the engine's API whether it serves.
func dockerPing(ctx context.Context, socket string) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /_ping: %s", resp.Status)
	}
	return nil
}
