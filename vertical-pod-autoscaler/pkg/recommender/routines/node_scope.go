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
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_alpha_client "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/typed/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
	utils_nodescope "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/nodescope"
	api_utils "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// NodeScope is what the recommender uses for VPAs with scope node.
type NodeScope struct {
	// Writer stores the per-node recommendations.
	Writer NodeScopeWriter
	// Nodes tells which nodes the DaemonSet can run on, and the UIDs of
	// nodes; nil: every node that runs a pod of it, and no pod is kept by
	// node (the gate is off).
	Nodes NodeChecker
	// Checkpoints stores the per-node history; nil: none is stored.
	Checkpoints NodeCheckpointStore
	// Cleaner deletes the slices and checkpoint slices of VPAs without scope
	// node; nil: they stay until their VPA is deleted.
	Cleaner NodeScopeCleaner
	// MinHistory is how much usage history of its own a node's pod needs
	// before the node gets its own recommendation (--node-scope-min-history,
	// default model.DefaultMinNodeHistory). Until then the node has no entry
	// in the VPA's slices and its pod gets the VPA's DaemonSet-wide
	// recommendation (status.recommendation).
	MinHistory time.Duration
	// CheckpointsTimeout is the deadline of the per-node checkpoints and the
	// cleanup in a loop (--node-scope-checkpoints-timeout), which they do not
	// share with upstream's checkpoints, and, each in full, of each VPA's load
	// of checkpoints and of its writes of slices in the update workers.
	CheckpointsTimeout time.Duration
	// Confidence weighs a node's own history against its node group's
	// (spec.nodeScope.groupLabel), over the recommender's confidence
	// intervals.
	Confidence logic.Confidence

	// state is the recommender's cluster state (forState).
	state model.NodeScopedState
}

// forState returns the node scope of a recommender of the given cluster
// state. A ClusterState that is not a model.NodeScopedState (one implemented
// outside this repository) gives per-node recommendations nothing to compute
// from: the node scope is then off, as with the gate off, and the error says
// so once.
func (s NodeScope) forState(cluster model.ClusterState) NodeScope {
	state, ok := cluster.(model.NodeScopedState)
	if !ok {
		if s.Writer != nil {
			klog.ErrorS(nil, "The recommender's cluster state does not implement NodeScopedState; VPAs with scope Node get only their DaemonSet-wide recommendation", "clusterState", fmt.Sprintf("%T", cluster))
		}
		return NodeScope{MinHistory: s.MinHistory, CheckpointsTimeout: s.CheckpointsTimeout, Confidence: s.Confidence}
	}
	s.state = state
	return s
}

// NodeScopeWriter stores the per-node recommendations of a VPA with scope node.
type NodeScopeWriter interface {
	Write(ctx context.Context, vpa *vpa_types.VerticalPodAutoscaler, recs map[model.NodeRef]*vpa_types.RecommendedPodResources, groups nodescope.Groups, requests map[model.NodeRef][]nodescope.PodRequests) (nodescope.Plan, error)
}

// NodeScopeCleaner deletes the slices and checkpoint slices of VPAs that do not
// have scope node (any more), the checkpoint slices after a grace period.
type NodeScopeCleaner interface {
	Cleanup(ctx context.Context, unscoped, scoped []*vpa_types.VerticalPodAutoscaler) (nodescope.CleanupStats, error)
	// Keeps tells whether checkpoint slices of the VPA are left.
	Keeps(vpa *vpa_types.VerticalPodAutoscaler) bool
}

// NodeChecker tells which nodes count for a VPA with scope node.
type NodeChecker interface {
	// Eligible tells whether the node exists (as that machine) and the
	// DaemonSet of the pod can run on it.
	Eligible(pod model.PodID, node model.NodeRef) bool
	// NodeUID returns the UID of the node of the given name, and whether the
	// node exists.
	NodeUID(name string) (types.UID, bool)
	// NodeLabel returns the value of the label of the given key on the node
	// of the given name, and whether the node has it.
	NodeLabel(name, key string) (string, bool)
}

