//go:build vpae2e

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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// The metrics-server of the VPA e2e test: a process on this machine that listens
// on the first node's pod bridge address, the one address of the machine that
// an EndpointSlice may name (not loopback) and that the apiserver reaches; the
// APIService routes to it through a Service without selector and that slice
// (the apiserver runs with --enable-aggregator-routing, there is no kube-proxy).
const (
	metricsServerHost = "10.88.0.1" // the gateway address of carry0 (podSubnet)
	metricsServerPort = "4443"
	recommenderAddr   = "127.0.0.1:8942"
	vpaGroup          = "autoscaling.k8s.io"
	// The recommender's minimum of per-node history, lowered from its default
	// of an hour so that the test takes minutes (--node-scope-min-history).
	e2eMinNodeHistory = time.Minute
)

var (
	vpaResource   = schema.GroupVersionResource{Group: vpaGroup, Version: "v1", Resource: "verticalpodautoscalers"}
	sliceResource = schema.GroupVersionResource{Group: vpaGroup, Version: "v1alpha1", Resource: "verticalpodautoscalerslices"}
)

// TestVPANodeScope is the end-to-end test of per-node VPA recommendations
// (docs/vpa-node-scope.md): the pods of one DaemonSet on the two nodes of the local
// cluster, one burning CPU and one idle, get different recommendations from the
// patched recommender, fed by metrics-server with the real usage. It brings the
// cluster up with two nodes if needed and takes down what it started. Run it as
// root with make vpa-e2e (which builds the VPA and metrics-server first).
func TestVPANodeScope(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local cluster needs root")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	recommender := filepath.Join(root, "_output", "vpa", "bin", "recommender")
	crds := filepath.Join(root, "_output", "vpa", "crds", "vpa-v1-crd-gen.yaml")
	metricsServer := filepath.Join(root, "_output", "vpa", "tools", "metrics-server")
	for _, f := range []string{recommender, crds, metricsServer} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run make vpa-e2e", f)
		}
	}
	c := New(root, testWriter{t})
	c.Nodes = 2
	first, second := c.firstNode(), c.secondNode()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	// The cluster: up with two nodes; afterwards down again, or only the second
	// node when the cluster ran already with one.
	_, clusterWasUp := c.running("kube-apiserver")
	_, node2WasUp := c.running("kubelet" + second.suffix)
	if clusterWasUp {
		pid, _ := c.running("kube-apiserver")
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !strings.Contains(string(cmdline), "--enable-aggregator-routing=true") {
			t.Fatal("the running cluster's apiserver has no aggregation layer (started by an earlier version): make cluster-down first")
		}
	}
	t.Cleanup(func() {
		switch {
		case !clusterWasUp:
			if err := c.Down(context.Background()); err != nil {
				t.Errorf("cluster down: %v", err)
			}
			if left := c.Leftovers(); len(left) > 0 {
				t.Errorf("left behind after down: %v", left)
			}
		case !node2WasUp:
			if err := c.DownSecondNode(context.Background()); err != nil {
				t.Errorf("second node down: %v", err)
			}
		}
	})
	start := time.Now()
	if err := c.Up(ctx); err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	t.Logf("MEASURED cluster up with nodes %s and %s: %s", first.name, second.name, time.Since(start).Round(time.Second))
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		out, err := run(ctx, stdin, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// cleanup runs kubectl after the test's context is gone.
	cleanup := func(stdin string, args ...string) {
		if _, err := run(context.Background(), stdin, args...); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}

	// The VPA CRDs (make vpa's), removed afterwards unless they were there.
	crdNames := []string{"verticalpodautoscalers", "verticalpodautoscalercheckpoints", "verticalpodautoscalerslices", "verticalpodautoscalercheckpointslices"}
	for i := range crdNames {
		crdNames[i] = "crd/" + crdNames[i] + "." + vpaGroup
	}
	hadCRDs := strings.TrimSpace(kubectl("", append([]string{"get", "--ignore-not-found", "-o", "name"}, crdNames...)...)) != ""
	kubectl("", "apply", "--server-side", "-f", crds)
	if !hadCRDs {
		t.Cleanup(func() { cleanup("", append([]string{"delete", "--ignore-not-found", "--wait=false"}, crdNames...)...) })
	}
	kubectl("", append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, crdNames...)...)

	// The namespace, and in it the DaemonSet: its pod burns CPU (throttled to
	// 300m) on the second node and idles on the first.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the cluster has no default service account: %v", err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vpa-e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s has no default service account: %v", ns.Name, err)
	}
	busyNode, idleNode := second.name, first.name
	labels := map[string]string{"app": "agent"}
	grace := int64(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:  "agent",
						Image: images.Names{Registry: RegistryAddr}.Busybox(),
						Command: []string{"sh", "-c", fmt.Sprintf(
							`if [ "$NODE_NAME" = %q ]; then echo "busy on $NODE_NAME"; while :; do :; done; else echo "idle on $NODE_NAME"; exec sleep 86400; fi`, busyNode)},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
						},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().DaemonSets(ns.Name).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	podsOn := map[string]string{} // node -> pod
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return false, err
		}
		clear(podsOn)
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				podsOn[p.Spec.NodeName] = p.Name
			}
		}
		return podsOn[busyNode] != "" && podsOn[idleNode] != "", nil
	}); err != nil {
		t.Fatalf("the DaemonSet has no Running pod on both nodes (%v): %v", podsOn, err)
	}
	t.Logf("MEASURED DaemonSet pods Running on both nodes after %s: %v", time.Since(start).Round(time.Second), podsOn)

	// metrics-server, and the aggregation layer's route to it.
	msAddr := metricsServerHost + ":" + metricsServerPort
	t.Cleanup(func() { c.stop("metrics-server", 10*time.Second) })
	if err := c.start(ctx, daemon{
		name: "metrics-server", port: msAddr,
		args: []string{metricsServer,
			"--kubeconfig=" + c.Kubeconfig(),
			"--authentication-kubeconfig=" + c.Kubeconfig(), "--authorization-kubeconfig=" + c.Kubeconfig(),
			"--bind-address=" + metricsServerHost, "--secure-port=" + metricsServerPort,
			"--cert-dir=" + c.path("metrics-server"),
			// Kubelets by host name (their addresses are loopback) and their
			// own ports; their serving certificates are checked against the
			// cluster CA of the kubeconfig.
			"--kubelet-preferred-address-types=Hostname", "--kubelet-use-node-status-port",
			"--metric-resolution=15s",
		},
		healthy: httpsOK("https://" + msAddr + "/readyz"),
	}); err != nil {
		t.Fatal(err)
	}
	aggregation := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
  labels: {app.kubernetes.io/managed-by: kube-carry-vpa-e2e}
