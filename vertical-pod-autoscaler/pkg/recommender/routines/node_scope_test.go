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
	"fmt"
	"reflect"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/checkpoint"
	recommender_config "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/config"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
)

// nodeScopeFixture is a recommender with one DaemonSet VPA and one pod (two
// containers) per node, fed with samples.
type nodeScopeFixture struct {
	r        *recommender
	cluster  model.NodeScopedState
	apiVPA   *vpa_types.VerticalPodAutoscaler
	selector labels.Selector
	client   *vpa_fake.Clientset
	// api is the client of the recommender: client, or a real API server's.
	api vpa_clientset.Interface
}

func newNodeScopeFixture(t testing.TB, scope vpa_types.VerticalPodAutoscalerScope, policy *vpa_types.PodResourcePolicy) *nodeScopeFixture {
	apiVPA := &vpa_types.VerticalPodAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling.k8s.io/v1", Kind: "VerticalPodAutoscaler"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "vpa-uid"},
		Spec: vpa_types.VerticalPodAutoscalerSpec{
			TargetRef:      &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent"},
			Scope:          scope,
			ResourcePolicy: policy,
		},
	}
	client := vpa_fake.NewSimpleClientset(apiVPA) //nolint:staticcheck // as the other tests of this package
	// The fake clientset does not generate names, the API server does.
	generated := 0
	client.PrependReactor("create", "*", func(action core.Action) (bool, runtime.Object, error) {
		obj := action.(core.CreateAction).GetObject().(metav1.Object)
		if obj.GetName() == "" {
			generated++
			obj.SetName(fmt.Sprintf("%s%05d", obj.GetGenerateName(), generated))
		}
		return false, nil, nil
	})
	f := &nodeScopeFixture{apiVPA: apiVPA, client: client}
	f.start(t)
	return f
}

// start makes the fixture's recommender, with a new cluster state, as a
// recommender (re)starting on the fixture's API server.
func (f *nodeScopeFixture) start(t testing.TB) {
	f.startWith(t, f.client)
}

// startWith makes the fixture's recommender on the given API client.
func (f *nodeScopeFixture) startWith(t testing.TB, client vpa_clientset.Interface) {
	cfg := recommender_config.DefaultRecommenderConfig()
	apiVPA := f.apiVPA
	f.api = client
	cluster := model.NewClusterState(time.Minute)
	selector := labels.SelectorFromSet(labels.Set{"app": "agent"})
	if err := cluster.AddOrUpdateVpa(apiVPA, selector); err != nil {
		t.Fatal(err)
	}
	cluster.SetObservedVPAs([]*vpa_types.VerticalPodAutoscaler{apiVPA})
	f.r = RecommenderFactory{
		ClusterState: cluster,
		VpaClient:    client.AutoscalingV1(),
		PodResourceRecommender: logic.CreatePodResourceRecommender(logic.RecommendationConfig{
			SafetyMarginFraction:       cfg.SafetyMarginFraction,
			PodMinCPUMillicores:        cfg.PodMinCPUMillicores,
			PodMinMemoryMb:             cfg.PodMinMemoryMb,
			TargetCPUPercentile:        cfg.TargetCPUPercentile,
			LowerBoundCPUPercentile:    cfg.LowerBoundCPUPercentile,
			UpperBoundCPUPercentile:    cfg.UpperBoundCPUPercentile,
			ConfidenceIntervalCPU:      cfg.ConfidenceIntervalCPU,
			TargetMemoryPercentile:     cfg.TargetMemoryPercentile,
			LowerBoundMemoryPercentile: cfg.LowerBoundMemoryPercentile,
			UpperBoundMemoryPercentile: cfg.UpperBoundMemoryPercentile,
			ConfidenceIntervalMemory:   cfg.ConfidenceIntervalMemory,
		}),
		RecommendationFormat:         logic.RecommendationFormat{RoundCPUMillicores: 1, RoundMemoryBytes: 1},
		RecommendationPostProcessors: []RecommendationPostProcessor{NewCappingRecommendationProcessor(nil)},
		UpdateWorkerCount:            1,
		CheckpointWriter:             checkpoint.NewCheckpointWriter(cluster, client.AutoscalingV1()),
		CheckpointsGCInterval:        time.Hour,
		NodeScope: NodeScope{
			Nodes:              fakeNodes{},
			Writer:             &nodescope.Writer{Client: client.AutoscalingV1alpha1(), RewriteThreshold: cfg.NodeScopeRewriteThreshold},
			Checkpoints:        nodescope.NewCheckpointStore(client.AutoscalingV1alpha1()),
			MinHistory:         cfg.NodeScopeMinHistory,
			CheckpointsTimeout: cfg.NodeScopeCheckpointsTimeout,
			Confidence:         logic.Confidence{CPUInterval: cfg.ConfidenceIntervalCPU, MemoryInterval: cfg.ConfidenceIntervalMemory},
		},
		UseCheckpoints: true,
	}.Make().(*recommender)
	f.cluster, f.selector = cluster, selector
}

