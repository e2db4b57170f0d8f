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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// controlPlaneComponents are the static pods of a kubeadm control plane whose
// flags carry the feature gates, by their ClusterConfiguration field.
var controlPlaneComponents = map[string]string{
	"kube-apiserver":          "apiServer",
	"kube-controller-manager": "controllerManager",
	"kube-scheduler":          "scheduler",
}

// ParseGates parses "Name=bool,..." as --feature-gates does; it refuses an empty
// list, a gate without a value and a value that is not a bool.
func ParseGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: a gate is Name=true or Name=false", kv)
		}
		on, err := strconv.ParseBool(value)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		gates[name] = on
	}
	return gates, nil
}

// mergeGates returns the --feature-gates value of flag with gates set in it
// and the gates of drop removed, sorted by name as kubeadm writes it.
func mergeGates(flag string, gates map[string]bool, drop []string) (string, error) {
	merged := map[string]bool{}
	if flag != "" {
		old, err := ParseGates(flag)
		if err != nil {
			return "", err
		}
		maps.Copy(merged, old)
	}
	maps.Copy(merged, gates)
	for _, name := range drop {
		delete(merged, name)
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(merged)) {
		parts = append(parts, fmt.Sprintf("%s=%t", name, merged[name]))
	}
	return strings.Join(parts, ","), nil
}

// ClusterSettings are changes to a kubeadm cluster's configuration: feature
// gates set in every component, gates dropped from every component (a release
// refuses a gate it does not know, even one set false), and kube-apiserver's
// --runtime-config (nil leaves it, "" drops the flag).
type ClusterSettings struct {
	Gates         map[string]bool
	DropGates     []string
	RuntimeConfig *string
}

// SeriesSettings returns the settings the series' kind configuration (the
// file at config, build/kind/cluster.yaml) gives the cluster it creates: its
// featureGates and runtimeConfig, as kind passes them to kubeadm.
func SeriesSettings(config string) (ClusterSettings, error) {
	data, err := os.ReadFile(config)
	if err != nil {
		return ClusterSettings{}, err
	}
	var cluster kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &cluster); err != nil {
		return ClusterSettings{}, fmt.Errorf("%s: %w", config, err)
	}
	var apis []string
	for _, api := range slices.Sorted(maps.Keys(cluster.RuntimeConfig)) {
		apis = append(apis, api+"="+cluster.RuntimeConfig[api])
	}
	return ClusterSettings{Gates: cluster.FeatureGates, RuntimeConfig: ptr.To(strings.Join(apis, ","))}, nil
}

// Removed returns the settings that take these out of a cluster: their gates
// dropped and the runtime-config they set removed.
func (s ClusterSettings) Removed() ClusterSettings {
	removed := ClusterSettings{DropGates: slices.Sorted(maps.Keys(s.Gates))}
	if s.RuntimeConfig != nil {
		removed.RuntimeConfig = ptr.To("")
	}
	return removed
}

// editClusterConfiguration applies the settings to the extraArgs of the
// control plane's components in a kubeadm ClusterConfiguration (v1beta4:
// extraArgs is a list of name and value), keeping every other field as it is.
func editClusterConfiguration(data string, s ClusterSettings) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		return "", fmt.Errorf("ClusterConfiguration: %w", err)
	}
	if v := cfg["apiVersion"]; v != "kubeadm.k8s.io/v1beta4" {
		return "", fmt.Errorf("ClusterConfiguration of apiVersion %v: only kubeadm.k8s.io/v1beta4 is known here", v)
	}
	for _, field := range slices.Sorted(maps.Values(controlPlaneComponents)) {
		component, _ := cfg[field].(map[string]any)
		if component == nil {
			component = map[string]any{}
			cfg[field] = component
		}
		args, _ := component["extraArgs"].([]any)
		old, _ := extraArg(args, "feature-gates")
		value, err := mergeGates(old, s.Gates, s.DropGates)
		if err != nil {
			return "", fmt.Errorf("%s feature-gates: %w", field, err)
		}
		args = setExtraArg(args, "feature-gates", value)
		if field == "apiServer" && s.RuntimeConfig != nil {
			args = setExtraArg(args, "runtime-config", *s.RuntimeConfig)
		}
		if len(args) == 0 {
			delete(component, "extraArgs")
		} else {
			component["extraArgs"] = args
		}
	}
	out, err := yaml.Marshal(cfg)
	return string(out), err
}

