//go:build vpascale

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

package apiserver

import (
	"bufio"
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
)

// The VPA's components at scale (issue 37, item 6; docs/vpa-node-scope.md): the
// recommender, the updater and the admission controller of _output/vpa/bin run as
// processes against the lone API server, which holds NODES nodes (objects only)
// and one pod per node of each DaemonSet. The test plays what the lone server
// lacks: the DaemonSet controller and the kubelets (it creates each node's pod,
// reports it running, and replaces a pod that is deleted or evicted), and
// metrics-server (the components' API address is a proxy of this test that serves
// metrics.k8s.io from the pods it knows and forwards everything else). It reports
// and asserts no timing: hack/vpa.sh scale runs it and writes the table.
const (
	scaleNamespace       = "scale"
	scaleProxyAddr       = "127.0.0.1:26480"
	scaleRecommenderAddr = "127.0.0.1:26482"
	scaleUpdaterAddr     = "127.0.0.1:26483"
	scaleAdmissionAddr   = "127.0.0.1:26484"
	scaleWebhookPort     = "26486"
	// The loops of the run: a minute each, as short as the components allow a
	// run of minutes to show several of them.
	scaleRecommenderInterval = time.Minute
	scaleUpdaterInterval     = time.Minute
	// scaleMinNodeHistory lets every node get its own recommendation within the
	// run (the default is an hour).
	scaleMinNodeHistory = 2 * time.Minute
	// busyEvery: every busyEvery-th node's pods use ten times the CPU of the others.
	busyEvery = 10
)

var (
	scaleVPAResource   = schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1", Resource: "verticalpodautoscalers"}
	scaleSliceResource = schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1alpha1", Resource: "verticalpodautoscalerslices"}
	scaleComponents    = []string{"vpa-recommender", "vpa-admission-controller", "vpa-updater"}
)

// scaleResult is one run's measurements.
type scaleResult struct {
	name                      string
	nodes, daemonSets         int
	gate                      bool
	recommenderLoop           time.Duration // mean of the loops of the steady phase
	recommenderFirstLoop      time.Duration // the first loop after the restart
	updaterLoop               time.Duration
	admission                 time.Duration // mean admission latency of the rollouts
	rss, heap                 map[string]float64
	rssRestart, heapRestart   float64 // the recommender after its restart, MiB
	rssWeek, heapWeek         map[string]float64
	writesPerMinute           map[string]float64       // "VERB resource" of the components' writes in the steady phase
	writeLatency              map[string]time.Duration // the API server's mean latency of those writes in the steady phase
	recommenderSteps          map[string]time.Duration // the mean of each step of the recommender's loops in the steady phase
	etcdBytesPerMinute        float64
	rollouts                  int
	nodeEntries               int // per-node recommendations at the end of the steady phase
	podsEvicted, podsReplaced int64
}

