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
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	admissiontesting "k8s.io/apiserver/pkg/admission/testing"
	"k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

var balloonClass = &scheduling.PriorityClass{
	TypeMeta: metav1.TypeMeta{
		Kind: "PriorityClass",
	},
	ObjectMeta: metav1.ObjectMeta{
		Name: scheduling.SystemNodeBalloon,
	},
	Value:            scheduling.SystemCriticalPriority + 1000,
	PreemptionPolicy: &preemptNever,
}

// clusterCritical is system-cluster-critical as kube-apiserver creates it:
// unlike systemClusterCritical, it is not the global default.
var clusterCritical = &scheduling.PriorityClass{
	TypeMeta: metav1.TypeMeta{
		Kind: "PriorityClass",
	},
	ObjectMeta: metav1.ObjectMeta{
		Name: scheduling.SystemClusterCritical,
	},
	Value: scheduling.SystemCriticalPriority,
}

var systemNodeCritical = &scheduling.PriorityClass{
	TypeMeta: metav1.TypeMeta{
		Kind: "PriorityClass",
	},
	ObjectMeta: metav1.ObjectMeta{
		Name: scheduling.SystemNodeCritical,
	},
	Value: scheduling.SystemCriticalPriority + 1000,
}

// balloonTestPod returns a pod in namespace with the balloon label when label
// is set and the given priority class.
func balloonTestPod(namespace string, label bool, priorityClassName string) *api.Pod {
	pod := &api.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "balloon",
			Namespace: namespace,
		},
		Spec: api.PodSpec{
			Containers:        []api.Container{{Name: "container"}},
			PriorityClassName: priorityClassName,
		},
	}
	if label {
		pod.Labels = map[string]string{corev1.LabelBalloonPod: "true"}
	}
	return pod
}

