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
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

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
	updaterAddr       = "127.0.0.1:8943"
	admissionAddr     = "127.0.0.1:8944" // the admission controller's metrics
	// The admission controller's webhook listens on every address; the
	// apiserver reaches it at metricsServerHost, as metrics-server.
	webhookPort  = "8946"
	vpaGroup     = "autoscaling.k8s.io"
	vpaNamespace = "kube-system" // of deploy/'s service accounts
	// The recommender's minimum of per-node history, lowered from its default
	// of an hour so that the test takes minutes (--node-scope-min-history).
	e2eMinNodeHistory   = time.Minute
	recommenderInterval = 15 * time.Second
	updaterInterval     = 10 * time.Second
	// The updater's staleness bound of the per-node recommendations, lowered
	// from its default of 30 minutes for the outage phase
	// (--node-scope-stale-after).
	e2eStaleAfter = 45 * time.Second
)

var (
	vpaResource             = schema.GroupVersionResource{Group: vpaGroup, Version: "v1", Resource: "verticalpodautoscalers"}
	checkpointResource      = schema.GroupVersionResource{Group: vpaGroup, Version: "v1", Resource: "verticalpodautoscalercheckpoints"}
	sliceResource           = schema.GroupVersionResource{Group: vpaGroup, Version: "v1alpha1", Resource: "verticalpodautoscalerslices"}
	checkpointSliceResource = schema.GroupVersionResource{Group: vpaGroup, Version: "v1alpha1", Resource: "verticalpodautoscalercheckpointslices"}
)

