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

package cluster

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

// NewKind describes the kind clusters of a repository checkout: the engine and the
// images live under _output/kind.
func NewKind(root string, log io.Writer) *Cluster {
	c := New(root, log)
	c.Dir = filepath.Join(root, "_output", "kind")
	return c
}

// NewPristineKind describes the pristine side of the parity runs: the same engine,
// upstream's binaries and tree (hack/lib.sh: _output/pristine), and a cluster of its
// own whose state lives in _output/kind/pristine.
func NewPristineKind(root string, log io.Writer) *Cluster {
	c := NewKind(root, log)
	c.Bin = filepath.Join(root, "_output", "pristine", "bin")
	c.Tree = filepath.Join(root, "_output", "pristine", "kubernetes")
	c.Pristine = true
	return c
}

// DockerHost is the engine's address, for DOCKER_HOST.
func (c *Cluster) DockerHost() string { return "unix://" + c.dockerSocket() }

func (c *Cluster) dockerSocket() string { return c.path("docker.sock") }

// StartEngine starts the project's own Docker engine (Debian's dockerd), whose data,
// state and socket are under the kind folder, so that it shares nothing with any
// other engine on the machine. It leaves the host's iptables alone (kind's nodes
// talk on their own bridge, and published ports go through docker-proxy).
func (c *Cluster) StartEngine(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the kind engine runs dockerd, which needs root")
	}
	// containerd's socket, in the exec root, has the longest path.
	if sock := c.path("exec", "containerd", "containerd.sock"); len(sock) >= 108 {
		return fmt.Errorf("the engine's containerd socket path %s is longer than a unix socket allows; clone the repository to a shorter path", sock)
	}
	if err := InstallPackages(c.Log, EnginePackages); err != nil {
		return err
	}
	if err := ensureBridge(engineBridge, engineBridgeCIDR); err != nil {
		return err
	}
	if err := c.ensureLibModules(); err != nil {
		return err
	}
	config := map[string]any{
		"hosts":          []string{c.DockerHost()},
		"data-root":      c.path("docker"),
		"exec-root":      c.path("exec"),
		"pidfile":        c.path("exec", "dockerd.pid"),
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
		wrapper := c.tool("runc-dropcaps")
		if _, err := os.Stat(wrapper); err != nil {
			return fmt.Errorf("this machine's capability bounding set lacks %s, so privileged containers need the runc-dropcaps runtime: %w (make kind-up builds it)", strings.Join(missing, ", "), err)
		}
		c.logf("this machine's capability bounding set lacks %s: the engine's containers run with runc-dropcaps, which removes them from each container's spec (docs/kind.md)", strings.Join(missing, ", "))
		config["runtimes"] = map[string]any{"runc-dropcaps": map[string]string{"path": wrapper}}
		config["default-runtime"] = "runc-dropcaps"
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("run"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("daemon.json"), data, 0o644); err != nil {
		return err
	}
	return c.start(ctx, daemon{
		name:    "dockerd",
		args:    []string{"dockerd", "--config-file", c.path("daemon.json")},
		healthy: func(ctx context.Context, _ time.Time) error { return dockerPing(ctx, c.dockerSocket()) },
	})
}

// StopEngine stops the engine and removes what it mounted and the bridges of its
// networks. Containers still running are stopped by dockerd as it shuts down.
func (c *Cluster) StopEngine(ctx context.Context) error {
	var bridges []string
	if _, ok := c.running("dockerd"); ok {
		// The networks' bridges (kind's): dockerd keeps them when it stops.
		out, err := c.docker(ctx, "network", "ls", "--filter", "driver=bridge", "--format", "{{.ID}} {{.Name}}").Output()
		if err != nil {
			return fmt.Errorf("listing the engine's networks: %w", err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if id, name, ok := strings.Cut(line, " "); ok && name != "bridge" {
				bridges = append(bridges, "br-"+id[:min(12, len(id))])
			}
		}
	}
	if err := c.stop("dockerd", time.Minute); err != nil {
		return err
	}
	// The engine's containerd and shims outlive dockerd when it is killed.
	for _, pid := range processesWith(c.Dir + "/") {
		if err := killAndWait(pid, 10*time.Second); err != nil {
			return err
		}
	}
	if _, err := os.Stat(c.path(libModulesMarker)); err == nil {
		// Only while empty: something else may have put modules there since.
		if err := os.Remove(libModules); err != nil && !os.IsNotExist(err) {
			c.logf("%-24s left %s, which engine-up created: %v", "engine", libModules, err)
		}
		os.Remove(c.path(libModulesMarker))
	}
	for _, b := range append(bridges, engineBridge) {
		if linkExists(b) {
			if out, err := exec.Command("ip", "link", "delete", b).CombinedOutput(); err != nil {
				return fmt.Errorf("ip link delete %s: %v: %s", b, err, out)
			}
		}
	}
	if err := unmountUnder(c.Dir); err != nil {
		return err
	}
	if left := c.EngineLeftovers(); len(left) > 0 {
		return fmt.Errorf("the engine left these behind:\n  %s", strings.Join(left, "\n  "))
	}
	return nil
}

// EngineLeftovers lists what of the engine is still on the machine: its processes
// (dockerd, its containerd and shims), mounts, bridge and the /lib/modules it made.
func (c *Cluster) EngineLeftovers() []string {
	var left []string
	for _, pid := range processesWith(c.Dir + "/") {
		left = append(left, fmt.Sprintf("process %d of the kind engine", pid))
	}
	for _, mp := range mountsUnder(c.Dir) {
		left = append(left, "mount "+mp)
	}
	if linkExists(engineBridge) {
		left = append(left, "network device "+engineBridge)
	}
	if _, err := os.Stat(c.path(libModulesMarker)); err == nil {
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

func (c *Cluster) ensureLibModules() error {
	if _, err := os.Stat(libModules); err == nil {
		return nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(c.path(libModulesMarker), nil, 0o644); err != nil {
		return err
	}
	c.logf("%-24s this machine has no %s; kind mounts it into its nodes: an empty one until engine-down", "engine", libModules)
	return os.Mkdir(libModules, 0o755)
}

// ensureBridge creates a bridge with an address, unless it exists.
func ensureBridge(name, cidr string) error {
	if linkExists(name) {
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
