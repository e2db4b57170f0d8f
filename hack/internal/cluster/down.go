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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Down stops what Up started, in reverse order, and removes what the cluster left on
// the machine: pod sandboxes (so that CNI releases their network), containerd shims,
// mounts under the cluster folder and the pod bridge. State on disk stays for the
// next Up. It reports anything it could not remove.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	errs = append(errs, c.stop("kubelet", 20*time.Second))
	if _, ok := c.running("containerd"); ok {
		errs = append(errs, c.removeSandboxes(ctx))
	}
	errs = append(errs, c.stop("containerd", 10*time.Second))
	errs = append(errs, c.killShims())
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "slow-registry", "registry"} {
		errs = append(errs, c.stop(name, 15*time.Second))
	}
	errs = append(errs, c.unmountAll())
	if linkExists(bridgeName) {
		if out, err := exec.Command("ip", "link", "delete", bridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", bridgeName, err, out))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if left := c.Leftovers(); len(left) > 0 {
		return fmt.Errorf("the cluster left these behind:\n  %s", strings.Join(left, "\n  "))
	}
	c.logf("the cluster is down; nothing is left running, mounted or linked (state stays in %s)", c.rel(c.Dir))
	return nil
}

// removeSandboxes stops and removes every pod sandbox through the CRI, so that
// containerd tears down their containers, mounts and network namespaces.
func (c *Cluster) removeSandboxes(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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
		c.logf("%-24s removed %d pod sandboxes", "containerd", len(resp.Items))
	}
	return errors.Join(errs...)
}

// shims lists the containerd shims serving this cluster's containerd.
func (c *Cluster) shims() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(cmdline, []byte("containerd-shim")) && bytes.Contains(cmdline, []byte(c.containerdSocket())) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (c *Cluster) killShims() error {
	var errs []error
	for _, pid := range c.shims() {
		errs = append(errs, killAndWait(pid, 5*time.Second))
	}
	return errors.Join(errs...)
}

// mounts lists the mount points under the cluster folder, deepest first.
func (c *Cluster) mounts() []string {
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
		if mp == c.Dir || strings.HasPrefix(mp, c.Dir+"/") {
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

func (c *Cluster) unmountAll() error {
	var errs []error
	for _, mp := range c.mounts() {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// Leftovers lists what of the cluster is still on the machine: processes, mounts,
// network devices.
func (c *Cluster) Leftovers() []string {
	var left []string
	for _, name := range []string{"registry", "slow-registry", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet"} {
		if pid, ok := c.running(name); ok {
			left = append(left, fmt.Sprintf("process %s (pid %d)", name, pid))
		}
	}
	for _, pid := range c.shims() {
		left = append(left, fmt.Sprintf("process containerd-shim (pid %d)", pid))
	}
	for _, mp := range c.mounts() {
		left = append(left, "mount "+mp)
	}
	if linkExists(bridgeName) {
		left = append(left, "network device "+bridgeName)
	}
	if entries, err := os.ReadDir("/sys/class/net/" + bridgeName + "/brif"); err == nil {
		for _, e := range entries {
			left = append(left, "network device "+e.Name())
		}
	}
	return left
}
