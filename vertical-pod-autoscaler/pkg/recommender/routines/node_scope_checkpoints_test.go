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
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
	vpa_alpha_client "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/typed/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
)

// fakeNodes is a NodeChecker with nodes the DaemonSet cannot run on, nodes
// that are gone, the UIDs of nodes (uid-<name> when not given) and their
// labels.
type fakeNodes struct {
	ineligible, gone map[string]bool
	uids             map[string]types.UID
	labels           map[string]map[string]string
}

func (n fakeNodes) Eligible(_ model.PodID, node model.NodeRef) bool {
	uid, exists := n.NodeUID(node.Name)
	return exists && uid == node.UID && !n.ineligible[node.Name]
}

func (n fakeNodes) NodeLabel(name, key string) (string, bool) {
	if n.gone[name] {
		return "", false
	}
	value, found := n.labels[name][key]
	return value, found
}

func (n fakeNodes) NodeUID(name string) (types.UID, bool) {
	if n.gone[name] {
		return "", false
	}
	if uid, found := n.uids[name]; found {
		return uid, true
	}
	return types.UID("uid-" + name), true
}

func (f *nodeScopeFixture) modelVPA() *model.Vpa {
	return f.cluster.VPAs()[model.VpaID{Namespace: "default", VpaName: "agent"}]
}

func (f *nodeScopeFixture) store() *nodescope.CheckpointStore {
	return f.r.nodeScope.Checkpoints.(*nodescope.CheckpointStore)
}

// checkpointed returns the nodes in the VPA's checkpoint slices.
func (f *nodeScopeFixture) checkpointed(t *testing.T) map[string]bool {
	t.Helper()
	list, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, s := range list.Items {
		for _, n := range s.Nodes {
			if len(n.Containers) != 2 {
				t.Errorf("node %s has checkpoints of %d containers, want 2", n.NodeName, len(n.Containers))
			}
			nodes[n.NodeName] = true
		}
	}
	return nodes
}

