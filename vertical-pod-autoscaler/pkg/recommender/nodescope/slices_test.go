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
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

func rec(milli int64) *vpa_types.RecommendedPodResources {
	return &vpa_types.RecommendedPodResources{ContainerRecommendations: []vpa_types.RecommendedContainerResources{{
		ContainerName: "agent",
		Target:        corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milli, resource.DecimalSI)},
	}}}
}

// ref is the node of the given name, as machine uid-<name>.
func ref(name string) model.NodeRef {
	return model.NodeRef{Name: name, UID: types.UID("uid-" + name)}
}

func nodeRecs(n int, milli int64) map[model.NodeRef]*vpa_types.RecommendedPodResources {
	recs := map[model.NodeRef]*vpa_types.RecommendedPodResources{}
	for i := range n {
		recs[ref(fmt.Sprintf("node-%04d", i))] = rec(milli)
	}
	return recs
}

// t0 is the time of the plans of the tests that do not test the stamps.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var testVPA = &vpa_types.VerticalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "uid"}}

// apply plays a plan against the current slices, as the API server would.
func apply(current []*vpa_alpha.VerticalPodAutoscalerSlice, plan Plan) []*vpa_alpha.VerticalPodAutoscalerSlice {
	byName := map[string]*vpa_alpha.VerticalPodAutoscalerSlice{}
	for _, s := range current {
		byName[s.Name] = s
	}
	for _, s := range plan.Delete {
		delete(byName, s.Name)
	}
	for _, s := range plan.Update {
		byName[s.Name] = s
	}
	for i, s := range plan.Create {
		s = s.DeepCopy()
		s.Name = fmt.Sprintf("%s%d-%d", s.GenerateName, len(byName), i)
		byName[s.Name] = s
	}
	var out []*vpa_alpha.VerticalPodAutoscalerSlice
	for _, s := range byName {
		out = append(out, s)
	}
	return out
}

func nodesIn(slices []*vpa_alpha.VerticalPodAutoscalerSlice) map[string]string {
	nodes := map[string]string{}
	for _, s := range slices {
		for _, n := range s.Nodes {
			nodes[n.NodeName] = s.Name
		}
	}
	return nodes
}

func TestPlanSlices(t *testing.T) {
	plan := PlanSlices(testVPA, nil, nodeRecs(250, 100), Groups{}, nil, t0)
	if len(plan.Create) != 3 || len(plan.Update)+len(plan.Delete) != 0 {
		t.Fatalf("250 new nodes: %d creates, %d updates, %d deletes; want 3 creates", len(plan.Create), len(plan.Update), len(plan.Delete))
	}
	for _, s := range plan.Create {
		if len(s.Nodes) > vpa_alpha.MaxNodesPerSlice || s.VPAName != "agent" || s.Labels[vpa_alpha.VPANameLabel] != "agent" ||
			len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid" {
			t.Errorf("slice %+v", s.ObjectMeta)
		}
	}
	slices := apply(nil, plan)
	before := nodesIn(slices)

	if plan := PlanSlices(testVPA, slices, nodeRecs(250, 100), Groups{}, nil, t0); plan.Writes() != 0 {
		t.Errorf("unchanged recommendations: %d writes, want none", plan.Writes())
	}

	changed := nodeRecs(250, 100)
	changed[ref("node-0007")] = rec(300)
	plan = PlanSlices(testVPA, slices, changed, Groups{}, nil, t0)
	if plan.Writes() != 1 || len(plan.Update) != 1 || plan.Update[0].Name != before["node-0007"] {
		t.Errorf("one node changed: %d writes, want one update of %s", plan.Writes(), before["node-0007"])
	}

	// A node without enough history keeps its entry; a new one gets none.
	insufficient := nodeRecs(250, 100)
	insufficient[ref("node-0008")] = nil
	insufficient[ref("node-9999")] = nil
	if plan := PlanSlices(testVPA, slices, insufficient, Groups{}, nil, t0); plan.Writes() != 0 {
		t.Errorf("nodes without enough history: %d writes, want none", plan.Writes())
	}

	// Nodes go: their slices are rewritten, the others are not; a node that
	// comes takes the free room of the first slice; the rest stay where they are.
	fewer := nodeRecs(250, 100)
	delete(fewer, ref("node-0003"))
	delete(fewer, ref("node-0004"))
	fewer[ref("node-0250")] = rec(100)
	plan = PlanSlices(testVPA, slices, fewer, Groups{}, nil, t0)
	if plan.Writes() != 1 {
		t.Errorf("two nodes gone and one new: %d writes, want 1 (the slice of the gone nodes takes the new one)", plan.Writes())
	}
	after := nodesIn(apply(slices, plan))
	for node, slice := range after {
		if was, found := before[node]; found && was != slice {
			t.Errorf("node %s moved from slice %s to %s", node, was, slice)
		}
	}
	if len(after) != 249 || after["node-0250"] != before["node-0003"] {
		t.Errorf("got %d nodes, node-0250 in %q; want 249 and the slice of node-0003 %q", len(after), after["node-0250"], before["node-0003"])
	}

	// All nodes of the last slice go: it is deleted.
	plan = PlanSlices(testVPA, slices, nodeRecs(200, 100), Groups{}, nil, t0)
	if len(plan.Delete) != 1 || plan.Writes() != 1 {
		t.Errorf("the last 50 nodes gone: %d deletes, %d writes; want one delete", len(plan.Delete), plan.Writes())
	}
}

