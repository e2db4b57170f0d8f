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
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// upgradeDir is where KindUpgrade puts a release's kubeadm, kubelet and kubectl
// in each node, as kinder's /kinder/upgrade/VERSION.
const upgradeDir = "/kind/upgrade"

// release is a server release tarball unpacked: its version and its files.
type release struct {
	version string // v1.37.2-carry.7+b07373f55496
	dir     string // the unpacked kubernetes/server/bin
}

// imageTag is the tag of a release's images: its version with '+' as '_', as
// kubeadm names them.
func (r release) imageTag() string { return strings.ReplaceAll(r.version, "+", "_") }

// unpackRelease unpacks a server release tarball (kubernetes-server-linux-amd64.tar.gz,
// as images.ServerTarball writes it) into work.
func unpackRelease(tarballPath, work string) (release, error) {
	f, err := os.Open(tarballPath)
	if err != nil {
		return release{}, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return release{}, fmt.Errorf("%s: %w", tarballPath, err)
	}
	r := release{dir: filepath.Join(work, "kubernetes", "server", "bin")}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return release{}, fmt.Errorf("%s: %w", tarballPath, err)
		}
		name := filepath.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return release{}, err
		}
		if name == "kubernetes/version" {
			r.version = strings.TrimSpace(string(data))
		}
		out := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return release{}, err
		}
		if err := os.WriteFile(out, data, os.FileMode(h.Mode)&0o755|0o600); err != nil {
			return release{}, err
		}
	}
	if r.version == "" {
		return release{}, fmt.Errorf("%s has no kubernetes/version", tarballPath)
	}
	return r, nil
}

// upgradeImages are the images the release's kubeadm runs: its control plane
// components and kube-proxy, named as kubeadm names them (the tarball's images
// carry the -amd64 names), and the etcd, CoreDNS and pause of its tree.
func upgradeImages(ctx context.Context, root, tree, work string, r release) (images.Set, error) {
	set, err := images.KindNode(ctx, root, tree, work)
	if err != nil {
		return nil, err
	}
	for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		img, err := tarball.ImageFromPath(filepath.Join(r.dir, component+".tar"), nil)
		if err != nil {
			return nil, fmt.Errorf("%s's image in the release: %w", component, err)
		}
		set["registry.k8s.io/"+component+":"+r.imageTag()] = img
	}
	return set, nil
}

