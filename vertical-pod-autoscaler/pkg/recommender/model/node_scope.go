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

package model

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/nodescope"
)

// NodeScopeLabel and NodeUIDLabel are the labels the model adds to the labels
// of a pod of a VPA with scope node: the name and the UID of the pod's node.
// They exist only in the model, where they make the usage of each node's pod
// an aggregation of its own, and a machine that takes the name of a deleted
// node another node. The VPA still uses all of them (its selector does not
// name the labels), so that its own recommendation stays the DaemonSet-wide
// one.
const (
	NodeScopeLabel = "node-scope.autoscaling.k8s.io/node"
	NodeUIDLabel   = "node-scope.autoscaling.k8s.io/node-uid"
)

// NodeRef is a node of a VPA with scope node: its name, and the UID that tells
// the machine from a later one of the same name, which has a history of its own.
type NodeRef struct {
	Name string
	UID  types.UID
}

// NodeUIDs returns the UID of the node of the given name, and whether the node
// exists.
type NodeUIDs func(nodeName string) (types.UID, bool)

// DefaultMinNodeHistory is the default of how much usage history of its own a
// node's pod needs before the node of a VPA with scope node gets its own
// recommendation (the recommender's --node-scope-min-history).
const DefaultMinNodeHistory = time.Hour

// DefaultNodeCheckpointsTimeout is the default of the recommender's
// --node-scope-checkpoints-timeout: the deadline of the per-node checkpoint
// writes and the cleanup of a loop, which make at most 10 writes and 10
// deletes each, and of each node-scoped VPA's checkpoint load and, again, of
// its slice writes.
const DefaultNodeCheckpointsTimeout = 30 * time.Second

// DefaultNodeCheckpointRefresh is the default of the recommender's
// --node-scope-checkpoint-refresh-interval: how long a checkpoint slice whose
// nodes did not change goes without a write. It is what a restart of the
// recommender can lose of days of per-node history (decayed with a half-life
// of a day), against a rewrite of every slice of up to 512 KiB in every loop.
const DefaultNodeCheckpointRefresh = 10 * time.Minute

// DefaultNodeRewriteThreshold is the default of the recommender's
// --node-scope-rewrite-threshold, how far a node's target moves before its
// entry is written again: the updater's default --pod-update-threshold, below
// which it does not update a pod whose requests are within the bounds.
const DefaultNodeRewriteThreshold = 0.1

// IsNodeScoped tells whether the VPA gets one recommendation per node
// (nodescope.NodeScoped).
func (vpa *Vpa) IsNodeScoped() bool {
	return nodescope.NodeScoped(vpa.Scope, vpa.TargetRef)
}

// ScopedPodLabels returns the labels under which the model keeps a pod: the
// pod's labels, plus NodeScopeLabel and NodeUIDLabel when the pod is bound to
// a node that nodeUIDs knows and a VPA with scope node matches it. The UID is
// looked up each time: a pod bound to a name runs on whichever machine has
// the name now.
func ScopedPodLabels(cluster ClusterState, podID PodID, podLabels map[string]string, nodeName string, nodeUIDs NodeUIDs) labels.Set {
	if nodeName == "" || nodeUIDs == nil || !features.Enabled(features.DaemonSetNodeScope) {
		return podLabels
	}
	for _, vpa := range cluster.VPAs() {
		if vpa.IsNodeScoped() && vpa.ID.Namespace == podID.Namespace && vpa.PodSelector != nil && vpa.PodSelector.Matches(labels.Set(podLabels)) {
			uid, found := nodeUIDs(nodeName)
			if !found {
				// Not in the node cache yet: the pod counts for the
				// DaemonSet-wide recommendation only until it is.
				return podLabels
			}
			scoped := make(labels.Set, len(podLabels)+2)
			for k, v := range podLabels {
				scoped[k] = v
			}
			scoped[NodeScopeLabel] = nodeName
			scoped[NodeUIDLabel] = string(uid)
			return scoped
		}
	}
	return podLabels
}

func nodeOf(podLabels labels.Labels) (NodeRef, bool) {
	node := NodeRef{Name: podLabels.Get(NodeScopeLabel), UID: types.UID(podLabels.Get(NodeUIDLabel))}
	return node, node.Name != "" && node.UID != ""
}

// NodeScopedState is a ClusterState that also gives what the recommender
// computes per-node recommendations from. It is an interface of its own, not
// methods of ClusterState, so that implementations of ClusterState outside
// this repository keep compiling; the recommender computes per-node
// recommendations only with a ClusterState that implements it, as the one of
// NewClusterState does.
type NodeScopedState interface {
	ClusterState
	// NodePods returns the live pods of the VPA by node.
	NodePods(vpa *Vpa) map[NodeRef][]PodID
	// NodeAggregations returns the aggregated state of each container of the
	// VPA's pods on each of the given nodes.
	NodeAggregations(vpa *Vpa, nodes map[NodeRef]bool) map[NodeRef]ContainerNameToAggregateStateMap
}

var _ NodeScopedState = &clusterState{}

// NodePods returns the live pods of the VPA by node, for the nodes that run
// one (normally one pod a node; two for a moment during a rollout).
func (cluster *clusterState) NodePods(vpa *Vpa) map[NodeRef][]PodID {
	nodes := map[NodeRef][]PodID{}
	for podID, pod := range cluster.pods {
		if podID.Namespace != vpa.ID.Namespace || pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
			continue
		}
		podLabels := cluster.labelSetMap[pod.labelSetKey]
		if node, scoped := nodeOf(podLabels); scoped && vpa.PodSelector != nil && vpa.PodSelector.Matches(podLabels) {
			nodes[node] = append(nodes[node], podID)
		}
	}
	return nodes
}

// NodeAggregations returns, for each of the given nodes, the aggregated state
// of each container of the VPA's pods on that node: the node's aggregations
// merged with its checkpointed history (NodeInitialAggregateStates), in new
// objects that the caller may change.
func (cluster *clusterState) NodeAggregations(vpa *Vpa, nodes map[NodeRef]bool) map[NodeRef]ContainerNameToAggregateStateMap {
	result := make(map[NodeRef]ContainerNameToAggregateStateMap, len(nodes))
	merge := func(node NodeRef, container string, state *AggregateContainerState) {
		byContainer, found := result[node]
		if !found {
			byContainer = ContainerNameToAggregateStateMap{}
			result[node] = byContainer
		}
		merged, found := byContainer[container]
		if !found {
			merged = NewAggregateContainerState()
			byContainer[container] = merged
		}
		merged.MergeContainerState(state)
	}
	for key, aggregation := range vpa.aggregateContainerStates {
		if node, scoped := nodeOf(key.Labels()); scoped && nodes[node] {
			merge(node, key.ContainerName(), aggregation)
		}
	}
	for node, byContainer := range vpa.NodeInitialAggregateStates {
		if !nodes[node] {
			continue
		}
		for container, state := range byContainer {
			merge(node, container, state)
		}
	}
	for node := range nodes {
		if _, found := result[node]; !found {
			result[node] = ContainerNameToAggregateStateMap{}
		}
	}
	return result
}