func TestVPAScale(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	nodes := envInt(t, "VPA_SCALE_NODES", 5000)
	rollouts := envInt(t, "VPA_SCALE_ROLLOUTS", 7)
	runs := strings.Fields(envOr("VPA_SCALE_RUNS", "off/1 on/1 off/3 on/3"))
	var results []scaleResult
	for _, run := range runs {
		gate, ds, ok := strings.Cut(run, "/")
		n, err := strconv.Atoi(ds)
		if !ok || err != nil || (gate != "on" && gate != "off") {
			t.Fatalf("VPA_SCALE_RUNS: %q is not on/N or off/N", run)
		}
		week := 0
		if n == 1 {
			// The week of rollouts runs with one DaemonSet: its cost is the
			// replaced pods' state, which three DaemonSets multiply.
			week = rollouts
		}
		t.Run(run, func(t *testing.T) {
			s := newScaleRun(t, root, nodes, n, gate == "on", week)
			results = append(results, s.run())
		})
		// Written after each run, so that a later failure keeps the runs before it.
		report := scaleReport(results)
		t.Log("\n" + report)
		if out := os.Getenv("VPA_SCALE_REPORT"); out != "" {
			if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// releaseBuild fails for a binary that is missing or built with the race
// detector: make test builds the same paths with -race, which makes the code
// the run measures several times slower and its numbers meaningless.
func releaseBuild(path string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return err
	}
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return fmt.Errorf("%s is built with -race", path)
		}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, name string, def int) int {
	n, err := strconv.Atoi(envOr(name, strconv.Itoa(def)))
	if err != nil || n < 0 {
		t.Fatalf("%s: want a number, got %q", name, os.Getenv(name))
	}
	return n
}

type scaleRun struct {
	t                 *testing.T
	ctx               context.Context
	root              string
	a                 *LoneAPIServer
	cs                kubernetes.Interface
	dyn               dynamic.Interface
	nodes, daemonSets int
	gate              bool
	rollouts          int
	pods              cache.Indexer
	dsUIDs            []string
	revision          atomic.Int64 // the DaemonSets' pod template revision
	evicted, replaced atomic.Int64
	terminating       sync.Map // UIDs of the pods seen terminating
	kubeconfig        string   // the components', through the proxy
	res               scaleResult
}

func newScaleRun(t *testing.T, root string, nodes, daemonSets int, gate bool, rollouts int) *scaleRun {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &scaleRun{t: t, ctx: ctx, root: root, a: NewLoneAPIServer(root, t.Output()), nodes: nodes, daemonSets: daemonSets, gate: gate, rollouts: rollouts}
	s.res = scaleResult{name: t.Name(), nodes: nodes, daemonSets: daemonSets, gate: gate, rollouts: rollouts}
	for _, bin := range []string{
		filepath.Join(root, "_output", "vpa", "bin", "recommender"),
		filepath.Join(root, "_output", "vpa", "bin", "updater"),
		filepath.Join(root, "_output", "vpa", "bin", "admission-controller"),
		filepath.Join(root, "_output", "bin", "kube-apiserver"),
	} {
		if err := releaseBuild(bin); err != nil {
			t.Fatalf("%v: hack/vpa.sh scale builds them", err)
		}
	}
	// Every run starts from an empty store.
	if err := s.a.Down(); err != nil {
		t.Fatal(err)
	}
	if err := s.a.Up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range scaleComponents {
			if err := s.a.c.Stop(name, 10*time.Second); err != nil {
				t.Error(err)
			}
		}
		if err := s.a.Down(); err != nil {
			t.Error(err)
		}
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", s.a.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	s.cs = kubernetes.NewForConfigOrDie(cfg)
	s.dyn = dynamic.NewForConfigOrDie(cfg)
	s.serveProxy(cfg)
	return s
}

func (s *scaleRun) logf(format string, args ...any) {
	s.t.Logf("%s %s", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (s *scaleRun) run() scaleResult {
	t := s.t
	s.installCRDs()
	s.createObjects()
	s.watchPods()
	s.startComponents()
	start := time.Now()
	s.createPods()
	s.logf("%d pods running after %v", s.nodes*s.daemonSets, time.Since(start).Round(time.Second))

	// Steady phase: the loops after the recommender has every node's history
	// (with the gate, each node its own recommendation).
	for loops := 0; loops < 2 || (s.gate && s.nodeEntries() < s.nodes*s.daemonSets); loops++ {
		if loops == 12 {
			t.Fatalf("after %d loops, %d of %d nodes have their own recommendation", loops, s.nodeEntries(), s.nodes*s.daemonSets)
		}
		s.waitLoops("vpa-recommender", scaleRecommenderAddr, 1)
		if s.gate {
			s.logf("loop %d: %d nodes have their own recommendation", loops+1, s.nodeEntries())
		}
	}
	before := s.sample()
	s.waitLoops("vpa-recommender", scaleRecommenderAddr, 3)
	after := s.sample()
	minutes := after.at.Sub(before.at).Minutes()
	s.res.recommenderLoop = after.loop("vpa-recommender").since(before.loop("vpa-recommender"))
	s.res.updaterLoop = after.loop("vpa-updater").since(before.loop("vpa-updater"))
	s.res.rss, s.res.heap = after.rss, after.heap
	s.res.writesPerMinute = map[string]float64{}
	for k, v := range after.writes {
		if d := v - before.writes[k]; d > 0 {
			s.res.writesPerMinute[k] = d / minutes
		}
	}
	s.res.writeLatency = map[string]time.Duration{}
	for k := range s.res.writesPerMinute {
		s.res.writeLatency[k] = after.latency[k].since(before.latency[k])
	}
	s.res.recommenderSteps = map[string]time.Duration{}
	for step, c := range after.steps {
		if d := c.since(before.steps[step]); d > 0 {
			s.res.recommenderSteps[step] = d
		}
	}
	s.res.etcdBytesPerMinute = (after.walBytes - before.walBytes) / minutes
	s.res.nodeEntries = s.nodeEntries()
	s.logf("steady: recommender loop %v, updater loop %v, RSS %v MiB", s.res.recommenderLoop, s.res.updaterLoop, after.rss)

	// Restart of the recommender: its first loop loads the checkpoints.
	if err := s.a.c.Stop("vpa-recommender", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.start("vpa-recommender")
	s.waitLoops("vpa-recommender", scaleRecommenderAddr, 1)
	first := s.sample()
	s.res.recommenderFirstLoop = first.loop("vpa-recommender").mean()
	s.waitLoops("vpa-recommender", scaleRecommenderAddr, 1)
	restarted := s.sample()
	s.res.rssRestart, s.res.heapRestart = restarted.rss["vpa-recommender"], restarted.heap["vpa-recommender"]

	// The week: each rollout replaces every pod by one of the next revision
	// (the DaemonSet controller's rolling update, at once), through the
	// admission controller; a recommender loop runs between two.
	admBefore := restarted.admission
	for i := 1; i <= s.rollouts; i++ {
		start := time.Now()
		s.rollout()
		s.logf("rollout %d of %d in %v", i, s.rollouts, time.Since(start).Round(time.Second))
		s.waitLoops("vpa-recommender", scaleRecommenderAddr, 1)
	}
	if s.rollouts > 0 {
		s.waitLoops("vpa-recommender", scaleRecommenderAddr, 2)
		week := s.sample()
		s.res.rssWeek, s.res.heapWeek = week.rss, week.heap
		s.res.admission = week.admission.since(admBefore)
	}
	s.res.podsEvicted, s.res.podsReplaced = s.evicted.Load(), s.replaced.Load()
	return s.res
}

// installCRDs applies the VPA's CRDs of the autoscaler tree.
func (s *scaleRun) installCRDs() {
	crds := filepath.Join(s.root, "_output", "autoscaler", "vertical-pod-autoscaler", "deploy", "vpa-v1-crd-gen.yaml")
	kubectl := filepath.Join(s.root, "_output", "bin", "kubectl")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", crds},
		{"wait", "--for=condition=Established", "--timeout=2m", "-f", crds},
	} {
		out, err := exec.CommandContext(s.ctx, kubectl, append([]string{"--kubeconfig", s.a.Kubeconfig()}, args...)...).CombinedOutput()
		if err != nil {
			s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// parallel runs f for 0..n-1 on 32 workers.
func (s *scaleRun) parallel(n int, f func(ctx context.Context, i int) error) {
	g, ctx := errgroup.WithContext(s.ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error { return f(ctx, i) })
	}
	if err := g.Wait(); err != nil {
		s.t.Fatal(err)
	}
}

// createObjects creates the nodes, the namespace, the DaemonSets and their VPAs
// (scope Node, Recreate, CPU and memory).
func (s *scaleRun) createObjects() {
	start := time.Now()
	s.parallel(s.nodes, func(ctx context.Context, i int) error {
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{"kubernetes.io/hostname": nodeName(i)}}}
		n, err := s.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		if n, err = s.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		// The node.kubernetes.io/not-ready taint that admission puts on a new
		// node goes once it is Ready, as the node lifecycle controller removes
		// it: a DaemonSet does not tolerate it (NoSchedule).
		n.Spec.Taints = nil
		_, err = s.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if _, err := s.cs.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	for d := range s.daemonSets {
		name := fmt.Sprintf("agent-%d", d)
		labels := map[string]string{"app": name}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: agentPodSpec()},
		}}
		ds, err := s.cs.AppsV1().DaemonSets(scaleNamespace).Create(s.ctx, ds, metav1.CreateOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.dsUIDs = append(s.dsUIDs, string(ds.UID))
		vpa := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling.k8s.io/v1",
			"kind":       "VerticalPodAutoscaler",
			"metadata":   map[string]any{"name": name},
			"spec": map[string]any{
				"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name},
				"scope":        "Node",
				"updatePolicy": map[string]any{"updateMode": "Recreate"},
			},
		}}
		if _, err := s.dyn.Resource(scaleVPAResource).Namespace(scaleNamespace).Create(s.ctx, vpa, metav1.CreateOptions{}); err != nil {
			s.t.Fatal(err)
		}
	}
	s.logf("%d nodes, %d DaemonSets and their VPAs in %v", s.nodes, s.daemonSets, time.Since(start).Round(time.Second))
}

// agentPodSpec requests what the DaemonSet-wide recommendation of the usage
// podMetrics reports lies around, so that the pods are not all evicted when the
// first recommendation appears.
func agentPodSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{
		Name: "agent", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}},
	}}}
}

