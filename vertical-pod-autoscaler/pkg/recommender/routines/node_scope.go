/*
Copyright 2026 The Kubernetes Authors.

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
	"time"

	"k8s.io/klog/v2"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
	api_utils "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// MinNodeHistory is how much usage history of its own a node's pod needs
// before the node gets its own recommendation. Until then the node has no
// entry in the VPA's slices and its pod gets the VPA's DaemonSet-wide
// recommendation (status.recommendation).
const MinNodeHistory = time.Hour

// NodeScopeWriter stores the per-node recommendations of a VPA with scope node.
type NodeScopeWriter interface {
	Write(ctx context.Context, vpa *vpa_types.VerticalPodAutoscaler, recs map[string]*vpa_types.RecommendedPodResources) (nodescope.Plan, error)
}

// NodeRecommendations computes the recommendation of each live node of a VPA
// with scope node, with the same recommender, format and post-processors (so
// the same resource policy) as the VPA's own recommendation. A node whose pod
// has less than MinNodeHistory of history maps to nil.
func NodeRecommendations(cluster model.ClusterState, vpa *model.Vpa, observedVpa *vpa_types.VerticalPodAutoscaler,
	recommender logic.PodResourceRecommender, format logic.RecommendationFormat, postProcessors []RecommendationPostProcessor,
) map[string]*vpa_types.RecommendedPodResources {
	recs := map[string]*vpa_types.RecommendedPodResources{}
	for node, containers := range cluster.NodeAggregations(vpa) {
		autoscaled := model.ContainerNameToAggregateStateMap{}
		enough := len(containers) > 0
		for name, state := range containers {
			policy := api_utils.GetContainerResourcePolicy(name, vpa.ResourcePolicy)
			if policy != nil && policy.Mode != nil && *policy.Mode == vpa_types.ContainerScalingModeOff {
				continue
			}
			state.UpdateFromPolicy(policy)
			autoscaled[name] = state
			enough = enough && state.LastSampleStart.Sub(state.FirstSampleStart) >= MinNodeHistory
		}
		if !enough || len(autoscaled) == 0 {
			recs[node] = nil
			continue
		}
		rec := logic.MapToListOfRecommendedContainerResources(recommender.GetRecommendedPodResources(autoscaled), format)
		for _, p := range postProcessors {
			rec = p.Process(observedVpa, rec)
		}
		recs[node] = rec
	}
	return recs
}

// updateNodeRecommendations writes the per-node recommendations of a VPA with
// scope node; it does nothing for other VPAs or without a writer.
func (r *recommender) updateNodeRecommendations(vpa *model.Vpa, observedVpa *vpa_types.VerticalPodAutoscaler) {
	if r.nodeScopeWriter == nil || !vpa.IsNodeScoped() {
		return
	}
	recs := NodeRecommendations(r.clusterState, vpa, observedVpa, r.podResourceRecommender, r.recommendationFormat, r.recommendationPostProcessor)
	plan, err := r.nodeScopeWriter.Write(context.TODO(), observedVpa, recs)
	if err != nil {
		klog.ErrorS(err, "Cannot write the per-node recommendations of VPA", "vpa", klog.KObj(observedVpa))
	}
	klog.V(4).InfoS("Per-node recommendations", "vpa", klog.KObj(observedVpa), "nodes", len(recs), "created", len(plan.Create), "updated", len(plan.Update), "deleted", len(plan.Delete))
}
