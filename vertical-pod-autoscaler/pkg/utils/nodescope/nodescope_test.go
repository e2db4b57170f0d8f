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

package nodescope

import (
	"fmt"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/resource/pod/recommendation"
	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/limitrange"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

func podResources(cpu, memory string) *vpa_types.RecommendedPodResources {
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	return &vpa_types.RecommendedPodResources{ContainerRecommendations: []vpa_types.RecommendedContainerResources{{
		ContainerName: "agent", Target: r, LowerBound: r, UpperBound: r, UncappedTarget: r,
	}}}
}

func daemonSetVPA(scope vpa_types.VerticalPodAutoscalerScope, policy *vpa_types.PodResourcePolicy) *vpa_types.VerticalPodAutoscaler {
	return &vpa_types.VerticalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "agent-uid"},
		Spec: vpa_types.VerticalPodAutoscalerSpec{
			TargetRef:      &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent"},
			Scope:          scope,
			ResourcePolicy: policy,
		},
		Status: vpa_types.VerticalPodAutoscalerStatus{Recommendation: podResources("300m", "300Mi")}, // DaemonSet-wide
	}
}

// sliceMeta is the metadata of a slice in namespace default owned by the VPA
// of the given name and UID, as the recommender writes it.
func sliceMeta(name, vpaName string, vpaUID types.UID) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: vpa_types.SchemeGroupVersion.String(), Kind: "VerticalPodAutoscaler", Name: vpaName, UID: vpaUID, Controller: ptr.To(true),
	}}}
}

// testNodes holds the nodes busy, quiet and third, each of UID uid-<name>.
func testNodes(t *testing.T) listersv1.NodeLister {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"busy", "quiet", "third"} {
		if err := indexer.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}); err != nil {
			t.Fatal(err)
		}
	}
	return listersv1.NewNodeLister(indexer)
}

func lookup(t *testing.T) *Lookup {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
	for _, s := range []*vpa_alpha.VerticalPodAutoscalerSlice{
		{ObjectMeta: sliceMeta("agent-a", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.Now(), Nodes: []vpa_alpha.NodeRecommendation{
			{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *podResources("2", "2Gi")},
			{NodeName: "quiet", NodeUID: "uid-quiet", Recommendation: *podResources("50m", "64Mi")},
		}},
		{ObjectMeta: sliceMeta("agent-b", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.Now(), Nodes: []vpa_alpha.NodeRecommendation{
			{NodeName: "third", NodeUID: "uid-third", Recommendation: *podResources("700m", "1Gi")},
		}},
		// Another VPA's slice, for the same node name.
		{ObjectMeta: sliceMeta("other-a", "other", "other-uid"), VPAName: "other", UpdateTime: metav1.Now(), Nodes: []vpa_alpha.NodeRecommendation{
			{NodeName: "quiet", NodeUID: "uid-quiet", Recommendation: *podResources("9", "9Gi")},
		}},
	} {
		if err := indexer.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return &Lookup{Indexer: indexer, Nodes: testNodes(t)}
}

// daemonSetPod is a pod as the DaemonSet controller creates it: pinned to its
// node by required node affinity, and bound (nodeName) only by the scheduler.
func daemonSetPod(node string, bound bool) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "default"},
		Spec: corev1.PodSpec{
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}},
				}}},
			}}},
			Containers: []corev1.Container{{Name: "agent", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("200Mi")},
			}}},
		},
	}
	if bound {
		pod.Spec.NodeName = node
		pod.Spec.Affinity = nil
	}
	return pod
}

func TestPodNode(t *testing.T) {
	twoNodes := daemonSetPod("a", false)
	twoNodes.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
		twoNodes.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
		corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}})
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"bound":                    {pod: daemonSetPod("n1", true), want: "n1"},
		"pinned by affinity":       {pod: daemonSetPod("n1", false), want: "n1"},
		"no node":                  {pod: &corev1.Pod{}, want: ""},
		"affinity names two nodes": {pod: twoNodes, want: ""},
	} {
		if got := PodNode(tc.pod); got != tc.want {
			t.Errorf("%s: PodNode = %q, want %q", name, got, tc.want)
		}
	}
}