// watchPods keeps the test's view of the pods (for the metrics it serves) and
// plays the DaemonSet controller and the kubelet for a pod that is deleted (an
// eviction): it removes it and creates its node's next pod.
func (s *scaleRun) watchPods() {
	factory := informers.NewSharedInformerFactoryWithOptions(s.cs, 0, informers.WithNamespace(scaleNamespace))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		p := obj.(*corev1.Pod)
		// A terminating pod is updated again when it is deleted at once:
		// it is replaced once.
		if p.DeletionTimestamp == nil {
			return
		}
		if _, seen := s.terminating.LoadOrStore(p.UID, true); seen {
			return
		}
		s.evicted.Add(1)
		go s.replace(p)
	}}); err != nil {
		s.t.Fatal(err)
	}
	s.pods = inf.GetIndexer()
	factory.Start(s.ctx.Done())
	factory.WaitForCacheSync(s.ctx.Done())
}

// replace deletes p at once and creates its node's pod of the current revision.
func (s *scaleRun) replace(p *corev1.Pod) {
	err := s.cs.CoreV1().Pods(p.Namespace).Delete(s.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		s.t.Errorf("delete %s: %v", p.Name, err)
		return
	}
	ds, _ := strconv.Atoi(strings.TrimPrefix(p.Labels["app"], "agent-"))
	node, _ := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "node-"))
	if err := s.createPod(s.ctx, ds, node); err != nil && s.ctx.Err() == nil {
		s.t.Errorf("replace %s: %v", p.Name, err)
	}
	s.replaced.Add(1)
}

