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
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
)

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// feedVarying adds one sample per minute over the span, ending now, for both
// containers of the node's pod: CPU log-uniform between a third and three
// times cores (so that the CPU histogram spreads over about 45 buckets, as a
// long-running agent's does), memory at memBytes.
func (f *nodeScopeFixture) feedVarying(b testing.TB, rnd *rand.Rand, node string, cores, memBytes float64, span time.Duration) {
	now := time.Now()
	for at := now.Add(-span); !at.After(now); at = at.Add(time.Minute) {
		f.feedSample(b, rnd, node, cores, memBytes, at)
	}
}

// feedSample adds the samples of one minute, at, as feedVarying does.
func (f *nodeScopeFixture) feedSample(b testing.TB, rnd *rand.Rand, node string, cores, memBytes float64, at time.Time) {
	f.feedPodSample(b, rnd, "agent-"+node, cores, memBytes, at)
}

// feedPodSample adds the samples of one minute, at, to the named pod.
func (f *nodeScopeFixture) feedPodSample(b testing.TB, rnd *rand.Rand, pod string, cores, memBytes float64, at time.Time) {
	podID := model.PodID{Namespace: "default", PodName: pod}
	for _, c := range []string{"agent", "sidecar"} {
		id := model.ContainerID{PodID: podID, ContainerName: c}
		cpu := cores * math.Exp((rnd.Float64()*2-1)*math.Log(3))
		for _, s := range []model.ContainerUsageSample{
			{MeasureStart: at, Usage: model.CPUAmountFromCores(cpu), Resource: model.ResourceCPU},
			{MeasureStart: at, Usage: model.MemoryAmountFromBytes(memBytes), Resource: model.ResourceMemory},
		} {
			if err := f.cluster.AddSample(&model.ContainerUsageSampleWithKey{ContainerUsageSample: s, Container: id}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchNodes is a NodeChecker over listers of the DaemonSet, its pods and the
// nodes, as the recommender has them from its informers; the pods are shaped
// as the DaemonSet controller creates them.
func benchNodes(b testing.TB, nodes int) *nodescope.Nodes {
	checker, _ := benchNodesWithPods(b, nodes)
	return checker
}

// benchNodesWithPods is benchNodes and the indexer of its pod lister, for
// tests that replace the pods (daemonSetPod).
func benchNodesWithPods(b testing.TB, nodes int) (*nodescope.Nodes, cache.Indexer) {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	nodeStore := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	daemonSets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"infra"}}}}},
			}}},
			Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
		}}},
	}
	if err := daemonSets.Add(ds); err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		name := fmt.Sprintf("node-%05d", i)
		if err := nodeStore.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"kubernetes.io/os": "linux", "pool": "infra", corev1.LabelInstanceTypeStable: fmt.Sprintf("type-%d", i%10)}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}}}); err != nil {
			b.Fatal(err)
		}
		if err := pods.Add(daemonSetPod(ds, "agent-"+name, name)); err != nil {
			b.Fatal(err)
		}
	}
	return &nodescope.Nodes{Pods: listersv1.NewPodLister(pods), Nodes: listersv1.NewNodeLister(nodeStore), DaemonSets: appslisters.NewDaemonSetLister(daemonSets)}, pods
}

// daemonSetPod is the DaemonSet's pod on the node, shaped as the DaemonSet
// controller creates it: the template's spec, the required node affinity
// replaced by a pin to the node's name, the DaemonSet as controller.
func daemonSetPod(ds *appsv1.DaemonSet, pod, node string) *corev1.Pod {
	spec := ds.Spec.Template.Spec.DeepCopy()
	spec.NodeName = node
	spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = []corev1.NodeSelectorTerm{
		{MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}},
	}
	owner := *metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "default", OwnerReferences: []metav1.OwnerReference{owner}}, Spec: *spec}
}