func TestPodAdmissionBalloon(t *testing.T) {
	const forbiddenMessage = "the system-node-balloon PriorityClass may only be used in the kube-system namespace"
	otherClasses := []*scheduling.PriorityClass{clusterCritical, systemNodeCritical, nondefaultClass1}
	allClasses := append([]*scheduling.PriorityClass{balloonClass}, otherClasses...)

	tests := []struct {
		name            string
		disabled        bool
		existingClasses []*scheduling.PriorityClass
		pod             *api.Pod
		// expectedErr is a part of the expected Forbidden error, empty when the pod is admitted.
		expectedErr              string
		expectedClass            string
		expectedPriority         int32
		expectedPreemptionPolicy *api.PreemptionPolicy
	}{
		{
			name:                     "balloon in kube-system",
			existingClasses:          allClasses,
			pod:                      balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon),
			expectedClass:            scheduling.SystemNodeBalloon,
			expectedPriority:         scheduling.SystemCriticalPriority + 1000,
			expectedPreemptionPolicy: &preemptNever,
		},
		{
			// The case reproduced on a cluster: such a pod, bound to a full node,
			// made the kubelet preempt a running workload.
			name:            "class without the label in kube-system",
			existingClasses: allClasses,
			pod:             balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeBalloon),
			expectedErr:     "pods of the system-node-balloon PriorityClass must carry the label node.kubernetes.io/balloon=true",
		},
		{
			name:            "class with another value of the label in kube-system",
			existingClasses: allClasses,
			pod: func() *api.Pod {
				pod := balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon)
				pod.Labels[corev1.LabelBalloonPod] = "yes"
				return pod
			}(),
			expectedErr: "must carry the label",
		},
		{
			name:            "balloon in default",
			existingClasses: allClasses,
			pod:             balloonTestPod(metav1.NamespaceDefault, true, scheduling.SystemNodeBalloon),
			expectedErr:     forbiddenMessage,
		},
		{
			name:            "class without the label in another namespace",
			existingClasses: allClasses,
			pod:             balloonTestPod("team-a", false, scheduling.SystemNodeBalloon),
			expectedErr:     forbiddenMessage,
		},
		{
			name:            "balloon in kube-system asking for PreemptLowerPriority",
			existingClasses: allClasses,
			pod: func() *api.Pod {
				pod := balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon)
				pod.Spec.PreemptionPolicy = &preemptLowerPriority
				return pod
			}(),
			expectedErr: "must not be provided in pod spec",
		},
		{
			name:            "balloon in kube-system with the wrong priority",
			existingClasses: allClasses,
			pod: func() *api.Pod {
				pod := balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon)
				pod.Spec.Priority = &clusterCritical.Value
				return pod
			}(),
			expectedErr: "must not be provided in pod spec",
		},
		{
			name:            "label only in kube-system, with the default class",
			existingClasses: append([]*scheduling.PriorityClass{defaultClass1}, allClasses...),
			pod:             balloonTestPod(metav1.NamespaceSystem, true, ""),
			expectedErr:     "the label node.kubernetes.io/balloon is reserved for pods of the system-node-balloon PriorityClass",
		},
		{
			name:            "label only in default without a default class",
			existingClasses: allClasses,
			pod:             balloonTestPod(metav1.NamespaceDefault, true, ""),
			expectedErr:     "is reserved for pods of the system-node-balloon PriorityClass",
		},
		{
			name:            "label with a user class in another namespace",
			existingClasses: allClasses,
			pod:             balloonTestPod("team-a", true, nondefaultClass1.Name),
			expectedErr:     "is reserved for pods of the system-node-balloon PriorityClass",
		},
		{
			name:             "system-node-critical in another namespace",
			existingClasses:  allClasses,
			pod:              balloonTestPod("team-a", false, scheduling.SystemNodeCritical),
			expectedClass:    scheduling.SystemNodeCritical,
			expectedPriority: systemNodeCritical.Value,
		},
		{
			name:            "system-cluster-critical with the label in default",
			existingClasses: allClasses,
			pod:             balloonTestPod(metav1.NamespaceDefault, true, scheduling.SystemClusterCritical),
			expectedErr:     "is reserved for pods of the system-node-balloon PriorityClass",
		},
		{
			name:             "system-node-critical in kube-system",
			existingClasses:  allClasses,
			pod:              balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeCritical),
			expectedClass:    scheduling.SystemNodeCritical,
			expectedPriority: systemNodeCritical.Value,
		},
		{
			name:            "gate off, the class does not exist",
			disabled:        true,
			existingClasses: otherClasses,
			pod:             balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon),
			expectedErr:     "no PriorityClass with name system-node-balloon was found",
		},
		{
			name:             "gate off, the label is no concern of admission",
			disabled:         true,
			existingClasses:  otherClasses,
			pod:              balloonTestPod("team-a", true, nondefaultClass1.Name),
			expectedClass:    nondefaultClass1.Name,
			expectedPriority: nondefaultClass1.Value,
		},
		{
			name:            "gate off, a class left from when it was on stays in kube-system",
			disabled:        true,
			existingClasses: allClasses,
			pod:             balloonTestPod(metav1.NamespaceDefault, true, scheduling.SystemNodeBalloon),
			expectedErr:     forbiddenMessage,
		},
	}

	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, feature.DefaultFeatureGate, features.BalloonPod, !test.disabled)
			ctrl := NewPlugin()
			if err := addPriorityClasses(ctrl, test.existingClasses); err != nil {
				t.Fatalf("unable to add object to informer: %v", err)
			}
			pod := test.pod
			attrs := admission.NewAttributesRecord(
				pod,
				nil,
				api.Kind("Pod").WithVersion("version"),
				pod.Namespace,
				pod.Name,
				api.Resource("pods").WithVersion("version"),
				"",
				admission.Create,
				&metav1.CreateOptions{},
				false,
				nil,
			)
			err := admitAndValidate(t, ctrl, attrs)

			if test.expectedErr != "" {
				if err == nil {
					t.Fatalf("expected a Forbidden error containing %q, the pod was admitted", test.expectedErr)
				}
				if !apierrors.IsForbidden(err) {
					t.Errorf("expected a Forbidden error, got %v", err)
				}
				if !strings.Contains(err.Error(), test.expectedErr) {
					t.Errorf("error %q does not contain %q", err, test.expectedErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if pod.Spec.PriorityClassName != test.expectedClass {
				t.Errorf("priorityClassName = %q, want %q", pod.Spec.PriorityClassName, test.expectedClass)
			}
			if pod.Spec.Priority == nil {
				t.Errorf("priority not set, want %d", test.expectedPriority)
			} else if *pod.Spec.Priority != test.expectedPriority {
				t.Errorf("priority = %d, want %d", *pod.Spec.Priority, test.expectedPriority)
			}
			switch {
			case test.expectedPreemptionPolicy == nil:
			case pod.Spec.PreemptionPolicy == nil:
				t.Errorf("preemptionPolicy not set, want %s", *test.expectedPreemptionPolicy)
			case *pod.Spec.PreemptionPolicy != *test.expectedPreemptionPolicy:
				t.Errorf("preemptionPolicy = %s, want %s", *pod.Spec.PreemptionPolicy, *test.expectedPreemptionPolicy)
			}
		})
	}
}