// extraArg returns the value of the named argument of a v1beta4 extraArgs list.
func extraArg(args []any, name string) (string, bool) {
	for _, a := range args {
		if arg, _ := a.(map[string]any); arg["name"] == name {
			value, _ := arg["value"].(string)
			return value, true
		}
	}
	return "", false
}

// setExtraArg sets the named argument of a v1beta4 extraArgs list, or removes
// it when value is empty.
func setExtraArg(args []any, name, value string) []any {
	i := slices.IndexFunc(args, func(a any) bool {
		arg, _ := a.(map[string]any)
		return arg["name"] == name
	})
	switch {
	case value == "" && i >= 0:
		return slices.Delete(args, i, i+1)
	case value == "":
		return args
	case i >= 0:
		args[i].(map[string]any)["value"] = value
		return args
	}
	return append(args, map[string]any{"name": name, "value": value})
}

// editKubeletConfigurationGates sets the gates in a KubeletConfiguration and
// removes those of drop, keeping every other field as it is.
func editKubeletConfigurationGates(data []byte, gates map[string]bool, drop []string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("KubeletConfiguration: %w", err)
	}
	if cfg["kind"] != "KubeletConfiguration" {
		return nil, fmt.Errorf("a %v, not a KubeletConfiguration", cfg["kind"])
	}
	featureGates, _ := cfg["featureGates"].(map[string]any)
	if featureGates == nil {
		featureGates = map[string]any{}
	}
	for name, on := range gates {
		featureGates[name] = on
	}
	for _, name := range drop {
		delete(featureGates, name)
	}
	if len(featureGates) == 0 {
		delete(cfg, "featureGates")
	} else {
		cfg["featureGates"] = featureGates
	}
	return yaml.Marshal(cfg)
}

// editClusterSettings applies the settings to the cluster's configuration,
// the ClusterConfiguration in kubeadm-config and the KubeletConfiguration in
// kubelet-config, which kubeadm init, join and upgrade read.
func (k *Kind) editClusterSettings(ctx context.Context, client kubernetes.Interface, s ClusterSettings) error {
	if err := k.updateConfigMap(ctx, client, "kubeadm-config", "ClusterConfiguration", func(data string) (string, error) {
		return editClusterConfiguration(data, s)
	}); err != nil {
		return err
	}
	return k.updateConfigMap(ctx, client, "kubelet-config", "kubelet", func(data string) (string, error) {
		out, err := editKubeletConfigurationGates([]byte(data), s.Gates, s.DropGates)
		return string(out), err
	})
}

// setManifestGates sets the gates in the --feature-gates flag of a static pod
// manifest's only container, adding the flag if it has none.
func setManifestGates(data []byte, gates map[string]bool) ([]byte, *corev1.Pod, error) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		return nil, nil, fmt.Errorf("static pod manifest: %w", err)
	}
	if len(pod.Spec.Containers) != 1 {
		return nil, nil, fmt.Errorf("static pod %s has %d containers, want one", pod.Name, len(pod.Spec.Containers))
	}
	command := pod.Spec.Containers[0].Command
	i := slices.IndexFunc(command, func(arg string) bool { return strings.HasPrefix(arg, "--feature-gates=") })
	old := ""
	if i >= 0 {
		old = strings.TrimPrefix(command[i], "--feature-gates=")
	}
	value, err := mergeGates(old, gates, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("static pod %s: %w", pod.Name, err)
	}
	if i >= 0 {
		command[i] = "--feature-gates=" + value
	} else {
		pod.Spec.Containers[0].Command = append(command, "--feature-gates="+value)
	}
	out, err := yaml.Marshal(&pod)
	return out, &pod, err
}

// KindSetGates sets feature gates in every component of the kind cluster, as
// kubeadm's guide to reconfiguring a cluster does it
// (kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-reconfigure):
// the cluster's configuration first (the ClusterConfiguration in kubeadm-config,
// the KubeletConfiguration in kubelet-config), so that kubeadm upgrade keeps the
// gates; then node by node, the control planes first, the static pod
// manifests' --feature-gates and the kubelet's configuration file, waiting for
// each component to run with them before the next. Each control plane's
// components restart in turn, so the others serve meanwhile, as in a rolling
// upgrade.
func (k *Kind) KindSetGates(ctx context.Context, gates map[string]bool) error {
	client, err := k.KindClient()
	if err != nil {
		return err
	}
	// A component refuses a gate it does not know and stops: check them all
	// before changing anything.
	metrics, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading kube-apiserver's feature gates from /metrics: %w", err)
	}
	if unknown := unknownGates(string(metrics), gates); len(unknown) > 0 {
		return fmt.Errorf("kube-apiserver does not know the gates %s (kubernetes_feature_enabled in its /metrics): nothing was changed", strings.Join(unknown, ", "))
	}
	if err := k.editClusterSettings(ctx, client, ClusterSettings{Gates: gates}); err != nil {
		return err
	}
	nodes, err := k.kindNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.role == "control-plane" {
			for _, component := range slices.Sorted(maps.Keys(controlPlaneComponents)) {
				if err := k.setStaticPodGates(ctx, client, n.name, component, gates); err != nil {
					return err
				}
			}
		}
		if err := k.setKubeletGates(ctx, client, n.name, gates); err != nil {
			return err
		}
	}
	return nil
}