// TestPlanSlicesNodeIdentity: a node without enough history of its own does not
// keep the entry of an earlier machine of its name, nor an entry without UID
// (no released version wrote one).
func TestPlanSlicesNodeIdentity(t *testing.T) {
	existing := apply(nil, PlanSlices(testVPA, nil, nodeRecs(3, 100), Groups{}, nil, t0))
	existing[0].Nodes[1].NodeUID = "" // node-0001

	recs := nodeRecs(3, 100)
	delete(recs, ref("node-0000"))
	recs[model.NodeRef{Name: "node-0000", UID: "uid-new-machine"}] = nil
	recs[ref("node-0001")] = nil
	plan := PlanSlices(testVPA, existing, recs, Groups{}, nil, t0)
	if len(plan.Update) != 1 || plan.Writes() != 1 {
		t.Fatalf("%d writes, want one update", plan.Writes())
	}
	want := []vpa_alpha.NodeRecommendation{
		{NodeName: "node-0002", NodeUID: ref("node-0002").UID, ComputedTime: ptr.To(metav1.NewTime(t0)), Recommendation: *rec(100)},
	}
	if got := plan.Update[0].Nodes; !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("entries %+v, want %+v", got, want)
	}
	if plan := PlanSlices(testVPA, apply(existing, plan), recs, Groups{}, nil, t0); plan.Writes() != 0 {
		t.Errorf("the same recommendations again: %d writes, want none", plan.Writes())
	}
}

// TestPlanSlicesStamps: every slice written carries the VPA's generation and
// the time; an unchanged slice is rewritten when its stamp is
// SliceRefreshInterval old or of another generation, so that readers can
// tell a recommender that stopped writing.
func TestPlanSlicesStamps(t *testing.T) {
	vpa := testVPA.DeepCopy()
	vpa.Generation = 3
	plan := PlanSlices(vpa, nil, nodeRecs(150, 100), Groups{}, nil, t0)
	for _, s := range plan.Create {
		if s.ObservedGeneration != 3 || !s.UpdateTime.Time.Equal(t0) {
			t.Errorf("created slice: observedGeneration %d, updateTime %v; want 3, %v", s.ObservedGeneration, s.UpdateTime, t0)
		}
	}
	slices := apply(nil, plan)

	if plan := PlanSlices(vpa, slices, nodeRecs(150, 100), Groups{}, nil, t0.Add(vpa_alpha.SliceRefreshInterval-time.Second)); plan.Writes() != 0 {
		t.Errorf("unchanged, before the refresh interval: %d writes, want none", plan.Writes())
	}
	refreshAt := t0.Add(vpa_alpha.SliceRefreshInterval)
	plan = PlanSlices(vpa, slices, nodeRecs(150, 100), Groups{}, nil, refreshAt)
	if len(plan.Update) != 2 || plan.Writes() != 2 {
		t.Fatalf("unchanged, after the refresh interval: %d updates, %d writes; want both slices updated", len(plan.Update), plan.Writes())
	}
	for _, s := range plan.Update {
		if !s.UpdateTime.Time.Equal(refreshAt) {
			t.Errorf("refreshed slice: updateTime %v, want %v", s.UpdateTime, refreshAt)
		}
	}

	vpa.Generation = 4
	plan = PlanSlices(vpa, slices, nodeRecs(150, 100), Groups{}, nil, t0.Add(time.Minute))
	if len(plan.Update) != 2 {
		t.Fatalf("new generation of the VPA: %d updates, want both slices", len(plan.Update))
	}
	for _, s := range plan.Update {
		if s.ObservedGeneration != 4 {
			t.Errorf("updated slice: observedGeneration %d, want 4", s.ObservedGeneration)
		}
	}
}

