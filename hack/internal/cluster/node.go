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
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Node is one kubelet of the cluster with a containerd, a pod network and files of
// its own. The first node keeps the cluster folder's layout; an opt-in second node
// (Cluster.Nodes = 2) runs on the same machine with everything of its own: node
// name, root dir, ports, cgroupRoot, containerd (a kubelet kills the pods of its
// runtime that it does not know), CNI bridge and pod subnet, client certificate.
type Node struct {
	Name string // the Node's name
	// suffix names its daemons, certificates and logs: "" for the first node.
	suffix string
	// Dir holds its containerd, kubelet and CNI state: the cluster folder for
	// the first node, a folder inside it for the second.
	Dir               string
	Port, HealthzPort int
	Bridge, Subnet    string
	// cgroupRoot is the kubelet's cgroupRoot, "" for the kubelet's default (/).
	cgroupRoot string
}

// SecondNodeName is the name of the opt-in second node: the first node's name
// with "-2". It resolves to loopback through a line in /etc/hosts that up adds
// (unless the name resolves to loopback already) and down removes.
func SecondNodeName() string { return NodeName() + "-2" }

func (c *Cluster) firstNode() Node {
	return Node{Name: NodeName(), Dir: c.Dir, Port: 10250, HealthzPort: 10248, Bridge: bridgeName, Subnet: podSubnet}
}

func (c *Cluster) secondNode() Node {
	return Node{
		Name: SecondNodeName(), suffix: "-node2", Dir: c.Path("node2"),
		Port: 10350, HealthzPort: 10348,
		Bridge: "carry1", Subnet: "10.88.1.0/24",
		cgroupRoot: "/kube-carry-node2",
	}
}

// nodes are the nodes Up starts.
func (c *Cluster) nodes() []Node {
	if c.Nodes >= 2 {
		return []Node{c.firstNode(), c.secondNode()}
	}
	return []Node{c.firstNode()}
}

// AllNodes are the nodes Down stops and Leftovers checks, whatever Up started.
func (c *Cluster) AllNodes() []Node { return []Node{c.firstNode(), c.secondNode()} }

func (n Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.Dir}, elem...)...)
}

func (n Node) ContainerdSocket() string { return n.path("run", "containerd.sock") }
func (n Node) kubeletAddr() string      { return "127.0.0.1:" + strconv.Itoa(n.Port) }
func (n Node) healthzAddr() string      { return "127.0.0.1:" + strconv.Itoa(n.HealthzPort) }

// kubeconfig is the kubelet's kubeconfig (the first node's stays where it was).
func (n Node) kubeconfig() string { return n.path("kubelet" + n.suffix + ".kubeconfig") }

// The hosts file that makes the second node's name resolve, and the marker of
// the line up adds to it.
var hostsFile = "/etc/hosts"

const hostsMarker = "# kube-carry second node: make cluster-down removes this line"

// resolvesToLoopback tells whether every address of name is a loopback address.
func resolvesToLoopback(name string) bool {
	addrs, err := net.LookupHost(name)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// ensureResolves makes name resolve to 127.0.0.1 (the apiserver and
// metrics-server reach kubelets by host name) with a marked line in the hosts
// file, unless it resolves to loopback already.
func ensureResolves(name string) error {
	if resolvesToLoopback(name) {
		return nil
	}
	return addHostsEntry(hostsFile, name)
}

func addHostsEntry(path, name string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	line := "127.0.0.1 " + name + " " + hostsMarker + "\n"
	if bytes.Contains(data, []byte(line)) {
		return nil
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		line = "\n" + line
	}
	// Appended in place: /etc/hosts may be a bind mount that cannot be replaced.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("adding %s to %s: %w", name, path, err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("adding %s to %s: %w", name, path, err)
	}
	return f.Close()
}

// hostsEntries are the lines of the hosts file that up added.
func hostsEntries(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, hostsMarker) {
			out = append(out, l)
		}
	}
	return out
}

// removeHostsEntries removes the lines up added, rewriting the file in place.
func removeHostsEntries(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	var kept strings.Builder
	for _, l := range lines {
		if !strings.Contains(l, hostsMarker) {
			kept.WriteString(l)
		}
	}
	if kept.Len() == len(data) {
		return nil
	}
	return os.WriteFile(path, []byte(kept.String()), 0o644)
}

// cgroupBase is where the cgroup hierarchies are mounted.
var cgroupBase = "/sys/fs/cgroup"

// cgroupDirs are the directories of a cgroupRoot in every cgroup hierarchy (one
// with cgroup v2, one per controller with v1).
func cgroupDirs(root string) []string {
	if root == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(cgroupBase, "cgroup.controllers")); err == nil {
		return []string{filepath.Join(cgroupBase, root)}
	}
	entries, err := os.ReadDir(cgroupBase)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		h := filepath.Join(cgroupBase, e.Name())
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			dirs = append(dirs, filepath.Join(h, root))
		}
	}
	return dirs
}

// createCgroupRoot creates the node's cgroupRoot, which the kubelet requires to
// exist, in every hierarchy; a new cpuset gets its parent's cpus and mems.
func createCgroupRoot(root string) error {
	for _, dir := range cgroupDirs(root) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || len(bytes.TrimSpace(cur)) > 0 {
				continue
			}
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("setting %s of %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// RemoveCgroupRoot removes the node's cgroupRoot and the cgroups the kubelet made
// in it (the kubepods and QoS cgroups), deepest first. Their processes must be
// gone (containerd and its shims stopped).
func RemoveCgroupRoot(root string) error {
	var errs []error
	for _, dir := range cgroupDirs(root) {
		var dirs []string
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupLeftovers are the directories of the cgroupRoot still present.
func cgroupLeftovers(root string) []string {
	var left []string
	for _, dir := range cgroupDirs(root) {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, dir)
		}
	}
	return left
}