// TestPodUpdateAdmissionBalloon checks that an update keeps the priority and
// preemption policy that a balloon got on creation.
func TestPodUpdateAdmissionBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, feature.DefaultFeatureGate, features.BalloonPod, true)
	ctrl := NewPlugin()
	if err := addPriorityClasses(ctrl, []*scheduling.PriorityClass{balloonClass}); err != nil {
		t.Fatalf("unable to add object to informer: %v", err)
	}
	oldPod := balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon)
	oldPod.Spec.Priority = &balloonClass.Value
	oldPod.Spec.PreemptionPolicy = &preemptNever
	pod := balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon)
	attrs := admission.NewAttributesRecord(
		pod,
		oldPod,
		api.Kind("Pod").WithVersion("version"),
		pod.Namespace,
		pod.Name,
		api.Resource("pods").WithVersion("version"),
		"",
		admission.Update,
		&metav1.UpdateOptions{},
		false,
		nil,
	)
	if err := admissiontesting.WithReinvocationTesting(t, ctrl).Admit(context.TODO(), attrs, nil); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority != balloonClass.Value {
		t.Errorf("priority = %s, want %d", ptrString(pod.Spec.Priority), balloonClass.Value)
	}
	if pod.Spec.PreemptionPolicy == nil || *pod.Spec.PreemptionPolicy != preemptNever {
		t.Errorf("preemptionPolicy = %s, want %s", ptrString(pod.Spec.PreemptionPolicy), preemptNever)
	}
}

// admitAndValidate runs the plugin's admission phases in the order
// kube-apiserver does: mutating (with reinvocation), then validating.
func admitAndValidate(t *testing.T, ctrl *Plugin, attrs admission.Attributes) error {
	if err := admissiontesting.WithReinvocationTesting(t, ctrl).Admit(context.TODO(), attrs, nil); err != nil {
		return err
	}
	return ctrl.Validate(context.TODO(), attrs, nil)
}

// TestPodUpdateAdmissionBalloonLabel: labels can change, through the pod and
// its status, so every update that changes the label keeps it exactly on the
// pods of the balloon class; one that leaves it as it was passes.
func TestPodUpdateAdmissionBalloonLabel(t *testing.T) {
	withLabels := func(pod *api.Pod, labels map[string]string) *api.Pod {
		pod.Labels = labels
		return pod
	}
	for _, tc := range []struct {
		name        string
		disabled    bool
		subresource string
		old, pod    *api.Pod
		expectedErr string
	}{{
		// The label left a balloon through pods/status, which the mutating
		// phase never looked at (issue 36).
		name:        "the label removed from a balloon through its status",
		subresource: "status",
		old:         balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon),
		pod:         balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeBalloon),
		expectedErr: "pods of the system-node-balloon PriorityClass must carry the label node.kubernetes.io/balloon=true",
	}, {
		name:        "the label added to another pod through its status",
		subresource: "status",
		old:         balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeCritical),
		pod:         balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical),
		expectedErr: "is reserved for pods of the system-node-balloon PriorityClass",
	}, {
		// A pod that carried the label before the gate was on: writes that
		// leave the label alone, its finalizer's removal among them, pass.
		name: "a pod labelled before the gate, another label changed",
		old:  balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical),
		pod:  withLabels(balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical), map[string]string{corev1.LabelBalloonPod: "true", "team": "infra"}),
	}, {
		name:        "a pod labelled before the gate, the label changed",
		old:         balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical),
		pod:         withLabels(balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical), map[string]string{corev1.LabelBalloonPod: "yes"}),
		expectedErr: "is reserved for pods of the system-node-balloon PriorityClass",
	}, {
		name: "a pod labelled before the gate, the label removed",
		old:  balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical),
		pod:  balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeCritical),
	}, {
		name: "a balloon keeps its label",
		old:  balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon),
		pod:  withLabels(balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon), map[string]string{corev1.LabelBalloonPod: "true", "team": "infra"}),
	}, {
		name:        "the label removed from a balloon by a patch",
		old:         balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon),
		pod:         balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeBalloon),
		expectedErr: "pods of the system-node-balloon PriorityClass must carry the label node.kubernetes.io/balloon=true",
	}, {
		name:        "the label added to another pod",
		old:         balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeCritical),
		pod:         balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeCritical),
		expectedErr: "the label node.kubernetes.io/balloon is reserved for pods of the system-node-balloon PriorityClass",
	}, {
		name:     "gate off",
		disabled: true,
		old:      balloonTestPod(metav1.NamespaceSystem, true, scheduling.SystemNodeBalloon),
		pod:      balloonTestPod(metav1.NamespaceSystem, false, scheduling.SystemNodeBalloon),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, feature.DefaultFeatureGate, features.BalloonPod, !tc.disabled)
			ctrl := NewPlugin()
			if err := addPriorityClasses(ctrl, []*scheduling.PriorityClass{balloonClass, systemNodeCritical}); err != nil {
				t.Fatalf("unable to add object to informer: %v", err)
			}
			attrs := admission.NewAttributesRecord(tc.pod, tc.old, api.Kind("Pod").WithVersion("version"), tc.pod.Namespace, tc.pod.Name,
				api.Resource("pods").WithVersion("version"), tc.subresource, admission.Update, &metav1.UpdateOptions{}, false, nil)
			err := admitAndValidate(t, ctrl, attrs)
			switch {
			case tc.expectedErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.expectedErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.expectedErr)):
				t.Fatalf("got %v, want a Forbidden error containing %q", err, tc.expectedErr)
			}
		})
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

