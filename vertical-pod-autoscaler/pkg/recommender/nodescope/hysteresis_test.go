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
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

func milli(m int64) resource.Quantity { return *resource.NewMilliQuantity(m, resource.DecimalSI) }

// boundedRec is a CPU recommendation of the container agent with bounds.
func boundedRec(target, lower, upper int64) *vpa_types.RecommendedPodResources {
	return &vpa_types.RecommendedPodResources{ContainerRecommendations: []vpa_types.RecommendedContainerResources{{
		ContainerName: "agent",
		Target:        corev1.ResourceList{corev1.ResourceCPU: milli(target)},
		LowerBound:    corev1.ResourceList{corev1.ResourceCPU: milli(lower)},
		UpperBound:    corev1.ResourceList{corev1.ResourceCPU: milli(upper)},
	}}}
}

func cpuRequest(m int64) []PodRequests {
	return []PodRequests{{"agent": corev1.ResourceList{corev1.ResourceCPU: milli(m)}}}
}

func TestPlanSlicesHysteresis(t *testing.T) {
	a, b := ref("node-a"), ref("node-b")
	written := map[model.NodeRef]*vpa_types.RecommendedPodResources{a: boundedRec(100, 80, 200), b: boundedRec(500, 400, 900)}
	existing := apply(nil, PlanSlices(testVPA, nil, written, Groups{}, nil, t0))
	// Node a's pod requests 100m, within the written bounds; node b's 300m, below them.
	requests := map[model.NodeRef][]PodRequests{a: cpuRequest(100), b: cpuRequest(300)}
	hysteresis := &Hysteresis{Threshold: 0.1, Requests: requests}
	// Both targets move by 5%, all bounds by 5 to 10%; a's request stays within,
	// b's below the bounds.
	small := boundedRec(105, 85, 190)
	smallB := boundedRec(525, 420, 850)

	for _, tc := range []struct {
		name       string
		a          *vpa_types.RecommendedPodResources
		hysteresis *Hysteresis
		rewritten  bool
	}{
		{name: "small moves", a: small, hysteresis: hysteresis},
		{name: "target up by more than the threshold", a: boundedRec(111, 85, 190), hysteresis: hysteresis, rewritten: true},
		{name: "target down by more than the threshold", a: boundedRec(89, 70, 190), hysteresis: hysteresis, rewritten: true},
		{name: "target by the threshold", a: boundedRec(110, 85, 190), hysteresis: hysteresis},
		{name: "request leaves the bounds", a: boundedRec(105, 101, 190), hysteresis: hysteresis, rewritten: true},
		{name: "request leaves the bounds upwards", a: boundedRec(95, 80, 99), hysteresis: hysteresis, rewritten: true},
		{name: "a second container", a: &vpa_types.RecommendedPodResources{ContainerRecommendations: append(small.DeepCopy().ContainerRecommendations,
			vpa_types.RecommendedContainerResources{ContainerName: "sidecar", Target: corev1.ResourceList{corev1.ResourceCPU: milli(10)}})}, hysteresis: hysteresis, rewritten: true},
		{name: "memory as well", a: func() *vpa_types.RecommendedPodResources {
			r := small.DeepCopy()
			r.ContainerRecommendations[0].Target[corev1.ResourceMemory] = resource.MustParse("100Mi")
			return r
		}(), hysteresis: hysteresis, rewritten: true},
		{name: "no hysteresis", a: small, rewritten: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := map[model.NodeRef]*vpa_types.RecommendedPodResources{a: tc.a, b: smallB}
			plan := PlanSlices(testVPA, existing, recs, Groups{}, tc.hysteresis, t0)
			if !tc.rewritten {
				if plan.Writes() != 0 {
					t.Errorf("%d writes, want none", plan.Writes())
				}
				return
			}
			if len(plan.Update) != 1 || plan.Writes() != 1 {
				t.Fatalf("%d writes, %d updates; want one update", plan.Writes(), len(plan.Update))
			}
			// Node a's entry is rewritten; b's small move only without hysteresis.
			want := map[string]*vpa_types.RecommendedPodResources{"node-a": tc.a, "node-b": written[b]}
			if tc.hysteresis == nil {
				want["node-b"] = smallB
			}
			for _, entry := range plan.Update[0].Nodes {
				if !apiequality.Semantic.DeepEqual(entry.Recommendation, *want[entry.NodeName]) {
					t.Errorf("node %s: entry %v, want %v", entry.NodeName, entry.Recommendation, *want[entry.NodeName])
				}
			}
		})
	}

	// A request that enters the bounds: b's 300m, below the written 400m, is
	// within the new ones.
	recs := map[model.NodeRef]*vpa_types.RecommendedPodResources{a: small, b: boundedRec(520, 290, 850)}
	if plan := PlanSlices(testVPA, existing, recs, Groups{}, hysteresis, t0); plan.Writes() != 1 {
		t.Errorf("request enters the bounds: %d writes, want 1", plan.Writes())
	}
	// During a rollout a node runs two pods: either one's request decides.
	rollout := &Hysteresis{Threshold: 0.1, Requests: map[model.NodeRef][]PodRequests{a: append(cpuRequest(100), cpuRequest(95)...), b: cpuRequest(300)}}
	recs = map[model.NodeRef]*vpa_types.RecommendedPodResources{a: boundedRec(102, 97, 190), b: smallB}
	if plan := PlanSlices(testVPA, existing, recs, Groups{}, rollout, t0); plan.Writes() != 1 {
		t.Errorf("the second pod's request leaves the bounds: %d writes, want 1", plan.Writes())
	}
}
