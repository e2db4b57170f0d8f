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

package priority

import (
	"fmt"

	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

// admitBalloonNamespace keeps the balloon priority class in kube-system, for pods
// and pod groups: a balloon's requests count as capacity that does not exist, so
// a workload that could run as one would hide its usage and escape preemption.
func admitBalloonNamespace(a admission.Attributes, priorityClassName string) error {
	if priorityClassName != scheduling.SystemNodeBalloon || a.GetNamespace() == metav1.NamespaceSystem {
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("the %s PriorityClass may only be used in the %s namespace", scheduling.SystemNodeBalloon, metav1.NamespaceSystem))
}

// validateBalloonLabel keeps the balloon label and the balloon priority class
// together: a pod carries the label, with the value "true", exactly when it
// runs at the system-node-balloon class. The kubelet tells a balloon by its
// class and namespace, which cannot change; the label, which tools select
// balloons by, can, through an update of the pod or of its status, so admission
// checks every write that sets or changes it, in the validating phase, where no
// later mutation can undo it. A write that leaves the label as it was passes
// (ratcheting): a pod labelled before the gate was on keeps working.
func validateBalloonLabel(a admission.Attributes) error {
	if !utilfeature.DefaultFeatureGate.Enabled(features.BalloonPod) {
		return nil
	}
	pod, ok := a.GetObject().(*core.Pod)
	if !ok {
		// The pods/binding and pods/eviction subresources write other kinds.
		return nil
	}
	value, labelled := pod.Labels[apiv1.LabelBalloonPod]
	if oldPod, ok := a.GetOldObject().(*core.Pod); ok {
		oldValue, wasLabelled := oldPod.Labels[apiv1.LabelBalloonPod]
		if labelled == wasLabelled && value == oldValue {
			return nil
		}
	}
	switch {
	case pod.Spec.PriorityClassName == scheduling.SystemNodeBalloon && value != "true":
		return admission.NewForbidden(a, fmt.Errorf("pods of the %s PriorityClass must carry the label %s=true", scheduling.SystemNodeBalloon, apiv1.LabelBalloonPod))
	case pod.Spec.PriorityClassName != scheduling.SystemNodeBalloon && labelled:
		return admission.NewForbidden(a, fmt.Errorf("the label %s is reserved for pods of the %s PriorityClass", apiv1.LabelBalloonPod, scheduling.SystemNodeBalloon))
	}
	return nil
}