// TestPodGroupAdmissionBalloon: a group of pods at the balloon class is admitted
// in kube-system only, whether a PodGroup or (1.37) a CompositePodGroup, which
// resolve their priority from the class as pods do.
func TestPodGroupAdmissionBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, feature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.BalloonPod:                      true,
		features.GenericWorkload:                 true,
		features.TopologyAwareWorkloadScheduling: true,
		features.CompositePodGroup:               true,
	})
	podGroup := func(namespace string) (runtime.Object, admission.Attributes) {
		pg := &scheduling.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "group", Namespace: namespace},
			Spec: scheduling.PodGroupSpec{
				SchedulingPolicy:  scheduling.PodGroupSchedulingPolicy{Basic: &scheduling.BasicSchedulingPolicy{}},
				PriorityClassName: scheduling.SystemNodeBalloon,
			},
		}
		return pg, admission.NewAttributesRecord(pg, nil, scheduling.Kind("PodGroup").WithVersion("v1beta1"), namespace, pg.Name,
			scheduling.Resource("podgroups").WithVersion("v1beta1"), "", admission.Create, &metav1.CreateOptions{}, false, nil)
	}
	compositePodGroup := func(namespace string) (runtime.Object, admission.Attributes) {
		cpg := &scheduling.CompositePodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "group", Namespace: namespace},
			Spec: scheduling.CompositePodGroupSpec{
				SchedulingPolicy:  scheduling.CompositePodGroupSchedulingPolicy{Basic: &scheduling.CompositeBasicSchedulingPolicy{}},
				PriorityClassName: scheduling.SystemNodeBalloon,
			},
		}
		return cpg, admission.NewAttributesRecord(cpg, nil, scheduling.Kind("CompositePodGroup").WithVersion("v1alpha3"), namespace, cpg.Name,
			scheduling.Resource("compositepodgroups").WithVersion("v1alpha3"), "", admission.Create, &metav1.CreateOptions{}, false, nil)
	}
	priority := func(obj runtime.Object) *int32 {
		switch g := obj.(type) {
		case *scheduling.PodGroup:
			return g.Spec.Priority
		case *scheduling.CompositePodGroup:
			return g.Spec.Priority
		}
		return nil
	}
	for kind, group := range map[string]func(string) (runtime.Object, admission.Attributes){"PodGroup": podGroup, "CompositePodGroup": compositePodGroup} {
		for _, tc := range []struct {
			namespace string
			wantErr   bool
		}{
			{namespace: metav1.NamespaceSystem},
			{namespace: metav1.NamespaceDefault, wantErr: true},
		} {
			t.Run(kind+"/"+tc.namespace, func(t *testing.T) {
				ctrl := NewPlugin()
				if err := addPriorityClasses(ctrl, []*scheduling.PriorityClass{balloonClass}); err != nil {
					t.Fatal(err)
				}
				obj, attrs := group(tc.namespace)
				err := ctrl.Admit(context.TODO(), attrs, nil)
				if tc.wantErr {
					if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may only be used in the kube-system namespace") {
						t.Errorf("want Forbidden naming kube-system, got %v", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if p := priority(obj); p == nil || *p != balloonClass.Value {
					t.Errorf("priority = %s, want %d", ptrString(p), balloonClass.Value)
				}
			})
		}
	}
}