func (f *nodeScopeFixture) deleteSlices(t *testing.T) {
	t.Helper()
	client := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default")
	list, err := client.List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if err := client.Delete(context.TODO(), s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// run has a pod on each node of usage use it for d.
func (f *nodeScopeFixture) run(t *testing.T, usage map[string][2]float64, d time.Duration) {
	t.Helper()
	for node, u := range usage {
		f.addPod(t, node)
		f.feed(t, node, u[0], u[1], d)
	}
}

// checkpointHistory runs usage for two hours, then lets the recommender write
// its recommendations and checkpoint each node's history.
func (f *nodeScopeFixture) checkpointHistory(t *testing.T, usage map[string][2]float64) {
	t.Helper()
	f.run(t, usage, 2*time.Hour)
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
}

// restart starts a new recommender on the same API server, without the
// recommendation slices (so that only the checkpoints can bring the per-node
// recommendations back), and feeds it five minutes of the same usage.
func (f *nodeScopeFixture) restart(t *testing.T, usage map[string][2]float64) {
	t.Helper()
	f.deleteSlices(t)
	f.start(t)
	f.run(t, usage, 5*time.Minute)
}

func TestNodeCheckpointsKeepRecommendationsOverRestart(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	usage := map[string][2]float64{"busy": {2, 2e9}, "quiet": {0.1, 1e8}}
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.checkpointHistory(t, usage)
	before := f.slices(t)
	if len(before) != 2 {
		t.Fatalf("before the restart: recommendations for %v, want busy and quiet", before)
	}
	if nodes := f.checkpointed(t); len(nodes) != 2 {
		t.Fatalf("checkpointed nodes %v, want busy and quiet", nodes)
	}

	f.restart(t, usage)
	f.r.UpdateVPAs()
	after := f.slices(t)
	if len(after) != 2 {
		t.Fatalf("after the restart: recommendations for %v, want busy and quiet", after)
	}
	if n := len(f.modelVPA().NodeInitialAggregateStates); n != 2 {
		t.Errorf("the model holds the checkpoints of %d nodes, want 2", n)
	}
	for node := range usage {
		for _, c := range []string{"agent", "sidecar"} {
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				b, a := targetOf(before[node], c, res), targetOf(after[node], c, res)
				if diff := a.AsApproximateFloat64()/b.AsApproximateFloat64() - 1; diff > 0.05 || diff < -0.05 {
					t.Errorf("%s/%s %s target: %s before the restart, %s after", node, c, res, b.String(), a.String())
				}
			}
		}
	}

	// Without the checkpoints, five minutes of history are not enough.
	f.restart(t, usage)
	f.r.nodeScope.Checkpoints = nil
	f.r.UpdateVPAs()
	if nodes := f.slices(t); len(nodes) != 0 {
		t.Errorf("a restart without checkpoints: recommendations for %v, want none", nodes)
	}
}

func TestNodeCheckpointsGarbageCollected(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	usage := map[string][2]float64{"a": {1, 1e9}, "b": {1, 1e9}, "c": {1, 1e9}, "d": {1, 1e9}}
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.checkpointHistory(t, usage)
	f.restart(t, usage)
	nodes := fakeNodes{ineligible: map[string]bool{}, gone: map[string]bool{}}
	f.r.nodeScope.Nodes = nodes
	f.r.UpdateVPAs()
	if n := len(f.modelVPA().NodeInitialAggregateStates); n != 4 {
		t.Fatalf("the model holds the checkpoints of %d nodes, want 4", n)
	}

	// Pod of a gone, node b gone, node c no longer fits the DaemonSet (a taint,
	// a label): none of them has a recommendation any more; within the grace
	// period only the gone node b loses its checkpoint.
	f.cluster.DeletePod(model.PodID{Namespace: "default", PodName: "agent-a"})
	nodes.gone["b"] = true
	nodes.ineligible["c"] = true
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
	if recs := f.slices(t); len(recs) != 1 || recs["d"].ContainerRecommendations == nil {
		t.Errorf("recommendations for %v, want d only", recs)
	}
	if got := f.checkpointed(t); len(got) != 3 || got["b"] {
		t.Errorf("within the grace period: checkpoints of %v, want a, c and d", got)
	}
	if _, found := f.modelVPA().NodeInitialAggregateStates[model.NodeRef{Name: "b", UID: "uid-b"}]; found {
		t.Errorf("the model keeps the checkpoint of the gone node b")
	}

	// After it, a and c lose theirs as well, in the API and in the model.
	f.store().GracePeriod = 0
	f.r.maintainNodeCheckpoints(context.TODO())
	if got := f.checkpointed(t); len(got) != 1 || !got["d"] {
		t.Errorf("after the grace period: checkpoints of %v, want d only", got)
	}
	if states := f.modelVPA().NodeInitialAggregateStates; len(states) != 1 || states[model.NodeRef{Name: "d", UID: "uid-d"}] == nil {
		t.Errorf("after the grace period the model holds checkpoints of %d nodes, want d only", len(states))
	}
}

func TestNodeCheckpointsKeptOverFailedLoad(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	usage := map[string][2]float64{"busy": {2, 2e9}, "quiet": {0.1, 1e8}}
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.checkpointHistory(t, usage)
	before := f.slices(t)

	// The restarted recommender's first list of the checkpoint slices fails.
	f.restart(t, usage)
	failed := false
	f.client.PrependReactor("list", "verticalpodautoscalercheckpointslices", func(core.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, errors.New("etcdserver: request timed out")
	})
	f.client.ClearActions()
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
	if !failed {
		t.Fatal("the recommender did not list the checkpoint slices")
	}
	for _, action := range f.client.Actions() {
		if action.GetResource().Resource == "verticalpodautoscalercheckpointslices" && action.GetVerb() != "list" {
			t.Errorf("%s of a checkpoint slice before the checkpoints were loaded", action.GetVerb())
		}
	}

	// The next loop loads them: each node has its recommendation back.
	f.r.UpdateVPAs()
	after := f.slices(t)
	if len(after) != 2 {
		t.Fatalf("after the load: recommendations for %v, want busy and quiet", after)
	}
	for node := range usage {
		b, a := targetOf(before[node], "agent", corev1.ResourceCPU), targetOf(after[node], "agent", corev1.ResourceCPU)
		if diff := a.AsApproximateFloat64()/b.AsApproximateFloat64() - 1; diff > 0.05 || diff < -0.05 {
			t.Errorf("%s cpu target: %s before the restart, %s after", node, b.String(), a.String())
		}
	}
}

// deadlineWriter is upstream's checkpoint writer in a cluster with many VPAs:
// it writes until the loop's checkpoint deadline is up.
type deadlineWriter struct{}

func (deadlineWriter) StoreCheckpoints(ctx context.Context, _ int) {
	<-ctx.Done()
}

// TestNodeCheckpointsOwnDeadline: when upstream's checkpoint writer uses up the
// deadline that the loop gives MaintainCheckpoints, the per-node checkpoints
// are written and the slices of a VPA that dropped the scope deleted all the
// same.
func TestNodeCheckpointsOwnDeadline(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.r.checkpointWriter = deadlineWriter{}
	f.r.nodeScope.Cleaner = newAPICleaner(f.client, nodescope.DefaultMaxCleanupDeletes)
	f.run(t, map[string][2]float64{"busy": {2, 2e9}, "quiet": {0.1, 1e8}}, 2*time.Hour)
	// As RunOnce calls it.
	maintain := func() {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(100*time.Millisecond))
		defer cancel()
		f.r.MaintainCheckpoints(ctx)
	}

	f.r.UpdateVPAs()
	maintain()
	if nodes := f.checkpointed(t); len(nodes) != 2 {
		t.Errorf("checkpointed nodes %v, want busy and quiet", nodes)
	}

	dropped := f.apiVPA.DeepCopy()
	dropped.Spec.Scope = ""
	if err := f.cluster.AddOrUpdateVpa(dropped, f.selector); err != nil {
		t.Fatal(err)
	}
	f.cluster.SetObservedVPAs([]*vpa_types.VerticalPodAutoscaler{dropped})
	maintain()
	if slices, _ := f.counts(t); slices != 0 || len(f.unscopedSince(t)) != 1 {
		t.Errorf("scope dropped: %d slices and checkpoint slices marked %v, want no slice and one mark", slices, f.unscopedSince(t))
	}
}