// createPod creates the pod of DaemonSet ds on node through the admission chain
// (the VPA's webhook) and reports it running, as the kubelet would.
func (s *scaleRun) createPod(ctx context.Context, ds, node int) error {
	name := fmt.Sprintf("agent-%d", ds)
	rev := strconv.FormatInt(s.revision.Load(), 10)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: fmt.Sprintf("%s-%s-", name, nodeName(node)),
			Labels:       map[string]string{"app": name, "controller-revision-hash": rev},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: name,
				UID: k8stypes.UID(s.dsUIDs[ds]), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: agentPodSpec(),
	}
	p.Spec.NodeName = nodeName(node)
	p, err := s.cs.CoreV1().Pods(scaleNamespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: true, Image: p.Spec.Containers[0].Image, ImageID: "sha256:pause",
			ContainerID: "containerd://" + string(p.UID), Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	_, err = s.cs.CoreV1().Pods(scaleNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// createPods creates every node's pod of each DaemonSet and reports the
// DaemonSets' status as their controller would: the updater evicts only from a
// DaemonSet with its desired pods scheduled.
func (s *scaleRun) createPods() {
	s.parallel(s.nodes*s.daemonSets, func(ctx context.Context, i int) error {
		return s.createPod(ctx, i/s.nodes, i%s.nodes)
	})
	n := int32(s.nodes)
	for d := range s.daemonSets {
		ds, err := s.cs.AppsV1().DaemonSets(scaleNamespace).Get(s.ctx, fmt.Sprintf("agent-%d", d), metav1.GetOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: n, CurrentNumberScheduled: n, NumberReady: n, NumberAvailable: n,
			UpdatedNumberScheduled: n, ObservedGeneration: ds.Generation}
		if _, err := s.cs.AppsV1().DaemonSets(scaleNamespace).UpdateStatus(s.ctx, ds, metav1.UpdateOptions{}); err != nil {
			s.t.Fatal(err)
		}
	}
}

// nodeEntries is the number of per-node recommendations in the slices.
func (s *scaleRun) nodeEntries() int {
	list, err := s.dyn.Resource(scaleSliceResource).Namespace(scaleNamespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return 0
		}
		s.t.Fatal(err)
	}
	n := 0
	for _, item := range list.Items {
		nodes, _, _ := unstructured.NestedSlice(item.Object, "nodes")
		n += len(nodes)
	}
	return n
}

// rollout replaces every pod by one of the next revision.
func (s *scaleRun) rollout() {
	s.revision.Add(1)
	pods := s.pods.List()
	s.parallel(len(pods), func(ctx context.Context, i int) error {
		p := pods[i].(*corev1.Pod)
		if p.DeletionTimestamp != nil {
			return nil // an eviction's replacement is on its way
		}
		// Deleted at once: the watcher sees no pod terminating, which it
		// would take for an eviction.
		if err := s.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return client404(err)
		}
		ds, _ := strconv.Atoi(strings.TrimPrefix(p.Labels["app"], "agent-"))
		node, _ := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "node-"))
		return s.createPod(ctx, ds, node)
	})
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// serveProxy serves the components' API address: metrics.k8s.io from the pods the
// test knows, everything else forwarded to the lone API server as its admin.
func (s *scaleRun) serveProxy(cfg *rest.Config) {
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	target, _ := url.Parse(cfg.Host)
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.Transport = transport
	forward.FlushInterval = -1
	mux := http.NewServeMux()
	mux.Handle("/", forward)
	mux.HandleFunc("/apis/metrics.k8s.io/v1beta1", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "metrics.k8s.io/v1beta1",
			"resources": []any{map[string]any{"name": "pods", "namespaced": true, "kind": "PodMetrics", "verbs": []string{"get", "list"}}}})
	})
	mux.HandleFunc("/apis/metrics.k8s.io/v1beta1/pods", s.podMetrics)
	mux.HandleFunc("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods", s.podMetrics)
	ln, err := net.Listen("tcp", scaleProxyAddr)
	if err != nil {
		s.t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	s.t.Cleanup(func() { srv.Close() })

	kc := clientcmdapi.NewConfig()
	kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: "http://" + scaleProxyAddr}
	kc.AuthInfos["scale"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "scale"}
	kc.CurrentContext = "scale"
	s.kubeconfig = s.a.c.Path("vpa-scale.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, s.kubeconfig); err != nil {
		s.t.Fatal(err)
	}
}