// TestPlanSlicesRestampsKeptEntries: a slice holding an entry kept without a
// recommendation is refreshed and restamped like the others. Its stamp tells
// that the writer is alive; leaving it unstamped froze the slice's other
// nodes, and the new nodes placed into it, for as long as that one node's
// history stayed short.
func TestPlanSlicesRestampsKeptEntries(t *testing.T) {
	vpa := testVPA.DeepCopy()
	vpa.Generation = 3
	slices := apply(nil, PlanSlices(vpa, nil, nodeRecs(150, 100), Groups{}, nil, t0))
	kept := nodeRecs(150, 100)
	kept[ref("node-0000")] = nil // in the first slice

	for _, c := range []struct {
		name       string
		generation int64
		now        time.Time
	}{
		{"after the refresh interval", 3, t0.Add(vpa_alpha.SliceRefreshInterval)},
		{"new generation", 4, t0.Add(time.Minute)},
	} {
		vpa.Generation = c.generation
		plan := PlanSlices(vpa, slices, kept, Groups{}, nil, c.now)
		if len(plan.Update) != 2 || plan.Writes() != 2 {
			t.Errorf("%s, with an entry kept without a recommendation: %d writes; want both slices updated", c.name, plan.Writes())
			continue
		}
		for _, s := range plan.Update {
			if !s.UpdateTime.Time.Equal(c.now) || s.ObservedGeneration != c.generation {
				t.Errorf("%s: slice of %d nodes stamped %v, generation %d; want %v, %d", c.name, len(s.Nodes), s.UpdateTime, s.ObservedGeneration, c.now, c.generation)
			}
		}
	}
}

// TestPlanSlicesStampsComputedEntries: an entry's computedTime is the last
// write of its slice that found a recommendation for its node; an entry kept
// without one keeps its computedTime while its slice is restamped, so that
// the readers can tell it stale on its own.
func TestPlanSlicesStampsComputedEntries(t *testing.T) {
	slices := apply(nil, PlanSlices(testVPA, nil, nodeRecs(3, 100), Groups{}, nil, t0))
	// As a recommender before computedTime wrote it: the entry kept without
	// a recommendation is then as old as its slice.
	slices[0].Nodes[0].ComputedTime = nil
	kept := nodeRecs(3, 100)
	kept[ref("node-0000")] = nil
	refresh := t0.Add(vpa_alpha.SliceRefreshInterval)
	plan := PlanSlices(testVPA, slices, kept, Groups{}, nil, refresh)
	if len(plan.Update) != 1 {
		t.Fatalf("%d writes at the refresh, want one update", plan.Writes())
	}
	for _, entry := range plan.Update[0].Nodes {
		want := refresh
		if entry.NodeName == "node-0000" {
			want = t0
		}
		if entry.ComputedTime == nil || !entry.ComputedTime.Time.Equal(want) {
			t.Errorf("%s: computedTime %v, want %v", entry.NodeName, entry.ComputedTime, want)
		}
	}
}