// addPod adds the DaemonSet's pod on a node, agent-<node>, as the cluster
// feeder does.
func (f *nodeScopeFixture) addPod(t testing.TB, node string) {
	f.addNamedPod(t, "agent-"+node, node)
}

func (f *nodeScopeFixture) addNamedPod(t testing.TB, pod, node string) {
	podID := model.PodID{Namespace: "default", PodName: pod}
	f.cluster.AddOrUpdatePod(podID, model.ScopedPodLabels(f.cluster, podID, map[string]string{"app": "agent"}, node, f.r.nodeScope.NodeUIDs()), corev1.PodRunning)
	for _, c := range []string{"agent", "sidecar"} {
		if err := f.cluster.AddOrUpdateContainer(model.ContainerID{PodID: podID, ContainerName: c}, model.Resources{}); err != nil {
			t.Fatal(err)
		}
	}
}

// feed adds one sample per minute over the given span, ending now, for both
// containers of the pod agent-<node>.
func (f *nodeScopeFixture) feed(t testing.TB, node string, cores float64, memBytes float64, span time.Duration) {
	f.feedPod(t, "agent-"+node, cores, memBytes, span)
}

func (f *nodeScopeFixture) feedPod(t testing.TB, pod string, cores float64, memBytes float64, span time.Duration) {
	podID := model.PodID{Namespace: "default", PodName: pod}
	now := time.Now()
	for at := now.Add(-span); !at.After(now); at = at.Add(time.Minute) {
		for _, c := range []string{"agent", "sidecar"} {
			id := model.ContainerID{PodID: podID, ContainerName: c}
			for _, s := range []model.ContainerUsageSample{
				{MeasureStart: at, Usage: model.CPUAmountFromCores(cores), Resource: model.ResourceCPU},
				{MeasureStart: at, Usage: model.MemoryAmountFromBytes(memBytes), Resource: model.ResourceMemory},
			} {
				if err := f.cluster.AddSample(&model.ContainerUsageSampleWithKey{ContainerUsageSample: s, Container: id}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func (f *nodeScopeFixture) slices(t testing.TB) map[string]vpa_types.RecommendedPodResources {
	nodes := map[string]vpa_types.RecommendedPodResources{}
	for _, s := range f.sliceObjects(t) {
		for _, n := range s.Nodes {
			nodes[n.NodeName] = n.Recommendation
		}
	}
	return nodes
}

// sliceObjects lists the slices the recommender wrote.
func (f *nodeScopeFixture) sliceObjects(t testing.TB) []vpa_alpha.VerticalPodAutoscalerSlice {
	list, err := f.api.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func targetOf(rec vpa_types.RecommendedPodResources, container string, res corev1.ResourceName) resource.Quantity {
	for _, c := range rec.ContainerRecommendations {
		if c.ContainerName == container {
			return c.Target[res]
		}
	}
	return resource.Quantity{}
}

func TestNodeScopedRecommendations(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.addPod(t, "busy")
	f.addPod(t, "quiet")
	f.addPod(t, "new")
	f.feed(t, "busy", 2, 2e9, 2*time.Hour)
	f.feed(t, "quiet", 0.1, 1e8, 2*time.Hour)
	f.feed(t, "new", 4, 4e9, 10*time.Minute) // less than the default minimum of node history

	f.r.UpdateVPAs()

	nodes := f.slices(t)
	if len(nodes) != 2 {
		t.Fatalf("got recommendations for %d nodes, want busy and quiet: %v", len(nodes), nodes)
	}
	if _, found := nodes["new"]; found {
		t.Errorf("node new has %v of history, less than %v, but got its own recommendation", 10*time.Minute, model.DefaultMinNodeHistory)
	}
	busy, quiet := nodes["busy"], nodes["quiet"]
	for _, c := range []string{"agent", "sidecar"} {
		b, q := targetOf(busy, c, corev1.ResourceCPU), targetOf(quiet, c, corev1.ResourceCPU)
		if b.Cmp(q) <= 0 {
			t.Errorf("%s: cpu target on the busy node %s is not above the quiet node's %s", c, b.String(), q.String())
		}
		// The usage differs by 20 times; the targets reflect it (the quiet node is at the 25m minimum or near).
		if b.MilliValue() < 2000 || q.MilliValue() > 200 {
			t.Errorf("%s: cpu targets busy %s, quiet %s; want >= 2 cores and <= 200m", c, b.String(), q.String())
		}
		bm, qm := targetOf(busy, c, corev1.ResourceMemory), targetOf(quiet, c, corev1.ResourceMemory)
		if bm.Value() < 2e9 || qm.Value() > 5e8 {
			t.Errorf("%s: memory targets busy %s, quiet %s", c, bm.String(), qm.String())
		}
	}

	// The VPA's own recommendation stays the DaemonSet-wide one (all nodes).
	vpa, err := f.r.vpaClient.VerticalPodAutoscalers("default").Get(context.TODO(), "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vpa.Status.Recommendation == nil {
		t.Fatal("the VPA has no DaemonSet-wide recommendation")
	}
	wide := targetOf(*vpa.Status.Recommendation, "agent", corev1.ResourceCPU)
	if q := targetOf(quiet, "agent", corev1.ResourceCPU); wide.Cmp(q) <= 0 {
		t.Errorf("the DaemonSet-wide cpu target %s is not above the quiet node's %s", wide.String(), q.String())
	}

	// A second loop without new samples writes nothing.
	client := f.r.nodeScope.Writer.(*nodescope.Writer).Client
	modelVPA := f.cluster.VPAs()[model.VpaID{Namespace: "default", VpaName: "agent"}]
	live, _ := f.r.liveNodes(modelVPA)
	recs, groups := NodeRecommendations(f.cluster, modelVPA, live, nil, f.r.nodeScope.MinHistory, f.r.nodeScope.Confidence, f.apiVPA, f.r.podResourceRecommender, f.r.recommendationFormat, f.r.recommendationPostProcessor)
	plan, err := (&nodescope.Writer{Client: client}).Write(context.TODO(), f.apiVPA, recs, groups, nil)
	if err != nil || plan.Writes() != 0 {
		t.Errorf("second write: %d writes (err %v), want none", plan.Writes(), err)
	}

	// The pod of node busy goes away: its entry goes with it.
	f.cluster.DeletePod(model.PodID{Namespace: "default", PodName: "agent-busy"})
	f.r.UpdateVPAs()
	nodes = f.slices(t)
	if _, found := nodes["busy"]; found || len(nodes) != 1 {
		t.Errorf("after the pod on busy is gone: nodes %v, want quiet only", nodes)
	}
}

// TestNodeScopeMinHistory: the minimum of per-node history is the recommender's
// --node-scope-min-history (an hour by default); lowered, it gives a node with
// less history than the default its own recommendation, and still none to a
// node with less than the minimum.
func TestNodeScopeMinHistory(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	if got := recommender_config.DefaultRecommenderConfig().NodeScopeMinHistory; got != time.Hour {
		t.Errorf("default --node-scope-min-history %v, want 1h", got)
	}
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	if f.r.nodeScope.MinHistory != model.DefaultMinNodeHistory {
		t.Errorf("the recommender's minimum of node history is %v, want the default %v", f.r.nodeScope.MinHistory, model.DefaultMinNodeHistory)
	}
	f.r.nodeScope.MinHistory = 5 * time.Minute
	f.addPod(t, "old")
	f.addPod(t, "new")
	f.addPod(t, "newest")
	f.feed(t, "old", 2, 2e9, 2*time.Hour)
	f.feed(t, "new", 0.1, 1e8, 10*time.Minute)
	f.feed(t, "newest", 0.1, 1e8, 2*time.Minute)

	f.r.UpdateVPAs()

	nodes := f.slices(t)
	if _, found := nodes["new"]; !found || len(nodes) != 2 {
		t.Errorf("with a minimum of 5m got recommendations for %v, want old and new (10m of history), not newest (2m)", nodes)
	}
	if n, o := targetOf(nodes["new"], "agent", corev1.ResourceCPU), targetOf(nodes["old"], "agent", corev1.ResourceCPU); n.Cmp(o) >= 0 {
		t.Errorf("cpu target of node new %s is not below node old's %s", n.String(), o.String())
	}
}

func TestNodeScopedRecommendationsHonourPolicy(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	off := vpa_types.ContainerScalingModeOff
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, &vpa_types.PodResourcePolicy{ContainerPolicies: []vpa_types.ContainerResourcePolicy{
		{ContainerName: "agent", MaxAllowed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
		{ContainerName: "sidecar", Mode: &off},
	}})
	f.addPod(t, "busy")
	f.feed(t, "busy", 2, 2e9, 2*time.Hour)
	f.r.UpdateVPAs()
	rec, found := f.slices(t)["busy"]
	if !found {
		t.Fatal("no recommendation for node busy")
	}
	if len(rec.ContainerRecommendations) != 1 || rec.ContainerRecommendations[0].ContainerName != "agent" {
		t.Fatalf("got containers %v, want agent only (sidecar is Off)", rec.ContainerRecommendations)
	}
	if cpu := targetOf(rec, "agent", corev1.ResourceCPU); cpu.MilliValue() != 500 {
		t.Errorf("cpu target %s, want the maxAllowed 500m", cpu.String())
	}
	if u := rec.ContainerRecommendations[0].UncappedTarget[corev1.ResourceCPU]; u.MilliValue() < 2000 {
		t.Errorf("uncapped cpu target %s, want >= 2", u.String())
	}
}

func TestNodeScopeOffWritesNoSlices(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gate       bool
		scope      vpa_types.VerticalPodAutoscalerScope
		groupLabel string
	}{
		{name: "gate off", gate: false, scope: vpa_types.ScopeNode},
		{name: "gate off, node groups", gate: false, scope: vpa_types.ScopeNode, groupLabel: "pool"},
		{name: "no scope", gate: true, scope: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, tc.gate)
			f := newNodeScopeFixture(t, tc.scope, nil)
			if tc.groupLabel != "" {
				f.apiVPA.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: tc.groupLabel}
				if err := f.cluster.AddOrUpdateVpa(f.apiVPA, f.selector); err != nil {
					t.Fatal(err)
				}
				f.r.nodeScope.Nodes = fakeNodes{labels: map[string]map[string]string{"node-0": {tc.groupLabel: "a"}, "node-1": {tc.groupLabel: "a"}}}
			}
			for i := range 3 {
				f.addPod(t, fmt.Sprintf("node-%d", i))
				f.feed(t, fmt.Sprintf("node-%d", i), float64(i+1), 1e9, 2*time.Hour)
			}
			f.r.UpdateVPAs()
			if nodes := f.slices(t); len(nodes) != 0 {
				t.Errorf("got per-node recommendations %v, want none", nodes)
			}
			// All pods share one aggregation per container, as upstream.
			if n := f.cluster.StateMapSize(); n != 2 {
				t.Errorf("%d aggregations, want 2 (one per container)", n)
			}
		})
	}
}

// clusterStateOfItsOwn is a ClusterState implemented outside this repository:
// it has ClusterState's methods only.
type clusterStateOfItsOwn struct{ model.ClusterState }

// TestNodeScopeNeedsANodeScopedState: ClusterState keeps upstream's methods,
// so that implementations of it outside this repository keep compiling, and a
// recommender of such a cluster state gives VPAs with scope node their
// DaemonSet-wide recommendation and writes no slices.
func TestNodeScopeNeedsANodeScopedState(t *testing.T) {
	for _, method := range []string{"NodePods", "NodeAggregations"} {
		if _, found := reflect.TypeFor[model.ClusterState]().MethodByName(method); found {
			t.Errorf("ClusterState has the method %s: implementations of it outside this repository no longer compile", method)
		}
	}
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	for i := range 2 {
		f.addPod(t, fmt.Sprintf("node-%d", i))
		f.feed(t, fmt.Sprintf("node-%d", i), float64(i+1), 1e9, 2*time.Hour)
	}
	ofItsOwn := clusterStateOfItsOwn{f.cluster}
	f.r.clusterState, f.r.nodeScope = ofItsOwn, f.r.nodeScope.forState(ofItsOwn)

	f.r.UpdateVPAs()
	f.r.MaintainCheckpoints(context.TODO())

	if nodes := f.slices(t); len(nodes) != 0 {
		t.Errorf("got per-node recommendations %v, want none", nodes)
	}
	vpa, err := f.client.AutoscalingV1().VerticalPodAutoscalers("default").Get(context.TODO(), "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vpa.Status.Recommendation == nil || len(vpa.Status.Recommendation.ContainerRecommendations) == 0 {
		t.Errorf("the VPA has no DaemonSet-wide recommendation: %+v", vpa.Status)
	}
}

// TestNodeRequests: the hysteresis gets the requests of every pod on a node,
// as the model has them.
func TestNodeRequests(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.addPod(t, "a")
	f.addNamedPod(t, "agent-a-next", "a") // a rollout: two pods on a
	f.addPod(t, "b")
	request := model.Resources{model.ResourceCPU: model.CPUAmountFromCores(0.25), model.ResourceMemory: model.MemoryAmountFromBytes(1 << 28)}
	if err := f.cluster.AddOrUpdateContainer(model.ContainerID{PodID: model.PodID{Namespace: "default", PodName: "agent-a-next"}, ContainerName: "agent"}, request); err != nil {
		t.Fatal(err)
	}
	live, pods := f.r.liveNodes(f.modelVPA())
	a, b := model.NodeRef{Name: "a", UID: "uid-a"}, model.NodeRef{Name: "b", UID: "uid-b"}
	delete(live, b)
	got := NodeRequests(f.cluster, pods, live)
	if len(got) != 1 || len(got[a]) != 2 {
		t.Fatalf("requests %v, want two pods of node a", got)
	}
	var found bool
	for _, pod := range got[a] {
		if cpu, memory := pod["agent"][corev1.ResourceCPU], pod["agent"][corev1.ResourceMemory]; cpu.MilliValue() == 250 && memory.Value() == 1<<28 {
			found = true
		}
	}
	if !found {
		t.Errorf("requests of node a %v, want agent's 250m and 256Mi of the second pod", got[a])
	}
}