func TestForPod(t *testing.T) {
	l := lookup(t)
	for _, tc := range []struct {
		name    string
		gate    bool
		scope   vpa_types.VerticalPodAutoscalerScope
		kind    string // of the target; empty: DaemonSet
		pod     *corev1.Pod
		wantCPU string
	}{
		{name: "bound pod on busy", gate: true, scope: vpa_types.ScopeNode, pod: daemonSetPod("busy", true), wantCPU: "2"},
		{name: "pod pinned to quiet, before binding", gate: true, scope: vpa_types.ScopeNode, pod: daemonSetPod("quiet", false), wantCPU: "50m"},
		{name: "node in the second slice", gate: true, scope: vpa_types.ScopeNode, pod: daemonSetPod("third", true), wantCPU: "700m"},
		{name: "node without an entry: DaemonSet-wide", gate: true, scope: vpa_types.ScopeNode, pod: daemonSetPod("new", true), wantCPU: "300m"},
		{name: "pod without a node: DaemonSet-wide", gate: true, scope: vpa_types.ScopeNode, pod: &corev1.Pod{}, wantCPU: "300m"},
		{name: "no scope", gate: true, scope: "", pod: daemonSetPod("busy", true), wantCPU: "300m"},
		{name: "gate off", gate: false, scope: vpa_types.ScopeNode, pod: daemonSetPod("busy", true), wantCPU: "300m"},
		{name: "target not a DaemonSet", gate: true, scope: vpa_types.ScopeNode, kind: "Deployment", pod: daemonSetPod("busy", true), wantCPU: "300m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, tc.gate)
			vpa := daemonSetVPA(tc.scope, nil)
			if tc.kind != "" {
				vpa.Spec.TargetRef.Kind = tc.kind
			}
			got := l.ForPod(vpa, tc.pod).Status.Recommendation.ContainerRecommendations[0].Target[corev1.ResourceCPU]
			if got.Cmp(resource.MustParse(tc.wantCPU)) != 0 {
				t.Errorf("cpu target %s, want %s", got.String(), tc.wantCPU)
			}
			if vpa.Status.Recommendation.ContainerRecommendations[0].Target.Cpu().String() != "300m" {
				t.Error("ForPod changed the VPA it was given")
			}
		})
	}
}

// TestAdmissionRecommendation runs the admission controller's recommendation
// provider with the wrapped processor: the pod of each node gets that node's
// requests, within the resource policy, and limits in proportion.
func TestAdmissionRecommendation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	provider := recommendation.NewProvider(limitrange.NewNoopLimitsCalculator(),
		&RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: lookup(t)})
	requestsOnly := vpa_types.ContainerControlledValuesRequestsOnly
	for _, tc := range []struct {
		name                 string
		policy               *vpa_types.PodResourcePolicy
		node                 string
		wantCPU, wantMem     string
		wantCPULimit, wantML string
	}{
		{name: "busy", node: "busy", wantCPU: "2", wantMem: "2Gi", wantCPULimit: "4", wantML: "4Gi"},
		{name: "quiet", node: "quiet", wantCPU: "50m", wantMem: "64Mi", wantCPULimit: "100m", wantML: "128Mi"},
		{name: "new node: DaemonSet-wide", node: "new", wantCPU: "300m", wantMem: "300Mi", wantCPULimit: "600m", wantML: "600Mi"},
		{name: "busy, capped by maxAllowed", node: "busy",
			policy: &vpa_types.PodResourcePolicy{ContainerPolicies: []vpa_types.ContainerResourcePolicy{{
				ContainerName: "agent", MaxAllowed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}}},
			wantCPU: "1", wantMem: "2Gi", wantCPULimit: "2", wantML: "4Gi"},
		{name: "busy, requests only: capped at the pod's limits, which stay", node: "busy",
			policy: &vpa_types.PodResourcePolicy{ContainerPolicies: []vpa_types.ContainerResourcePolicy{{
				ContainerName: "agent", ControlledValues: &requestsOnly,
			}}},
			wantCPU: "200m", wantMem: "200Mi", wantCPULimit: "", wantML: ""},
		{name: "quiet, requests only", node: "quiet",
			policy: &vpa_types.PodResourcePolicy{ContainerPolicies: []vpa_types.ContainerResourcePolicy{{
				ContainerName: "agent", ControlledValues: &requestsOnly,
			}}},
			wantCPU: "50m", wantMem: "64Mi", wantCPULimit: "", wantML: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resources, _, err := provider.GetContainersResourcesForPod(daemonSetPod(tc.node, false), daemonSetVPA(vpa_types.ScopeNode, tc.policy))
			if err != nil || len(resources) != 1 {
				t.Fatalf("resources %v, err %v", resources, err)
			}
			r := resources[0]
			check := func(what string, got resource.Quantity, found bool, want string) {
				if want == "" {
					if found {
						t.Errorf("%s set to %s, want unset", what, got.String())
					}
					return
				}
				if !found || got.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s = %s, want %s", what, got.String(), want)
				}
			}
			cpu, okc := r.Requests[corev1.ResourceCPU]
			mem, okm := r.Requests[corev1.ResourceMemory]
			cpuL, okcl := r.Limits[corev1.ResourceCPU]
			memL, okml := r.Limits[corev1.ResourceMemory]
			check("cpu request", cpu, okc, tc.wantCPU)
			check("memory request", mem, okm, tc.wantMem)
			check("cpu limit", cpuL, okcl, tc.wantCPULimit)
			check("memory limit", memL, okml, tc.wantML)
		})
	}
}