spec:
  ports:
  - {name: https, port: 443, targetPort: %[2]s, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-server-host
  namespace: kube-system
  labels:
    kubernetes.io/service-name: metrics-server
    endpointslice.kubernetes.io/managed-by: kube-carry-vpa-e2e
addressType: IPv4
endpoints:
- addresses: [%[1]q]
  conditions: {ready: true}
ports:
- {name: https, port: %[2]s, protocol: TCP}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
  labels: {app.kubernetes.io/managed-by: kube-carry-vpa-e2e}
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {name: metrics-server, namespace: kube-system, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
`, metricsServerHost, metricsServerPort)
	kubectl(aggregation, "apply", "-f", "-")
	t.Cleanup(func() { cleanup(aggregation, "delete", "--ignore-not-found", "-f", "-") })
	kubectl("", "wait", "--for=condition=Available", "--timeout=120s", "apiservice/v1beta1.metrics.k8s.io")
	start = time.Now()
	var usage map[string]string // pod -> CPU usage
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces/" + ns.Name + "/pods").DoRaw(ctx)
		if err != nil {
			t.Logf("pod metrics: %v", err)
			return false, nil
		}
		usage = podCPU(t, raw)
		return usage[podsOn[busyNode]] != "" && usage[podsOn[idleNode]] != "", nil
	}); err != nil {
		t.Fatalf("metrics-server has no usage of both pods (%v): %v", usage, err)
	}
	t.Logf("MEASURED pod metrics of both nodes after %s: cpu busy (%s) %s, idle (%s) %s", time.Since(start).Round(time.Second),
		busyNode, usage[podsOn[busyNode]], idleNode, usage[podsOn[idleNode]])

	// The recommender, with the gate on, short intervals and the lowered minimum.
	t.Cleanup(func() { c.stop("vpa-recommender", 10*time.Second) })
	if err := c.start(ctx, daemon{
		name: "vpa-recommender", port: recommenderAddr,
		args: []string{recommender,
			"--kubeconfig=" + c.Kubeconfig(),
			"--feature-gates=DaemonSetNodeScope=true",
			"--vpa-object-namespace=" + ns.Name,
			"--recommender-interval=15s",
			fmt.Sprintf("--node-scope-min-history=%s", e2eMinNodeHistory),
			"--address=" + recommenderAddr,
			"--v=4",
		},
		healthy: httpOK("http://" + recommenderAddr + "/metrics"),
	}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	vpa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vpaGroup + "/v1",
		"kind":       "VerticalPodAutoscaler",
		"metadata":   map[string]any{"name": "agent"},
		"spec": map[string]any{
			"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"},
			"scope":        "node",
			"updatePolicy": map[string]any{"updateMode": "Off"},
		},
	}}
	if _, err := dyn.Resource(vpaResource).Namespace(ns.Name).Create(ctx, vpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The per-node recommendations: one for each node, once each node's pod
	// has e2eMinNodeHistory of usage.
	var recs map[string]map[string]string // node -> resource -> target
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(sliceResource).Namespace(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: vpaGroup + "/vpa-name=agent"})
		if err != nil {
			return false, err
		}
		recs = sliceTargets(t, list)
		return recs[busyNode] != nil && recs[idleNode] != nil, nil
	}); err != nil {
		t.Fatalf("no per-node recommendation for both nodes after %s (got %v); recommender log %s:\n%s",
			time.Since(start).Round(time.Second), recs, c.logFile("vpa-recommender"), tail(c.logFile("vpa-recommender"), 30))
	}
	elapsed := time.Since(start).Round(time.Second)
	got, err := dyn.Resource(vpaResource).Namespace(ns.Name).Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wide, _, _ := unstructured.NestedSlice(got.Object, "status", "recommendation", "containerRecommendations")
	t.Logf("MEASURED per-node recommendations %s after the VPA was created (min node history %s): busy node %s: %v; idle node %s: %v; DaemonSet-wide (status.recommendation): %v",
		elapsed, e2eMinNodeHistory, busyNode, recs[busyNode], idleNode, recs[idleNode], wide)

	busyCPU, idleCPU := resource.MustParse(recs[busyNode]["cpu"]), resource.MustParse(recs[idleNode]["cpu"])
	if busyCPU.MilliValue() < 4*idleCPU.MilliValue() {
		t.Errorf("cpu target of the busy node %s is %s, not at least 4 times the idle node's %s", busyNode, busyCPU.String(), idleCPU.String())
	}
	if busyCPU.MilliValue() < 150 || idleCPU.MilliValue() > 100 {
		t.Errorf("cpu targets busy %s, idle %s: want the busy pod's throttled 300m reflected (>= 150m) and the idle pod near the 25m minimum (<= 100m)", busyCPU.String(), idleCPU.String())
	}
}

// podCPU reads the CPU usage of each pod (its one container) from a PodMetricsList.
func podCPU(t *testing.T, raw []byte) map[string]string {
	var list struct {
		Items []struct {
			Metadata   struct{ Name string }
			Containers []struct {
				Usage map[string]string
			}
		}
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("pod metrics: %v: %s", err, raw)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		for _, ctr := range p.Containers {
			out[p.Metadata.Name] = ctr.Usage["cpu"]
		}
	}
	return out
}

// sliceTargets reads the target of each node's container "agent" from the VPA's
// slices: node -> resource -> quantity.
func sliceTargets(t *testing.T, list *unstructured.UnstructuredList) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, item := range list.Items {
		nodes, _, _ := unstructured.NestedSlice(item.Object, "nodes")
		for _, n := range nodes {
			entry, _ := n.(map[string]any)
			name, _, _ := unstructured.NestedString(entry, "nodeName")
			ctrs, _, _ := unstructured.NestedSlice(entry, "recommendation", "containerRecommendations")
			for _, ctr := range ctrs {
				m, _ := ctr.(map[string]any)
				if cn, _, _ := unstructured.NestedString(m, "containerName"); cn != "agent" {
					continue
				}
				target, _, _ := unstructured.NestedStringMap(m, "target")
				out[name] = target
			}
		}
	}
	return out
}