// NodeCheckpointStore stores the per-node history of VPAs with scope node.
type NodeCheckpointStore interface {
	Load(ctx context.Context, vpa *vpa_types.VerticalPodAutoscaler, nodeUIDs model.NodeUIDs) (map[model.NodeRef][]vpa_alpha.ContainerCheckpoint, error)
	Store(ctx context.Context, now time.Time, histories []nodescope.NodeHistory) (nodescope.StoreStats, error)
	Loaded(vpa types.UID) bool
	Holds(vpa types.UID, node model.NodeRef) bool
}

// NewNodeScope returns the NodeScope of the recommender. With the
// DaemonSetNodeScope gate on, it first checks that the slices and the
// checkpoint slices can be listed and watched (nodescope.CheckAccess, the
// admission controller's and the updater's check, one kind after the other
// with 30 s each, so up to a minute in all), and fails naming what is
// missing; then: slices and checkpoint slices through the client,
// the nodes of the informer factory, the given minimum of per-node history,
// deadline of the checkpoints, interval of their refresh, threshold of the
// slice writer's hysteresis and
// confidence of the node groups' blend, and a Cleaner over metadata informers of both
// kinds (in namespace, or all when empty), started with stopCh. With the gate off it holds no writer, store or
// cleaner and starts nothing, so the recommender never reads or writes the
// alpha kinds (whose CRDs may be absent); slices written while the gate was on
// stay until their VPA is deleted.
func NewNodeScope(client vpa_alpha_client.AutoscalingV1alpha1Interface, kubeConfig *rest.Config, pods listersv1.PodLister, factory informers.SharedInformerFactory,
	namespace string, minHistory, checkpointsTimeout, checkpointRefresh time.Duration, rewriteThreshold float64, confidence logic.Confidence, stopCh <-chan struct{},
) (NodeScope, error) {
	scope := NodeScope{MinHistory: minHistory, CheckpointsTimeout: checkpointsTimeout, Confidence: confidence}
	if !features.Enabled(features.DaemonSetNodeScope) {
		return scope, nil
	}
	// Without them the recommender would only log errors in every loop and
	// its informers retry for ever.
	if err := utils_nodescope.CheckAccess(stopCh, "verticalpodautoscalerslices.autoscaling.k8s.io", client.VerticalPodAutoscalerSlices(namespace), namespace); err != nil {
		return scope, err
	}
	if err := utils_nodescope.CheckAccess(stopCh, "verticalpodautoscalercheckpointslices.autoscaling.k8s.io", client.VerticalPodAutoscalerCheckpointSlices(namespace), namespace); err != nil {
		return scope, err
	}
	scope.Writer = &nodescope.Writer{Client: client, RewriteThreshold: rewriteThreshold}
	store := nodescope.NewCheckpointStore(client)
	store.RefreshInterval = checkpointRefresh
	scope.Checkpoints = store
	scope.Nodes = nodescope.NewNodes(pods, factory)
	scope.Cleaner = nodescope.NewCleaner(client, metadata.NewForConfigOrDie(kubeConfig), namespace, stopCh)
	return scope, nil
}

// NodeUIDs returns the UIDs of the nodes (nil without Nodes), by which the
// cluster feeder keeps the pods of VPAs with scope node by machine.
func (s NodeScope) NodeUIDs() model.NodeUIDs {
	if s.Nodes == nil {
		return nil
	}
	return s.Nodes.NodeUID
}

// liveNodes returns the nodes of the VPA's live pods that the DaemonSet can
// run on, and the pods by node.
func (r *recommender) liveNodes(vpa *model.Vpa) (map[model.NodeRef]bool, map[model.NodeRef][]model.PodID) {
	pods := r.nodeScope.state.NodePods(vpa)
	live := make(map[model.NodeRef]bool, len(pods))
	for node, podIDs := range pods {
		for _, pod := range podIDs {
			if r.nodeScope.Nodes == nil || r.nodeScope.Nodes.Eligible(pod, node) {
				live[node] = true
				break
			}
		}
	}
	return live, pods
}