func TestForPodThroughProcessor(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	vpa, pod := daemonSetVPA(vpa_types.ScopeNode, nil), daemonSetPod("busy", true)
	capping := vpa_api_util.NewCappingRecommendationProcessor(nil)
	scoped := &RecommendationProcessor{Inner: capping, Lookup: lookup(t)}
	if got := ForPod(scoped, vpa, pod).Status.Recommendation; !apiequality.Semantic.DeepEqual(got, podResources("2", "2Gi")) {
		t.Errorf("through the node scope processor: %v, want the node's recommendation", got)
	}
	if got := ForPod(capping, vpa, pod); got != vpa {
		t.Errorf("through another processor: got a different VPA, want the VPA itself")
	}
}

// TestForPodIgnoresSlicesOfEarlierVPA: a VPA deleted and created again with
// the same name gets a new UID; the slices of the earlier one, which the
// garbage collector has not removed yet, are not its recommendations.
func TestForPodIgnoresSlicesOfEarlierVPA(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	l := lookup(t)
	recreated := daemonSetVPA(vpa_types.ScopeNode, nil)
	recreated.UID = "agent-uid-2"
	for _, node := range []string{"busy", "quiet", "third"} {
		got := l.ForPod(recreated, daemonSetPod(node, true)).Status.Recommendation.ContainerRecommendations[0].Target[corev1.ResourceCPU]
		if got.Cmp(resource.MustParse("300m")) != 0 {
			t.Errorf("node %s: cpu target %s of the earlier VPA's slice, want the DaemonSet-wide 300m", node, got.String())
		}
	}
}

// TestReadersMatchNodeUID: an entry is the node's only when it carries the UID
// of the Node of that name. A node deleted and registered again under the same
// name (a new machine) gets nothing of the earlier machine's entry, from the
// admission controller or the updater, until the recommender writes one for
// the new UID; a node not in the node cache gets no entry either.
func TestReadersMatchNodeUID(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	vpa := daemonSetVPA(vpa_types.ScopeNode, nil)
	slice := &vpa_alpha.VerticalPodAutoscalerSlice{ObjectMeta: sliceMeta("agent-a", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.Now(), Nodes: []vpa_alpha.NodeRecommendation{
		{NodeName: "busy", NodeUID: "uid-earlier-machine", Recommendation: *podResources("2", "2Gi")},
		{NodeName: "gone", NodeUID: "uid-gone", Recommendation: *podResources("3", "3Gi")},
	}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
	if err := indexer.Add(slice); err != nil {
		t.Fatal(err)
	}
	l := &Lookup{Indexer: indexer, Nodes: testNodes(t)}
	check := func(when, node, want string) {
		t.Helper()
		for _, role := range []Role{AdmissionController, Updater} {
			p := &RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: l, Role: role}
			rec, _, err := p.Apply(vpa, daemonSetPod(node, role == Updater))
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.ContainerRecommendations[0].Target[corev1.ResourceCPU]; got.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("%s: %s on node %s: cpu target %s, want %s", when, role, node, got.String(), want)
			}
		}
	}
	check("the entry of the earlier machine", "busy", "300m")
	check("a node not in the cache", "gone", "300m")

	slice = slice.DeepCopy()
	slice.Nodes[0] = vpa_alpha.NodeRecommendation{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *podResources("1", "1Gi")}
	if err := indexer.Update(slice); err != nil {
		t.Fatal(err)
	}
	check("the recommender wrote the new machine's entry", "busy", "1")
}

