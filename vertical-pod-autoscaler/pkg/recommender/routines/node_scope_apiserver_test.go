//go:build vpaapiserver

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

package routines

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"sigs.k8s.io/yaml"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
	controllerfetcher "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/target/controller_fetcher"
	nodescopeutil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/nodescope"
)

// requestCounter counts the requests of a client by verb and resource, the
// bytes of their bodies and the time until their responses.
type requestCounter struct {
	mu       sync.Mutex
	requests map[string]int
	bytes    map[string]int
	latency  map[string]time.Duration
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		key := requestKey(req)
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		c.requests[key]++
		if req.ContentLength > 0 {
			c.bytes[key] += int(req.ContentLength)
		}
		c.latency[key] += time.Since(start)
		c.mu.Unlock()
		return resp, err
	})
}

func (c *requestCounter) reset() (map[string]int, map[string]int, map[string]time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	requests, bytes, latency := c.requests, c.bytes, c.latency
	c.requests, c.bytes, c.latency = map[string]int{}, map[string]int{}, map[string]time.Duration{}
	return requests, bytes, latency
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requestKey is "verb resource[/subresource]" of a request to a namespaced
// resource, e.g. "update verticalpodautoscalerslices".
func requestKey(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	resource := req.URL.Path
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			resource = parts[i+2]
			if i+4 < len(parts) {
				resource += "/" + parts[i+4]
			}
			break
		}
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[req.Method]
	if req.Method == http.MethodGet {
		verb = "get"
		if req.URL.Query().Get("watch") == "true" {
			verb = "watch"
		} else if len(parts)%2 == 0 {
			verb = "list"
		}
	}
	return verb + " " + resource
}