// BenchmarkRecommenderLoop measures the recommender loop's UpdateVPAs (the
// VPA's status and, with scope node, the per-node slices) and
// MaintainCheckpoints (upstream's checkpoints and, with scope node, the
// per-node checkpoint slices) for one DaemonSet VPA with two containers and 70
// minutes of one-per-minute samples on every node, with upstream's single
// scope, with scope node (with the eligibility check of every node against
// listers) and with scope node and node groups by instance type (ten groups).
// It reports the heap the cluster state holds, the largest object
// written (JSON bytes), the loops it takes to checkpoint every node, and the
// API writes of a steady-state loop; the timed loops are the steady state
// (recommendations unchanged, checkpoints refreshed in turn).
func BenchmarkRecommenderLoop(b *testing.B) {
	featuregatetesting.SetFeatureGateDuringTest(b, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	ctx := context.TODO()
	for _, nodes := range []int{100, 1000, 5000} {
		for _, variant := range []struct {
			name       string
			scope      vpa_types.VerticalPodAutoscalerScope
			groupLabel string
		}{
			{name: "single"},
			{name: "node", scope: vpa_types.ScopeNode},
			{name: "node-groups", scope: vpa_types.ScopeNode, groupLabel: corev1.LabelInstanceTypeStable},
		} {
			scope := variant.scope
			b.Run(fmt.Sprintf("%s/nodes=%d", variant.name, nodes), func(b *testing.B) {
				if testing.Short() && nodes > 100 {
					b.Skip("the larger clusters are for measuring, not for -short runs")
				}
				before := heapInUse()
				f := newNodeScopeFixture(b, scope, nil)
				if scope != "" {
					f.r.nodeScope.Nodes = benchNodes(b, nodes)
				}
				if variant.groupLabel != "" {
					f.apiVPA.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: variant.groupLabel}
					if err := f.cluster.AddOrUpdateVpa(f.apiVPA, f.selector); err != nil {
						b.Fatal(err)
					}
				}
				rnd := rand.New(rand.NewSource(1))
				for i := range nodes {
					node := fmt.Sprintf("node-%05d", i)
					f.addPod(b, node)
					f.feedVarying(b, rnd, node, 0.1+float64(i%50)/10, 1e8*float64(1+i%20), 70*time.Minute)
				}
				heap := heapInUse() - before
				writes := 0
				f.client.PrependReactor("*", "*", func(action core.Action) (bool, k8sruntime.Object, error) {
					switch action.GetVerb() {
					case "create", "update", "patch", "delete":
						writes++
					}
					return false, nil, nil
				})

				start := time.Now()
				f.r.UpdateVPAs()
				f.r.MaintainCheckpoints(ctx)
				first := time.Since(start)
				// Until every node is checkpointed (at most DefaultMaxCheckpointWrites a loop).
				loops := 1
				for ; scope != "" && loops < 100 && f.checkpointedNodes(b) < nodes; loops++ {
					f.r.UpdateVPAs()
					f.r.MaintainCheckpoints(ctx)
				}
				largest, slices, checkpointSlices, covered := f.largestObject(b)
				if scope != "" && covered != nodes {
					b.Fatalf("slices cover %d nodes, want %d", covered, nodes)
				}

				writes = 0
				b.ResetTimer()
				for range b.N {
					f.r.UpdateVPAs()
					f.r.MaintainCheckpoints(ctx)
				}
				b.StopTimer()
				b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(largest), "largest-object-B")
				b.ReportMetric(float64(slices), "slices")
				b.ReportMetric(float64(checkpointSlices), "checkpoint-slices")
				b.ReportMetric(float64(loops), "loops-to-checkpoint")
				b.ReportMetric(float64(writes)/float64(b.N), "writes/loop")
				b.ReportMetric(first.Seconds()*1000, "first-loop-ms")
			})
		}
	}
}

// addMovingNodes gives the fixture's recommender the nodes of benchNodes, each
// with a pod whose two containers request 500m CPU and 256Mi memory (as from
// the DaemonSet's template) and have the given history of one-per-minute
// samples (feedVarying, at a level that differs between nodes). It returns
// the nodes' names.
func (f *nodeScopeFixture) addMovingNodes(tb testing.TB, rnd *rand.Rand, nodes int, history time.Duration) []string {
	f.r.nodeScope.Nodes = benchNodes(tb, nodes)
	return f.addMovingPods(tb, rnd, nodes, history)
}

// addMovingPods is addMovingNodes on the nodes the fixture has already.
func (f *nodeScopeFixture) addMovingPods(tb testing.TB, rnd *rand.Rand, nodes int, history time.Duration) []string {
	request := model.Resources{model.ResourceCPU: model.CPUAmountFromCores(0.5), model.ResourceMemory: model.MemoryAmountFromBytes(256 << 20)}
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%05d", i)
		f.addPod(tb, names[i])
		for _, c := range []string{"agent", "sidecar"} {
			if err := f.cluster.AddOrUpdateContainer(model.ContainerID{PodID: model.PodID{Namespace: "default", PodName: "agent-" + names[i]}, ContainerName: c}, request); err != nil {
				tb.Fatal(err)
			}
		}
		f.feedVarying(tb, rnd, names[i], 0.1+float64(i%50)/10, 1e8*float64(1+i%20), history)
	}
	return names
}

// feedMovingNodes adds the samples of the minute at to the nodes of
// addMovingNodes.
func (f *nodeScopeFixture) feedMovingNodes(tb testing.TB, rnd *rand.Rand, names []string, at time.Time) {
	f.feedMovingPods(tb, rnd, names, "", at)
}

// feedMovingPods is feedMovingNodes for the pods agent-<node><suffix>.
func (f *nodeScopeFixture) feedMovingPods(tb testing.TB, rnd *rand.Rand, names []string, suffix string, at time.Time) {
	for i, node := range names {
		f.feedPodSample(tb, rnd, "agent-"+node+suffix, 0.1+float64(i%50)/10, 1e8*float64(1+i%20), at)
	}
}