// TestStaleSlices: a slice the recommender has not written for StaleAfter
// (it is down, or stopped writing: RBAC, the gate off in the recommender
// only), or one without updateTime, is stale. The admission controller
// gives a new pod the node's last recommendation all the same, as upstream
// keeps applying a status.recommendation that no one updates; the updater
// leaves the pod alone (its own requests as recommendation), instead of
// moving it to the DaemonSet-wide value. A node without an entry gets the
// DaemonSet-wide recommendation from both, unless every slice of the VPA is
// stale: then the updater leaves its pod alone too.
func TestStaleSlices(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	written := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		updateTime time.Time
		age        time.Duration
		staleAfter time.Duration // 0: the default
		node       string
		// cpu targets: the pod requests 100m, the node's entry is 2, the DaemonSet-wide 300m
		wantAdmission, wantUpdater string
	}{
		{name: "fresh", updateTime: written, age: vpa_alpha.SliceStaleAfter - time.Second, node: "busy", wantAdmission: "2", wantUpdater: "2"},
		{name: "stale", updateTime: written, age: vpa_alpha.SliceStaleAfter, node: "busy", wantAdmission: "2", wantUpdater: "100m"},
		{name: "stale after a day", updateTime: written, age: 24 * time.Hour, node: "busy", wantAdmission: "2", wantUpdater: "100m"},
		{name: "without updateTime", age: 0, node: "busy", wantAdmission: "2", wantUpdater: "100m"},
		{name: "stale by a shorter bound", updateTime: written, age: time.Minute, staleAfter: time.Minute, node: "busy", wantAdmission: "2", wantUpdater: "100m"},
		{name: "fresh within a shorter bound", updateTime: written, age: time.Minute - time.Second, staleAfter: time.Minute, node: "busy", wantAdmission: "2", wantUpdater: "2"},
		{name: "no entry, slices fresh", updateTime: written, age: time.Minute, node: "new", wantAdmission: "300m", wantUpdater: "300m"},
		{name: "no entry, every slice stale", updateTime: written, age: vpa_alpha.SliceStaleAfter, node: "new", wantAdmission: "300m", wantUpdater: "100m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
			if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
				ObjectMeta: sliceMeta("agent-a", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.NewTime(tc.updateTime),
				Nodes: []vpa_alpha.NodeRecommendation{{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *podResources("2", "2Gi")}},
			}); err != nil {
				t.Fatal(err)
			}
			l := &Lookup{Indexer: indexer, Nodes: testNodes(t), Clock: clocktesting.NewFakePassiveClock(written.Add(tc.age)), StaleAfter: tc.staleAfter}
			for _, c := range []struct {
				role Role
				want string
			}{{AdmissionController, tc.wantAdmission}, {Updater, tc.wantUpdater}} {
				p := &RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: l, Role: c.role}
				rec, _, err := p.Apply(daemonSetVPA(vpa_types.ScopeNode, nil), daemonSetPod(tc.node, true))
				if err != nil {
					t.Fatalf("%s: %v", c.role, err)
				}
				r := rec.ContainerRecommendations[0]
				if got := r.Target[corev1.ResourceCPU]; got.Cmp(resource.MustParse(c.want)) != 0 {
					t.Errorf("%s: cpu target %s, want %s", c.role, got.String(), c.want)
				}
				lower, upper := r.LowerBound[corev1.ResourceCPU], r.UpperBound[corev1.ResourceCPU]
				if lower.Cmp(resource.MustParse(c.want)) != 0 || upper.Cmp(resource.MustParse(c.want)) != 0 {
					t.Errorf("%s: cpu bounds [%s, %s], want both %s", c.role, lower.String(), upper.String(), c.want)
				}
			}
		})
	}
}

