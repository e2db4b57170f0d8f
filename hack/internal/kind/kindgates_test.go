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
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func TestParseGatesRefusesWhatFeatureGatesRefuses(t *testing.T) {
	got, err := ParseGates("BalloonPod=false, FeatureLifecycle=true")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"BalloonPod": false, "FeatureLifecycle": true}; !maps.Equal(got, want) {
		t.Errorf("ParseGates = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "BalloonPod", "BalloonPod=", "=true", "BalloonPod=yes", "A=true,"} {
		if _, err := ParseGates(bad); err == nil {
			t.Errorf("ParseGates(%q) accepted", bad)
		}
	}
}

func TestMergeGatesKeepsTheOthersSorted(t *testing.T) {
	got, err := mergeGates("KubeletImagePullGate=true,BalloonPod=true", map[string]bool{"BalloonPod": false, "AllAlpha": false}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "AllAlpha=false,BalloonPod=false,KubeletImagePullGate=true"; got != want {
		t.Errorf("mergeGates = %q, want %q", got, want)
	}
	if _, err := mergeGates("BalloonPod", map[string]bool{"A": true}, nil); err == nil {
		t.Error("a flag that is not Name=bool was merged")
	}
}

// A ClusterConfiguration as kind writes it for kubeadm v1beta4.
const clusterConfiguration = `apiServer:
  certSANs:
  - localhost
  extraArgs:
  - name: feature-gates
    value: BalloonPod=true,FeatureLifecycle=true
  - name: runtime-config
    value: features.k8s.io/v1alpha1=true
apiVersion: kubeadm.k8s.io/v1beta4
clusterName: kube-carry
controlPlaneEndpoint: kube-carry-external-load-balancer:6443
controllerManager:
  extraArgs:
  - name: feature-gates
    value: BalloonPod=true,FeatureLifecycle=true
kind: ClusterConfiguration
kubernetesVersion: v1.37.2
`

func TestEditClusterConfigurationChangesOnlyTheGates(t *testing.T) {
	out, err := editClusterConfiguration(clusterConfiguration, ClusterSettings{Gates: map[string]bool{"BalloonPod": false}})
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(clusterConfiguration), &want); err != nil {
		t.Fatal(err)
	}
	gates := map[string]any{"name": "feature-gates", "value": "BalloonPod=false,FeatureLifecycle=true"}
	want["apiServer"].(map[string]any)["extraArgs"].([]any)[0] = gates
	want["controllerManager"].(map[string]any)["extraArgs"].([]any)[0] = gates
	// The scheduler had no flag: it gets one with the gate alone.
	want["scheduler"] = map[string]any{"extraArgs": []any{map[string]any{"name": "feature-gates", "value": "BalloonPod=false"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterConfiguration = %v, want %v", got, want)
	}

	old := strings.Replace(clusterConfiguration, "v1beta4", "v1beta3", 1)
	if _, err := editClusterConfiguration(old, ClusterSettings{Gates: map[string]bool{"BalloonPod": false}}); err == nil || !strings.Contains(err.Error(), "v1beta3") {
		t.Errorf("a v1beta3 ClusterConfiguration (extraArgs a map) was changed, err = %v", err)
	}
}

func TestEditKubeletConfigurationGatesChangesOnlyTheGates(t *testing.T) {
	in := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\nfeatureGates:\n  BalloonPod: true\n  KubeletImagePullGate: true\n"
	out, err := editKubeletConfigurationGates([]byte(in), map[string]bool{"BalloonPod": false}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: kubelet.config.k8s.io/v1beta1\nfailCgroupV1: false\nfeatureGates:\n  BalloonPod: false\n  KubeletImagePullGate: true\nkind: KubeletConfiguration\n"
	if string(out) != want {
		t.Errorf("KubeletConfiguration:\n%s\nwant:\n%s", out, want)
	}
	if _, err := editKubeletConfigurationGates([]byte("kind: ClusterConfiguration\n"), map[string]bool{"BalloonPod": false}, nil); err == nil {
		t.Error("a ClusterConfiguration was taken for a KubeletConfiguration")
	}
}

// The settings of a move to a release without the series: its gates dropped
// from every component (pristine refuses them, even off) and the Feature API's
// runtime-config with them; then back.
func TestEditClusterConfigurationDropsGatesAndTheRuntimeConfig(t *testing.T) {
	series := []string{"BalloonPod", "FeatureLifecycle"}
	out, err := editClusterConfiguration(clusterConfiguration, ClusterSettings{DropGates: series, RuntimeConfig: ptr.To("")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "feature-gates") || strings.Contains(out, "runtime-config") || strings.Contains(out, "BalloonPod") {
		t.Errorf("the series' gates or the runtime-config remain:\n%s", out)
	}
	if !strings.Contains(out, "certSANs") || !strings.Contains(out, "kubernetesVersion: v1.37.2") {
		t.Errorf("other fields were lost:\n%s", out)
	}
	back, err := editClusterConfiguration(out, ClusterSettings{Gates: map[string]bool{"BalloonPod": true, "FeatureLifecycle": true}, RuntimeConfig: ptr.To("features.k8s.io/v1alpha1=true")})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(back), &cfg); err != nil {
		t.Fatal(err)
	}
	args, _ := cfg["apiServer"].(map[string]any)["extraArgs"].([]any)
	if gates, _ := extraArg(args, "feature-gates"); gates != "BalloonPod=true,FeatureLifecycle=true" {
		t.Errorf("apiServer feature-gates %q after the way back", gates)
	}
	if runtime, _ := extraArg(args, "runtime-config"); runtime != "features.k8s.io/v1alpha1=true" {
		t.Errorf("apiServer runtime-config %q after the way back", runtime)
	}

	kubelet, err := editKubeletConfigurationGates([]byte("kind: KubeletConfiguration\nfeatureGates:\n  BalloonPod: false\n"), nil, series)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kind: KubeletConfiguration\n"; string(kubelet) != want {
		t.Errorf("KubeletConfiguration with the gates dropped:\n%s\nwant:\n%s", kubelet, want)
	}
}

func TestSetManifestGatesSetsTheFlag(t *testing.T) {
	manifest := `apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --feature-gates=BalloonPod=true,FeatureLifecycle=true
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:v1.37.2
    name: kube-scheduler
`
	_, pod, err := setManifestGates([]byte(manifest), map[string]bool{"BalloonPod": false})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kube-scheduler", "--feature-gates=BalloonPod=false,FeatureLifecycle=true", "--leader-elect=true"}
	if got := pod.Spec.Containers[0].Command; !slices.Equal(got, want) {
		t.Errorf("command = %q, want %q", got, want)
	}

	without := strings.Replace(manifest, "    - --feature-gates=BalloonPod=true,FeatureLifecycle=true\n", "", 1)
	_, pod, err = setManifestGates([]byte(without), map[string]bool{"BalloonPod": false})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"kube-scheduler", "--leader-elect=true", "--feature-gates=BalloonPod=false"}
	if got := pod.Spec.Containers[0].Command; !slices.Equal(got, want) {
		t.Errorf("command of a manifest without the flag = %q, want %q", got, want)
	}

	if _, _, err := setManifestGates([]byte(manifest+"    unknownField: 1\n"), map[string]bool{"BalloonPod": false}); err == nil {
		t.Error("a manifest with a field the Pod does not have was rewritten without it")
	}
}

// A gate kube-apiserver does not know is refused before anything changes.
func TestUnknownGatesAreTheOnesTheMetricsDoNotList(t *testing.T) {
	metrics := `# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="BalloonPod",stage="ALPHA"} 1
kubernetes_feature_enabled{name="FeatureLifecycle",stage="ALPHA"} 1
apiserver_request_total{name="Typo"} 3
`
	got := unknownGates(metrics, map[string]bool{"BalloonPod": false, "Typo": true, "AlsoUnknown": false})
	if want := []string{"AlsoUnknown", "Typo"}; !slices.Equal(got, want) {
		t.Errorf("unknownGates = %v, want %v", got, want)
	}
}

// The series' settings, as the upgrade lane carries them into a release: the
// same in every kind config of build/kind, each valid to kind's own types.
func TestSeriesSettingsOfTheKindConfigs(t *testing.T) {
	var first ClusterSettings
	for i, name := range []string{"cluster.yaml", "cluster-ha.yaml", "cluster-kindnetd.yaml"} {
		s, err := SeriesSettings(filepath.Join("..", "..", "..", "build", "kind", name))
		if err != nil {
			t.Fatal(err)
		}
		if !s.Gates["FeatureLifecycle"] || s.RuntimeConfig == nil || *s.RuntimeConfig != "features.k8s.io/v1alpha1=true" {
			t.Errorf("%s: gates %v, runtime-config %v", name, s.Gates, s.RuntimeConfig)
		}
		if i == 0 {
			first = s
		} else if !maps.Equal(s.Gates, first.Gates) || *s.RuntimeConfig != *first.RuntimeConfig {
			t.Errorf("%s: settings %v differ from cluster.yaml's %v", name, s, first)
		}
	}
	removed := first.Removed()
	if len(removed.Gates) != 0 || !slices.Equal(removed.DropGates, []string{"BalloonPod", "FeatureLifecycle", "KubeletImagePullGate"}) || removed.RuntimeConfig == nil || *removed.RuntimeConfig != "" {
		t.Errorf("Removed() = %+v", removed)
	}
}

// A wait that ends says what holds each Feature: its Transitioning condition.
func TestTransitioningMessage(t *testing.T) {
	feature := func(status string) map[string]any {
		return map[string]any{"status": map[string]any{"conditions": []any{
			map[string]any{"type": "ConfigurationAgreed", "status": "True", "message": ""},
			map[string]any{"type": "Transitioning", "status": status, "message": "WaitForUses: reporting true: kubelet (worker)"},
		}}}
	}
	if got := transitioningMessage(feature("True")); got != "WaitForUses: reporting true: kubelet (worker)" {
		t.Errorf("in a transition: %q", got)
	}
	if got := transitioningMessage(feature("False")); got != "" {
		t.Errorf("after it: %q", got)
	}
	if got := transitioningMessage(map[string]any{}); got != "" {
		t.Errorf("no status: %q", got)
	}
}