// TestWriterSendsNoManagedFields: a slice rewritten from the one the API
// server listed goes back without the managed fields the server added.
func TestWriterSendsNoManagedFields(t *testing.T) {
	listed := newSlice(testVPA)
	listed.Name, listed.GenerateName = "agent-1", ""
	listed.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "vpa-recommender", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "autoscaling.k8s.io/v1alpha1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:nodes":{}}`)}}}
	listed.Nodes = []vpa_alpha.NodeRecommendation{{NodeName: "node-0000", NodeUID: ref("node-0000").UID, Recommendation: *rec(100)}}
	client := vpa_fake.NewSimpleClientset(listed) //nolint:staticcheck // as the other tests of this package
	var sent []*vpa_alpha.VerticalPodAutoscalerSlice
	client.PrependReactor("update", "verticalpodautoscalerslices", func(action core.Action) (bool, runtime.Object, error) {
		sent = append(sent, action.(core.UpdateAction).GetObject().(*vpa_alpha.VerticalPodAutoscalerSlice).DeepCopy())
		return false, nil, nil
	})

	recs := map[model.NodeRef]*vpa_types.RecommendedPodResources{ref("node-0000"): rec(900)}
	if _, err := (&Writer{Client: client.AutoscalingV1alpha1()}).Write(context.TODO(), testVPA, recs, Groups{}, nil); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 {
		t.Fatalf("%d updates sent, want 1", len(sent))
	}
	if sent[0].ManagedFields != nil {
		t.Errorf("the update sent managedFields %+v, want none", sent[0].ManagedFields)
	}
	if got := sent[0].Nodes; len(got) != 1 || got[0].Recommendation.ContainerRecommendations[0].Target.Cpu().MilliValue() != 900 {
		t.Errorf("the update sent entries %+v, want node-0000's new 900m", got)
	}
}

// groupsIn returns the cpu target (milli) of each group in each slice, by
// slice name and label value.
func groupsIn(slices []*vpa_alpha.VerticalPodAutoscalerSlice) map[string]map[string]int64 {
	groups := map[string]map[string]int64{}
	for _, s := range slices {
		for _, g := range s.Groups {
			if groups[s.Name] == nil {
				groups[s.Name] = map[string]int64{}
			}
			groups[s.Name][g.LabelValue] = g.Recommendation.ContainerRecommendations[0].Target.Cpu().MilliValue()
		}
	}
	return groups
}

// TestPlanSlicesGroups: each slice holds the values of the groups of its nodes
// that have one, so that a node of a group without an entry of its own finds
// its group's; a value that moves within the hysteresis is not written again,
// one that moves beyond it is, and a group whose last node leaves a slice
// leaves it too.
func TestPlanSlicesGroups(t *testing.T) {
	recs := nodeRecs(150, 100) // node-0000..0099 in the first slice, the rest in the second
	groups := Groups{Of: map[model.NodeRef]string{}, Recs: map[string]*vpa_types.RecommendedPodResources{"a": rec(400), "b": rec(800), "": rec(50)}}
	for node := range recs {
		switch {
		case node.Name < "node-0050":
			groups.Of[node] = "a"
		case node.Name < "node-0120":
			groups.Of[node] = "b"
		case node.Name == "node-0149":
			groups.Of[node] = "" // an empty value is a group like any other
		}
	}
	groups.Of[ref("node-0148")] = "without-value"
	slices := apply(nil, PlanSlices(testVPA, nil, recs, groups, nil, t0))
	first, second := nodesIn(slices)["node-0000"], nodesIn(slices)["node-0149"]
	want := map[string]map[string]int64{first: {"a": 400, "b": 800}, second: {"b": 800, "": 50}}
	if got := groupsIn(slices); !reflect.DeepEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if plan := PlanSlices(testVPA, slices, recs, groups, nil, t0); plan.Writes() != 0 {
		t.Errorf("unchanged groups: %d writes, want none", plan.Writes())
	}

	hysteresis := &Hysteresis{Threshold: 0.1}
	groups.Recs["a"] = rec(420) // 5 %
	if plan := PlanSlices(testVPA, slices, recs, groups, hysteresis, t0); plan.Writes() != 0 {
		t.Errorf("a group value within the hysteresis: %d writes, want none", plan.Writes())
	}
	groups.Recs["a"] = rec(480) // 20 %
	plan := PlanSlices(testVPA, slices, recs, groups, hysteresis, t0)
	if len(plan.Update) != 1 || plan.Update[0].Name != first || len(plan.Create)+len(plan.Delete) != 0 {
		t.Fatalf("a group value beyond the hysteresis: plan %+v, want an update of %s", plan, first)
	}
	slices = apply(slices, plan)
	if got := groupsIn(slices)[first]["a"]; got != 480 {
		t.Errorf("group a in %s: %dm, want 480m", first, got)
	}

	for node := range recs {
		if groups.Of[node] == "b" && node.Name >= "node-0100" {
			delete(recs, node)
		}
	}
	slices = apply(slices, PlanSlices(testVPA, slices, recs, groups, nil, t0))
	want = map[string]map[string]int64{first: {"a": 480, "b": 800}, second: {"": 50}}
	if got := groupsIn(slices); !reflect.DeepEqual(got, want) {
		t.Errorf("after the second slice's nodes of group b left: groups %v, want %v", got, want)
	}
}
