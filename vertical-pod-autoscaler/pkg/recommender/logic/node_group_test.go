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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// history returns a state with one sample a minute over the span.
func history(span time.Duration) *model.AggregateContainerState {
	s := model.NewAggregateContainerState()
	if span > 0 {
		s.LastSampleStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		s.FirstSampleStart = s.LastSampleStart.Add(-span)
		s.TotalSamplesCount = int(span/time.Minute) + 1
	}
	return s
}

func TestConfidenceWeight(t *testing.T) {
	c := Confidence{CPUInterval: 24 * time.Hour, MemoryInterval: 12 * time.Hour}
	for _, tc := range []struct {
		name        string
		state       *model.AggregateContainerState
		cpu, memory float64
	}{
		{name: "no history", state: history(0), cpu: 0, memory: 0},
		{name: "six hours", state: history(6 * time.Hour), cpu: 0.25, memory: 0.5},
		{name: "a day", state: history(24 * time.Hour), cpu: 1, memory: 1},
		{name: "two days", state: history(48 * time.Hour), cpu: 1, memory: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.cpu, c.Weight(tc.state, model.ResourceCPU), 1e-9)
			assert.InDelta(t, tc.memory, c.Weight(tc.state, model.ResourceMemory), 1e-9)
		})
	}
	// Few samples over a long span: the sample count bounds the confidence.
	sparse := history(24 * time.Hour)
	sparse.TotalSamplesCount = 360
	assert.InDelta(t, 0.25, c.Weight(sparse, model.ResourceCPU), 1e-9)
}

func TestBlendWithGroup(t *testing.T) {
	c := Confidence{CPUInterval: 24 * time.Hour, MemoryInterval: 24 * time.Hour}
	rec := func(cpuMilli, memory int64) RecommendedContainerResources {
		r := model.Resources{model.ResourceCPU: model.ResourceAmount(cpuMilli), model.ResourceMemory: model.ResourceAmount(memory)}
		return RecommendedContainerResources{Target: r, LowerBound: r, UpperBound: r}
	}
	own := RecommendedPodResources{"agent": rec(400, 1000), "sidecar": rec(100, 100)}
	group := RecommendedPodResources{"agent": rec(800, 2000)}
	for _, tc := range []struct {
		name        string
		span        time.Duration
		cpu, memory model.ResourceAmount
	}{
		{name: "new node: the group's", span: 0, cpu: 800, memory: 2000},
		{name: "six hours: a quarter of its own", span: 6 * time.Hour, cpu: 700, memory: 1750},
		{name: "a day: its own", span: 24 * time.Hour, cpu: 400, memory: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := model.ContainerNameToAggregateStateMap{"agent": history(tc.span), "sidecar": history(tc.span)}
			got := c.BlendWithGroup(own, group, states)
			for name, values := range map[string]model.Resources{
				"target": got["agent"].Target, "lowerBound": got["agent"].LowerBound, "upperBound": got["agent"].UpperBound,
			} {
				assert.Equal(t, model.Resources{model.ResourceCPU: tc.cpu, model.ResourceMemory: tc.memory}, values, name)
			}
			// The group has no history of the sidecar: its own values.
			assert.Equal(t, own["sidecar"], got["sidecar"])
		})
	}

	// A resource the group's recommendation lacks keeps the node's value.
	cpuOnly := RecommendedPodResources{"agent": {Target: model.Resources{model.ResourceCPU: 800}}}
	got := c.BlendWithGroup(RecommendedPodResources{"agent": rec(400, 1000)}, cpuOnly, model.ContainerNameToAggregateStateMap{"agent": history(0)})
	assert.Equal(t, model.Resources{model.ResourceCPU: 800, model.ResourceMemory: 1000}, got["agent"].Target)
}