// KindUpgrade upgrades the kind cluster to the release of a server tarball built
// from tree, as kinder's kubeadm-upgrade action does (kubernetes/kubeadm,
// kinder/pkg/cluster/manager/actions/kubeadm-upgrade.go), with the drain and
// uncordon it leaves out:
//  1. the release's images are loaded into every node, and its kubeadm, kubelet
//     and kubectl copied to /kind/upgrade/VERSION in each; the settings are
//     written into the cluster's configuration, which kubeadm upgrade renders
//     into the release's manifests and kubelet configuration (a release that
//     does not know a gate refuses it);
//  2. the first control plane runs kubeadm upgrade apply, then every other node
//     kubeadm upgrade node, each with kubeadm linked to the release's, waiting for a
//     control plane's static pods to run the new images;
//  3. node by node, control planes first: drain, the release's kubelet and
//     kubectl linked in, the kubelet restarted, uncordon, waiting until the node
//     reports the release.
func (k *Kind) KindUpgrade(ctx context.Context, tarballPath, tree string, settings ClusterSettings) error {
	work := k.kindPath("upgrade")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	r, err := unpackRelease(tarballPath, work)
	if err != nil {
		return err
	}
	k.c.Logf("%-24s to %s", "kind upgrade", r.version)
	set, err := upgradeImages(ctx, k.root, tree, work, r)
	if err != nil {
		return err
	}
	if err := k.LoadImages(ctx, work, set); err != nil {
		return err
	}
	client, err := k.KindClient()
	if err != nil {
		return err
	}
	nodes, err := k.kindNodes(ctx)
	if err != nil {
		return err
	}
	if err := k.editClusterSettings(ctx, client, settings); err != nil {
		return err
	}
	controlPlanes := 0
	for _, n := range nodes {
		if n.role == "control-plane" {
			controlPlanes++
		}
	}
	dest := upgradeDir + "/" + r.version
	for _, n := range nodes {
		if out, err := k.docker(ctx, "exec", n.name, "mkdir", "-p", dest).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", n.name, err, out)
		}
		for _, bin := range []string{"kubeadm", "kubelet", "kubectl"} {
			if out, err := k.docker(ctx, "cp", filepath.Join(r.dir, bin), n.name+":"+dest+"/"+bin).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: copying %s: %w: %s", n.name, bin, err, out)
			}
		}
	}
	for i, n := range nodes {
		if err := k.nodeExec(ctx, n.name, "ln", "-sf", dest+"/kubeadm", "/usr/bin/kubeadm"); err != nil {
			return err
		}
		if err := k.writeNodeFile(ctx, n.name, "/kind/upgrade.yaml", []byte(upgradeConfiguration(r.version))); err != nil {
			return err
		}
		if n.role == "control-plane" && controlPlanes > 1 {
			if err := k.drainAPIServer(ctx, n.name); err != nil {
				return err
			}
		}
		if i == 0 {
			k.c.Logf("%s: kubeadm upgrade apply %s", n.name, r.version)
			if err := k.nodeExecLogged(ctx, n.name, "kubeadm", "upgrade", "apply", "--config", "/kind/upgrade.yaml"); err != nil {
				return err
			}
		} else {
			k.c.Logf("%s: kubeadm upgrade node", n.name)
			if err := k.nodeExecLogged(ctx, n.name, "kubeadm", "upgrade", "node", "--config", "/kind/upgrade.yaml"); err != nil {
				return err
			}
		}
		if n.role == "control-plane" {
			for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				image := "registry.k8s.io/" + component + ":" + r.imageTag()
				if err := waitMirrorPod(ctx, client, component+"-"+n.name, 5*time.Minute, func(pod *corev1.Pod) string {
					if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Image != image {
						return "the mirror pod runs " + pod.Spec.Containers[0].Image
					}
					return ""
				}); err != nil {
					return fmt.Errorf("%s: %s did not run %s: %w", n.name, component, image, err)
				}
			}
		}
	}
	for _, n := range nodes {
		if err := k.upgradeKubelet(ctx, client, n.name, dest, r.version); err != nil {
			return err
		}
	}
	return nil
}

// apiServerDrainTime is how long a control plane's kube-apiserver has to end
// its requests and connections before kubeadm runs on its node: the 20
// seconds of kubeadm's upgrade guide.
const apiServerDrainTime = 20 * time.Second

// stopProcessScript sends SIGTERM to every process of the node named $1 (its
// command name, as /proc/PID/comm holds it) and fails when there is none; the
// node sees its containers' processes, and pkill is not in every node image.
const stopProcessScript = `found=
for p in /proc/[0-9]*; do
  [ "$(cat "$p/comm" 2>/dev/null)" = "$1" ] || continue
  kill -TERM "${p#/proc/}" && found=1
done
[ -n "$found" ] || { echo "no process $1 to stop" >&2; exit 1; }`

// drainAPIServer follows kubeadm's upgrade guide ("Considerations when
// upgrading etcd", kubernetes/website#45095, from kubernetes/kubeadm#2991)
// on a control plane of a cluster with several: its kube-apiserver is stopped
// gracefully 20 seconds before kubeadm runs on the node, so that the clients
// it holds (the kubelets, through kind's load balancer) move to the other
// control planes. kubeadm restarts the node's etcd whenever its manifest
// changes (a new image, or the certificates it renews on every upgrade), and a
// kubeadm kube-apiserver talks to its own node's etcd only: its clients would
// otherwise wait on it for as long as etcd restarts. The kubelet starts it
// again at once; the connections that moved stay where they are. In the
// lane's run of 2026-12-07 without it, the second control plane's etcd was
// down 47 s, both workers' node leases expired and the Service's endpoints
// went with them.
func (k *Kind) drainAPIServer(ctx context.Context, node string) error {
	k.c.Logf("%s: kube-apiserver stopped (SIGTERM) %v before kubeadm, which restarts etcd", node, apiServerDrainTime)
	if err := k.nodeExec(ctx, node, "sh", "-c", stopProcessScript, "sh", "kube-apiserver"); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(apiServerDrainTime):
	}
	return nil
}

