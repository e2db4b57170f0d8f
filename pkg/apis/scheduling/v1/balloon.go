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

package v1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	v1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"
)

// systemNodeBalloonPriorityClass is the priority class of balloon pods: as hard
// to preempt as system-node-critical, but never preempting, so that a balloon
// that grows never displaces a running pod.
var systemNodeBalloonPriorityClass = &v1.PriorityClass{
	ObjectMeta: metav1.ObjectMeta{
		Name: scheduling.SystemNodeBalloon,
	},
	Value:            scheduling.SystemCriticalPriority + 1000,
	PreemptionPolicy: ptr.To(corev1.PreemptNever),
	Description:      "Used for balloon pods, which hold node capacity that does not exist; they never preempt and are never preempted.",
}

// knownSystemPriorityClasses returns the system priority classes of the enabled features.
func knownSystemPriorityClasses() []*v1.PriorityClass {
	if utilfeature.DefaultFeatureGate.Enabled(features.BalloonPod) {
		return append(slices.Clip(systemPriorityClasses), systemNodeBalloonPriorityClass)
	}
	return systemPriorityClasses
}