// nodeGroups returns the node group of each of the given nodes that has the
// VPA's group label (spec.nodeScope.groupLabel): the label's value. It is nil
// when the VPA has no group label.
func (r *recommender) nodeGroups(vpa *model.Vpa, nodes map[model.NodeRef]bool) map[model.NodeRef]string {
	if vpa.NodeGroupLabel == "" || r.nodeScope.Nodes == nil {
		return nil
	}
	groups := make(map[model.NodeRef]string, len(nodes))
	for node := range nodes {
		if value, found := r.nodeScope.Nodes.NodeLabel(node.Name, vpa.NodeGroupLabel); found {
			groups[node] = value
		}
	}
	return groups
}

// NodeRecommendations computes the recommendation of each of the given nodes
// of a VPA with scope node, with the same recommender, format and
// post-processors (so the same resource policy) as the VPA's own
// recommendation.
//
// A node in a group (groups, by the VPA's group label) whose merged history,
// that of all the given nodes of the group, has minHistory gets the group's
// estimate blended with its own by the confidence of its own history
// (logic.Confidence.BlendWithGroup). Any other node gets its own estimate once
// its pod has minHistory of history (its own and checkpointed), and maps to
// nil before. Each group with enough history also gets its estimate
// (nodescope.Groups.Recs), for the nodes of the group that have no entry yet.
func NodeRecommendations(cluster model.NodeScopedState, vpa *model.Vpa, nodes map[model.NodeRef]bool, groups map[model.NodeRef]string, minHistory time.Duration, confidence logic.Confidence,
	observedVpa *vpa_types.VerticalPodAutoscaler, recommender logic.PodResourceRecommender, format logic.RecommendationFormat, postProcessors []RecommendationPostProcessor,
) (map[model.NodeRef]*vpa_types.RecommendedPodResources, nodescope.Groups) {
	process := func(raw logic.RecommendedPodResources) *vpa_types.RecommendedPodResources {
		rec := logic.MapToListOfRecommendedContainerResources(raw, format)
		for _, p := range postProcessors {
			rec = p.Process(observedVpa, rec)
		}
		return rec
	}
	autoscaledOf := func(containers model.ContainerNameToAggregateStateMap) model.ContainerNameToAggregateStateMap {
		autoscaled := model.ContainerNameToAggregateStateMap{}
		for name, state := range containers {
			policy := api_utils.GetContainerResourcePolicy(name, vpa.ResourcePolicy)
			if policy != nil && policy.Mode != nil && *policy.Mode == vpa_types.ContainerScalingModeOff {
				continue
			}
			state.UpdateFromPolicy(policy)
			autoscaled[name] = state
		}
		return autoscaled
	}
	enoughHistory := func(autoscaled model.ContainerNameToAggregateStateMap) bool {
		for _, state := range autoscaled {
			if state.LastSampleStart.Sub(state.FirstSampleStart) < minHistory {
				return false
			}
		}
		return len(autoscaled) > 0
	}

	aggregations := cluster.NodeAggregations(vpa, nodes)
	groupStates := map[string]model.ContainerNameToAggregateStateMap{}
	for node, containers := range aggregations {
		group, grouped := groups[node]
		if !grouped {
			continue
		}
		if groupStates[group] == nil {
			groupStates[group] = model.ContainerNameToAggregateStateMap{}
		}
		for name, state := range containers {
			merged, found := groupStates[group][name]
			if !found {
				merged = model.NewAggregateContainerState()
				groupStates[group][name] = merged
			}
			merged.MergeContainerState(state)
		}
	}
	groupRecs := make(map[string]logic.RecommendedPodResources, len(groupStates))
	for group, containers := range groupStates {
		if autoscaled := autoscaledOf(containers); enoughHistory(autoscaled) {
			groupRecs[group] = recommender.GetRecommendedPodResources(autoscaled)
		}
	}

	recs := map[model.NodeRef]*vpa_types.RecommendedPodResources{}
	for node, containers := range aggregations {
		autoscaled := autoscaledOf(containers)
		var raw logic.RecommendedPodResources
		group, grouped := groups[node]
		if groupRec, found := groupRecs[group]; grouped && found && len(autoscaled) > 0 {
			raw = confidence.BlendWithGroup(recommender.GetRecommendedPodResources(autoscaled), groupRec, autoscaled)
		} else if enoughHistory(autoscaled) {
			raw = recommender.GetRecommendedPodResources(autoscaled)
		} else {
			recs[node] = nil
			continue
		}
		recs[node] = process(raw)
	}
	groupsOut := nodescope.Groups{Of: groups}
	if len(groupRecs) > 0 {
		groupsOut.Recs = make(map[string]*vpa_types.RecommendedPodResources, len(groupRecs))
		for group, raw := range groupRecs {
			groupsOut.Recs[group] = process(raw)
		}
	}
	return recs, groupsOut
}