// upgradeConfiguration is kubeadm's UpgradeConfiguration of an upgrade to
// version, for kubeadm upgrade apply and node: a release of this project is a
// pre-release in semver's terms (v1.37.2-carry.N), which kubeadm takes only as an
// experimental upgrade, and no one is there to confirm it. The system
// verification is the one preflight check ignored: it fails on a cgroup v1 host
// even with the kubelet's failCgroupV1 off, and kind's own init and join skip
// every preflight check (skipPhases: preflight).
func upgradeConfiguration(version string) string {
	return `apiVersion: kubeadm.k8s.io/v1beta4
kind: UpgradeConfiguration
apply:
  kubernetesVersion: ` + version + `
  allowExperimentalUpgrades: true
  forceUpgrade: true
  ignorePreflightErrors:
  - SystemVerification
node:
  ignorePreflightErrors:
  - SystemVerification
`
}

// upgradeKubelet drains the node, links the release's kubelet and kubectl in,
// restarts the kubelet, waits until the node reports the release and Ready, and
// uncordons it.
func (k *Kind) upgradeKubelet(ctx context.Context, client kubernetes.Interface, node, dest, version string) error {
	k.c.Logf("%s: drain, kubelet %s, uncordon", node, version)
	if err := k.kubectlRetried(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m"); err != nil {
		return err
	}
	for _, bin := range []string{"kubelet", "kubectl"} {
		if err := k.nodeExec(ctx, node, "ln", "-sf", dest+"/"+bin, "/usr/bin/"+bin); err != nil {
			return err
		}
	}
	if err := k.nodeExec(ctx, node, "systemctl", "restart", "kubelet"); err != nil {
		return err
	}
	// The node reports the version built into the kubelet, which says -dirty
	// when its tree had edits and the tarball's version file does not.
	out, err := k.docker(ctx, "exec", node, dest+"/kubelet", "--version").Output()
	if err != nil {
		return fmt.Errorf("%s: %s/kubelet --version: %w", node, dest, err)
	}
	if v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "Kubernetes "); ok {
		version = v
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if got := n.Status.NodeInfo.KubeletVersion; got != version {
			last = "the kubelet reports " + got
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		last = "not Ready"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s: the kubelet did not come back at %s within 3m (%s): %w", node, version, last, err)
	}
	return k.kubectlRetried(ctx, "uncordon", node)
}

// kubectlRetried runs kubectl up to five times, 5 s apart, until it succeeds:
// a control plane's static pods start again when its kubelet is upgraded (the
// new kubelet's defaults change their hash), and the load balancer may send a
// request to a kube-apiserver that is going or not yet authorizing (measured: an
// unexpected EOF, and a Forbidden for the cluster's administrator). kubectl drain
// and uncordon may be repeated.
func (k *Kind) kubectlRetried(ctx context.Context, args ...string) error {
	var err error
	for range 5 {
		if err = k.kubectl(ctx, args...); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Second):
		}
	}
	return err
}

// waitMirrorPod waits until the mirror pod is Ready and unmet, which says what
// it lacks, returns "".
func waitMirrorPod(ctx context.Context, client kubernetes.Interface, name string, timeout time.Duration, unmet func(*corev1.Pod) string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error() // the API restarts with kube-apiserver
			return false, nil
		case unmet(pod) != "":
			last = unmet(pod)
			return false, nil
		case !podReady(pod):
			last = "not Ready"
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s within %v (%s): %w", name, timeout, last, err)
	}
	return nil
}

// nodeExec runs a command in a node; nodeExecLogged with its output in the log.
func (k *Kind) nodeExec(ctx context.Context, node string, args ...string) error {
	if out, err := k.docker(ctx, append([]string{"exec", node}, args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %s: %w: %s", node, strings.Join(args, " "), err, out)
	}
	return nil
}

func (k *Kind) nodeExecLogged(ctx context.Context, node string, args ...string) error {
	cmd := k.docker(ctx, append([]string{"exec", node}, args...)...)
	cmd.Stdout, cmd.Stderr = k.c.Log, k.c.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %s: %w", node, strings.Join(args, " "), err)
	}
	return nil
}