// TestNodeEntryInTwoSlices: a node found in two slices of the VPA (a move
// between them that a recommender restart cut short) takes the entry of the
// newer slice, and its freshness.
func TestNodeEntryInTwoSlices(t *testing.T) {
	written := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
	for i, s := range []struct {
		age time.Duration
		cpu string
	}{{age: time.Hour, cpu: "1"}, {age: time.Minute, cpu: "2"}} {
		if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
			ObjectMeta: sliceMeta(fmt.Sprintf("agent-%d", i), "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.NewTime(written.Add(-s.age)),
			Nodes: []vpa_alpha.NodeRecommendation{{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *podResources(s.cpu, "1Gi")}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	l := &Lookup{Indexer: indexer, Nodes: testNodes(t), Clock: clocktesting.NewFakePassiveClock(written)}
	rec, fresh := l.NodeEntry(daemonSetVPA(vpa_types.ScopeNode, nil), "busy")
	if rec == nil || !fresh || rec.ContainerRecommendations[0].Target.Cpu().String() != "2" {
		t.Errorf("entry %v, fresh %t; want the newer slice's 2 cores, fresh", rec, fresh)
	}
}

// TestNodesWithoutEntryGetTheirGroups: with a group label, a node that has no
// entry of its own (a new node, or a machine that registered again under a
// name) gets its group's recommendation from the admission controller and the
// updater alike, so that the updater does not evict a new node's first pod
// admitted with it; a node with an entry keeps its own, a node without the
// label or in a group without a value gets the DaemonSet-wide one, and a
// stale group value is left alone by the updater, as a stale entry is.
func TestNodesWithoutEntryGetTheirGroups(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	written := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []struct{ name, pool string }{{"busy", "big"}, {"new", "big"}, {"new-small", "small"}, {"unlabelled", ""}, {"reused", "big"}} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, UID: types.UID("uid-" + n.name)}}
		if n.pool != "" {
			node.Labels = map[string]string{"pool": n.pool}
		}
		if err := nodes.Add(node); err != nil {
			t.Fatal(err)
		}
	}
	vpa := daemonSetVPA(vpa_types.ScopeNode, nil)
	vpa.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: "pool"}
	for _, tc := range []struct {
		name  string
		age   time.Duration
		vpa   *vpa_types.VerticalPodAutoscaler
		node  string
		want  string // cpu target for the admission controller
		wantU string // and the updater; the pod requests 100m, the DaemonSet-wide is 300m
	}{
		{name: "own entry", vpa: vpa, node: "busy", want: "2", wantU: "2"},
		{name: "new node of a group", vpa: vpa, node: "new", want: "1500m", wantU: "1500m"},
		{name: "an earlier machine's name", vpa: vpa, node: "reused", want: "1500m", wantU: "1500m"},
		{name: "group without a value", vpa: vpa, node: "new-small", want: "300m", wantU: "300m"},
		{name: "no label", vpa: vpa, node: "unlabelled", want: "300m", wantU: "300m"},
		{name: "no group label", vpa: daemonSetVPA(vpa_types.ScopeNode, nil), node: "new", want: "300m", wantU: "300m"},
		{name: "stale group value", age: vpa_alpha.SliceStaleAfter, vpa: vpa, node: "new", want: "1500m", wantU: "100m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
			if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
				ObjectMeta: sliceMeta("agent-a", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.NewTime(written),
				Nodes: []vpa_alpha.NodeRecommendation{
					{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *podResources("2", "2Gi")},
					{NodeName: "reused", NodeUID: "uid-earlier-machine", Recommendation: *podResources("3", "3Gi")},
				},
				Groups: []vpa_alpha.GroupRecommendation{{LabelValue: "big", Recommendation: *podResources("1500m", "1Gi")}},
			}); err != nil {
				t.Fatal(err)
			}
			l := &Lookup{Indexer: indexer, Nodes: listersv1.NewNodeLister(nodes), Clock: clocktesting.NewFakePassiveClock(written.Add(tc.age))}
			for _, c := range []struct {
				role Role
				want string
			}{{AdmissionController, tc.want}, {Updater, tc.wantU}} {
				p := &RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: l, Role: c.role}
				rec, _, err := p.Apply(tc.vpa, daemonSetPod(tc.node, c.role == Updater))
				if err != nil {
					t.Fatalf("%s: %v", c.role, err)
				}
				if got := rec.ContainerRecommendations[0].Target[corev1.ResourceCPU]; got.Cmp(resource.MustParse(c.want)) != 0 {
					t.Errorf("%s: cpu target %s, want %s", c.role, got.String(), c.want)
				}
			}
		})
	}
}

