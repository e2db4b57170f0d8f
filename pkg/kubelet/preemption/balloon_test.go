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

package preemption

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/utils/ptr"
)

func balloonPod(name, cpu string) *v1.Pod {
	pod := getPodWithResources(name, v1.ResourceRequirements{Requests: v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(cpu),
		v1.ResourceMemory: resource.MustParse("1Mi"),
	}})
	pod.Name = name
	pod.Namespace = metav1.NamespaceSystem
	pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
	pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
	priority := scheduling.SystemCriticalPriority + 1000
	pod.Spec.Priority = &priority
	return pod
}

// labelOnlyBalloon is a workload that labels itself as a balloon.
func labelOnlyBalloon(name, cpu string) *v1.Pod {
	pod := getPodWithResources(name, v1.ResourceRequirements{Requests: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse(cpu),
	}})
	pod.Name = name
	pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
	return pod
}

func killedNames(k *fakePodKiller) []string {
	var names []string
	for _, p := range k.getKilledPods() {
		names = append(names, p.Name)
	}
	return names
}

func TestBalloonNeverPreemptsToBeAdmitted(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		t.Run(map[bool]string{true: "BalloonPod=on", false: "BalloonPod=off"}[enabled], func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, enabled)
			tCtx := ktesting.Init(t)
			pods, killer := newFakePodProvider(), newFakePodKiller(false)
			victim := getTestPods()[burstable]
			victim.Name = "workload"
			pods.setPods([]*v1.Pod{victim})
			handler := getTestCriticalPodAdmissionHandler(pods, killer)

			reasons := getPredicateFailureReasons(100, 0, 0, false)
			got, err := handler.HandleAdmissionFailure(tCtx, balloonPod("balloon", "500m"), reasons, lifecycle.AddOperation)
			if err != nil {
				t.Fatal(err)
			}
			if !enabled {
				// Without the gate the balloon is a critical pod and preempts.
				if len(got) != 0 || len(killer.getKilledPods()) != 1 {
					t.Fatalf("with the gate off, want the critical pod admitted by preemption, got reasons %v, killed %v", got, killedNames(killer))
				}
				return
			}
			if len(got) != len(reasons) {
				t.Errorf("want the balloon's failure reasons kept, got %v", got)
			}
			if killed := killedNames(killer); len(killed) != 0 {
				t.Errorf("a balloon preempted %v to be admitted", killed)
			}
		})
	}
}

func TestCriticalPodNeverPreemptsBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	tCtx := ktesting.Init(t)
	nodeCriticalPod := getTestPods()[nodeCritical]

	// A static pod's priority is whatever its manifest says: above the
	// balloon class's, upstream's rules let it preempt the balloon.
	aboveTheBalloon := getTestPods()[nodeCritical]
	aboveTheBalloon.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	aboveTheBalloon.Spec.Priority = ptr.To(scheduling.SystemCriticalPriority + 1001)

	t.Run("only a balloon could free the resources", func(t *testing.T) {
		pods, killer := newFakePodProvider(), newFakePodKiller(false)
		pods.setPods([]*v1.Pod{balloonPod("balloon", "2")})
		if _, err := getTestCriticalPodAdmissionHandler(pods, killer).HandleAdmissionFailure(tCtx, aboveTheBalloon, getPredicateFailureReasons(100, 0, 0, false), lifecycle.AddOperation); err == nil {
			t.Error("want an error: no pod may be preempted")
		}
		if killed := killedNames(killer); len(killed) != 0 {
			t.Errorf("preempted %v", killed)
		}
	})
	t.Run("the label alone grants nothing", func(t *testing.T) {
		pods, killer := newFakePodProvider(), newFakePodKiller(false)
		pods.setPods([]*v1.Pod{balloonPod("balloon", "2"), labelOnlyBalloon("fake-balloon", "200m")})
		if _, err := getTestCriticalPodAdmissionHandler(pods, killer).HandleAdmissionFailure(tCtx, nodeCriticalPod, getPredicateFailureReasons(100, 0, 0, false), lifecycle.AddOperation); err != nil {
			t.Fatal(err)
		}
		if killed := killedNames(killer); len(killed) != 1 || killed[0] != "fake-balloon" {
			t.Errorf("preempted %v, want only fake-balloon", killed)
		}
	})
	t.Run("the class outside kube-system grants nothing", func(t *testing.T) {
		pods, killer := newFakePodProvider(), newFakePodKiller(false)
		elsewhere := balloonPod("elsewhere", "200m")
		elsewhere.Namespace = "default"
		pods.setPods([]*v1.Pod{balloonPod("balloon", "2"), elsewhere})
		if _, err := getTestCriticalPodAdmissionHandler(pods, killer).HandleAdmissionFailure(tCtx, nodeCriticalPod, getPredicateFailureReasons(100, 0, 0, false), lifecycle.AddOperation); err == nil {
			t.Error("want an error: the pod outside kube-system has a critical priority and cannot be preempted either")
		}
		if killed := killedNames(killer); len(killed) != 0 {
			t.Errorf("preempted %v", killed)
		}
	})
}

// TestPodOfTheBalloonClassNeverPreempts: the case reproduced on a cluster, a pod at
// the balloon class without the balloon label bound to a full node, and a static
// pod claiming the class: the class says preemptionPolicy Never, and the kubelet
// honours it whatever the labels.
func TestPodOfTheBalloonClassNeverPreempts(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	unlabelled := balloonPod("unlabelled", "500m")
	unlabelled.Labels = nil
	static := balloonPod("static", "500m")
	static.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	for _, admitPod := range []*v1.Pod{unlabelled, static} {
		t.Run(admitPod.Name, func(t *testing.T) {
			tCtx := ktesting.Init(t)
			pods, killer := newFakePodProvider(), newFakePodKiller(false)
			victim := getTestPods()[burstable]
			victim.Name = "workload"
			pods.setPods([]*v1.Pod{victim})
			reasons := getPredicateFailureReasons(100, 0, 0, false)
			got, err := getTestCriticalPodAdmissionHandler(pods, killer).HandleAdmissionFailure(tCtx, admitPod, reasons, lifecycle.AddOperation)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(reasons) {
				t.Errorf("want the failure reasons kept, got %v", got)
			}
			if killed := killedNames(killer); len(killed) != 0 {
				t.Errorf("preempted %v to admit a pod of the balloon class", killed)
			}
		})
	}
}
