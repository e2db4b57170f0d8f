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
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// PodRequests are the requests of the containers of a pod, by container name.
type PodRequests map[string]corev1.ResourceList

// Hysteresis keeps a node's entry while the node's recommendation moves only a
// little: the bounds move with every sample (their confidence grows with the
// history), and so would every entry in every loop.
type Hysteresis struct {
	// Threshold is how far, relative to the entry's, a target may move before
	// the entry is rewritten.
	Threshold float64
	// Requests are the requests of the VPA's pods on each node (more than one
	// during a rollout).
	Requests map[model.NodeRef][]PodRequests
}

// Keeps tells whether the node's entry old stays although the node's
// recommendation is now rec: they have the same containers and resources, no
// target moved by more than Threshold of the entry's, and the request of each
// pod on the node is, for every container and resource, within the bounds of
// both or outside the bounds of both, so that the updater decides on the
// entry as it would on rec. A nil Hysteresis keeps no entry that differs.
func (h *Hysteresis) Keeps(node model.NodeRef, old, rec *vpa_types.RecommendedPodResources) bool {
	if h == nil || len(old.ContainerRecommendations) != len(rec.ContainerRecommendations) {
		return false
	}
	for _, c := range rec.ContainerRecommendations {
		o := vpa_api_util.GetRecommendationForContainer(c.ContainerName, old)
		if o == nil || len(o.Target) != len(c.Target) || len(o.LowerBound) != len(c.LowerBound) || len(o.UpperBound) != len(c.UpperBound) {
			return false
		}
		for name, target := range c.Target {
			oldTarget, found := o.Target[name]
			if !found || moved(oldTarget, target) > h.Threshold {
				return false
			}
			for _, pod := range h.Requests[node] {
				request, found := pod[c.ContainerName][name]
				if found && inBounds(request, o, name) != inBounds(request, &c, name) {
					return false
				}
			}
		}
	}
	return true
}

// moved returns how far to is from from, relative to from.
func moved(from, to resource.Quantity) float64 {
	f, t := from.AsApproximateFloat64(), to.AsApproximateFloat64()
	if f == 0 {
		if t == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Abs(t-f) / f
}

// inBounds tells whether the request lies within the recommendation's bounds of
// the resource, as the updater compares them.
func inBounds(request resource.Quantity, rec *vpa_types.RecommendedContainerResources, name corev1.ResourceName) bool {
	if lower, found := rec.LowerBound[name]; found && request.Cmp(lower) < 0 {
		return false
	}
	if upper, found := rec.UpperBound[name]; found && request.Cmp(upper) > 0 {
		return false
	}
	return true
}