// podMetrics lists a PodMetrics for each running pod: a busy node's pods use 800m
// CPU and 400 MiB, the others 80m and 100 MiB, with a little noise by the minute.
func (s *scaleRun) podMetrics(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var items []any
	for _, obj := range s.pods.List() {
		p := obj.(*corev1.Pod)
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		node, _ := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "node-"))
		cpu, mem := int64(80), int64(100)
		if node%busyEvery == 0 {
			cpu, mem = 800, 400
		}
		cpu += (int64(node) + now.Unix()/60) % 7
		items = append(items, map[string]any{
			"metadata":   map[string]any{"name": p.Name, "namespace": p.Namespace, "labels": p.Labels},
			"timestamp":  now.Format(time.RFC3339),
			"window":     "1m0s",
			"containers": []any{map[string]any{"name": "agent", "usage": map[string]string{"cpu": fmt.Sprintf("%dm", cpu), "memory": fmt.Sprintf("%dMi", mem)}}},
		})
	}
	writeJSON(w, map[string]any{"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": map[string]any{}, "items": items})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// startComponents starts the admission controller (registered by URL with the lone
// server, so that every pod the test creates passes it), the recommender and the
// updater.
func (s *scaleRun) startComponents() {
	p := &cluster.PKI{Dir: s.a.c.Path("pki")}
	if err := p.EnsureCA(); err != nil {
		s.t.Fatal(err)
	}
	if err := p.Leaf("vpa-webhook", "vpa-webhook", nil, x509.ExtKeyUsageServerAuth, nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		s.t.Fatal(err)
	}
	for _, name := range scaleComponents {
		s.start(name)
	}
	if err := wait.PollUntilContextTimeout(s.ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "vpa-webhook-config", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		s.t.Fatalf("the admission controller registered no webhook: %v", err)
	}
}