// NodeRequests returns the CPU and memory requests of the containers of the
// pods on each of the given nodes, as the model has them from the pods' specs.
func NodeRequests(cluster model.ClusterState, pods map[model.NodeRef][]model.PodID, nodes map[model.NodeRef]bool) map[model.NodeRef][]nodescope.PodRequests {
	result := make(map[model.NodeRef][]nodescope.PodRequests, len(nodes))
	for node := range nodes {
		for _, podID := range pods[node] {
			pod := cluster.Pods()[podID]
			if pod == nil {
				continue
			}
			requests := make(nodescope.PodRequests, len(pod.Containers))
			for name, container := range pod.Containers {
				list := corev1.ResourceList{}
				if cpu, found := container.Request[model.ResourceCPU]; found {
					list[corev1.ResourceCPU] = model.QuantityFromCPUAmount(cpu)
				}
				if memory, found := container.Request[model.ResourceMemory]; found {
					list[corev1.ResourceMemory] = model.QuantityFromMemoryAmount(memory)
				}
				requests[name] = list
			}
			result[node] = append(result[node], requests)
		}
	}
	return result
}

// NodeCheckpoints returns the checkpoint of each container of the VPA's pods on
// the given nodes. As upstream's checkpoint writer does for the VPA-wide
// checkpoints, it leaves out the memory peak of the current aggregation window
// of each container, which would count twice after a restore.
func NodeCheckpoints(cluster model.NodeScopedState, vpa *model.Vpa, pods map[model.NodeRef][]model.PodID, nodes []model.NodeRef, now time.Time) map[model.NodeRef][]vpa_alpha.ContainerCheckpoint {
	set := make(map[model.NodeRef]bool, len(nodes))
	for _, node := range nodes {
		set[node] = true
	}
	result := make(map[model.NodeRef][]vpa_alpha.ContainerCheckpoint, len(nodes))
	for node, containers := range cluster.NodeAggregations(vpa, set) {
		for _, podID := range pods[node] {
			pod := cluster.Pods()[podID]
			if pod == nil {
				continue
			}
			for name, container := range pod.Containers {
				if state, found := containers[name]; found && now.Before(container.WindowEnd) {
					state.AggregateMemoryPeaks.SubtractSample(model.BytesFromMemoryAmount(container.GetMaxMemoryPeak()), 1.0, container.WindowEnd)
				}
			}
		}
		entry := make([]vpa_alpha.ContainerCheckpoint, 0, len(containers))
		for name, state := range containers {
			checkpoint, err := state.SaveToCheckpoint()
			if err != nil {
				klog.ErrorS(err, "Cannot checkpoint the history of a node", "vpa", klog.KRef(vpa.ID.Namespace, vpa.ID.VpaName), "node", node.Name, "container", name)
				continue
			}
			entry = append(entry, vpa_alpha.ContainerCheckpoint{ContainerName: name, Checkpoint: *checkpoint})
		}
		sort.Slice(entry, func(i, j int) bool { return entry[i].ContainerName < entry[j].ContainerName })
		result[node] = entry
	}
	return result
}

