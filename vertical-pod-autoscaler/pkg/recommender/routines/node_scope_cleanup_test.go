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
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	testingclock "k8s.io/utils/clock/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
)

// apiCleaner is a nodescope.Cleaner whose caches are filled from the fixture's
// API server before and after each call, as its informers are between two
// loops, with the default grace period on a fake clock.
type apiCleaner struct {
	*nodescope.Cleaner
	client *vpa_fake.Clientset
	clock  *testingclock.FakePassiveClock
}

func newAPICleaner(client *vpa_fake.Clientset, maxDeletes int) apiCleaner {
	indexer := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{nodescope.VPANameIndex: nodescope.VPANameIndexFunc})
	}
	clock := testingclock.NewFakePassiveClock(time.Now())
	return apiCleaner{
		Cleaner: &nodescope.Cleaner{Client: client.AutoscalingV1alpha1(), Slices: indexer(), CheckpointSlices: indexer(), MaxDeletes: maxDeletes,
			UnscopedGracePeriod: model.GetAggregationsConfig().GetMemoryAggregationWindowLength(), Clock: clock},
		client: client,
		clock:  clock,
	}
}

func (c apiCleaner) Cleanup(ctx context.Context, unscoped, scoped []*vpa_types.VerticalPodAutoscaler) (nodescope.CleanupStats, error) {
	if err := c.refresh(ctx); err != nil {
		return nodescope.CleanupStats{}, err
	}
	stats, err := c.Cleaner.Cleanup(ctx, unscoped, scoped)
	if err != nil {
		return stats, err
	}
	return stats, c.refresh(ctx)
}

func (c apiCleaner) refresh(ctx context.Context) error {
	slices, err := c.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	checkpoints, err := c.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var objs, checkpointObjs []any
	for i := range slices.Items {
		objs = append(objs, &slices.Items[i])
	}
	for i := range checkpoints.Items {
		checkpointObjs = append(checkpointObjs, &checkpoints.Items[i])
	}
	if err := c.Slices.Replace(objs, ""); err != nil {
		return err
	}
	return c.CheckpointSlices.Replace(checkpointObjs, "")
}

// counts returns the number of slices and of checkpoint slices in the API.
func (f *nodeScopeFixture) counts(t *testing.T) (int, int) {
	t.Helper()
	slices, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkpoints, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(slices.Items), len(checkpoints.Items)
}

// loop runs the steps of a recommender loop that write to the API.
func (f *nodeScopeFixture) loop() {
	f.r.UpdateVPAs()
	f.r.MaintainCheckpoints(context.TODO())
}

func TestNodeScopeCleanup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*vpa_types.VerticalPodAutoscaler)
	}{
		{name: "scope dropped", change: func(vpa *vpa_types.VerticalPodAutoscaler) { vpa.Spec.Scope = "" }},
		{name: "target not a DaemonSet", change: func(vpa *vpa_types.VerticalPodAutoscaler) { vpa.Spec.TargetRef.Kind = "Deployment" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
			f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
			cleaner := newAPICleaner(f.client, 1)
			f.r.nodeScope.Cleaner = cleaner
			for _, node := range []string{"a", "b", "c"} {
				f.addPod(t, node)
				f.feed(t, node, 1, 1e9, 2*time.Hour)
			}
			f.loop()
			f.loop()
			if slices, checkpoints := f.counts(t); slices != 1 || checkpoints != 1 {
				t.Fatalf("scope node: %d slices and %d checkpoint slices, want 1 and 1 (kept)", slices, checkpoints)
			}
			// As after a restart: the model holds the loaded checkpoints.
			f.modelVPA().NodeInitialAggregateStates = map[model.NodeRef]model.ContainerNameToAggregateStateMap{{Name: "a", UID: "uid-a"}: {}}

			changed := f.apiVPA.DeepCopy()
			tc.change(changed)
			if err := f.cluster.AddOrUpdateVpa(changed, f.selector); err != nil {
				t.Fatal(err)
			}
			f.cluster.SetObservedVPAs([]*vpa_types.VerticalPodAutoscaler{changed})

			// One request a loop (MaxDeletes 1): the recommendation slice
			// first, then the mark of the checkpoint slice, which stays.
			f.loop()
			if slices, checkpoints := f.counts(t); slices != 0 || checkpoints != 1 {
				t.Errorf("first loop after the change: %d slices and %d checkpoint slices, want 0 and 1", slices, checkpoints)
			}
			f.loop()
			if marks := f.unscopedSince(t); len(marks) != 1 || marks[0] != cleaner.clock.Now().UTC().Format(time.RFC3339) {
				t.Errorf("second loop after the change: checkpoint slices marked %v, want one, now", marks)
			}
			cleaner.clock.SetTime(cleaner.clock.Now().Add(cleaner.UnscopedGracePeriod - time.Second))
			f.loop()
			if slices, checkpoints := f.counts(t); slices != 0 || checkpoints != 1 {
				t.Errorf("a second short of the grace period: %d slices and %d checkpoint slices, want 0 and 1", slices, checkpoints)
			}
			if f.modelVPA().NodeInitialAggregateStates == nil {
				t.Error("within the grace period, the model lost the per-node checkpoints it had loaded")
			}
			cleaner.clock.SetTime(cleaner.clock.Now().Add(time.Second))
			f.loop()
			if slices, checkpoints := f.counts(t); slices != 0 || checkpoints != 0 {
				t.Errorf("after the grace period: %d slices and %d checkpoint slices, want none", slices, checkpoints)
			}
			f.loop()
			if f.modelVPA().NodeInitialAggregateStates != nil {
				t.Error("the model keeps the per-node checkpoints of a VPA without scope node after the grace period")
			}
		})
	}
}

