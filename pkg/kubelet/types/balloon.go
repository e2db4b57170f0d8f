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
// capacity that does not exist. A pod is a balloon by facts that cannot change
// once it exists: it runs at the system-node-balloon priority class, in
// kube-system, where admission keeps that class, and it is no static pod, which
// no admission checked. Labels can change, so they decide nothing here; admission
// requires the balloon label exactly on the pods of the class, so that what the
// label says and what the kubelet decides agree.
func IsBalloonPod(pod *v1.Pod) bool {
	return UsesBalloonClass(pod) && pod.Namespace == metav1.NamespaceSystem && !IsStaticPod(pod)
}

// UsesBalloonClass returns true if the pod runs at the system-node-balloon
// priority class, whose preemptionPolicy is Never: the kubelet never preempts to
// admit such a pod, balloon or not (a static pod may claim the class).
func UsesBalloonClass(pod *v1.Pod) bool {
	return pod != nil &&
		utilfeature.DefaultFeatureGate.Enabled(features.BalloonPod) &&
		pod.Spec.PriorityClassName == scheduling.SystemNodeBalloon
}
