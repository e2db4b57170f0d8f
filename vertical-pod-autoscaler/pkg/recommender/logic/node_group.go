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

package logic

import (
	"math"
	"time"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// Confidence weighs a node's own history against its node group's with the
// confidence the confidence multipliers of the bounds use (getConfidence),
// over the same intervals (--confidence-interval-cpu and -memory).
type Confidence struct {
	CPUInterval    time.Duration
	MemoryInterval time.Duration
}

// Weight returns the weight of the history in s for the resource: its
// confidence, at most 1. It grows linearly from 0 without history to 1 with a
// full interval (a day by default) of one sample a minute.
func (c Confidence) Weight(s *model.AggregateContainerState, resource model.ResourceName) float64 {
	interval := c.CPUInterval
	if resource == model.ResourceMemory {
		interval = c.MemoryInterval
	}
	return math.Min(1, getConfidence(s, interval))
}

// BlendWithGroup returns the recommendation of each container of own blended
// with the group's: for each resource of the target and both bounds,
// w*own + (1-w)*group, where w is the Weight of the container's own history
// in states, which holds every container of own. A container or resource the
// group lacks keeps its own value.
func (c Confidence) BlendWithGroup(own, group RecommendedPodResources, states model.ContainerNameToAggregateStateMap) RecommendedPodResources {
	result := make(RecommendedPodResources, len(own))
	for name, ownRec := range own {
		groupRec, found := group[name]
		if !found {
			result[name] = ownRec
			continue
		}
		state := states[name]
		blend := func(ownValues, groupValues model.Resources) model.Resources {
			blended := make(model.Resources, len(ownValues))
			for resource, value := range ownValues {
				groupValue, found := groupValues[resource]
				if !found {
					blended[resource] = value
					continue
				}
				switch w := c.Weight(state, resource); {
				case w <= 0:
					// Without history of its own, its estimate means
					// nothing (the upper bound's multiplier is infinite).
					blended[resource] = groupValue
				case w >= 1:
					blended[resource] = value
				default:
					blended[resource] = model.ScaleResource(value, w) + model.ScaleResource(groupValue, 1-w)
				}
			}
			return blended
		}
		result[name] = RecommendedContainerResources{
			Target:     blend(ownRec.Target, groupRec.Target),
			LowerBound: blend(ownRec.LowerBound, groupRec.LowerBound),
			UpperBound: blend(ownRec.UpperBound, groupRec.UpperBound),
		}
	}
	return result
}
