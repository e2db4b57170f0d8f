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
	"fmt"
	"strings"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

func RegistryConfig(storage, addr string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, storage, addr)
}

func containerdConfig(n Node) string { return ContainerdConfigWith(n, RegistryAddr, SlowRegistryAddr) }

// ContainerdConfigWith is a node's containerd configuration with its sandbox image
// from registry, which it reaches over plain HTTP, as it does slow.
func ContainerdConfigWith(n Node, registry, slow string) string {
	// The second node's runc keeps its state apart from the first's (runc's
	// default root is per namespace, and both containerds use k8s.io).
	runcRoot := ""
	if n.suffix != "" {
		runcRoot = fmt.Sprintf("\n        Root = %q", n.path("containerd", "runc"))
	}
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # Sandboxed machines (gVisor) refuse to lower oom_score_adj, even for root: keep
  # containers at or above containerd's own score instead of failing to start them.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false%[9]s
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."%[7]s"]
    endpoint = ["http://%[7]s"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."%[8]s"]
    endpoint = ["http://%[8]s"]
`, n.path("containerd", "root"), n.path("containerd", "state"), n.ContainerdSocket(),
		n.path("containerd", "opt"), images.Names{Registry: registry}.Pause(),
		n.path("cni", "net.d"), registry, slow, runcRoot)
}

// CNIConfig is a bridge of the node's own with host-local addresses; no
// masquerading, so the cluster leaves no firewall rules behind.
func CNIConfig(n Node) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kube-carry%s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "dataDir": %q
      }
    }
  ]
}
`, n.suffix, n.Bridge, n.Subnet, n.path("cni", "ipam"))
}

func kubeletConfig(c *Cluster, n Node) string {
	var gates strings.Builder
	for _, g := range c.gates {
		name, value, _ := strings.Cut(g, "=")
		fmt.Fprintf(&gates, "  %s: %s\n", name, value)
	}
	if gates.Len() == 0 {
		gates.WriteString("  {}\n")
	}
	// The second node: its pods' cgroups and logs apart from the first's (a
	// kubelet removes the pod cgroups and log folders of pods it does not know).
	var own strings.Builder
	if n.cgroupRoot != "" {
		fmt.Fprintf(&own, "cgroupRoot: %s\n", n.cgroupRoot)
	}
	if n.suffix != "" {
		fmt.Fprintf(&own, "podLogsDirectory: %s\n", n.path("pod-logs"))
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
%scgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%%
  imagefs.available: 2%%
imageGCHighThresholdPercent: 98
imageGCLowThresholdPercent: 96
serializeImagePulls: false
maxParallelImagePulls: 3
featureGates:
%s`, n.Port, n.HealthzPort, own.String(),
		n.ContainerdSocket(), c.Path("pki", "kubelet"+n.suffix+"-serving.crt"), c.Path("pki", "kubelet"+n.suffix+"-serving.key"),
		c.Path("pki", "ca.crt"), gates.String())
}

// RepoList is the e2e framework's image repository list (KUBE_TEST_REPO_LIST) that
// points every registry the smoke subset uses at the local one.
func RepoList(registry string) string {
	return fmt.Sprintf(`gcRegistry: %[1]s
gcEtcdRegistry: %[1]s
promoterE2eRegistry: %[1]s/e2e-test-images
buildImageRegistry: %[1]s/build-image
sigStorageRegistry: %[1]s/sig-storage
dockerLibraryRegistry: %[1]s/library
cloudProviderGcpRegistry: %[1]s/cloud-provider-gcp
privateRegistry: %[1]s/k8s-authenticated-test
invalidRegistry: invalid.registry.k8s.io/invalid
`, registry)
}
