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

package restriction

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	baseclocktest "k8s.io/utils/clock/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/utils"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/nodescope"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/test"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

func cpuMemRec(cpu, mem string) *vpa_types.RecommendedPodResources {
	return &vpa_types.RecommendedPodResources{ContainerRecommendations: []vpa_types.RecommendedContainerResources{{
		ContainerName: "test-container",
		Target:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
	}}}
}

// TestNodeScopedInfeasibleAttempts: the pod on node busy failed an in-place
// resize to its node's recommendation (2 cores, 2Gi). The DaemonSet-wide
// recommendation is lower, the node's is not: the node-scoped restriction
// keeps the attempt cached, where the VPA-wide comparison would retry.
func TestNodeScopedInfeasibleAttempts(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.InPlace, true)
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	ds := appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"}, TypeMeta: metav1.TypeMeta{Kind: "DaemonSet"},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, NumberReady: 1}}
	pod := test.Pod().WithName("agent-busy").WithUID("agent-busy-uid").WithCreator(&ds.ObjectMeta, &ds.TypeMeta).Get()
	pod.Spec.NodeName = "busy"

	vpa := getIPVpa()
	vpa.UID = "agent-uid"
	vpa.Spec.TargetRef = &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent"}
	vpa.Spec.Scope = vpa_types.ScopeNode
	vpa.Status.Recommendation = cpuMemRec("1", "1Gi")
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodescope.Indexers())
	if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: metav1.ObjectMeta{Name: vpa.Name + "-1", Namespace: vpa.Namespace,
			OwnerReferences: []metav1.OwnerReference{{Kind: "VerticalPodAutoscaler", Name: vpa.Name, UID: vpa.UID}}},
		VPAName:    vpa.Name,
		UpdateTime: metav1.Now(),
		Nodes:      []vpa_alpha.NodeRecommendation{{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *cpuMemRec("2", "2Gi")}},
	}); err != nil {
		t.Fatal(err)
	}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "busy", UID: "uid-busy"}}); err != nil {
		t.Fatal(err)
	}
	processor := &nodescope.RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(nil), Lookup: &nodescope.Lookup{Indexer: indexer, Nodes: listersv1.NewNodeLister(nodes)}, Role: nodescope.Updater}
	attempts := map[types.UID]*vpa_types.RecommendedPodResources{pod.UID: cpuMemRec("2", "2Gi")}

	factory, err := getRestrictionFactory(nil, nil, nil, &ds, 1, 0.5, baseclocktest.NewFakeClock(time.Time{}), map[string]time.Time{}, GetFakeCalculatorsWithFakeResourceCalc(), false)
	if err != nil {
		t.Fatal(err)
	}
	creators, podCreators, err := factory.GetCreatorMaps([]*corev1.Pod{pod}, vpa)
	if err != nil {
		t.Fatal(err)
	}
	plain := factory.NewPodsInPlaceRestriction(creators, podCreators)
	if got := plain.CanInPlaceUpdate(pod, vpa, attempts); got != utils.InPlaceApproved {
		t.Fatalf("VPA-wide: %v, want %v (the DaemonSet-wide recommendation is lower than the attempt)", got, utils.InPlaceApproved)
	}
	if got := NodeScoped(plain, processor).CanInPlaceUpdate(pod, vpa, attempts); got != utils.InPlaceInfeasibleCached {
		t.Errorf("node-scoped: %v, want %v (the node's recommendation is the attempt's)", got, utils.InPlaceInfeasibleCached)
	}
	// The node's recommendation goes down: the node-scoped restriction retries.
	indexer.List()[0].(*vpa_alpha.VerticalPodAutoscalerSlice).Nodes[0].Recommendation = *cpuMemRec("1500m", "2Gi")
	if got := NodeScoped(plain, processor).CanInPlaceUpdate(pod, vpa, attempts); got != utils.InPlaceApproved {
		t.Errorf("node-scoped, lower node recommendation: %v, want %v", got, utils.InPlaceApproved)
	}
	// Without the node scope processor (gate off), the restriction is left as is.
	if got := NodeScoped(plain, vpa_api_util.NewCappingRecommendationProcessor(nil)); got != plain {
		t.Errorf("NodeScoped without the node scope processor wrapped the restriction")
	}
}
