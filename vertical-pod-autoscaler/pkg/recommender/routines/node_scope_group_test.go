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
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// TestNodeGroupRecommendations: with spec.nodeScope.groupLabel, a node gets
// its group's estimate blended with its own by the confidence of its own
// history (a day of samples for full weight, the default confidence
// intervals): a new node the group's value, a node with two days of history
// its own, a node with six hours a quarter of its own and three quarters of
// the group's. A node without the label, or in a group without the minimum of
// history, gets what it gets without groups.
func TestNodeGroupRecommendations(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.apiVPA.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: "pool"}
	if err := f.cluster.AddOrUpdateVpa(f.apiVPA, f.selector); err != nil {
		t.Fatal(err)
	}
	pools := map[string]string{"a-old": "a", "a-new": "a", "b-old": "b", "b-busy": "b", "b-mid": "b", "b-new": "b", "c-new": "c"}
	labels := map[string]map[string]string{"solo": {"other": "b"}}
	for node, pool := range pools {
		labels[node] = map[string]string{"pool": pool}
	}
	f.r.nodeScope.Nodes = fakeNodes{labels: labels}
	for _, node := range []string{"a-old", "a-new", "b-old", "b-busy", "b-mid", "b-new", "c-new", "solo", "solo-new"} {
		f.addPod(t, node)
	}
	f.feed(t, "a-old", 1, 1e9, 48*time.Hour)
	f.feed(t, "b-old", 1, 1e9, 48*time.Hour)
	f.feed(t, "b-busy", 4, 4e9, 48*time.Hour)
	f.feed(t, "b-mid", 0.1, 1e8, 6*time.Hour)
	f.feed(t, "solo", 4, 4e9, 6*time.Hour)
	f.feed(t, "c-new", 4, 4e9, 10*time.Minute)
	f.feed(t, "solo-new", 4, 4e9, 10*time.Minute)

	f.r.UpdateVPAs()
	got := f.slices(t)

	// Each node's recommendation without groups.
	modelVPA := f.modelVPA()
	live, _ := f.r.liveNodes(modelVPA)
	ungrouped := map[string]*vpa_types.RecommendedPodResources{}
	recs, _ := NodeRecommendations(f.cluster, modelVPA, live, nil, f.r.nodeScope.MinHistory, f.r.nodeScope.Confidence,
		f.apiVPA, f.r.podResourceRecommender, f.r.recommendationFormat, f.r.recommendationPostProcessor)
	for node, rec := range recs {
		ungrouped[node.Name] = rec
	}

	type value struct {
		container string
		resource  corev1.ResourceName
		bound     string
	}
	values := func(rec vpa_types.RecommendedPodResources) map[value]float64 {
		result := map[value]float64{}
		for _, c := range rec.ContainerRecommendations {
			for bound, list := range map[string]corev1.ResourceList{"target": c.Target, "lowerBound": c.LowerBound, "upperBound": c.UpperBound} {
				for res, q := range list {
					result[value{c.ContainerName, res, bound}] = q.AsApproximateFloat64()
				}
			}
		}
		return result
	}
	// Within rounding: the recommendations are in millicores and bytes.
	near := func(a, b float64) bool { return math.Abs(a-b) <= math.Max(0.002, 1e-6*math.Abs(b)) }

	for _, node := range []string{"a-old", "a-new", "b-old", "b-busy", "b-mid", "b-new", "solo"} {
		if _, found := got[node]; !found {
			t.Fatalf("no recommendation for node %s: %v", node, got)
		}
	}
	for _, node := range []string{"c-new", "solo-new"} {
		if _, found := got[node]; found {
			t.Errorf("node %s has a recommendation with 10 minutes of history, and no group with the minimum: want none", node)
		}
	}

	// A new node gets its group's value: in group a, which has one node with
	// history, that node's.
	aOld, aNew := values(got["a-old"]), values(got["a-new"])
	if len(aOld) != 12 {
		t.Fatalf("a-old: %d values, want 12 (two containers, two resources, target and bounds)", len(aOld))
	}
	for v, want := range aOld {
		if !near(aNew[v], want) {
			t.Errorf("a-new %v: %v, want a-old's %v (the group's)", v, aNew[v], want)
		}
	}

	// A node with two days of history gets its own, unlike the group's.
	bOld, bMid, bNew := values(got["b-old"]), values(got["b-mid"]), values(got["b-new"])
	for v, want := range values(*ungrouped["b-old"]) {
		if !near(bOld[v], want) {
			t.Errorf("b-old %v: %v, want its own %v", v, bOld[v], want)
		}
	}
	groupTarget, ownTarget := bNew[value{"agent", corev1.ResourceCPU, "target"}], bOld[value{"agent", corev1.ResourceCPU, "target"}]
	if groupTarget <= ownTarget*1.5 {
		t.Errorf("group b's cpu target %v is not above b-old's own %v: the test does not tell them apart", groupTarget, ownTarget)
	}

	// Six hours of history: a quarter its own, three quarters the group's.
	bMidOwn := values(*ungrouped["b-mid"])
	for v, group := range bNew {
		own := bMidOwn[v]
		if want := 0.25*own + 0.75*group; !near(bMid[v], want) {
			t.Errorf("b-mid %v: %v, want 0.25 * its own %v + 0.75 * the group's %v = %v", v, bMid[v], own, group, want)
		}
	}
	if cpu, own := bMid[value{"agent", corev1.ResourceCPU, "target"}], bMidOwn[value{"agent", corev1.ResourceCPU, "target"}]; cpu <= own || cpu >= groupTarget {
		t.Errorf("b-mid cpu target %v is not between its own %v and the group's %v", cpu, own, groupTarget)
	}

	// A node without the label gets its own, as without groups.
	for v, want := range values(*ungrouped["solo"]) {
		if !near(values(got["solo"])[v], want) {
			t.Errorf("solo %v: %v, want its own %v", v, values(got["solo"])[v], want)
		}
	}

	// The slices hold each group's value, for nodes of the group that have
	// no entry yet: a new node's first pod gets at admission what the node's
	// entry will be. Group c has no value (10 minutes of history).
	groupValues := map[string]vpa_types.RecommendedPodResources{}
	for _, s := range f.sliceObjects(t) {
		for _, g := range s.Groups {
			groupValues[g.LabelValue] = g.Recommendation
		}
	}
	if len(groupValues) != 2 {
		t.Errorf("group values for %d groups, want 2 (a and b)", len(groupValues))
	}
	for group, newNode := range map[string]string{"a": "a-new", "b": "b-new"} {
		if !apiequality.Semantic.DeepEqual(groupValues[group], got[newNode]) {
			t.Errorf("group %s's value %v, want what its new node %s got: %v", group, groupValues[group], newNode, got[newNode])
		}
	}
}