// TestEntriesGoStaleOnTheirOwn: an entry kept without a recommendation (its
// node's history is short again) keeps its computedTime while its slice is
// rewritten: the updater leaves its pod alone once that is StaleAfter old, as
// for a stale slice, while the other entries of the slice stay fresh. An entry
// without computedTime is as fresh as its slice.
func TestEntriesGoStaleOnTheirOwn(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
	if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: sliceMeta("agent-a", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.NewTime(now),
		Nodes: []vpa_alpha.NodeRecommendation{
			{NodeName: "busy", NodeUID: "uid-busy", ComputedTime: ptr.To(metav1.NewTime(now)), Recommendation: *podResources("2", "2Gi")},
			{NodeName: "quiet", NodeUID: "uid-quiet", ComputedTime: ptr.To(metav1.NewTime(now.Add(-vpa_alpha.SliceStaleAfter))), Recommendation: *podResources("50m", "64Mi")},
			{NodeName: "third", NodeUID: "uid-third", Recommendation: *podResources("700m", "1Gi")},
		},
	}); err != nil {
		t.Fatal(err)
	}
	l := &Lookup{Indexer: indexer, Nodes: testNodes(t), Clock: clocktesting.NewFakePassiveClock(now)}
	vpa := daemonSetVPA(vpa_types.ScopeNode, nil)
	for node, want := range map[string]struct{ admission, updater string }{
		"busy":  {"2", "2"},
		"quiet": {"50m", "100m"}, // the pod's own request: left alone
		"third": {"700m", "700m"},
	} {
		for role, cpu := range map[Role]string{AdmissionController: want.admission, Updater: want.updater} {
			p := &RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: l, Role: role}
			rec, _, err := p.Apply(vpa, daemonSetPod(node, true))
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.ContainerRecommendations[0].Target[corev1.ResourceCPU]; got.Cmp(resource.MustParse(cpu)) != 0 {
				t.Errorf("%s on node %s: cpu target %s, want %s", role, node, got.String(), cpu)
			}
		}
	}
}

// TestLookupReadsANodeItsCacheDoesNotHoldYet: the DaemonSet controller may
// create a new node's first pod before the admission controller's node cache
// has seen the node; the admission controller then reads the node from the
// API server (GetNode), so that the pod gets its group's value all the same.
// It reads only for a pod a DaemonSet controls: anyone who may create pods
// can pin one to any node name.
func TestLookupReadsANodeItsCacheDoesNotHoldYet(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers())
	if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: sliceMeta("agent-a", "agent", "agent-uid"), VPAName: "agent", UpdateTime: metav1.Now(),
		Nodes:  []vpa_alpha.NodeRecommendation{{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *podResources("2", "2Gi")}},
		Groups: []vpa_alpha.GroupRecommendation{{LabelValue: "big", Recommendation: *podResources("1500m", "1Gi")}},
	}); err != nil {
		t.Fatal(err)
	}
	vpa := daemonSetVPA(vpa_types.ScopeNode, nil)
	vpa.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: "pool"}
	var read []string
	getNode := func(name string) (*corev1.Node, error) {
		read = append(read, name)
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + types.UID(name), Labels: map[string]string{"pool": "big"}}}, nil
	}
	controlled := daemonSetPod("just-registered", false)
	controlled.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		name    string
		getNode func(string) (*corev1.Node, error)
		pod     *corev1.Pod
		want    string
	}{
		{name: "cache only", pod: controlled, want: "300m"},
		{name: "read from the API server", getNode: getNode, pod: controlled, want: "1500m"},
		{name: "a pod no DaemonSet controls is not read for", getNode: getNode, pod: daemonSetPod("just-registered", false), want: "300m"},
	} {
		l := &Lookup{Indexer: indexer, Nodes: testNodes(t), GetNode: tc.getNode}
		p := &RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: l, Role: AdmissionController}
		rec, _, err := p.Apply(vpa, tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.ContainerRecommendations[0].Target[corev1.ResourceCPU]; got.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("%s: cpu target %s, want %s", tc.name, got.String(), tc.want)
		}
	}
	if len(read) != 1 || read[0] != "just-registered" {
		t.Errorf("nodes read from the API server: %v, want only the one the cache does not hold", read)
	}
}
