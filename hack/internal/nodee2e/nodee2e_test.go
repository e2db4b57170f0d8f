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

package nodee2e

import (
	"net"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
)

// TestNodeE2EKeepsApartFromTheCluster: make node-e2e's containerd, pod network
// and registries are not the local cluster's, so that nothing of one is mistaken
// for the other's (both may have been run on the machine).
func TestNodeE2EKeepsApartFromTheCluster(t *testing.T) {
	e := NewNodeE2E("/srv/repo", nil)
	c := cluster.New("/srv/repo", nil)
	cfg := cluster.ContainerdConfigWith(e.n, NodeE2ERegistryAddr, NodeE2EUniqueRegistryAddr)
	for _, line := range strings.Split(cfg, "\n") {
		if strings.Contains(line, `"/`) && !strings.Contains(line, "/srv/repo/_output/node-e2e/") && !strings.Contains(line, "/usr/lib/cni") {
			t.Errorf("containerd config writes outside _output/node-e2e: %s", line)
		}
	}
	for _, want := range []string{`sandbox_image = "127.0.0.1:5002/pause:`, `endpoint = ["http://127.0.0.1:5003"]`, "restrict_oom_score_adj = true", "SystemdCgroup = false"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s", want)
		}
	}
	if strings.Contains(cfg, cluster.RegistryAddr) || strings.Contains(cfg, cluster.SlowRegistryAddr) {
		t.Errorf("containerd config uses the local cluster's registries:\n%s", cfg)
	}
	for _, n := range c.AllNodes() {
		if n.Bridge == e.n.Bridge || n.Subnet == e.n.Subnet || n.ContainerdSocket() == e.ContainerdSocket() {
			t.Errorf("node e2e shares the bridge, subnet or socket of node %s", n.Name)
		}
	}
	var list map[string]string
	if err := yaml.Unmarshal([]byte(cluster.RepoList(NodeE2ERegistryAddr)), &list); err != nil {
		t.Fatal(err)
	}
	if list["gcRegistry"] != NodeE2ERegistryAddr {
		t.Errorf("repo list: %v", list)
	}
}

// TestNodeE2EKubeletConfig: the suite's base kubelet config runs on cgroup v1
// and a mostly full disk.
func TestNodeE2EKubeletConfig(t *testing.T) {
	var kc map[string]any
	if err := yaml.Unmarshal([]byte(nodeE2EKubeletConfig), &kc); err != nil {
		t.Fatal(err)
	}
	if kc["failCgroupV1"] != false || kc["cgroupDriver"] != "cgroupfs" || kc["imageGCHighThresholdPercent"] != float64(100) {
		t.Errorf("kubelet config: %v", kc)
	}
	for k, v := range kc["evictionHard"].(map[string]any) {
		if strings.HasSuffix(v.(string), "%") && k != "nodefs.inodesFree" {
			t.Errorf("evictionHard %s: %v is relative to the disk's size", k, v)
		}
	}
}

// TestNodeE2EPreflightRefusesBusyPorts: with the local cluster's apiserver port
// taken, make node-e2e says what to do.
func TestNodeE2EPreflightRefusesBusyPorts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("preflight refuses non-root first")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	saved := nodeE2EPorts
	t.Cleanup(func() { nodeE2EPorts = saved })
	nodeE2EPorts = []string{l.Addr().String()}
	err = NewNodeE2E(t.TempDir(), nil).Preflight()
	if err == nil || !strings.Contains(err.Error(), "run make cluster-down first") {
		t.Errorf("preflight with a busy port: %v", err)
	}
}