// hangingAlphaClient is the fixture's client whose lists of slices and
// checkpoint slices answer only when their context ends, as an API server
// that does not answer. A context without a deadline would hang the caller
// for ever: such a list fails at once with errNoDeadline instead.
type hangingAlphaClient struct {
	vpa_clientset.Interface
	lists chan<- listEnd
}

var errNoDeadline = errors.New("a list without a deadline")

// listEnd is how a list of the hangingAlphaClient ended: its error, its
// context's deadline and when it returned.
type listEnd struct {
	err           error
	deadline, end time.Time
}

func (c hangingAlphaClient) AutoscalingV1alpha1() vpa_alpha_client.AutoscalingV1alpha1Interface {
	return hangingAlpha{AutoscalingV1alpha1Interface: c.Interface.AutoscalingV1alpha1(), lists: c.lists}
}

type hangingAlpha struct {
	vpa_alpha_client.AutoscalingV1alpha1Interface
	lists chan<- listEnd
}

func (a hangingAlpha) VerticalPodAutoscalerSlices(namespace string) vpa_alpha_client.VerticalPodAutoscalerSliceInterface {
	return hangingSlices{VerticalPodAutoscalerSliceInterface: a.AutoscalingV1alpha1Interface.VerticalPodAutoscalerSlices(namespace), lists: a.lists}
}

func (a hangingAlpha) VerticalPodAutoscalerCheckpointSlices(namespace string) vpa_alpha_client.VerticalPodAutoscalerCheckpointSliceInterface {
	return hangingCheckpointSlices{VerticalPodAutoscalerCheckpointSliceInterface: a.AutoscalingV1alpha1Interface.VerticalPodAutoscalerCheckpointSlices(namespace), lists: a.lists}
}

// hang waits for the end of ctx, sends how the list ended and returns its
// error.
func hang(ctx context.Context, lists chan<- listEnd) error {
	err := errNoDeadline
	deadline, ok := ctx.Deadline()
	if ok {
		<-ctx.Done()
		err = ctx.Err()
	}
	lists <- listEnd{err: err, deadline: deadline, end: time.Now()}
	return err
}

type hangingSlices struct {
	vpa_alpha_client.VerticalPodAutoscalerSliceInterface
	lists chan<- listEnd
}

func (s hangingSlices) List(ctx context.Context, _ metav1.ListOptions) (*vpa_alpha.VerticalPodAutoscalerSliceList, error) {
	return nil, hang(ctx, s.lists)
}

type hangingCheckpointSlices struct {
	vpa_alpha_client.VerticalPodAutoscalerCheckpointSliceInterface
	lists chan<- listEnd
}

func (s hangingCheckpointSlices) List(ctx context.Context, _ metav1.ListOptions) (*vpa_alpha.VerticalPodAutoscalerCheckpointSliceList, error) {
	return nil, hang(ctx, s.lists)
}

// TestNodeScopeUpdateHasADeadline: the load of a VPA's per-node checkpoints
// and the write of its slices in the update workers end with the deadline of
// --node-scope-checkpoints-timeout when the API server does not answer, so
// that UpdateVPAs returns; each has a deadline of its own, so that a load
// that took all its time leaves the write its own.
func TestNodeScopeUpdateHasADeadline(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	lists := make(chan listEnd, 3) // room for a third list, which fails the test instead of hanging it
	f.startWith(t, hangingAlphaClient{Interface: f.client, lists: lists})
	f.r.nodeScope.CheckpointsTimeout = 10 * time.Millisecond

	f.r.UpdateVPAs()
	close(lists)
	var ended []listEnd
	for end := range lists {
		ended = append(ended, end)
	}
	if len(ended) != 2 || !errors.Is(ended[0].err, context.DeadlineExceeded) || !errors.Is(ended[1].err, context.DeadlineExceeded) {
		t.Fatalf("the lists of the checkpoint load and of the slice write ended with %v, want both at their deadline", ended)
	}
	if load, write := ended[0], ended[1]; !write.deadline.After(load.end) {
		t.Errorf("the slice write's deadline %v is not after the end of the load at its deadline %v: they share one", write.deadline, load.end)
	}
	if f.r.nodeScope.Checkpoints.Loaded(f.apiVPA.UID) {
		t.Error("the checkpoints count as loaded after a list that ended at its deadline")
	}
}
