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

package balloonpod

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-helpers/nodedeclaredfeatures/types"
)

func podInfo(class, cpu string) *types.PodInfo {
	return &types.PodInfo{Spec: &v1.PodSpec{
		PriorityClassName: class,
		Containers: []v1.Container{{
			Name:      "pause",
			Image:     "pause",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
		}},
	}}
}

func TestDiscover(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		cfg := &types.NodeConfiguration{FeatureGates: types.FeatureGateMap{BalloonPodFeatureGate: enabled}}
		if got := Feature.Discover(cfg); got != enabled {
			t.Errorf("gate %v: Discover() = %v, want %v", enabled, got, enabled)
		}
	}
}

func TestInferForScheduling(t *testing.T) {
	tests := []struct {
		name string
		pod  *types.PodInfo
		want bool
	}{
		{name: "balloon class", pod: podInfo(BalloonPriorityClassName, "1m"), want: true},
		{name: "system-node-critical", pod: podInfo("system-node-critical", "1m")},
		{name: "no class", pod: podInfo("", "1m")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Feature.InferForScheduling(tc.pod); got != tc.want {
				t.Errorf("InferForScheduling() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInferForUpdate(t *testing.T) {
	withPodResources := podInfo(BalloonPriorityClassName, "1m")
	withPodResources.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}
	withImage := podInfo(BalloonPriorityClassName, "1m")
	withImage.Spec.Containers[0].Image = "pause:next"

	tests := []struct {
		name     string
		old, new *types.PodInfo
		want     bool
	}{
		{name: "balloon resize", old: podInfo(BalloonPriorityClassName, "1m"), new: podInfo(BalloonPriorityClassName, "500m"), want: true},
		{name: "balloon pod-level resize", old: podInfo(BalloonPriorityClassName, "1m"), new: withPodResources, want: true},
		{name: "balloon, same size written differently", old: podInfo(BalloonPriorityClassName, "1"), new: podInfo(BalloonPriorityClassName, "1000m")},
		{name: "balloon, other update", old: podInfo(BalloonPriorityClassName, "1m"), new: withImage},
		{name: "resize of another pod", old: podInfo("system-node-critical", "1m"), new: podInfo("system-node-critical", "500m")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Feature.InferForUpdate(tc.old, tc.new); got != tc.want {
				t.Errorf("InferForUpdate() = %v, want %v", got, tc.want)
			}
		})
	}
}