// BenchmarkSliceWritesMovingSamples measures what the slice writer writes per
// loop while the recommendations move: one DaemonSet VPA, 70 minutes (as in
// BenchmarkRecommenderLoop: just past --node-scope-min-history) or 24 hours of
// history on every node, then in every timed
// loop one new minute of samples per container on every node (CPU log-uniform
// around the node's level, so the targets move a little; the bounds move with
// the growing history) and UpdateVPAs. Every pod requests 500m CPU and 256Mi
// memory per container, as from the DaemonSet's template. It reports the
// recommendation slice writes, the node entries whose recommendation changed
// and the JSON bytes of the slices written, per loop, without hysteresis
// (threshold 0) and with the default threshold.
func BenchmarkSliceWritesMovingSamples(b *testing.B) {
	featuregatetesting.SetFeatureGateDuringTest(b, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	for _, nodes := range []int{100, 1000, 5000} {
		for _, history := range []time.Duration{70 * time.Minute, 24 * time.Hour} {
			for _, threshold := range []float64{0, model.DefaultNodeRewriteThreshold} {
				b.Run(fmt.Sprintf("nodes=%d/history=%v/threshold=%g", nodes, history, threshold), func(b *testing.B) {
					if testing.Short() && nodes > 100 {
						b.Skip("the larger clusters are for measuring, not for -short runs")
					}
					f := newNodeScopeFixture(b, vpa_types.ScopeNode, nil)
					f.r.nodeScope.Writer.(*nodescope.Writer).RewriteThreshold = threshold
					rnd := rand.New(rand.NewSource(1))
					names := f.addMovingNodes(b, rnd, nodes, history)
					written := map[string]vpa_types.RecommendedPodResources{}
					writes, entries, bytes := 0, 0, 0
					f.client.PrependReactor("*", "verticalpodautoscalerslices", func(action core.Action) (bool, k8sruntime.Object, error) {
						var obj k8sruntime.Object
						switch a := action.(type) {
						case core.CreateAction:
							obj = a.GetObject()
						case core.UpdateAction:
							obj = a.GetObject()
						default:
							return false, nil, nil
						}
						slice := obj.(*vpa_alpha.VerticalPodAutoscalerSlice)
						raw, err := json.Marshal(slice)
						if err != nil {
							b.Fatal(err)
						}
						writes++
						bytes += len(raw)
						for _, n := range slice.Nodes {
							if old, found := written[n.NodeName]; !found || !apiequality.Semantic.DeepEqual(old, n.Recommendation) {
								entries++
								written[n.NodeName] = n.Recommendation
							}
						}
						return false, nil, nil
					})
					f.r.UpdateVPAs()
					if len(written) != nodes {
						b.Fatalf("the first loop wrote entries of %d nodes, want %d", len(written), nodes)
					}

					writes, entries, bytes = 0, 0, 0
					at := time.Now()
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						at = at.Add(time.Minute)
						f.feedMovingNodes(b, rnd, names, at)
						b.StartTimer()
						f.r.UpdateVPAs()
					}
					b.StopTimer()
					b.ReportMetric(float64(writes)/float64(b.N), "slice-writes/loop")
					b.ReportMetric(float64(entries)/float64(b.N), "entries-changed/loop")
					b.ReportMetric(float64(bytes)/float64(b.N), "bytes/loop")
				})
			}
		}
	}
}

func (f *nodeScopeFixture) checkpointedNodes(b testing.TB) int {
	list, err := f.api.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		n += len(s.Nodes)
	}
	return n
}

// largestObject returns the size of the largest object the loop wrote (the
// VPA, its checkpoints, its slices and checkpoint slices), the number of
// slices and checkpoint slices, and the nodes the checkpoint slices cover.
func (f *nodeScopeFixture) largestObject(b *testing.B) (largest, slices, checkpointSlices, covered int) {
	var objs []any
	vpa, err := f.client.AutoscalingV1().VerticalPodAutoscalers("default").Get(context.TODO(), "agent", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	objs = append(objs, vpa)
	checkpoints, err := f.client.AutoscalingV1().VerticalPodAutoscalerCheckpoints("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range checkpoints.Items {
		objs = append(objs, &checkpoints.Items[i])
	}
	recs, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range recs.Items {
		objs = append(objs, &recs.Items[i])
	}
	cps, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range cps.Items {
		objs = append(objs, &cps.Items[i])
		covered += len(cps.Items[i].Nodes)
	}
	for _, obj := range objs {
		if raw, _ := json.Marshal(obj); len(raw) > largest {
			largest = len(raw)
		}
	}
	return largest, len(recs.Items), len(cps.Items), covered
}
