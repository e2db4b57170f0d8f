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

package types

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

// IsBalloonPod returns true if the pod is a balloon: its requests hold node
// capacity that does not exist. A balloon carries the balloon label and runs
// in kube-system at the system-node-balloon priority class, which admission
// keeps in kube-system; the label or the class alone grants nothing.
func IsBalloonPod(pod *v1.Pod) bool {
	return pod != nil &&
		utilfeature.DefaultFeatureGate.Enabled(features.BalloonPod) &&
		pod.Labels[v1.LabelBalloonPod] == "true" &&
		pod.Spec.PriorityClassName == scheduling.SystemNodeBalloon &&
		pod.Namespace == metav1.NamespaceSystem
}
