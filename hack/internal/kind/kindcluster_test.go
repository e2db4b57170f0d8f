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
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// Without CAP_SYS_RESOURCE, kind gets a copy of each committed config that differs
// only by the containerd patch; with it, the committed config itself.
func TestKindConfigRestrictsOOMScoreAdjWithoutSysResource(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	for _, name := range []string{"cluster.yaml", "cluster-ha.yaml"} {
		config := filepath.Join(root, "build", "kind", name)
		k := NewKind(t.TempDir(), io.Discard)
		if err := os.MkdirAll(k.c.Dir, 0o755); err != nil {
			t.Fatal(err)
		}

		got, err := k.kindConfig(config, []string{"CAP_BPF"})
		if err != nil || got != config {
			t.Errorf("%s with CAP_SYS_RESOURCE: got %q, %v; want the committed config", name, got, err)
		}

		got, err = k.kindConfig(config, []string{"CAP_SYS_RESOURCE"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got == config || filepath.Dir(got) != k.c.Dir {
			t.Fatalf("%s: derived config %q, want a copy in %s", name, got, k.c.Dir)
		}
		want, derived := readKindConfig(t, config), readKindConfig(t, got)
		want.ContainerdConfigPatches = append(want.ContainerdConfigPatches, restrictOOMScoreAdj)
		if !reflect.DeepEqual(derived, want) {
			t.Errorf("%s: derived config\n%+v\nwant\n%+v", name, derived, want)
		}
	}
}

// The pristine side's cluster is the same but for the series' gates and APIs, which
// upstream's components would refuse; its config lives in the pristine folder.
func TestKindConfigOfPristineDropsTheSeriesGatesAndAPIs(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	for _, name := range []string{"cluster.yaml", "cluster-ha.yaml"} {
		config := filepath.Join(root, "build", "kind", name)
		k := NewPristineKind(t.TempDir(), io.Discard)
		for _, missing := range [][]string{nil, {"CAP_SYS_RESOURCE"}} {
			got, err := k.kindConfig(config, missing)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if filepath.Dir(got) != filepath.Join(k.c.Dir, "pristine") {
				t.Fatalf("%s: derived config %q, want a copy in %s/pristine", name, got, k.c.Dir)
			}
			want, derived := readKindConfig(t, config), readKindConfig(t, got)
			if len(want.FeatureGates) == 0 || len(want.RuntimeConfig) == 0 {
				t.Fatalf("%s: the committed config has no gates or APIs to drop", name)
			}
			want.FeatureGates, want.RuntimeConfig = nil, nil
			if missing != nil {
				want.ContainerdConfigPatches = append(want.ContainerdConfigPatches, restrictOOMScoreAdj)
			}
			if !reflect.DeepEqual(derived, want) {
				t.Errorf("%s, missing %v: derived config\n%+v\nwant\n%+v", name, missing, derived, want)
			}
		}
		if k.KindClusterName() != PristineKindClusterName || filepath.Dir(k.KindKubeconfig()) != filepath.Join(k.c.Dir, "pristine") {
			t.Errorf("pristine cluster %s with kubeconfig %s, want %s in %s/pristine", k.KindClusterName(), k.KindKubeconfig(), PristineKindClusterName, k.c.Dir)
		}
	}
}

// WORKERS=2 adds workers to the committed topology, as kind's CI runs Conformance.
func TestKindConfigAddsWorkers(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	config := filepath.Join(filepath.Dir(file), "..", "..", "..", "build", "kind", "cluster.yaml")
	k := NewKind(t.TempDir(), io.Discard)
	if err := os.MkdirAll(k.c.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k.KindWorkers = 2
	got, err := k.kindConfig(config, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := readKindConfig(t, config)
	want.Nodes = append(want.Nodes, kindv1alpha4.Node{Role: kindv1alpha4.WorkerRole})
	if derived := readKindConfig(t, got); !reflect.DeepEqual(derived, want) {
		t.Errorf("derived config\n%+v\nwant\n%+v", derived, want)
	}
}

func TestKindConfigRejectsUnknownFields(t *testing.T) {
	config := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(config, []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodez: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k := NewKind(t.TempDir(), io.Discard)
	if _, err := k.kindConfig(config, []string{"CAP_SYS_RESOURCE"}); err == nil {
		t.Error("a config with an unknown field was accepted")
	}
}

func readKindConfig(t *testing.T, path string) kindv1alpha4.Cluster {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// The pod network's DaemonSet runs the image make kind-up loads, never pulled.
func TestPodNetworkManifestRunsTheLoadedImage(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	manifest := filepath.Join(filepath.Dir(file), "..", "..", "..", "build", "kind", "pod-network.yaml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var containers int
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Kind != "DaemonSet" {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			containers++
			if c.Image != images.PodNetwork || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("container %s runs %s (%s), want %s never pulled", c.Name, c.Image, c.ImagePullPolicy, images.PodNetwork)
			}
		}
	}
	if containers == 0 {
		t.Error("no DaemonSet container in the manifest")
	}
}

// An existing cluster serves a run only when every node runs the node image being
// tested and the nodes are the ones the config asks for.
func TestStaleKindClusterIsCreatedAgain(t *testing.T) {
	ha := []kindv1alpha4.Node{{Role: kindv1alpha4.ControlPlaneRole}, {Role: kindv1alpha4.ControlPlaneRole}, {Role: kindv1alpha4.ControlPlaneRole}, {Role: kindv1alpha4.WorkerRole}}
	single := []kindv1alpha4.Node{{Role: kindv1alpha4.ControlPlaneRole}, {Role: kindv1alpha4.WorkerRole}}
	nodes := []kindNode{
		{name: "kube-carry-control-plane", role: "control-plane", imageID: "sha256:new"},
		{name: "kube-carry-worker", role: "worker", imageID: "sha256:new"},
	}
	haNodes := append([]kindNode{
		{name: "kube-carry-control-plane2", role: "control-plane", imageID: "sha256:new"},
		{name: "kube-carry-control-plane3", role: "control-plane", imageID: "sha256:new"},
		{name: "kube-carry-external-load-balancer", role: "external-load-balancer", imageID: "sha256:haproxy"},
	}, nodes...)
	oldWorker := []kindNode{nodes[0], {name: "kube-carry-worker", role: "worker", imageID: "sha256:0123456789abcdef"}}
	for _, tc := range []struct {
		name  string
		nodes []kindNode
		want  []kindv1alpha4.Node
		stale string
	}{
		{"same image and nodes", nodes, single, ""},
		{"HA with its load balancer", haNodes, ha, ""},
		{"a node of an older image", oldWorker, single, "node kube-carry-worker runs image 0123456789ab, not the node image being tested (new)"},
		{"one control plane where three are asked for", nodes, ha, "its nodes are 1 control planes and 1 workers where the config asks for 3 control planes and 1 workers"},
		{"a worker short", nodes, append(single, kindv1alpha4.Node{Role: kindv1alpha4.WorkerRole}), "its nodes are 1 control planes and 1 workers where the config asks for 1 control planes and 2 workers"},
	} {
		if got := staleness(tc.nodes, "sha256:new", tc.want); got != tc.stale {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.stale)
		}
	}
}

// A release side has a cluster and a folder of its own, and kind-down finds it.
func TestReleaseSideHasItsOwnClusterAndFolder(t *testing.T) {
	root := t.TempDir()
	k := NewReleaseKind(root, "v1.36.3", nil)
	if got, want := k.KindClusterName(), "kube-carry-v1-36-3"; got != want {
		t.Errorf("cluster name = %q, want %q", got, want)
	}
	if got, want := k.KindKubeconfig(), root+"/_output/kind/releases/v1.36.3/kubeconfig"; got != want {
		t.Errorf("kubeconfig = %q, want %q", got, want)
	}
	if !k.Pristine {
		t.Error("a release side is upstream's: its cluster must be made without the series' gates")
	}
	if err := os.MkdirAll(filepath.Dir(k.KindKubeconfig()), 0o755); err != nil {
		t.Fatal(err)
	}
	kinds, err := SideKinds(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range kinds {
		names = append(names, k.KindClusterName())
	}
	if want := []string{"kube-carry-pristine", "kube-carry-v1-36-3", "kube-carry"}; !slices.Equal(names, want) {
		t.Errorf("SideKinds = %v, want %v", names, want)
	}
}
