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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Helpers are processes that tests start against the cluster (the VPA e2e test:
// metrics-server and the VPA's three components, docs/vpa-node-scope.md). Down
// stops them too, in case a test was killed before its cleanup.
var Helpers = []string{"vpa-updater", "vpa-admission-controller", "vpa-recommender", "metrics-server"}

// Down stops what Up started, in reverse order, and removes what the cluster left on
// the machine: pod sandboxes (so that CNI releases their network), containerd shims,
// mounts under the cluster folder, the pod bridges and, of the second node, its
// Node object, cgroups and /etc/hosts line. State on disk stays for the next Up.
// It reports anything it could not remove.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	for _, name := range Helpers {
		errs = append(errs, c.Stop(name, 10*time.Second))
	}
	for _, n := range c.AllNodes() {
		errs = append(errs, c.DownNode(ctx, n, false))
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "slow-registry", "registry"} {
		errs = append(errs, c.Stop(name, 15*time.Second))
	}
	errs = append(errs, c.unmountAll())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if left := c.Leftovers(); len(left) > 0 {
		return fmt.Errorf("the cluster left these behind:\n  %s", strings.Join(left, "\n  "))
	}
	c.Logf("the cluster is down; nothing is left running, mounted or linked (state stays in %s)", c.Rel(c.Dir))
	return nil
}

// DownSecondNode stops the second node and removes all of it (see DownNode), and
// leaves the rest of the cluster running.
func (c *Cluster) DownSecondNode(ctx context.Context) error {
	n := c.secondNode()
	if err := c.DownNode(ctx, n, true); err != nil {
		return err
	}
	left := c.NodeLeftovers(n)
	for _, mp := range MountsUnder(n.Dir) {
		left = append(left, "mount "+mp)
	}
	if len(left) > 0 {
		return fmt.Errorf("the second node left these behind:\n  %s", strings.Join(left, "\n  "))
	}
	return nil
}

// DownNode stops a node's kubelet and containerd and removes its pod sandboxes,
// shims and bridge; of the second node also its Node object (while the apiserver
// runs: a NotReady node would hold up the e2e tests of a later single-node run),
// its cgroups and its /etc/hosts line. unmount also unmounts what is left under
// the node's folder (Down unmounts the whole cluster folder afterwards).
func (c *Cluster) DownNode(ctx context.Context, n Node, unmount bool) error {
	var errs []error
	errs = append(errs, c.Stop("kubelet"+n.suffix, 20*time.Second))
	if n.suffix != "" {
		errs = append(errs, c.deleteNode(ctx, n.Name))
	}
	if _, ok := c.Running("containerd" + n.suffix); ok {
		errs = append(errs, c.RemoveSandboxes(ctx, n))
	}
	errs = append(errs, c.Stop("containerd"+n.suffix, 10*time.Second))
	errs = append(errs, c.KillShims(n))
	if unmount {
		errs = append(errs, UnmountUnder(n.Dir))
	}
	if LinkExists(n.Bridge) {
		if out, err := exec.Command("ip", "link", "delete", n.Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", n.Bridge, err, out))
		}
	}
	if n.suffix != "" {
		errs = append(errs, RemoveCgroupRoot(n.cgroupRoot))
		errs = append(errs, removeHostsEntries(hostsFile))
	}
	return errors.Join(errs...)
}

// deleteNode deletes a Node object, if the apiserver runs and the Node exists.
func (c *Cluster) deleteNode(ctx context.Context, name string) error {
	if _, ok := c.Running("kube-apiserver"); !ok {
		return nil
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}

// RemoveSandboxes stops and removes every pod sandbox of a node through the CRI, so
// that containerd tears down their containers, mounts and network namespaces.
func (c *Cluster) RemoveSandboxes(ctx context.Context, n Node) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+n.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range resp.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox of %s/%s: %w", s.Metadata.Namespace, s.Metadata.Name, err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox of %s/%s: %w", s.Metadata.Namespace, s.Metadata.Name, err))
		}
	}
	if len(resp.Items) > 0 {
		c.Logf("%-24s removed %d pod sandboxes", "containerd"+n.suffix, len(resp.Items))
	}
	return errors.Join(errs...)
}

// shims lists the containerd shims serving a node's containerd.
func (c *Cluster) shims(n Node) []int {
	return ProcessesWith("containerd-shim", n.ContainerdSocket())
}

// ProcessesWith lists the live processes whose command line contains every one of parts.
func ProcessesWith(parts ...string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && bytes.Contains(cmdline, []byte(p))
		}
		if all && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (c *Cluster) KillShims(n Node) error {
	var errs []error
	for _, pid := range c.shims(n) {
		errs = append(errs, KillAndWait(pid, 5*time.Second))
	}
	return errors.Join(errs...)
}

// mounts lists the mount points under the cluster folder, deepest first.
func (c *Cluster) mounts() []string { return MountsUnder(c.Dir) }

// MountsUnder lists the mount points under dir, deepest first.
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func (c *Cluster) unmountAll() error { return UnmountUnder(c.Dir) }

func UnmountUnder(dir string) error {
	var errs []error
	for _, mp := range MountsUnder(dir) {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

func LinkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// Leftovers lists what of the cluster (both nodes, whatever Up started) is still
// on the machine: processes, mounts, network devices, the second node's cgroups
// and /etc/hosts line.
func (c *Cluster) Leftovers() []string {
	var left []string
	for _, name := range append([]string{"registry", "slow-registry", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}, Helpers...) {
		if pid, ok := c.Running(name); ok {
			left = append(left, fmt.Sprintf("process %s (pid %d)", name, pid))
		}
	}
	for _, n := range c.AllNodes() {
		left = append(left, c.NodeLeftovers(n)...)
	}
	for _, mp := range c.mounts() {
		left = append(left, "mount "+mp)
	}
	return left
}

// NodeLeftovers lists what of a node is still on the machine but its mounts
// (which Leftovers lists for the whole cluster folder).
func (c *Cluster) NodeLeftovers(n Node) []string {
	var left []string
	for _, name := range []string{"containerd" + n.suffix, "kubelet" + n.suffix} {
		if pid, ok := c.Running(name); ok {
			left = append(left, fmt.Sprintf("process %s (pid %d)", name, pid))
		}
	}
	for _, pid := range c.shims(n) {
		left = append(left, fmt.Sprintf("process containerd-shim of containerd%s (pid %d)", n.suffix, pid))
	}
	if LinkExists(n.Bridge) {
		left = append(left, "network device "+n.Bridge)
	}
	if entries, err := os.ReadDir("/sys/class/net/" + n.Bridge + "/brif"); err == nil {
		for _, e := range entries {
			left = append(left, "network device "+e.Name())
		}
	}
	for _, dir := range cgroupLeftovers(n.cgroupRoot) {
		left = append(left, "cgroup "+dir)
	}
	if n.suffix != "" {
		for _, l := range hostsEntries(hostsFile) {
			left = append(left, hostsFile+" line "+strconv.Quote(l))
		}
	}
	return left
}

// emptyEtcd removes the stopped cluster's etcd data, so that it comes up with an
// empty API: a test that brings the cluster up must not find what an earlier run
// left there (the namespaces of an earlier end-to-end test, still being deleted,
// whose pods the node counts until they are gone).
func (c *Cluster) emptyEtcd() error {
	if _, ok := c.Running("etcd"); ok {
		return fmt.Errorf("etcd of the local cluster is running: make cluster-down first")
	}
	return os.RemoveAll(c.Path("etcd"))
}
