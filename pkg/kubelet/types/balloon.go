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
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// UnsizedBalloonMemory is the memory request of a balloon that holds nothing:
// the node-balloon addon's template, and the least kubectl balloon sets.
var UnsizedBalloonMemory = resource.MustParse("1Mi")

// BalloonProtectionFinalizer is added to every balloon when it is created (the
// node-balloon addon's admission policy). A deleted balloon that carries it is
// held: it keeps running, and so keeps its capacity closed in the scheduler's
// view and in the kubelet's admission, until the resize agent has tainted its
// node and removed the finalizer.
const BalloonProtectionFinalizer = "kubernetes.io/balloon-protection"

// IsHeldBalloon returns true if the pod is a deleted balloon that its protection
// finalizer still holds: the kubelet does not begin its termination yet.
func IsHeldBalloon(pod *v1.Pod) bool {
	return pod.DeletionTimestamp != nil && IsBalloonPod(pod) && slices.Contains(pod.Finalizers, BalloonProtectionFinalizer)
}

// IsReleasedBalloon returns true if ref is the update that releases the held
// balloon existing: its protection finalizer was removed.
func IsReleasedBalloon(existing, ref *v1.Pod) bool {
	return IsHeldBalloon(existing) && !IsHeldBalloon(ref)
}