// installCRDs creates the CRDs of deploy/vpa-v1-crd-gen.yaml and waits until
// they are served.
func installCRDs(t *testing.T, cfg *rest.Config) {
	raw, err := os.ReadFile("../../../deploy/vpa-v1-crd-gen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Create(context.TODO(), obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	vpaClient := vpa_clientset.NewForConfigOrDie(cfg)
	if err := wait.PollUntilContextTimeout(context.TODO(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err1 := vpaClient.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(ctx, metav1.ListOptions{})
		_, err2 := vpaClient.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(ctx, metav1.ListOptions{})
		_, err3 := vpaClient.AutoscalingV1().VerticalPodAutoscalers("default").List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil && err3 == nil, nil
	}); err != nil {
		t.Fatalf("the CRDs are not served: %v", err)
	}
}

// sliceWatch counts the events and bytes a watcher of the slices receives.
type sliceWatch struct {
	mu            sync.Mutex
	events, bytes int
}

func (w *sliceWatch) reset() (events, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	events, bytes = w.events, w.bytes
	w.events, w.bytes = 0, 0
	return events, bytes
}

// apiServerRun is one case of TestNodeScopeWritesOnAPIServer: a VPA of its
// own on the server, the fixture's recommender with a model of its own, the
// nodes' names and the time of their last samples.
type apiServerRun struct {
	t       *testing.T
	cfg     *rest.Config
	client  *vpa_clientset.Clientset
	counter *requestCounter
	f       *nodeScopeFixture
	rnd     *rand.Rand
	names   []string
	at      time.Time
	watch   *sliceWatch
}

// newAPIServerRun deletes what earlier cases left in the namespace, then
// creates the node-scoped VPA (a new UID) and a recommender on the server.
func newAPIServerRun(t *testing.T, cfg *rest.Config, client *vpa_clientset.Clientset, counter *requestCounter) *apiServerRun {
	ctx := context.TODO()
	for _, err := range []error{
		client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		client.AutoscalingV1().VerticalPodAutoscalerCheckpoints("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		client.AutoscalingV1().VerticalPodAutoscalers("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	created, err := client.AutoscalingV1().VerticalPodAutoscalers("default").Create(ctx, &vpa_types.VerticalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: vpa_types.VerticalPodAutoscalerSpec{
			TargetRef: &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent"},
			Scope:     vpa_types.ScopeNode,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &nodeScopeFixture{apiVPA: created}
	f.startWith(t, client)
	return &apiServerRun{t: t, cfg: cfg, client: client, counter: counter, f: f, rnd: rand.New(rand.NewSource(1)), watch: &sliceWatch{}}
}

// checkpointAll runs loops until every node is checkpointed, as in
// BenchmarkRecommenderLoop (with the gate off: one loop).
func (r *apiServerRun) checkpointAll() {
	first := time.Now()
	gate := features.Enabled(features.DaemonSetNodeScope)
	for i := 0; i < 20 && (i == 0 || gate && r.f.checkpointedNodes(r.t) < len(r.names)); i++ {
		r.f.r.UpdateVPAs()
		r.f.r.MaintainCheckpoints(context.TODO())
	}
	if gate {
		r.t.Logf("MEASURED first loops until all checkpointed: %v", time.Since(first))
	}
	r.at = time.Now()
}

// watchSlices starts the watcher of the slices.
func (r *apiServerRun) watchSlices() {
	ctx := context.TODO()
	list, err := r.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	watcher, err := vpa_clientset.NewForConfigOrDie(rest.CopyConfig(r.cfg)).AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(watcher.Stop)
	w := r.watch
	go func() {
		for e := range watcher.ResultChan() {
			raw, _ := json.Marshal(e.Object)
			w.mu.Lock()
			w.events++
			w.bytes += len(raw)
			w.mu.Unlock()
		}
	}()
}

// loops runs n recommender loops, each after a new minute of samples of the
// pods agent-<node><suffix>, and logs what they sent and what the watcher of
// the slices received, per loop.
func (r *apiServerRun) loops(what string, n int, suffix string) {
	r.counter.reset()
	r.watch.reset()
	var busy time.Duration
	for range n {
		r.at = r.at.Add(time.Minute)
		r.f.feedMovingPods(r.t, r.rnd, r.names, suffix, r.at)
		start := time.Now()
		r.f.r.UpdateVPAs()
		loopCtx, cancel := context.WithDeadline(context.TODO(), time.Now().Add(time.Minute))
		r.f.r.MaintainCheckpoints(loopCtx)
		cancel()
		busy += time.Since(start)
	}
	time.Sleep(2 * time.Second) // the last events
	requests, sent, latency := r.counter.reset()
	events, eventBytes := r.watch.reset()
	var parts []string
	for key, count := range requests {
		parts = append(parts, fmt.Sprintf("%s: %.1f requests %.0f B %v", key, float64(count)/float64(n), float64(sent[key])/float64(n), latency[key]/time.Duration(n)))
	}
	sort.Strings(parts)
	r.t.Logf("MEASURED %s, per loop: loop %v; %s; watch of the slices: %.1f events %.0f B",
		what, busy/time.Duration(n), strings.Join(parts, "; "), float64(events)/float64(n), float64(eventBytes)/float64(n))
}

// memory logs the heap in use after a GC beyond base (what the recommender's
// model, its checkpoint store and slice writer hold: base is taken after
// the listers were filled), the model's aggregations, and the RSS of this
// process after the free heap was returned to the system.
func (r *apiServerRun) memory(what string, base heap) {
	now := heapAfterGC()
	debug.FreeOSMemory()
	r.t.Logf("MEASURED %s: heap in use %.1f MiB (live objects %.1f MiB) beyond the listers, %d aggregations; test process RSS %s, peak %s",
		what, mib(now.inUse, base.inUse), mib(now.live, base.live), r.f.cluster.StateMapSize(), procStatus(r.t, "VmRSS"), procStatus(r.t, "VmHWM"))
}

// heap is the heap after a GC: the spans in use (heapInUse, as
// BenchmarkRecommenderLoop reports it) and the live objects in them.
type heap struct{ inUse, live uint64 }

func heapAfterGC() heap {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heap{inUse: m.HeapInuse, live: m.HeapAlloc}
}

// mib is the difference of two byte counts in MiB.
func mib(now, base uint64) float64 { return (float64(now) - float64(base)) / (1 << 20) }

// procStatus is a field of /proc/self/status, e.g. "1234 kB".
func procStatus(t *testing.T, field string) string {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if value, found := strings.CutPrefix(line, field+":"); found {
			return strings.TrimSpace(value)
		}
	}
	return "?"
}

// lookupMemory starts the slice and node informers of the admission
// controller and the updater (nodescopeutil.NewLookup and NewNodeLister, which
// their main.go start with the gate on), checks that it serves the recommender's entries and logs the heap it
// holds.
func (r *apiServerRun) lookupMemory(what string) {
	base := heapAfterGC()
	stop := make(chan struct{})
	defer close(stop)
	lookup, err := nodescopeutil.NewLookup(vpa_clientset.NewForConfigOrDie(rest.CopyConfig(r.cfg)), "default", stop)
	if err != nil {
		r.t.Fatal(err)
	}
	if lookup.Nodes, err = nodescopeutil.NewNodeLister(kubernetes.NewForConfigOrDie(rest.CopyConfig(r.cfg)), stop); err != nil {
		r.t.Fatal(err)
	}
	held := heapAfterGC()
	for _, node := range []string{r.names[0], r.names[len(r.names)-1]} {
		if lookup.NodeRecommendation(r.f.apiVPA, node) == nil {
			r.t.Errorf("the slice informer has no recommendation for node %s", node)
		}
	}
	r.t.Logf("MEASURED %s: the slice and node informers of the admission controller and of the updater hold %d slices in %.1f MiB of heap in use (live objects %.1f MiB)",
		what, len(lookup.Indexer.List()), mib(held.inUse, base.inUse), mib(held.live, base.live))
}

// rollOut replaces the pod agent-<node><prev> on every node by
// agent-<node><rev>, as a rolling update of the DaemonSet does (a new name, the
// new revision's controller-revision-hash label, the same requests), in the
// model as the cluster feeder does and in the pod lister.
func (r *apiServerRun) rollOut(pods cache.Indexer, ds *appsv1.DaemonSet, prev, rev string) {
	request := model.Resources{model.ResourceCPU: model.CPUAmountFromCores(0.5), model.ResourceMemory: model.MemoryAmountFromBytes(256 << 20)}
	for _, node := range r.names {
		old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node + prev, Namespace: "default"}}
		r.f.cluster.DeletePod(model.PodID{Namespace: "default", PodName: old.Name})
		if err := pods.Delete(old); err != nil {
			r.t.Fatal(err)
		}
		pod := daemonSetPod(ds, "agent-"+node+rev, node)
		if err := pods.Add(pod); err != nil {
			r.t.Fatal(err)
		}
		id := model.PodID{Namespace: "default", PodName: pod.Name}
		podLabels := map[string]string{"app": "agent", appsv1.ControllerRevisionHashLabelKey: strings.TrimPrefix(rev, "-")}
		r.f.cluster.AddOrUpdatePod(id, model.ScopedPodLabels(r.f.cluster, id, podLabels, node, r.f.r.nodeScope.NodeUIDs()), corev1.PodRunning)
		for _, c := range []string{"agent", "sidecar"} {
			if err := r.f.cluster.AddOrUpdateContainer(model.ContainerID{PodID: id, ContainerName: c}, request); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// kubeletNode is a Node as a kubelet on a cloud VM registers and reports it:
// the well-known labels, a few annotations, a taint and a status with
// conditions, addresses, capacity and the images on the node.
func kubeletNode(i int) *corev1.Node {
	name := fmt.Sprintf("node-%05d", i)
	zone := fmt.Sprintf("region-1%c", 'a'+i%3)
	instanceType := fmt.Sprintf("type-%d", i%10)
	resources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", corev1.LabelHostname: name,
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
				corev1.LabelInstanceTypeStable: instanceType, corev1.LabelInstanceType: instanceType,
				corev1.LabelTopologyRegion: "region-1", corev1.LabelTopologyZone: zone,
				corev1.LabelFailureDomainBetaRegion: "region-1", corev1.LabelFailureDomainBetaZone: zone,
				"pool": "infra",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"pd.csi.storage.gke.io":"projects/p/zones/%s/instances/%s"}`, zone, name),
			},
		},
		Spec: corev1.NodeSpec{
			PodCIDR: fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)},
			ProviderID: fmt.Sprintf("gce://p/%s/%s", zone, name),
			Taints:     []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.128.%d.%d", i/256, i%256)},
				{Type: corev1.NodeExternalIP, Address: fmt.Sprintf("34.1.%d.%d", i/256, i%256)},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("%032x", i+1), BootID: fmt.Sprintf("%032x", i+2),
				KernelVersion: "6.1.0-1", OSImage: "Container-Optimized OS", ContainerRuntimeVersion: "containerd://2.0.0",
				KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64",
			},
		},
	}
	for _, c := range []struct {
		condition       corev1.NodeConditionType
		status          corev1.ConditionStatus
		reason, message string
	}{
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
		{corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "RouteController created a route"},
	} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: c.condition, Status: c.status, Reason: c.reason, Message: c.message, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	for j := range 30 {
		image := fmt.Sprintf("registry.example.com/team-%d/image-%d", j%7, j)
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", image, j), image + ":v1.2.3"},
			SizeBytes: int64(10_000_000 + j*1_000_000),
		})
	}
	return node
}

// nodeCacheMemory creates n Nodes shaped as kubelets report them, then
// measures the heap that the recommender's node cache holds (NewNodes, whose
// informer keeps only name, UID, labels and taints), against that of a node
// informer without the trim, and deletes the Nodes.
func nodeCacheMemory(t *testing.T, cfg *rest.Config, n int) {
	ctx := context.TODO()
	setup := rest.CopyConfig(cfg)
	setup.QPS, setup.Burst = 500, 1000
	kube := kubernetes.NewForConfigOrDie(setup)
	t.Cleanup(func() {
		if err := kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "pool=infra"}); err != nil {
			t.Error(err)
		}
	})
	created := time.Now()
	work := make(chan int)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			var failed error
			for i := range work {
				if _, err := kube.CoreV1().Nodes().Create(ctx, kubeletNode(i), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && failed == nil {
					failed = err
				}
			}
			errs <- failed
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "pool=infra", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(list.Items[0])
	t.Logf("MEASURED %d Nodes created in %v, each about %d bytes of JSON as the server returns it (with its status and managedFields)", n, time.Since(created).Round(time.Second), len(raw))

	measure := func(what string, start func(stop <-chan struct{}) func(string) bool) {
		base := heapAfterGC()
		stop := make(chan struct{})
		defer close(stop)
		known := start(stop)
		held := heapAfterGC()
		if !known(fmt.Sprintf("node-%05d", n-1)) {
			t.Errorf("%s: the last node is not in the cache", what)
		}
		t.Logf("MEASURED %s of %d nodes: heap in use %.1f MiB (live objects %.1f MiB)", what, n, mib(held.inUse, base.inUse), mib(held.live, base.live))
	}
	measure("the recommender's node cache (NewNodes: name, UID, labels, taints)", func(stop <-chan struct{}) func(string) bool {
		factory := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg)), 0)
		nodes := nodescope.NewNodes(nil, factory)
		factory.Start(stop)
		factory.WaitForCacheSync(stop)
		return func(name string) bool {
			_, found := nodes.NodeLabel(name, "pool")
			return found
		}
	})
	measure("a node informer without the trim", func(stop <-chan struct{}) func(string) bool {
		factory := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg)), 0)
		lister := factory.Core().V1().Nodes().Lister()
		factory.Start(stop)
		factory.WaitForCacheSync(stop)
		return func(name string) bool {
			_, err := lister.Get(name)
			return err == nil
		}
	})
}

// TestNodeScopeWritesOnAPIServer measures, against the kube-apiserver of the
// kubeconfig $VPA_APISERVER_KUBECONFIG (with etcd; nothing else runs there),
// what the recommender
// writes and what a watcher of the slices (the admission controller and the
// updater have one each) receives per loop while the recommendations move:
// the nodes of addMovingNodes ($VPA_APISERVER_NODES, default 1000), a new
// minute of samples before every loop, without hysteresis and with the
// default threshold, after 70 minutes and 24 hours of history; and the heap
// that the recommender's model holds, with the gate on and off, and the slice
// informer of the admission controller and the updater. The case "rollout"
// replaces every node's pod twice, as rolling updates of the DaemonSet do,
// and measures the same after each, then the aggregation GC; "node-cache"
// measures the recommender's cache of Nodes. The client runs
// at the VPA's default 50 QPS and burst 100. The model is the recommender's
// own, in this process; only the API objects are on the server.
func TestNodeScopeWritesOnAPIServer(t *testing.T) {
	kubeconfig := os.Getenv("VPA_APISERVER_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("VPA_APISERVER_KUBECONFIG is not set")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	nodes := 1000
	if n, err := strconv.Atoi(os.Getenv("VPA_APISERVER_NODES")); err == nil {
		nodes = n
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	installCRDs(t, cfg)
	counter := &requestCounter{}
	counter.reset()
	cfg.Wrap(counter.wrap)
	client := vpa_clientset.NewForConfigOrDie(cfg)
	const loops = 10

	for _, history := range []time.Duration{70 * time.Minute, 24 * time.Hour} {
		// The same nodes and samples with the gate off: upstream's model.
		t.Run(fmt.Sprintf("history=%v/gate=off", history), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, false)
			r := newAPIServerRun(t, cfg, client, counter)
			r.f.r.nodeScope.Nodes = benchNodes(t, nodes)
			listers := heapAfterGC()
			r.names = r.f.addMovingPods(t, r.rnd, nodes, history)
			r.checkpointAll()
			what := fmt.Sprintf("nodes=%d history=%v gate off", nodes, history)
			r.loops(what, loops, "")
			r.memory(what, listers)
		})
		for _, threshold := range []float64{0, model.DefaultNodeRewriteThreshold} {
			t.Run(fmt.Sprintf("history=%v/threshold=%g", history, threshold), func(t *testing.T) {
				r := newAPIServerRun(t, cfg, client, counter)
				r.f.r.nodeScope.Writer.(*nodescope.Writer).RewriteThreshold = threshold
				before := heapAfterGC()
				r.f.r.nodeScope.Nodes = benchNodes(t, nodes)
				listers := heapAfterGC()
				t.Logf("MEASURED the test's pod, node and DaemonSet listers of %d nodes: heap in use %.1f MiB (live objects %.1f MiB)", nodes, mib(listers.inUse, before.inUse), mib(listers.live, before.live))
				r.names = r.f.addMovingPods(t, r.rnd, nodes, history)
				r.checkpointAll()
				r.watchSlices()
				what := fmt.Sprintf("nodes=%d history=%v threshold=%g", nodes, history, threshold)
				r.loops(what, loops, "")
				r.memory(what, listers)
				r.lookupMemory(what)
			})
		}
	}

	t.Run("rollout", func(t *testing.T) {
		r := newAPIServerRun(t, cfg, client, counter)
		checker, pods := benchNodesWithPods(t, nodes)
		r.f.r.nodeScope.Nodes = checker
		listers := heapAfterGC()
		r.names = r.f.addMovingPods(t, r.rnd, nodes, 24*time.Hour)
		r.checkpointAll()
		r.watchSlices()
		what := fmt.Sprintf("nodes=%d history=24h rollout: revision 1", nodes)
		r.loops(what, loops, "")
		r.memory(what, listers)
		ds, err := checker.DaemonSets.DaemonSets("default").Get("agent")
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		for i, rev := range []string{"-rev2", "-rev3"} {
			r.rollOut(pods, ds, prev, rev)
			what := fmt.Sprintf("nodes=%d history=24h rollout: revision %d", nodes, i+2)
			r.loops(what, loops, rev)
			r.memory(what, listers)
			if got, want := r.f.cluster.StateMapSize(), 2*nodes*(i+2); got != want {
				t.Errorf("after revision %d: %d aggregations, want %d (two containers of every revision's pod on every node)", i+2, got, want)
			}
			prev = rev
		}
		entries := r.f.slices(t)
		for _, node := range []string{r.names[0], r.names[len(r.names)-1]} {
			if _, found := entries[node]; !found {
				t.Errorf("node %s has no recommendation after the rollouts", node)
			}
		}
		// Upstream's aggregation GC, as the recommender runs it after every
		// loop (at most once per gcInterval): the earlier revisions'
		// aggregations have samples of the last minutes and stay.
		ctx := context.TODO()
		r.f.cluster.RateLimitedGarbageCollectAggregateCollectionStates(ctx, r.at, controllerfetcher.FakeControllerFetcher{})
		if got, want := r.f.cluster.StateMapSize(), 6*nodes; got != want {
			t.Errorf("after the GC right after the rollouts: %d aggregations, want %d", got, want)
		}
		r.memory(fmt.Sprintf("nodes=%d rollout: after the GC right after the rollouts", nodes), listers)
		// They go once their last sample is older than the memory
		// aggregation window (8 days); the pods of revision 3 still report.
		gcAt := r.at.Add(8 * 24 * time.Hour)
		r.f.feedMovingPods(t, r.rnd, r.names, "-rev3", gcAt)
		r.f.cluster.RateLimitedGarbageCollectAggregateCollectionStates(ctx, gcAt, controllerfetcher.FakeControllerFetcher{})
		if got, want := r.f.cluster.StateMapSize(), 2*nodes; got != want {
			t.Errorf("after the GC 8 days later: %d aggregations, want %d", got, want)
		}
		r.memory(fmt.Sprintf("nodes=%d rollout: after the GC 8 days after revision 3 started", nodes), listers)
	})

	t.Run("node-cache", func(t *testing.T) {
		nodeCacheMemory(t, cfg, nodes)
	})
}