func (s *scaleRun) start(name string) {
	bin := filepath.Join(s.root, "_output", "vpa", "bin")
	// env sets the namespace of the components' status leases, as deploy/ does.
	args := []string{"/usr/bin/env", "NAMESPACE=kube-system"}
	// --profiling serves /debug/pprof on each component's --address, so a run's
	// loop can be profiled while it goes (docs/vpa-node-scope.md).
	common := []string{"--kubeconfig=" + s.kubeconfig, fmt.Sprintf("--feature-gates=DaemonSetNodeScope=%t", s.gate), "--v=" + envOr("VPA_SCALE_V", "2"), "--profiling"}
	var d cluster.Daemon
	switch name {
	case "vpa-recommender":
		d = cluster.Daemon{Name: name, Port: scaleRecommenderAddr, Healthy: cluster.HTTPOK("http://" + scaleRecommenderAddr + "/metrics"),
			Args: append(append(args, filepath.Join(bin, "recommender")), append(common,
				"--recommender-interval="+scaleRecommenderInterval.String(),
				"--node-scope-min-history="+scaleMinNodeHistory.String(),
				"--address="+scaleRecommenderAddr)...)}
	case "vpa-updater":
		d = cluster.Daemon{Name: name, Port: scaleUpdaterAddr, Healthy: cluster.HTTPOK("http://" + scaleUpdaterAddr + "/metrics"),
			Args: append(append(args, filepath.Join(bin, "updater")), append(common,
				"--updater-interval="+scaleUpdaterInterval.String(),
				"--address="+scaleUpdaterAddr)...)}
	default:
		p := &cluster.PKI{Dir: s.a.c.Path("pki")}
		d = cluster.Daemon{Name: name, Port: scaleAdmissionAddr, Healthy: cluster.HTTPOK("http://" + scaleAdmissionAddr + "/metrics"),
			Args: append(append(args, filepath.Join(bin, "admission-controller")), append(common,
				"--client-ca-file="+p.Path("ca.crt"),
				"--tls-cert-file="+p.Path("vpa-webhook.crt"), "--tls-private-key="+p.Path("vpa-webhook.key"),
				"--register-by-url=true", "--webhook-address=https://127.0.0.1", "--webhook-port="+scaleWebhookPort,
				"--port="+scaleWebhookPort, "--address="+scaleAdmissionAddr)...)}
	}
	if err := s.a.c.Start(s.ctx, d); err != nil {
		s.t.Fatal(err)
	}
}