// loadNodeCheckpoints puts the checkpointed history of each node of the VPA
// into the model (model.Vpa.NodeInitialAggregateStates) until a load succeeds;
// the store writes the VPA's checkpoints only after that.
func (r *recommender) loadNodeCheckpoints(ctx context.Context, vpa *model.Vpa, observedVpa *vpa_types.VerticalPodAutoscaler) {
	if r.nodeScope.Checkpoints == nil || !r.useCheckpoints || r.nodeScope.Checkpoints.Loaded(observedVpa.UID) {
		return
	}
	loaded, err := r.nodeScope.Checkpoints.Load(ctx, observedVpa, r.nodeScope.NodeUIDs())
	if err != nil {
		klog.ErrorS(err, "Cannot load the per-node checkpoints of VPA, retrying in the next loop", "vpa", klog.KObj(observedVpa))
		return
	}
	states := make(map[model.NodeRef]model.ContainerNameToAggregateStateMap, len(loaded))
	for node, containers := range loaded {
		states[node] = model.ContainerNameToAggregateStateMap{}
		for _, c := range containers {
			state := model.NewAggregateContainerState()
			if err := state.LoadFromCheckpoint(&c.Checkpoint); err != nil {
				klog.ErrorS(err, "Cannot load the checkpoint of a node", "vpa", klog.KObj(observedVpa), "node", node.Name, "container", c.ContainerName)
				continue
			}
			states[node][c.ContainerName] = state
		}
	}
	vpa.NodeInitialAggregateStates = states
	klog.V(3).InfoS("Loaded per-node checkpoints", "vpa", klog.KObj(observedVpa), "nodes", len(states))
}

// updateNodeRecommendations writes the per-node recommendations of a VPA with
// scope node; it does nothing for other VPAs or without a writer. The load of
// the VPA's checkpoints and the writes of its slices each have a deadline of
// CheckpointsTimeout, so that a slow load does not use up the writes' time:
// an API server that does not answer must not hold a worker, and the loop, for
// ever. They derive from no parent: UpdateVPAs, upstream's interface, has no
// context to give.
func (r *recommender) updateNodeRecommendations(vpa *model.Vpa, observedVpa *vpa_types.VerticalPodAutoscaler) {
	if r.nodeScope.Writer == nil || !vpa.IsNodeScoped() {
		return
	}
	loadCtx, cancelLoad := context.WithTimeout(context.Background(), r.nodeScope.CheckpointsTimeout)
	r.loadNodeCheckpoints(loadCtx, vpa, observedVpa)
	cancelLoad()
	live, pods := r.liveNodes(vpa)
	recs, groups := NodeRecommendations(r.nodeScope.state, vpa, live, r.nodeGroups(vpa, live), r.nodeScope.MinHistory, r.nodeScope.Confidence,
		observedVpa, r.podResourceRecommender, r.recommendationFormat, r.recommendationPostProcessor)
	ctx, cancel := context.WithTimeout(context.Background(), r.nodeScope.CheckpointsTimeout)
	defer cancel()
	plan, err := r.nodeScope.Writer.Write(ctx, observedVpa, recs, groups, NodeRequests(r.clusterState, pods, live))
	if err != nil {
		klog.ErrorS(err, "Cannot write the per-node recommendations of VPA", "vpa", klog.KObj(observedVpa))
	}
	klog.V(4).InfoS("Per-node recommendations", "vpa", klog.KObj(observedVpa), "nodes", len(recs), "created", len(plan.Create), "updated", len(plan.Update), "deleted", len(plan.Delete))
}

// maintainNodeScope stores the per-node checkpoints and cleans up the slices of
// VPAs without scope node, with a deadline of their own: upstream's checkpoint
// writer, which runs first, may use up the loop's, and per-node history would
// then never be stored.
func (r *recommender) maintainNodeScope(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.nodeScope.CheckpointsTimeout)
	defer cancel()
	if r.useCheckpoints {
		r.maintainNodeCheckpoints(ctx)
	}
	r.cleanupNodeScope(ctx)
}