// unknownGates returns, sorted, the gates that the metrics text does not list
// in kubernetes_feature_enabled, the metric every component's feature gate
// exports for each gate it knows.
func unknownGates(metrics string, gates map[string]bool) []string {
	known := map[string]bool{}
	for line := range strings.Lines(metrics) {
		rest, ok := strings.CutPrefix(line, "kubernetes_feature_enabled{")
		if !ok {
			continue
		}
		if _, after, ok := strings.Cut(rest, `name="`); ok {
			name, _, _ := strings.Cut(after, `"`)
			known[name] = true
		}
	}
	var unknown []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// kindNodes returns the cluster's control planes, then its workers, each
// sorted by name.
func (k *Kind) kindNodes(ctx context.Context) ([]kindNode, error) {
	all, err := k.nodeContainers(ctx)
	if err != nil {
		return nil, err
	}
	nodes := slices.DeleteFunc(all, func(n kindNode) bool { return n.role != "control-plane" && n.role != "worker" })
	if len(nodes) == 0 {
		return nil, fmt.Errorf("the kind cluster %s has no node", k.KindClusterName())
	}
	slices.SortFunc(nodes, func(a, b kindNode) int {
		if a.role != b.role {
			return strings.Compare(a.role, b.role) // control-plane before worker
		}
		return strings.Compare(a.name, b.name)
	})
	return nodes, nil
}

func (k *Kind) updateConfigMap(ctx context.Context, client kubernetes.Interface, name, key string, update func(string) (string, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		data, ok := cm.Data[key]
		if !ok {
			return fmt.Errorf("ConfigMap kube-system/%s has no %s", name, key)
		}
		if cm.Data[key], err = update(data); err != nil {
			return fmt.Errorf("ConfigMap kube-system/%s: %w", name, err)
		}
		_, err = client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// readNodeFile and writeNodeFile read and replace a file in a node. The new
// content is written next to the file and renamed over it: the kubelet, which
// watches the manifests, never reads half a file.
func (k *Kind) readNodeFile(ctx context.Context, node, path string) ([]byte, error) {
	out, err := k.docker(ctx, "exec", node, "cat", path).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", node, path, err)
	}
	return out, nil
}

func (k *Kind) writeNodeFile(ctx context.Context, node, path string, data []byte) error {
	// A name the kubelet's manifest source skips (it ignores hidden files).
	dir, base := pathpkg.Split(path)
	tmp := dir + "." + base + ".new"
	cmd := k.docker(ctx, "exec", "-i", node, "sh", "-c", `cat > "$1" && mv "$1" "$2"`, "sh", tmp, path)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: writing %s: %w: %s", node, path, err, out)
	}
	return nil
}

// setStaticPodGates sets the gates in a control plane component's manifest and
// waits until its mirror pod runs the new command and is Ready.
func (k *Kind) setStaticPodGates(ctx context.Context, client kubernetes.Interface, node, component string, gates map[string]bool) error {
	path := "/etc/kubernetes/manifests/" + component + ".yaml"
	data, err := k.readNodeFile(ctx, node, path)
	if err != nil {
		return err
	}
	out, wantPod, err := setManifestGates(data, gates)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", node, path, err)
	}
	if !bytes.Equal(out, data) {
		k.c.Logf("%s: %s with --feature-gates set", node, component)
		if err := k.writeNodeFile(ctx, node, path, out); err != nil {
			return err
		}
	}
	want := wantPod.Spec.Containers[0].Command
	if err := waitMirrorPod(ctx, client, component+"-"+node, 5*time.Minute, func(pod *corev1.Pod) string {
		if len(pod.Spec.Containers) != 1 || !slices.Equal(pod.Spec.Containers[0].Command, want) {
			return "the mirror pod runs the old command"
		}
		return ""
	}); err != nil {
		return fmt.Errorf("%s: %s did not run with the new gates: %w", node, component, err)
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setKubeletGates sets the gates in a node's kubelet configuration, restarts
// the kubelet and waits until its live configuration (configz) has them.
func (k *Kind) setKubeletGates(ctx context.Context, client kubernetes.Interface, node string, gates map[string]bool) error {
	const path = "/var/lib/kubelet/config.yaml"
	data, err := k.readNodeFile(ctx, node, path)
	if err != nil {
		return err
	}
	out, err := editKubeletConfigurationGates(data, gates, nil)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", node, path, err)
	}
	if err := k.writeNodeFile(ctx, node, path, out); err != nil {
		return err
	}
	k.c.Logf("%s: kubelet restarted with featureGates set", node)
	if err := k.nodeExec(ctx, node, "systemctl", "restart", "kubelet"); err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "configz").DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		var configz struct {
			KubeletConfig struct {
				FeatureGates map[string]bool `json:"featureGates"`
			} `json:"kubeletconfig"`
		}
		if err := json.Unmarshal(raw, &configz); err != nil {
			return false, fmt.Errorf("%s: configz: %w", node, err)
		}
		for name, on := range gates {
			if got, ok := configz.KubeletConfig.FeatureGates[name]; !ok || got != on {
				last = fmt.Sprintf("configz has %s=%v", name, configz.KubeletConfig.FeatureGates[name])
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: the kubelet did not run with the new gates within 3m (%s): %w", node, last, err)
	}
	return nil
}

// FeaturesResource is the Feature API's resource.
var FeaturesResource = schema.GroupVersionResource{Group: "features.k8s.io", Version: "v1alpha1", Resource: "features"}

// KindWaitFeatures waits until the Feature of each gate in kube-system is On
// or Off as the gate is set, logging every state and task list it passes
// through with the time since the call, and fails after timeout. The Feature
// of a gate is the gate's name in lower case.
func (k *Kind) KindWaitFeatures(ctx context.Context, gates map[string]bool, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", k.KindKubeconfig())
	if err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	// seen is each Feature's state and tasks as last logged; why, what its
	// Transitioning condition last said (WaitForUses names who holds it).
	seen, why := map[string]string{}, map[string]string{}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		done := true
		for _, gate := range slices.Sorted(maps.Keys(gates)) {
			name := strings.ToLower(gate)
			f, err := client.Resource(FeaturesResource).Namespace(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				// The wait's own end is no news of the Feature.
				if ctx.Err() == nil {
					why[name] = err.Error()
				}
				done = false
				continue
			}
			state, tasks := FeatureProgress(f.Object)
			if now := fmt.Sprintf("%s %v", state, tasks); now != seen[name] {
				k.c.Logf("%s: %s after %v", name, now, time.Since(start).Round(time.Second))
				seen[name] = now
			}
			why[name] = transitioningMessage(f.Object)
			want := map[bool]string{true: "On", false: "Off"}[gates[gate]]
			done = done && state == want && len(tasks) == 0
		}
		return done, nil
	})
	if err != nil {
		var last []string
		for _, name := range slices.Sorted(maps.Keys(seen)) {
			last = append(last, fmt.Sprintf("%s %s: %s", name, seen[name], why[name]))
		}
		return fmt.Errorf("the Features did not reach the gates' values within %v (last seen: %s): %w", timeout, strings.Join(last, "; "), err)
	}
	return nil
}

// transitioningMessage is the message of a Feature's Transitioning condition
// while it is True, or "".
func transitioningMessage(feature map[string]any) string {
	conditions, _, _ := unstructured.NestedSlice(feature, "status", "conditions")
	for _, c := range conditions {
		if c, ok := c.(map[string]any); ok && c["type"] == "Transitioning" && c["status"] == "True" {
			msg, _ := c["message"].(string)
			return msg
		}
	}
	return ""
}

// FeatureProgress returns a Feature's status.state and the names of its
// status.tasks.
func FeatureProgress(obj map[string]any) (string, []string) {
	state, _, _ := unstructured.NestedString(obj, "status", "state")
	list, _, _ := unstructured.NestedSlice(obj, "status", "tasks")
	var tasks []string
	for _, t := range list {
		if task, ok := t.(map[string]any); ok {
			name, _ := task["name"].(string)
			tasks = append(tasks, name)
		}
	}
	return state, tasks
}
