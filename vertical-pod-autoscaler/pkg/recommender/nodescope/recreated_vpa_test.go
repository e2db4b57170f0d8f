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
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// A VPA deleted and created again with the same name has a new UID. Until the
// garbage collector removes the slices of the earlier one (their owner
// reference names its UID), they carry the same label and vpaName.

// TestWriterIgnoresSlicesOfEarlierVPA: the writer of the new VPA creates
// slices of its own and leaves the earlier VPA's slice, with its values and
// owner, to the garbage collector.
func TestWriterIgnoresSlicesOfEarlierVPA(t *testing.T) {
	earlier := newSlice(&vpa_types.VerticalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "earlier-uid"}})
	earlier.Name, earlier.GenerateName = "agent-old", ""
	earlier.Nodes = []vpa_alpha.NodeRecommendation{{NodeName: "node-0000", NodeUID: ref("node-0000").UID, Recommendation: *rec(900)}}
	client := vpa_fake.NewSimpleClientset(earlier) //nolint:staticcheck // as the other tests of this package
	asAPIServer(client)

	recs := map[model.NodeRef]*vpa_types.RecommendedPodResources{ref("node-0000"): rec(100)}
	plan, err := (&Writer{Client: client.AutoscalingV1alpha1()}).Write(context.TODO(), testVPA, recs, Groups{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Create) != 1 || len(plan.Update)+len(plan.Delete) != 0 {
		t.Errorf("%d creates, %d updates, %d deletes; want 1 create and no write of the earlier VPA's slice", len(plan.Create), len(plan.Update), len(plan.Delete))
	}

	old, err := client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").Get(context.TODO(), "agent-old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(old.Nodes, earlier.Nodes) {
		t.Errorf("the earlier VPA's slice holds %+v, want %+v", old.Nodes, earlier.Nodes)
	}

	// The next write finds only the new VPA's slice: no change.
	plan, err = (&Writer{Client: client.AutoscalingV1alpha1()}).Write(context.TODO(), testVPA, recs, Groups{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Writes() != 0 {
		t.Errorf("unchanged recommendations: %d writes, want none", plan.Writes())
	}
}

// TestCleanupLeavesSlicesOfEarlierVPA: a VPA created again without scope node
// does not delete the earlier VPA's slices, which the garbage collector
// removes; it deletes its own.
func TestCleanupLeavesSlicesOfEarlierVPA(t *testing.T) {
	f := newCleanupFixture(t)
	recreated := vpaNamed("ns", "gone")
	recreated.UID = "vpa-ns/gone-2"
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{recreated}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats != (CleanupStats{}) || len(f.deletes) != 0 {
		t.Errorf("stats %+v, deletes %v; want none of the earlier VPA's slices", stats, f.deletes)
	}
}
