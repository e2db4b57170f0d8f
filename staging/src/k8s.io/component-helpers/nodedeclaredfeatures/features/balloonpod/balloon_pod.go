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

// Package balloonpod declares the BalloonPod node feature (KEP-5620): the
// kubelet honours balloon pods, which never preempt and are never preempted.
// A kubelet without it treats a balloon as an ordinary critical pod, which
// preempts to be admitted or resized, so balloons and their resizes must be
// kept away from such nodes.
package balloonpod

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-helpers/nodedeclaredfeatures/types"
)

const (
	// BalloonPodFeatureGate is the kubelet feature gate, and the feature's name.
	BalloonPodFeatureGate = "BalloonPod"
	// BalloonPriorityClassName is the priority class of balloon pods
	// (k8s.io/kubernetes/pkg/apis/scheduling.SystemNodeBalloon).
	BalloonPriorityClassName = "system-node-balloon"
)

// Feature is the BalloonPod node feature.
var Feature = &balloonPodFeature{}

var _ types.Feature = &balloonPodFeature{}

type balloonPodFeature struct{}

func (f *balloonPodFeature) Name() string {
	return BalloonPodFeatureGate
}

func (f *balloonPodFeature) Discover(cfg *types.NodeConfiguration) bool {
	return cfg.FeatureGates.Enabled(BalloonPodFeatureGate)
}

func (f *balloonPodFeature) Requirements() *types.FeatureRequirements {
	return &types.FeatureRequirements{
		EnabledFeatureGates: []string{BalloonPodFeatureGate},
	}
}

// InferForScheduling requires the feature for every pod of the balloon class.
// The pod's namespace is not at hand here and need not be: admission keeps the
// class in kube-system, and the kubelet's rules (never preempt) apply to every
// pod of the class.
func (f *balloonPodFeature) InferForScheduling(podInfo *types.PodInfo) bool {
	return usesBalloonClass(podInfo)
}

// InferForUpdate requires the feature for an in-place resize of a pod of the
// balloon class.
func (f *balloonPodFeature) InferForUpdate(oldPodInfo, newPodInfo *types.PodInfo) bool {
	if !usesBalloonClass(newPodInfo) || oldPodInfo == nil || oldPodInfo.Spec == nil {
		return false
	}
	return !equality.Semantic.DeepEqual(resources(oldPodInfo.Spec), resources(newPodInfo.Spec))
}

// MaxVersion is nil while the feature is alpha.
func (f *balloonPodFeature) MaxVersion() *version.Version {
	return nil
}

func usesBalloonClass(podInfo *types.PodInfo) bool {
	return podInfo != nil && podInfo.Spec != nil && podInfo.Spec.PriorityClassName == BalloonPriorityClassName
}

// resources returns what an in-place resize changes: the pod's and each
// container's resources.
func resources(spec *v1.PodSpec) []*v1.ResourceRequirements {
	r := []*v1.ResourceRequirements{spec.Resources}
	for i := range spec.InitContainers {
		r = append(r, &spec.InitContainers[i].Resources)
	}
	for i := range spec.Containers {
		r = append(r, &spec.Containers[i].Resources)
	}
	return r
}