// maintainNodeCheckpoints stores the per-node history of the VPAs with scope
// node and drops from the model the checkpointed history of nodes the store
// let go (node gone, or no live pod of the DaemonSet that fits it for the
// grace period).
func (r *recommender) maintainNodeCheckpoints(ctx context.Context) {
	if r.nodeScope.Checkpoints == nil {
		return
	}
	now := time.Now()
	var histories, dormant []nodescope.NodeHistory
	var vpas []*model.Vpa
	for _, observed := range r.clusterState.ObservedVPAs() {
		vpa, found := r.clusterState.VPAs()[model.VpaID{Namespace: observed.Namespace, VpaName: observed.Name}]
		if !found {
			continue
		}
		if !vpa.IsNodeScoped() {
			if r.keepsNodeCheckpoints(observed) {
				dormant = append(dormant, nodescope.NodeHistory{VPA: observed, Dormant: true})
			}
			continue
		}
		live, pods := r.liveNodes(vpa)
		histories = append(histories, nodescope.NodeHistory{
			VPA:      observed,
			Live:     live,
			NodeUIDs: r.nodeScope.NodeUIDs(),
			Checkpoints: func(nodes []model.NodeRef) map[model.NodeRef][]vpa_alpha.ContainerCheckpoint {
				return NodeCheckpoints(r.nodeScope.state, vpa, pods, nodes, now)
			},
		})
		vpas = append(vpas, vpa)
	}
	stats, err := r.nodeScope.Checkpoints.Store(ctx, now, append(histories, dormant...))
	if err != nil {
		klog.ErrorS(err, "Cannot store all per-node checkpoints")
	}
	for i, vpa := range vpas {
		for node := range vpa.NodeInitialAggregateStates {
			if !r.nodeScope.Checkpoints.Holds(histories[i].VPA.UID, node) {
				delete(vpa.NodeInitialAggregateStates, node)
			}
		}
	}
	klog.V(4).InfoS("Per-node checkpoints", "vpas", len(histories), "slices", stats.Slices, "writes", stats.Writes, "pending", stats.Pending)
}

// keepsNodeCheckpoints tells whether the checkpoint slices of a VPA without
// scope node are left, in their grace period.
func (r *recommender) keepsNodeCheckpoints(vpa *vpa_types.VerticalPodAutoscaler) bool {
	return r.nodeScope.Cleaner != nil && r.nodeScope.Cleaner.Keeps(vpa)
}

// cleanupNodeScope deletes the slices and checkpoint slices of the observed VPAs
// that do not have scope node (any more, or the target is not a DaemonSet),
// the checkpoint slices after the Cleaner's grace period, within its bound of
// requests a loop. Such a VPA keeps the per-node checkpoints it had loaded
// into the model while its checkpoint slices are left: the scope put back
// then continues with the same history, and the Cleaner removes the marks
// left on it.
func (r *recommender) cleanupNodeScope(ctx context.Context) {
	if r.nodeScope.Cleaner == nil {
		return
	}
	var unscoped, scoped []*vpa_types.VerticalPodAutoscaler
	for _, observed := range r.clusterState.ObservedVPAs() {
		vpa, found := r.clusterState.VPAs()[model.VpaID{Namespace: observed.Namespace, VpaName: observed.Name}]
		if !found {
			continue
		}
		if vpa.IsNodeScoped() {
			scoped = append(scoped, observed)
			continue
		}
		if !r.keepsNodeCheckpoints(observed) {
			vpa.NodeInitialAggregateStates = nil
		}
		unscoped = append(unscoped, observed)
	}
	stats, err := r.nodeScope.Cleaner.Cleanup(ctx, unscoped, scoped)
	if err != nil {
		klog.ErrorS(err, "Cannot delete all slices of VPAs without scope node")
	}
	if stats != (nodescope.CleanupStats{}) {
		klog.V(3).InfoS("Deleted slices of VPAs without scope node", "deleted", stats.Deleted, "marked", stats.Marked, "unmarked", stats.Unmarked, "pending", stats.Pending)
	}
}