// TestNodeGroupsKeyedByLabelValue: nodes are grouped by the value of the VPA's
// label: another key's value, or a node that is gone, puts a node in no
// group, and an empty value is a group like any other.
func TestNodeGroupsKeyedByLabelValue(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.apiVPA.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: "pool"}
	if err := f.cluster.AddOrUpdateVpa(f.apiVPA, f.selector); err != nil {
		t.Fatal(err)
	}
	f.r.nodeScope.Nodes = fakeNodes{gone: map[string]bool{"gone": true}, labels: map[string]map[string]string{
		"a": {"pool": "x"}, "b": {"pool": "x"}, "empty": {"pool": ""}, "other": {"zone": "x"},
	}}
	nodes := map[model.NodeRef]bool{}
	for _, name := range []string{"a", "b", "empty", "other", "gone"} {
		nodes[model.NodeRef{Name: name, UID: types.UID("uid-" + name)}] = true
	}
	groups := f.r.nodeGroups(f.modelVPA(), nodes)
	want := map[model.NodeRef]string{{Name: "a", UID: "uid-a"}: "x", {Name: "b", UID: "uid-b"}: "x", {Name: "empty", UID: "uid-empty"}: ""}
	if len(groups) != len(want) {
		t.Errorf("groups %v, want %v", groups, want)
	}
	for node, group := range want {
		if got, found := groups[node]; !found || got != group {
			t.Errorf("group of %s: %q (found %v), want %q", node.Name, got, found, group)
		}
	}

	// Without the group label on the VPA, no groups.
	f.apiVPA.Spec.NodeScope = nil
	if err := f.cluster.AddOrUpdateVpa(f.apiVPA, f.selector); err != nil {
		t.Fatal(err)
	}
	if groups := f.r.nodeGroups(f.modelVPA(), nodes); groups != nil {
		t.Errorf("without groupLabel: groups %v, want none", groups)
	}
}