var componentAddr = map[string]string{"vpa-recommender": scaleRecommenderAddr, "vpa-updater": scaleUpdaterAddr, "vpa-admission-controller": scaleAdmissionAddr}

// waitLoops waits until the component has finished n more loops.
func (s *scaleRun) waitLoops(name, addr string, n int) {
	start := s.metric(addr, loopMetric(name), `step="total"`, "_count")
	if err := wait.PollUntilContextTimeout(s.ctx, 2*time.Second, time.Duration(n+3)*scaleRecommenderInterval+10*time.Minute, false, func(context.Context) (bool, error) {
		return s.metric(addr, loopMetric(name), `step="total"`, "_count") >= start+float64(n), nil
	}); err != nil {
		s.t.Fatalf("%s finished no %d loops: %v; its log:\n%s", name, n, err, cluster.Tail(s.a.c.Path("logs", name+".log"), 30))
	}
}

func loopMetric(name string) string {
	return "vpa_" + strings.TrimPrefix(strings.ReplaceAll(name, "-", "_"), "vpa_") + "_execution_latency_seconds"
}

// metric sums the samples of name+suffix whose labels contain every part of labels.
func (s *scaleRun) metric(addr, name, labels, suffix string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+suffix) {
			continue
		}
		rest := line[len(name+suffix):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		match := true
		for _, l := range strings.Split(labels, ",") {
			if l != "" && !strings.Contains(rest, l) {
				match = false
			}
		}
		if !match {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// counter is a histogram's sum and count at one time.
type counter struct{ sum, count float64 }

func (c counter) since(b counter) time.Duration {
	if c.count <= b.count {
		return 0
	}
	return time.Duration((c.sum - b.sum) / (c.count - b.count) * float64(time.Second))
}

func (c counter) mean() time.Duration { return c.since(counter{}) }

type scaleSample struct {
	at        time.Time
	loops     map[string]counter
	admission counter
	rss, heap map[string]float64 // MiB
	writes    map[string]float64 // apiserver_request_total of writes by "VERB resource"
	latency   map[string]counter // apiserver_request_duration_seconds of the same writes
	steps     map[string]counter // the recommender's loop by step
	walBytes  float64
}

func (x scaleSample) loop(name string) counter { return x.loops[name] }

// sample reads the components' loops and memory, the API server's write counts
// and etcd's WAL bytes.
func (s *scaleRun) sample() scaleSample {
	x := scaleSample{at: time.Now(), loops: map[string]counter{}, rss: map[string]float64{}, heap: map[string]float64{}, writes: map[string]float64{}, steps: map[string]counter{}}
	for _, name := range scaleComponents {
		addr := componentAddr[name]
		if name != "vpa-admission-controller" {
			x.loops[name] = counter{s.metric(addr, loopMetric(name), `step="total"`, "_sum"), s.metric(addr, loopMetric(name), `step="total"`, "_count")}
		}
		x.heap[name] = s.metric(addr, "go_memstats_heap_inuse_bytes", "", "") / (1 << 20)
		if pid, ok := s.a.c.Running(name); ok {
			x.rss[name] = vmRSS(pid)
		}
	}
	x.admission = counter{s.metric(scaleAdmissionAddr, "vpa_admission_controller_admission_latency_seconds", "", "_sum"),
		s.metric(scaleAdmissionAddr, "vpa_admission_controller_admission_latency_seconds", "", "_count")}
	x.writes, x.latency = s.apiserverWrites()
	for _, step := range s.labelValues(scaleRecommenderAddr, loopMetric("vpa-recommender")+"_count", "step") {
		if step != "total" {
			label := `step="` + step + `"`
			x.steps[step] = counter{s.metric(scaleRecommenderAddr, loopMetric("vpa-recommender"), label, "_sum"), s.metric(scaleRecommenderAddr, loopMetric("vpa-recommender"), label, "_count")}
		}
	}
	x.walBytes = s.etcdWALBytes()
	return x
}

// vmRSS is the resident set of a process in MiB.
func vmRSS(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// apiserverWrites counts the API server's completed writes by verb and resource,
// of the resources the components write (not the pods and nodes the test writes),
// and sums their latency.
func (s *scaleRun) apiserverWrites() (map[string]float64, map[string]counter) {
	raw, err := s.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	out, latency := map[string]float64{}, map[string]counter{}
	for _, line := range strings.Split(string(raw), "\n") {
		metric, _, _ := strings.Cut(line, "{")
		switch metric {
		case "apiserver_request_total", "apiserver_request_duration_seconds_sum", "apiserver_request_duration_seconds_count":
		default:
			continue
		}
		labels := promLabels(line)
		switch labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
		default:
			continue
		}
		switch labels["resource"] {
		case "pods", "nodes", "namespaces", "daemonsets", "customresourcedefinitions":
			if labels["subresource"] != "eviction" {
				continue
			}
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		c := latency[key]
		switch metric {
		case "apiserver_request_total":
			out[key] += v
		case "apiserver_request_duration_seconds_sum":
			c.sum += v
		case "apiserver_request_duration_seconds_count":
			c.count += v
		}
		latency[key] = c
	}
	return out, latency
}

// labelValues returns the values a label takes in the series of a metric.
func (s *scaleRun) labelValues(addr, series, label string) []string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var values []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, series+"{") {
			if v, ok := promLabels(line)[label]; ok && !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
	}
	sort.Strings(values)
	return values
}

func promLabels(line string) map[string]string {
	out := map[string]string{}
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if open < 0 || end < open {
		return out
	}
	for _, kv := range strings.Split(line[open+1:end], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// etcdWALBytes is the bytes etcd wrote to its write-ahead log.
func (s *scaleRun) etcdWALBytes() float64 {
	return s.metric(loneEtcdClient, "etcd_disk_wal_write_bytes_total", "", "")
}

func scaleReport(results []scaleResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| run | nodes | DaemonSets | recommender loop | after restart: first loop | updater loop | RSS MiB rec / adm / upd | heap MiB rec / adm / upd | recommender after restart RSS / heap | after %s rollouts RSS / heap (rec) | admission mean | component writes/min (API server's mean latency) | recommender loop by step | etcd WAL KiB/min | per-node recommendations | evictions |\n", "the")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		var writes []string
		for k, v := range r.writesPerMinute {
			writes = append(writes, fmt.Sprintf("%s %.1f (%v)", k, v, r.writeLatency[k].Round(time.Millisecond)))
		}
		sort.Strings(writes)
		var steps []string
		for step, d := range r.recommenderSteps {
			steps = append(steps, fmt.Sprintf("%s %v", step, d.Round(time.Millisecond)))
		}
		sort.Strings(steps)
		week := "-"
		if r.rollouts > 0 {
			week = fmt.Sprintf("%d: %.0f / %.0f", r.rollouts, r.rssWeek["vpa-recommender"], r.heapWeek["vpa-recommender"])
		}
		gate := map[bool]string{true: "gate on", false: "gate off"}[r.gate]
		fmt.Fprintf(&b, "| %s | %d | %d | %v | %v | %v | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %.0f / %.0f | %s | %v | %s | %s | %.0f | %d | %d |\n",
			gate, r.nodes, r.daemonSets, r.recommenderLoop.Round(time.Millisecond), r.recommenderFirstLoop.Round(time.Millisecond), r.updaterLoop.Round(time.Millisecond),
			r.rss["vpa-recommender"], r.rss["vpa-admission-controller"], r.rss["vpa-updater"],
			r.heap["vpa-recommender"], r.heap["vpa-admission-controller"], r.heap["vpa-updater"],
			r.rssRestart, r.heapRestart, week, r.admission.Round(time.Microsecond), strings.Join(writes, ", "), strings.Join(steps, ", "), r.etcdBytesPerMinute/1024, r.nodeEntries, r.podsEvicted)
	}
	return b.String()
}