// TestVPANodeScope is the end-to-end test of per-node VPA recommendations
// (docs/vpa-node-scope.md): the pods of one DaemonSet on the two nodes of the local
// cluster, one burning CPU and one idle, get different recommendations from the
// patched recommender, fed by metrics-server with the real usage; the admission
// controller and the updater apply them per node. The three components run with
// the RBAC of the VPA's deploy/, each with its own service account's token. It
// checks admission, eviction, a recommender restart, an outage of the recommender
// longer than the updater's staleness bound (no pod moves), the cleanup after a
// Node and the VPA are deleted, and the components with the gate off. It brings the
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
	crds := filepath.Join(root, "_output", "vpa", "crds", "vpa-v1-crd-gen.yaml")
	metricsServer := filepath.Join(root, "_output", "vpa", "tools", "metrics-server")
	required := []string{crds, metricsServer, filepath.Join(root, "_output", "autoscaler", "vertical-pod-autoscaler", "deploy", "vpa-rbac.yaml")}
	for _, b := range []string{"recommender", "admission-controller", "updater"} {
		required = append(required, filepath.Join(root, "_output", "vpa", "bin", b))
	}
	for _, f := range required {
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
	_, clusterWasUp := c.Running("kube-apiserver")
	_, node2WasUp := c.Running("kubelet" + second.suffix)
	if !clusterWasUp {
		if err := c.emptyEtcd(); err != nil {
			t.Fatal(err)
		}
	}
	if clusterWasUp {
		pid, _ := c.Running("kube-apiserver")
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
	t.Logf("MEASURED cluster up with nodes %s and %s: %s", first.Name, second.Name, time.Since(start).Round(time.Second))
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
	// 300m) on the second node and idles on the first. Both request 30m: above
	// the 25m minimum the idle node gets, below the busy node's lower bound.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
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
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s has no default service account: %v", ns.Name, err)
	}
	busyNode, idleNode := second.Name, first.Name
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
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("30m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
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
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
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
		// What the pods and the cluster did, for a run that cannot be repeated.
		for _, args := range [][]string{
			{"get", "nodes", "-o", "wide"},
			{"get", "daemonset,pods", "-n", ns.Name, "-o", "wide"},
			{"describe", "pods", "-n", ns.Name},
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		} {
			out, err := run(context.Background(), "", args...)
			t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, err)
		}
		t.Fatalf("the DaemonSet has no Running pod on both nodes (%v): %v", podsOn, err)
	}
	t.Logf("MEASURED DaemonSet pods Running on both nodes after %s: %v", time.Since(start).Round(time.Second), podsOn)

	// metrics-server, and the aggregation layer's route to it.
	msAddr := metricsServerHost + ":" + metricsServerPort
	t.Cleanup(func() { c.Stop("metrics-server", 10*time.Second) })
	if err := c.Start(ctx, Daemon{
		Name: "metrics-server", Port: msAddr,
		Args: []string{metricsServer,
			"--kubeconfig=" + c.Kubeconfig(),
			"--authentication-kubeconfig=" + c.Kubeconfig(), "--authorization-kubeconfig=" + c.Kubeconfig(),
			"--bind-address=" + metricsServerHost, "--secure-port=" + metricsServerPort,
			"--cert-dir=" + c.Path("metrics-server"),
			// Kubelets by host name (their addresses are loopback) and their
			// own ports; their serving certificates are checked against the
			// cluster CA of the kubeconfig.
			"--kubelet-preferred-address-types=Hostname", "--kubelet-use-node-status-port",
			"--metric-resolution=15s",
		},
		Healthy: httpsOK("https://" + msAddr + "/readyz"),
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
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
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

	// The three components as deploy/ runs them: its RBAC, each with the token of
	// its own service account, the admission controller's webhook behind a Service
	// without selector, as metrics-server.
	comps := newVPAComponents(t, ctx, c, cs, cfg, kubectl, cleanup, root, ns.Name)
	t.Cleanup(comps.stopAll)
	start = time.Now()
	comps.start(ctx, true)
	t.Logf("MEASURED recommender, admission controller and updater serving (gate on): %s", time.Since(start).Round(time.Second))

	// The VPA: scope node, recommendations applied in place or by eviction.
	// The pods as they are before it exists: the updater may resize the busy
	// node's pod as soon as that node's entry is written, before the idle
	// node's is.
	before := daemonPods(t, ctx, cs, ns.Name)
	vpa := testVPA("agent", true)
	start = time.Now()
	if _, err := dyn.Resource(vpaResource).Namespace(ns.Name).Create(ctx, vpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The per-node recommendations: one for each node, once each node's pod
	// has e2eMinNodeHistory of usage.
	recs := waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, 6*time.Minute, func(r map[string]nodeRec) bool {
		return r[busyNode].target != nil && r[idleNode].target != nil
	})
	elapsed := time.Since(start).Round(time.Second)
	wide := wideRecommendation(t, ctx, dyn, ns.Name)
	t.Logf("MEASURED per-node recommendations %s after the VPA was created (min node history %s): busy node %s: %v; idle node %s: %v; DaemonSet-wide (status.recommendation): %v",
		elapsed, e2eMinNodeHistory, busyNode, recs[busyNode], idleNode, recs[idleNode], wide)
	busyCPU, idleCPU := recs[busyNode].cpu(), recs[idleNode].cpu()
	if busyCPU.MilliValue() < 4*idleCPU.MilliValue() {
		t.Errorf("cpu target of the busy node %s is %s, not at least 4 times the idle node's %s", busyNode, busyCPU.String(), idleCPU.String())
	}
	if busyCPU.MilliValue() < 150 || idleCPU.MilliValue() > 100 {
		t.Errorf("cpu targets busy %s, idle %s: want the busy pod's throttled 300m reflected (>= 150m) and the idle pod near the 25m minimum (<= 100m)", busyCPU.String(), idleCPU.String())
	}
	if t.Failed() {
		t.FailNow()
	}

	// (b) The updater resizes the busy node's pod in place (InPlaceOrRecreate):
	// its 30m request is below its node's lower bound. It leaves the idle node's
	// pod alone: both request the same, so with one DaemonSet-wide range it
	// would resize both or neither.
	start = time.Now()
	var resized corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		resized = daemonPods(t, ctx, cs, ns.Name)[busyNode]
		if resized.UID != before[busyNode].UID {
			return true, nil
		}
		applied := actuatedCPU(resized)
		return podCPURequest(resized).Cmp(*podCPURequest(before[busyNode])) != 0 && applied != nil && applied.Cmp(*podCPURequest(resized)) == 0, nil
	}); err != nil {
		t.Fatalf("the updater did not resize the busy node's pod %s (request %s, its node's recommendation %v): %v; updater log %s:\n%s",
			before[busyNode].Name, podCPURequest(before[busyNode]).String(), recs[busyNode], err, c.logFile("vpa-updater"), Tail(c.logFile("vpa-updater"), 30))
	}
	if resized.UID != before[busyNode].UID {
		t.Fatalf("the updater replaced the busy node's pod %s by %s instead of resizing it in place; updater log %s:\n%s",
			before[busyNode].Name, resized.Name, c.logFile("vpa-updater"), Tail(c.logFile("vpa-updater"), 30))
	}
	recs = waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, time.Minute, func(r map[string]nodeRec) bool { return r[busyNode].target != nil && r[idleNode].target != nil })
	t.Logf("MEASURED the updater resized %s (busy node) in place %s after the per-node recommendations: cpu request %s, actuated %s (node target %s)",
		resized.Name, time.Since(start).Round(time.Second), podCPURequest(resized).String(), actuatedCPU(resized).String(), recs[busyNode].cpu().String())
	if got, want := podCPURequest(resized), recs[busyNode].cpu(); got.Cmp(*want) != 0 {
		t.Errorf("the busy node's pod %s was resized to cpu %s, want its node's target %s", resized.Name, got.String(), want.String())
	}
	if got := podCPULimit(resized); got.MilliValue() != 300 {
		t.Errorf("the busy node's pod %s has cpu limit %s, want 300m (RequestsOnly)", resized.Name, got.String())
	}
	// The updater may act on one pod of the two per loop: the idle one's turn
	// would be the next loop.
	time.Sleep(updaterInterval + 2*time.Second)
	if p := daemonPods(t, ctx, cs, ns.Name)[idleNode]; p.UID != before[idleNode].UID || podCPURequest(p).Cmp(*podCPURequest(before[idleNode])) != 0 {
		t.Errorf("the idle node's pod %s was changed (now %s, cpu request %s); its 30m request is within its node's bounds %v", before[idleNode].Name, p.Name, podCPURequest(p).String(), recs[idleNode])
	}

	// (a) At admission each node's new pod gets its node's target. The
	// recommender writes every loop, so a target may move between the
	// admission and the read after it (CI of 2026-11-29: 296m at admission,
	// 300m a loop later): the request must be the node's target of just before
	// the deletion or of just after the admission.
	targetsBefore := waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, time.Minute, func(r map[string]nodeRec) bool { return r[busyNode].target != nil && r[idleNode].target != nil })
	for _, n := range []string{busyNode, idleNode} {
		if err := cs.CoreV1().Pods(ns.Name).Delete(ctx, before[n].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admitted := map[string]corev1.Pod{}
	for _, n := range []string{busyNode, idleNode} {
		admitted[n] = waitNewPod(t, ctx, cs, ns.Name, n, before[n].UID)
	}
	recs = waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, time.Minute, func(r map[string]nodeRec) bool { return r[busyNode].target != nil && r[idleNode].target != nil })
	wide = wideRecommendation(t, ctx, dyn, ns.Name)
	for _, n := range []string{busyNode, idleNode} {
		if got, want, earlier := podCPURequest(admitted[n]), recs[n].cpu(), targetsBefore[n].cpu(); got.Cmp(*want) != 0 && got.Cmp(*earlier) != 0 {
			t.Errorf("node %s's new pod %s requests cpu %s, want its node's target %s (%s before the pod was deleted)", n, admitted[n].Name, got.String(), want.String(), earlier.String())
		}
	}
	if got, w := podCPURequest(admitted[idleNode]), wide.cpu(); got.Cmp(*w) >= 0 {
		t.Errorf("the idle node's new pod %s requests cpu %s, not below the DaemonSet-wide target %s", admitted[idleNode].Name, got.String(), w.String())
	}
	t.Logf("MEASURED at admission: busy node %s pod %s cpu request %s, idle node %s pod %s cpu request %s; DaemonSet-wide target %s",
		busyNode, admitted[busyNode].Name, podCPURequest(admitted[busyNode]).String(), idleNode, admitted[idleNode].Name, podCPURequest(admitted[idleNode]).String(), wide.cpu().String())

	// (c) A restart keeps per-node history: with the recommendation slices
	// deleted, the restarted recommender writes both nodes' entries again before
	// either could have e2eMinNodeHistory of new samples, and the checkpoints it
	// writes keep their first sample. The updater is stopped meanwhile (without
	// slices it would apply the DaemonSet-wide range).
	var ckBefore map[string]nodeCheckpoint
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		ckBefore = checkpointSlices(t, ctx, dyn, ns.Name)
		for _, n := range []string{busyNode, idleNode} {
			if ck, ok := ckBefore[n]; !ok || ck.last.Sub(ck.first) < e2eMinNodeHistory {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("no checkpoint of %s of both nodes (got %v): %v", e2eMinNodeHistory, ckBefore, err)
	}
	checkpointSlicesManagedWhole(t, ctx, dyn, ns.Name)
	recsBefore := recs
	comps.stop("vpa-updater", "vpa-recommender")
	if err := dyn.Resource(sliceResource).Namespace(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	comps.start(ctx, true, "vpa-recommender")
	start = time.Now()
	recs = waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, 2*time.Minute, func(r map[string]nodeRec) bool { return r[busyNode].target != nil && r[idleNode].target != nil })
	elapsed = time.Since(start).Round(time.Second)
	t.Logf("MEASURED after a recommender restart, both nodes' entries again after %s: busy %v, idle %v (before: busy %v, idle %v)",
		elapsed, recs[busyNode], recs[idleNode], recsBefore[busyNode], recsBefore[idleNode])
	if elapsed >= e2eMinNodeHistory {
		t.Errorf("the restarted recommender wrote the per-node entries after %s, not before the %s of history new samples would give", elapsed, e2eMinNodeHistory)
	}
	for _, n := range []string{busyNode, idleNode} {
		if got, want := recs[n].cpu(), recsBefore[n].cpu(); got.Cmp(*want) != 0 {
			t.Errorf("node %s: cpu target %s after the restart, %s before", n, got.String(), want.String())
		}
	}
	// The targets are pinned (the busy one by maxAllowed, the idle one by the
	// 25m minimum), so they would not show a history lost or cut short. The
	// busy node's lower bound is not: it grows with the confidence in its
	// history (its length and number of samples), so a restored history gives
	// one at least as high as before the restart, and a lost one a lower one.
	if lowerBefore, lowerAfter := recsBefore[busyNode].lowerCPU(), recs[busyNode].lowerCPU(); lowerBefore.Cmp(resource.MustParse("300m")) >= 0 || lowerBefore.Cmp(resource.MustParse("25m")) <= 0 {
		t.Errorf("the busy node's cpu lower bound %s before the restart is pinned (by 300m or 25m): the check of its history proves nothing", lowerBefore.String())
	} else if lowerAfter.Cmp(*lowerBefore) < 0 {
		t.Errorf("the busy node's cpu lower bound %s after the restart is below the %s before it: its history was not restored whole", lowerAfter.String(), lowerBefore.String())
	}
	var ckAfter map[string]nodeCheckpoint
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		ckAfter = checkpointSlices(t, ctx, dyn, ns.Name)
		for _, n := range []string{busyNode, idleNode} {
			if !ckAfter[n].last.After(ckBefore[n].last) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the restarted recommender wrote no checkpoint of both nodes (before %v, now %v): %v", ckBefore, ckAfter, err)
	}
	for _, n := range []string{busyNode, idleNode} {
		if !ckAfter[n].first.Equal(ckBefore[n].first) || ckAfter[n].samples <= ckBefore[n].samples {
			t.Errorf("node %s: checkpoint after the restart %+v, before %+v: want the same first sample and more samples", n, ckAfter[n], ckBefore[n])
		}
	}
	// From here on the updater takes a node's recommendation as stale 45 s
	// after the recommender last wrote it.
	comps.updaterArgs = []string{"--node-scope-stale-after=" + e2eStaleAfter.String()}
	comps.start(ctx, true, "vpa-updater")

	// (c2) An outage of the recommender moves no pod: with the recommender
	// stopped for longer than the updater's staleness bound and the updater
	// running, neither pod is evicted or resized, and a pod created meanwhile
	// gets its node's last recommendation. The VPA's DaemonSet-wide range is
	// set (the recommender is stopped, so it stays) to one that holds neither
	// node's value, as it is on any DaemonSet whose nodes differ enough: an
	// updater that fell back to it for stale nodes would resize both pods, and
	// an admission controller that did would give the new pod its target.
	outagePods := daemonPods(t, ctx, cs, ns.Name)
	recs = waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, time.Minute, func(r map[string]nodeRec) bool { return r[busyNode].target != nil && r[idleNode].target != nil })
	// Each pod holds what its node's target was at its admission, which the
	// recommender may have moved since within the node's bounds: within them,
	// the updater has no reason to move it.
	for _, n := range []string{busyNode, idleNode} {
		if got := podCPURequest(outagePods[n]); got.Cmp(*recs[n].lowerCPU()) < 0 || got.Cmp(*recs[n].upperCPU()) > 0 {
			t.Fatalf("before the outage: node %s's pod %s requests cpu %s, outside its node's bounds %v", n, outagePods[n].Name, got.String(), recs[n])
		}
	}
	comps.stop("vpa-recommender")
	start = time.Now()
	lastWrite := newestSliceWrite(t, ctx, dyn, ns.Name)
	busyMilli, idleMilli := recs[busyNode].cpu().MilliValue(), recs[idleNode].cpu().MilliValue()
	lower, upper := idleMilli+(busyMilli-idleMilli)/3, idleMilli+2*(busyMilli-idleMilli)/3
	wideStatus := fmt.Sprintf(`{"status":{"recommendation":{"containerRecommendations":[{"containerName":"agent","target":{"cpu":"%[1]dm"},"lowerBound":{"cpu":"%[2]dm"},"upperBound":{"cpu":"%[3]dm"},"uncappedTarget":{"cpu":"%[1]dm"}}]}}}`,
		(lower+upper)/2, lower, upper)
	if _, err := dyn.Resource(vpaResource).Namespace(ns.Name).Patch(ctx, "agent", types.MergePatchType, []byte(wideStatus), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	// Past the bound, by three updater loops.
	activity := updaterActivity(t, ctx)
	until := lastWrite.Add(e2eStaleAfter + 3*updaterInterval)
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Until(until)+time.Minute, true, func(context.Context) (bool, error) {
		now := daemonPods(t, ctx, cs, ns.Name)
		for _, n := range []string{busyNode, idleNode} {
			if now[n].UID != outagePods[n].UID || podCPURequest(now[n]).Cmp(*podCPURequest(outagePods[n])) != 0 {
				return false, fmt.Errorf("node %s's pod %s was replaced or resized during the outage: now %s, cpu request %s (DaemonSet-wide range %dm-%dm); updater log %s:\n%s",
					n, outagePods[n].Name, now[n].Name, podCPURequest(now[n]).String(), lower, upper, c.logFile("vpa-updater"), Tail(c.logFile("vpa-updater"), 30))
			}
		}
		return time.Now().After(until), nil
	}); err != nil {
		t.Fatal(err)
	}
	activity.ranSince(t, ctx, 3, "during the outage")
	if w := wideRecommendation(t, ctx, dyn, ns.Name); w.cpu().MilliValue() != (lower+upper)/2 {
		t.Fatalf("the DaemonSet-wide recommendation changed during the outage: %v", w)
	}
	t.Logf("MEASURED recommender stopped %s, the slices written last %s before the end: no pod evicted or resized (DaemonSet-wide range %dm-%dm)",
		time.Since(start).Round(time.Second), time.Since(lastWrite).Round(time.Second), lower, upper)
	if err := cs.CoreV1().Pods(ns.Name).Delete(ctx, outagePods[idleNode].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	outageNew := waitNewPod(t, ctx, cs, ns.Name, idleNode, outagePods[idleNode].UID)
	if got, want := podCPURequest(outageNew), recs[idleNode].cpu(); got.Cmp(*want) != 0 {
		t.Errorf("during the outage the idle node's new pod %s requests cpu %s, want its node's last target %s", outageNew.Name, got.String(), want.String())
	}
	activity = updaterActivity(t, ctx)
	time.Sleep(3 * updaterInterval)
	activity.ranSince(t, ctx, 2, "while the idle node's new pod stood during the outage")
	if p := daemonPods(t, ctx, cs, ns.Name)[idleNode]; p.UID != outageNew.UID || podCPURequest(p).Cmp(*podCPURequest(outageNew)) != 0 {
		t.Errorf("during the outage the idle node's new pod %s was replaced or resized: now %s, cpu request %s", outageNew.Name, p.Name, podCPURequest(p).String())
	}
	t.Logf("MEASURED during the outage (%s), the idle node's new pod %s requests cpu %s (its node's last target %s)",
		time.Since(start).Round(time.Second), outageNew.Name, podCPURequest(outageNew).String(), recs[idleNode].cpu().String())
	comps.start(ctx, true, "vpa-recommender")

	// (d) Cleanup: a Node deleted (the busy node's machine goes away) loses its
	// entry and its history at once; the VPA deleted takes its slices,
	// checkpoint slices and checkpoints along.
	start = time.Now()
	if err := c.DownSecondNode(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		recs = sliceTargetsOf(t, ctx, dyn, ns.Name)
		ck := checkpointSlices(t, ctx, dyn, ns.Name)
		_, busyRec := recs[busyNode]
		_, busyCk := ck[busyNode]
		return !busyRec && !busyCk && recs[idleNode].target != nil && ck[idleNode].samples > 0, nil
	}); err != nil {
		t.Fatalf("the deleted node %s keeps its entry or its checkpoint, or the idle node lost its own (entries %v, checkpoints %v): %v",
			busyNode, recs, checkpointSlices(t, ctx, dyn, ns.Name), err)
	}
	t.Logf("MEASURED node %s deleted: its entry and checkpoint gone after %s, node %s keeps both", busyNode, time.Since(start).Round(time.Second), idleNode)

	// (d2) A new node's first pod gets its group's value at admission, in
	// Recreate mode, and is not evicted once its node has an entry: the nodes
	// grouped by kubernetes.io/os, which a kubelet sets when it registers, so
	// that the node is in its group before its first pod is admitted. The
	// second node comes back as a new machine (a new Node UID), without
	// history; its group's history is the idle node's.
	groupPatch := []byte(`{"spec":{"updatePolicy":{"updateMode":"Recreate"},"nodeScope":{"groupLabel":"kubernetes.io/os"}}}`)
	if _, err := dyn.Resource(vpaResource).Namespace(ns.Name).Patch(ctx, "agent", types.MergePatchType, groupPatch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var group nodeRec
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		group = sliceGroupTargets(t, ctx, dyn, ns.Name)["linux"]
		return group.target != nil, nil
	}); err != nil {
		t.Fatalf("no value of group linux in the slices: %v; recommender log %s:\n%s", err, c.logFile("vpa-recommender"), Tail(c.logFile("vpa-recommender"), 30))
	}
	wide = wideRecommendation(t, ctx, dyn, ns.Name)
	if group.cpu().Cmp(*wide.cpu()) == 0 {
		t.Fatalf("group linux's cpu target %s is the DaemonSet-wide one: the test cannot tell them apart", group.cpu().String())
	}
	t.Logf("MEASURED group linux's value in the slices %s after the VPA got its group label: %v (DaemonSet-wide %v)", time.Since(start).Round(time.Second), group, wide)
	// The deleted machine's pod goes as the pod garbage collector would take
	// it (after its quarantine): a new machine has none of its pods.
	pods, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "app=agent", FieldSelector: "spec.nodeName=" + busyNode})
	if err != nil {
		t.Fatal(err)
	}
	now := int64(0)
	for _, old := range pods.Items {
		if err := cs.CoreV1().Pods(ns.Name).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		left, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "app=agent", FieldSelector: "spec.nodeName=" + busyNode})
		return err == nil && len(left.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the deleted node's pods are still there: %v", err)
	}
	if err := c.Up(ctx); err != nil {
		t.Fatalf("second node up again: %v", err)
	}
	start = time.Now()
	firstPod := waitDaemonPods(t, ctx, cs, ns.Name, []string{busyNode})[busyNode]
	groupNow := sliceGroupTargets(t, ctx, dyn, ns.Name)["linux"]
	if got := podCPURequest(firstPod); got.Cmp(*group.cpu()) != 0 && (groupNow.target == nil || got.Cmp(*groupNow.cpu()) != 0) {
		t.Errorf("the new node's first pod %s requests cpu %s, want its group's target %s (DaemonSet-wide %s)", firstPod.Name, got.String(), group.cpu().String(), wide.cpu().String())
	}
	recs = waitSliceTargets(t, ctx, cs, dyn, c, ns.Name, 2*time.Minute, func(r map[string]nodeRec) bool { return r[busyNode].target != nil })
	t.Logf("MEASURED new node %s: first pod %s requests cpu %s at admission; its own entry %s later: %v",
		busyNode, firstPod.Name, podCPURequest(firstPod).String(), time.Since(start).Round(time.Second), recs[busyNode])
	activity = updaterActivity(t, ctx)
	time.Sleep(3 * updaterInterval)
	activity.ranSince(t, ctx, 2, "after the new node got its entry")
	if p := daemonPods(t, ctx, cs, ns.Name)[busyNode]; p.UID != firstPod.UID {
		t.Errorf("the new node's first pod %s was evicted (Recreate) after its node got an entry: now %s; updater log %s:\n%s",
			firstPod.Name, p.Name, c.logFile("vpa-updater"), Tail(c.logFile("vpa-updater"), 30))
	}

	start = time.Now()
	if err := dyn.Resource(vpaResource).Namespace(ns.Name).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, r := range []schema.GroupVersionResource{sliceResource, checkpointSliceResource, checkpointResource} {
			list, err := dyn.Resource(r).Namespace(ns.Name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			left[r.Resource] = len(list.Items)
		}
		return left[sliceResource.Resource]+left[checkpointSliceResource.Resource]+left[checkpointResource.Resource] == 0, nil
	}); err != nil {
		t.Fatalf("after the VPA was deleted these are left: %v: %v", left, err)
	}
	t.Logf("MEASURED VPA deleted: its slices, checkpoint slices and checkpoints gone after %s", time.Since(start).Round(time.Second))

	// (e) The gate off: the second node back, a VPA with scope node (created
	// while no admission controller runs, as one written while the gate was on)
	// and the three components restarted without the gate. They handle it as
	// upstream handles any VPA: each node's new pod gets the DaemonSet-wide
	// target, the idle one too, and there are no slices and no per-node
	// history. A new VPA with scope node is refused.
	start = time.Now()
	comps.stopAll()
	comps.updaterArgs = nil
	if err := c.Up(ctx); err != nil {
		t.Fatalf("second node up again: %v", err)
	}
	if _, err := dyn.Resource(vpaResource).Namespace(ns.Name).Create(ctx, testVPA("agent", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	comps.start(ctx, false)
	podsUp := waitDaemonPods(t, ctx, cs, ns.Name, []string{busyNode, idleNode})
	t.Logf("MEASURED node %s up again and the components restarted with the gate off: %s", busyNode, time.Since(start).Round(time.Second))
	if _, err := dyn.Resource(vpaResource).Namespace(ns.Name).Create(ctx, testVPA("agent-new", true), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "DaemonSetNodeScope") {
		t.Errorf("creating a VPA with scope node with the gate off: got %v, want the admission controller's refusal naming DaemonSetNodeScope", err)
	}
	start = time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		wide = wideRecommendation(t, ctx, dyn, ns.Name)
		return wide.target != nil && wide.cpu().MilliValue() >= 150, nil
	}); err != nil {
		t.Fatalf("no DaemonSet-wide cpu target of at least 150m (the busy pod's usage) with the gate off: %v: %v", wide, err)
	}
	t.Logf("MEASURED gate off: DaemonSet-wide recommendation %s after the components started: %v", time.Since(start).Round(time.Second), wide)
	wideAt := time.Now()
	for _, n := range []string{busyNode, idleNode} {
		if err := cs.CoreV1().Pods(ns.Name).Delete(ctx, podsUp[n].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newPods := map[string]corev1.Pod{}
	for _, n := range []string{busyNode, idleNode} {
		newPods[n] = waitNewPod(t, ctx, cs, ns.Name, n, podsUp[n].UID)
	}
	wideNow := wideRecommendation(t, ctx, dyn, ns.Name)
	for _, n := range []string{busyNode, idleNode} {
		got := podCPURequest(newPods[n])
		if got.Cmp(*wide.cpu()) != 0 && got.Cmp(*wideNow.cpu()) != 0 {
			t.Errorf("gate off: node %s's new pod %s requests cpu %s, want the DaemonSet-wide target %s", n, newPods[n].Name, got.String(), wideNow.cpu().String())
		}
	}
	t.Logf("MEASURED gate off, at admission: busy node pod cpu request %s, idle node pod cpu request %s",
		podCPURequest(newPods[busyNode]).String(), podCPURequest(newPods[idleNode]).String())
	// A recommender loop after the one that wrote the recommendation: with the
	// gate on it would have written both nodes' per-node history by now (in
	// its first loop with the VPA).
	time.Sleep(time.Until(wideAt.Add(recommenderInterval + 5*time.Second)))
	for _, r := range []schema.GroupVersionResource{sliceResource, checkpointSliceResource} {
		list, err := dyn.Resource(r).Namespace(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			t.Errorf("gate off: %d %s in the namespace, want none", len(list.Items), r.Resource)
		}
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

// vpaDaemons are the VPA components in start order, named as their service
// accounts in deploy/vpa-rbac.yaml.
var vpaDaemons = []string{"vpa-recommender", "vpa-admission-controller", "vpa-updater"}

// vpaComponents runs the VPA's three components as processes on this machine,
// each with a token of its own service account of deploy/.
type vpaComponents struct {
	t           *testing.T
	c           *Cluster
	cs          kubernetes.Interface
	bin, ns     string
	kubeconfigs map[string]string // daemon -> kubeconfig of its service account
	webhookPKI  *PKI
	logStart    map[string]int64 // daemon -> size of its log before the test
	updaterArgs []string         // more flags of the updater
}

// newVPAComponents applies deploy/vpa-rbac.yaml, writes a kubeconfig with a
// service account token for each component, the webhook's serving certificate
// (cluster CA, for the Service's DNS name the apiserver checks) and the webhook's
// Service and EndpointSlice; it removes what it created when the test ends.
func newVPAComponents(t *testing.T, ctx context.Context, c *Cluster, cs kubernetes.Interface, cfg *rest.Config,
	kubectl func(string, ...string) string, cleanup func(string, ...string), root, ns string) *vpaComponents {
	v := &vpaComponents{t: t, c: c, cs: cs, ns: ns, bin: filepath.Join(root, "_output", "vpa", "bin"), kubeconfigs: map[string]string{}, logStart: map[string]int64{}}
	for _, name := range vpaDaemons {
		if fi, err := os.Stat(c.logFile(name)); err == nil {
			v.logStart[name] = fi.Size()
		}
	}
	// Registered first, so it runs after the components stopped.
	t.Cleanup(func() {
		if lines := v.denied(); len(lines) > 0 {
			t.Errorf("the API server refused requests of the components (deploy/'s RBAC lacks them):\n%s", strings.Join(lines, "\n"))
		}
	})
	rbac := filepath.Join(root, "_output", "autoscaler", "vertical-pod-autoscaler", "deploy", "vpa-rbac.yaml")
	hadRBAC := strings.TrimSpace(kubectl("", "get", "--ignore-not-found", "-o", "name", "clusterrole/system:vpa-actor")) != ""
	kubectl("", "apply", "-f", rbac)
	if !hadRBAC {
		t.Cleanup(func() { cleanup("", "delete", "--ignore-not-found", "--wait=false", "-f", rbac) })
	}
	// The admission controller registers its webhook and renews its status
	// Lease, which the updater reads; neither outlives the test.
	t.Cleanup(func() {
		cleanup("", "delete", "--ignore-not-found", "mutatingwebhookconfiguration/vpa-webhook-config")
		cleanup("", "delete", "--ignore-not-found", "-n", vpaNamespace, "lease/vpa-admission-controller",
			"lease/vpa-admission-controller-node-scope", "lease/vpa-updater-node-scope")
	})

	dir := c.Path("vpa-e2e")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	expiry := int64(2 * 60 * 60)
	for _, name := range vpaDaemons {
		tok, err := cs.CoreV1().ServiceAccounts(vpaNamespace).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of service account %s/%s: %v", vpaNamespace, name, err)
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["kube-carry"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
		kc.Contexts["kube-carry"] = &clientcmdapi.Context{Cluster: "kube-carry", AuthInfo: name}
		kc.CurrentContext = "kube-carry"
		v.kubeconfigs[name] = filepath.Join(dir, name+".kubeconfig")
		if err := clientcmd.WriteToFile(*kc, v.kubeconfigs[name]); err != nil {
			t.Fatal(err)
		}
		// The component is its service account, not the admin.
		saCfg, err := clientcmd.BuildConfigFromFlags("", v.kubeconfigs[name])
		if err != nil {
			t.Fatal(err)
		}
		saClient, err := kubernetes.NewForConfig(saCfg)
		if err != nil {
			t.Fatal(err)
		}
		review, err := saClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := review.Status.UserInfo.Username, "system:serviceaccount:"+vpaNamespace+":"+name; got != want {
			t.Fatalf("the kubeconfig of %s authenticates as %q, want %q", name, got, want)
		}
	}

	v.webhookPKI = &PKI{Dir: dir}
	ca := &PKI{Dir: c.Path("pki")}
	if err := ca.EnsureCA(); err != nil {
		t.Fatal(err)
	}
	v.webhookPKI.caCert, v.webhookPKI.caKey = ca.caCert, ca.caKey
	svc := "vpa-webhook." + vpaNamespace + ".svc"
	if err := v.webhookPKI.Leaf("vpa-webhook", svc, nil, x509.ExtKeyUsageServerAuth, []string{svc, svc + ".cluster.local"}, nil); err != nil {
		t.Fatal(err)
	}
	route := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: vpa-webhook
  namespace: %[1]s
  labels: {app.kubernetes.io/managed-by: kube-carry-vpa-e2e}
spec:
  ports:
  - {port: 443, targetPort: %[3]s, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: vpa-webhook-host
  namespace: %[1]s
  labels:
    kubernetes.io/service-name: vpa-webhook
    endpointslice.kubernetes.io/managed-by: kube-carry-vpa-e2e
addressType: IPv4
endpoints:
- addresses: [%[2]q]
  conditions: {ready: true}
ports:
- {port: %[3]s, protocol: TCP}
`, vpaNamespace, metricsServerHost, webhookPort)
	kubectl(route, "apply", "-f", "-")
	t.Cleanup(func() { cleanup(route, "delete", "--ignore-not-found", "-f", "-") })
	return v
}

func (v *vpaComponents) daemon(name string, gate bool) Daemon {
	args := []string{"--kubeconfig=" + v.kubeconfigs[name], fmt.Sprintf("--feature-gates=DaemonSetNodeScope=%t", gate), "--v=4"}
	if !gate {
		// With the gate the components watch every namespace, as deployed
		// by default; without it, the test's only, so that both ways of
		// listing VPAs and slices run.
		args = append(args, "--vpa-object-namespace="+v.ns)
	}
	// As deploy/'s Deployments set it: the namespace of the status Lease.
	env := []string{"NAMESPACE=" + vpaNamespace}
	switch name {
	case "vpa-recommender":
		return Daemon{Name: name, Port: recommenderAddr, env: env,
			Args: append([]string{filepath.Join(v.bin, "recommender")}, append(args,
				"--recommender-interval="+recommenderInterval.String(),
				"--node-scope-min-history="+e2eMinNodeHistory.String(),
				// Checkpoint slices refreshed in every loop, so that a restart
				// finds all the history written before it.
				"--node-scope-checkpoint-refresh-interval="+recommenderInterval.String(),
				// Checkpoints of a deleted VPA go in the next loop, not after 10 minutes.
				"--checkpoints-gc-interval="+recommenderInterval.String(),
				"--address="+recommenderAddr)...),
			Healthy: HTTPOK("http://" + recommenderAddr + "/metrics")}
	case "vpa-admission-controller":
		return Daemon{Name: name, Port: admissionAddr, env: env,
			Args: append([]string{filepath.Join(v.bin, "admission-controller")}, append(args,
				"--client-ca-file="+v.c.Path("pki", "ca.crt"),
				"--tls-cert-file="+v.webhookPKI.Path("vpa-webhook.crt"), "--tls-private-key="+v.webhookPKI.Path("vpa-webhook.key"),
				"--port="+webhookPort, "--address="+admissionAddr)...),
			Healthy: HTTPOK("http://" + admissionAddr + "/metrics")}
	default:
		return Daemon{Name: name, Port: updaterAddr, env: env,
			Args: append([]string{filepath.Join(v.bin, "updater")}, append(append(args,
				"--updater-interval="+updaterInterval.String(), "--address="+updaterAddr), v.updaterArgs...)...),
			Healthy: HTTPOK("http://" + updaterAddr + "/metrics")}
	}
}

// start starts the named components (all when none is named) with the gate on
// or off; for the admission controller it waits until it has registered its
// webhook anew.
func (v *vpaComponents) start(ctx context.Context, gate bool, names ...string) {
	v.t.Helper()
	if len(names) == 0 {
		names = vpaDaemons
	}
	for _, name := range names {
		var old types.UID
		hooks := v.cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
		if name == "vpa-admission-controller" {
			if w, err := hooks.Get(ctx, "vpa-webhook-config", metav1.GetOptions{}); err == nil {
				old = w.UID
			}
		}
		if err := v.c.Start(ctx, v.daemon(name, gate)); err != nil {
			v.t.Fatal(err)
		}
		if name != "vpa-admission-controller" {
			continue
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
			w, err := hooks.Get(ctx, "vpa-webhook-config", metav1.GetOptions{})
			return err == nil && w.UID != old, nil
		}); err != nil {
			v.t.Fatalf("the admission controller registered no webhook: %v; its log %s:\n%s", err, v.c.logFile(name), Tail(v.c.logFile(name), 30))
		}
	}
}

func (v *vpaComponents) stop(names ...string) {
	for _, name := range names {
		if err := v.c.Stop(name, 10*time.Second); err != nil {
			v.t.Error(err)
		}
	}
}

// denied returns the lines of the components' logs, since the test began, that
// report a request the API server's authorizer refused.
func (v *vpaComponents) denied() []string {
	var out []string
	for _, name := range vpaDaemons {
		data, err := os.ReadFile(v.c.logFile(name))
		if err != nil || int64(len(data)) < v.logStart[name] {
			continue
		}
		for _, line := range strings.Split(string(data[v.logStart[name]:]), "\n") {
			if strings.Contains(line, "is forbidden: User") {
				out = append(out, name+": "+line)
			}
		}
	}
	return out
}

func (v *vpaComponents) stopAll() {
	v.stop("vpa-updater", "vpa-admission-controller", "vpa-recommender")
}

// testVPA is the VPA of the DaemonSet agent, with scope node or without: it
// applies its recommendations in place or by eviction, to CPU requests only
// (the limits keep the busy pod at 300m), at most 300m.
func testVPA(name string, nodeScope bool) *unstructured.Unstructured {
	spec := map[string]any{
		"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"},
		"updatePolicy": map[string]any{"updateMode": "InPlaceOrRecreate"},
		"resourcePolicy": map[string]any{"containerPolicies": []any{map[string]any{
			"containerName":       "agent",
			"controlledResources": []any{"cpu"},
			"controlledValues":    "RequestsOnly",
			"maxAllowed":          map[string]any{"cpu": "300m"},
		}}},
	}
	if nodeScope {
		spec["scope"] = "Node"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vpaGroup + "/v1",
		"kind":       "VerticalPodAutoscaler",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// nodeRec is the recommendation for the container agent: of one node, or the
// VPA's DaemonSet-wide one.
type nodeRec struct{ target, lower, upper map[string]string }

func (r nodeRec) cpu() *resource.Quantity {
	q, _ := resource.ParseQuantity(r.target["cpu"])
	return &q
}

func (r nodeRec) String() string {
	return fmt.Sprintf("target %v lowerBound %v upperBound %v", r.target, r.lower, r.upper)
}

func (r nodeRec) lowerCPU() *resource.Quantity {
	q, _ := resource.ParseQuantity(r.lower["cpu"])
	return &q
}

func (r nodeRec) upperCPU() *resource.Quantity {
	q, _ := resource.ParseQuantity(r.upper["cpu"])
	return &q
}

// updaterLoops is the updater's count of loops it ran, from its metrics, so
// that a check that it left a pod alone cannot pass because it did nothing.
type updaterLoops float64

func updaterActivity(t *testing.T, ctx context.Context) updaterLoops {
	t.Helper()
	loops, _ := updaterMetrics(t, ctx)
	return updaterLoops(loops)
}

// ranSince fails the test unless the updater ran at least n loops since the
// count was taken and, in its last one, controlled both pods of the DaemonSet.
func (since updaterLoops) ranSince(t *testing.T, ctx context.Context, n int, when string) {
	t.Helper()
	loops, controlled := updaterMetrics(t, ctx)
	if loops-float64(since) < float64(n) || controlled < 2 {
		t.Errorf("%s the updater ran %v loops (want at least %d) and controlled %v pods in its last one (want 2): the check that it left the pods alone proves nothing",
			when, loops-float64(since), n, controlled)
	}
}

// updaterMetrics returns the number of loops the updater has run
// (vpa_updater_execution_latency_seconds_count of the step total) and the
// pods it controlled in its last loop (vpa_updater_controlled_pods_total).
func updaterMetrics(t *testing.T, ctx context.Context) (loops, controlled float64) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+updaterAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the updater's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the updater's metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			continue
		}
		switch {
		case fields[0] == `vpa_updater_execution_latency_seconds_count{step="total"}`:
			loops = v
		case strings.HasPrefix(fields[0], "vpa_updater_controlled_pods_total{"):
			controlled += v
		}
	}
	return loops, controlled
}

func agentRec(ctrs []any) (nodeRec, bool) {
	for _, ctr := range ctrs {
		m, _ := ctr.(map[string]any)
		if cn, _, _ := unstructured.NestedString(m, "containerName"); cn != "agent" {
			continue
		}
		var r nodeRec
		r.target, _, _ = unstructured.NestedStringMap(m, "target")
		r.lower, _, _ = unstructured.NestedStringMap(m, "lowerBound")
		r.upper, _, _ = unstructured.NestedStringMap(m, "upperBound")
		return r, true
	}
	return nodeRec{}, false
}

// nodeEntries lists the slices of resource in the namespace and calls each for
// every per-node entry, with its node's name.
func nodeEntries(t *testing.T, ctx context.Context, dyn dynamic.Interface, resource schema.GroupVersionResource, ns string, each func(Node string, entry map[string]any)) {
	t.Helper()
	list, err := dyn.Resource(resource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range list.Items {
		nodes, _, _ := unstructured.NestedSlice(item.Object, "nodes")
		for _, n := range nodes {
			entry, _ := n.(map[string]any)
			name, _, _ := unstructured.NestedString(entry, "nodeName")
			each(name, entry)
		}
	}
}

// newestSliceWrite is the newest updateTime of the slices of the namespace.
func newestSliceWrite(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) time.Time {
	t.Helper()
	list, err := dyn.Resource(sliceResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var newest time.Time
	for _, item := range list.Items {
		raw, _, _ := unstructured.NestedString(item.Object, "updateTime")
		if at, err := time.Parse(time.RFC3339, raw); err == nil && at.After(newest) {
			newest = at
		}
	}
	if newest.IsZero() {
		t.Fatalf("no slice with updateTime in namespace %s", ns)
	}
	return newest
}

// sliceTargetsOf reads each node's recommendation from the slices of the namespace.
func sliceTargetsOf(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) map[string]nodeRec {
	t.Helper()
	out := map[string]nodeRec{}
	nodeEntries(t, ctx, dyn, sliceResource, ns, func(name string, entry map[string]any) {
		ctrs, _, _ := unstructured.NestedSlice(entry, "recommendation", "containerRecommendations")
		if r, ok := agentRec(ctrs); ok {
			out[name] = r
		}
	})
	return out
}

// sliceGroupTargets reads each node group's recommendation from the slices of
// the namespace, by the group label's value.
func sliceGroupTargets(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) map[string]nodeRec {
	t.Helper()
	list, err := dyn.Resource(sliceResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]nodeRec{}
	for _, item := range list.Items {
		groups, _, _ := unstructured.NestedSlice(item.Object, "groups")
		for _, g := range groups {
			entry, _ := g.(map[string]any)
			value, _, _ := unstructured.NestedString(entry, "labelValue")
			ctrs, _, _ := unstructured.NestedSlice(entry, "recommendation", "containerRecommendations")
			if r, ok := agentRec(ctrs); ok {
				out[value] = r
			}
		}
	}
	return out
}

// waitSliceTargets polls the slices until ok holds.
func waitSliceTargets(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, c *Cluster, ns string, timeout time.Duration, ok func(map[string]nodeRec) bool) map[string]nodeRec {
	t.Helper()
	var recs map[string]nodeRec
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, timeout, true, func(context.Context) (bool, error) {
		recs = sliceTargetsOf(t, ctx, dyn, ns)
		return ok(recs), nil
	}); err != nil {
		t.Fatalf("no per-node recommendations as expected after %s (got %v); %s\nrecommender log %s:\n%s\nmetrics-server log %s:\n%s",
			time.Since(start).Round(time.Second), recs, recommenderInputs(t, ctx, cs, dyn, c, ns),
			c.logFile("vpa-recommender"), Tail(c.logFile("vpa-recommender"), 60), c.logFile("metrics-server"), Tail(c.logFile("metrics-server"), 20))
	}
	return recs
}

// recommenderInputs says what a recommendation of each node depends on: the
// recommender's process, each node's history in the checkpoint slices, and
// each node's readiness, taints and pod.
func recommenderInputs(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, c *Cluster, ns string) string {
	t.Helper()
	var b strings.Builder
	_, running := c.Running("vpa-recommender")
	fmt.Fprintf(&b, "recommender running: %v; now %s\n", running, time.Now().UTC().Format(time.RFC3339))
	for name, ck := range checkpointSlices(t, ctx, dyn, ns) {
		fmt.Fprintf(&b, "history of node %s: %d samples, %s to %s\n", name, ck.samples, ck.first.Format(time.RFC3339), ck.last.Format(time.RFC3339))
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := daemonPods(t, ctx, cs, ns)
	for _, n := range nodes.Items {
		ready := "unknown"
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = string(cond.Status)
			}
		}
		p := pods[n.Name]
		fmt.Fprintf(&b, "node %s: Ready %s, taints %v; pod %s %s\n", n.Name, ready, n.Spec.Taints, p.Name, p.Status.Phase)
	}
	return b.String()
}

// wideRecommendation is the VPA agent's status.recommendation for the container agent.
func wideRecommendation(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) nodeRec {
	t.Helper()
	got, err := dyn.Resource(vpaResource).Namespace(ns).Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrs, _, _ := unstructured.NestedSlice(got.Object, "status", "recommendation", "containerRecommendations")
	r, _ := agentRec(ctrs)
	return r
}

// nodeCheckpoint is the history of the container agent on one node, from the
// checkpoint slices.
type nodeCheckpoint struct {
	first, last time.Time
	samples     int64
}

func checkpointSlices(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) map[string]nodeCheckpoint {
	t.Helper()
	out := map[string]nodeCheckpoint{}
	nodeEntries(t, ctx, dyn, checkpointSliceResource, ns, func(name string, entry map[string]any) {
		ctrs, _, _ := unstructured.NestedSlice(entry, "containers")
		for _, ctr := range ctrs {
			m, _ := ctr.(map[string]any)
			if cn, _, _ := unstructured.NestedString(m, "containerName"); cn != "agent" {
				continue
			}
			var ck nodeCheckpoint
			first, _, _ := unstructured.NestedString(m, "checkpoint", "firstSampleStart")
			last, _, _ := unstructured.NestedString(m, "checkpoint", "lastSampleStart")
			ck.first, _ = time.Parse(time.RFC3339, first)
			ck.last, _ = time.Parse(time.RFC3339, last)
			ck.samples, _, _ = unstructured.NestedInt64(m, "checkpoint", "totalSamplesCount")
			out[name] = ck
		}
	})
	return out
}

// checkpointSlicesManagedWhole fails when the API server tracks the fields of
// a checkpoint slice's nodes one by one: their list is atomic, because
// per-entry managedFields doubled the stored size and the cost of each write
// (docs/vpa-node-scope.md).
func checkpointSlicesManagedWhole(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) {
	t.Helper()
	list, err := dyn.Resource(checkpointSliceResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range list.Items {
		for _, m := range item.GetManagedFields() {
			var fields map[string]any
			if m.FieldsV1 == nil || json.Unmarshal(m.FieldsV1.Raw, &fields) != nil {
				t.Fatalf("checkpoint slice %s: managedFields of %s unreadable", item.GetName(), m.Manager)
			}
			if nodes, _ := fields["f:nodes"].(map[string]any); len(nodes) > 0 {
				t.Errorf("checkpoint slice %s: %s manages %d fields of nodes one by one, want the list atomic", item.GetName(), m.Manager, len(nodes))
			}
		}
	}
}

// daemonPods are the DaemonSet's pods that are not being deleted, by node.
func daemonPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) map[string]corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// waitNewPod waits for a Running pod on node other than the pod old.
func waitNewPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, Node string, old types.UID) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		var ok bool
		p, ok = daemonPods(t, ctx, cs, ns)[Node]
		return ok && p.UID != old && p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("no new Running pod of the DaemonSet on %s: %v", Node, err)
	}
	return p
}

// waitDaemonPods waits for a Running pod of the DaemonSet on each node.
func waitDaemonPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, nodes []string) map[string]corev1.Pod {
	t.Helper()
	var pods map[string]corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		pods = daemonPods(t, ctx, cs, ns)
		for _, n := range nodes {
			if pods[n].Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the DaemonSet has no Running pod on each of %v (%d pods): %v", nodes, len(pods), err)
	}
	return pods
}

func podCPURequest(p corev1.Pod) *resource.Quantity {
	return p.Spec.Containers[0].Resources.Requests.Cpu()
}

// actuatedCPU is the CPU request the kubelet reports as applied, nil before it does.
func actuatedCPU(p corev1.Pod) *resource.Quantity {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].Resources == nil {
		return nil
	}
	return p.Status.ContainerStatuses[0].Resources.Requests.Cpu()
}

func podCPULimit(p corev1.Pod) *resource.Quantity { return p.Spec.Containers[0].Resources.Limits.Cpu() }