// unscopedSince returns the marks of the checkpoint slices in the API.
func (f *nodeScopeFixture) unscopedSince(t *testing.T) []string {
	t.Helper()
	list, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var marks []string
	for _, s := range list.Items {
		if mark, found := s.Annotations[vpa_alpha.UnscopedSinceAnnotation]; found {
			marks = append(marks, mark)
		}
	}
	return marks
}

// TestNodeScopePutBackKeepsHistory: a scope dropped (as by a client that
// writes the VPA back without the field) and put back within the grace period
// continues with the history it had: the checkpoint slice is kept and
// written again without its mark, and the per-node checkpoints loaded into
// the model stay, neither dropped nor loaded a second time.
func TestNodeScopePutBackKeepsHistory(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.r.nodeScope.Cleaner = newAPICleaner(f.client, nodescope.DefaultMaxCleanupDeletes)
	for _, node := range []string{"a", "b"} {
		f.addPod(t, node)
		f.feed(t, node, 1, 1e9, 2*time.Hour)
	}
	f.loop()
	f.loop()
	// As after a restart: the model holds the loaded checkpoints.
	loaded := model.ContainerNameToAggregateStateMap{"agent": model.NewAggregateContainerState()}
	f.modelVPA().NodeInitialAggregateStates = map[model.NodeRef]model.ContainerNameToAggregateStateMap{{Name: "a", UID: "uid-a"}: loaded}

	setScope := func(scope vpa_types.VerticalPodAutoscalerScope) {
		vpa := f.apiVPA.DeepCopy()
		vpa.Spec.Scope = scope
		if err := f.cluster.AddOrUpdateVpa(vpa, f.selector); err != nil {
			t.Fatal(err)
		}
		f.cluster.SetObservedVPAs([]*vpa_types.VerticalPodAutoscaler{vpa})
	}
	setScope("")
	f.loop()
	if slices, checkpoints := f.counts(t); slices != 0 || checkpoints != 1 || len(f.unscopedSince(t)) != 1 {
		t.Errorf("scope dropped: %d slices, %d checkpoint slices, marks %v; want 0, 1 and one mark", slices, checkpoints, f.unscopedSince(t))
	}

	setScope(vpa_types.ScopeNode)
	for range 3 {
		f.loop()
	}
	if _, checkpoints := f.counts(t); checkpoints != 1 || len(f.unscopedSince(t)) != 0 {
		t.Errorf("scope put back: %d checkpoint slices, marks %v; want 1 and no mark", checkpoints, f.unscopedSince(t))
	}
	if states := f.modelVPA().NodeInitialAggregateStates; len(states) != 1 || states[model.NodeRef{Name: "a", UID: "uid-a"}]["agent"] != loaded["agent"] {
		t.Errorf("scope put back: the model's loaded per-node checkpoints are %v, want node a's as loaded before", states)
	}
	if nodes := f.checkpointed(t); !nodes["a"] || !nodes["b"] {
		t.Errorf("scope put back: checkpointed nodes %v, want a and b", nodes)
	}
}

// TestNodeScopeCleanupLeavesOtherVPAs: the slices of a VPA with scope node, and
// those of a VPA this recommender does not observe, stay.
func TestNodeScopeCleanupLeavesOtherVPAs(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.r.nodeScope.Cleaner = newAPICleaner(f.client, nodescope.DefaultMaxCleanupDeletes)
	unobserved := &vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "other-1", Namespace: "default", Labels: map[string]string{vpa_alpha.VPANameLabel: "other"}},
		VPAName:    "other",
	}
	if _, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").Create(context.TODO(), unobserved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.addPod(t, "a")
	f.feed(t, "a", 1, 1e9, 2*time.Hour)
	f.loop()
	f.loop()
	if slices, checkpoints := f.counts(t); slices != 2 || checkpoints != 1 {
		t.Errorf("%d slices and %d checkpoint slices, want 2 (the VPA's and other's) and 1", slices, checkpoints)
	}
}

// TestNodeScopeGateOff: with the gate off the recommender's NodeScope has no
// writer, store or cleaner, so the recommender makes no request of the alpha
// kinds, and slices from a time the gate was on stay.
func TestNodeScopeGateOff(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, false)
	f := newNodeScopeFixture(t, "", nil)
	scope, err := NewNodeScope(f.client.AutoscalingV1alpha1(), nil, nil, nil, "", model.DefaultMinNodeHistory, model.DefaultNodeCheckpointsTimeout, model.DefaultNodeCheckpointRefresh, model.DefaultNodeRewriteThreshold, logic.Confidence{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.r.nodeScope = scope
	if s := f.r.nodeScope; s.Writer != nil || s.Checkpoints != nil || s.Nodes != nil || s.Cleaner != nil {
		t.Fatalf("gate off: NodeScope %+v, want no writer, store, nodes or cleaner", s)
	}
	left := &vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1", Namespace: "default", Labels: map[string]string{vpa_alpha.VPANameLabel: "agent"}},
		VPAName:    "agent",
	}
	if _, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").Create(context.TODO(), left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.addPod(t, "a")
	f.feed(t, "a", 1, 1e9, 2*time.Hour)
	f.client.ClearActions()
	f.loop()
	for _, action := range f.client.Actions() {
		if strings.HasSuffix(action.GetResource().Resource, "slices") {
			t.Errorf("gate off: %s %s, want no request of the alpha kinds", action.GetVerb(), action.GetResource().Resource)
		}
	}
	if slices, _ := f.counts(t); slices != 1 {
		t.Errorf("gate off: %d slices, want the one left in place", slices)
	}
}
