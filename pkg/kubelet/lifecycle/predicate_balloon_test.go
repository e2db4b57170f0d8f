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

package lifecycle_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/preemption"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/utils/ptr"
)

func requestingCPU(name, namespace, cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "c",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
}

// TestBalloonThatDoesNotFitIsRejected runs the kubelet's admission chain: the
// general predicates and, on failure, critical pod preemption.
func TestBalloonThatDoesNotFitIsRejected(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	tCtx := ktesting.Init(t)
	workload := requestingCPU("workload", metav1.NamespaceDefault, "800m")
	workload.Spec.Priority = ptr.To[int32](0)
	pods := []*v1.Pod{workload}
	var preempted []string
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		preempted = append(preempted, pod.Name)
		return nil
	}
	node := &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("1"),
		v1.ResourceMemory: resource.MustParse("1Gi"),
		v1.ResourcePods:   resource.MustParse("10"),
	}}}
	admit := lifecycle.NewPredicateAdmitHandler(
		func(context.Context, bool) (*v1.Node, error) { return node, nil },
		preemption.NewCriticalPodAdmissionHandler(func() []*v1.Pod { return pods }, kill, record.NewFakeRecorder(10)),
		func(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error { return nil },
	)
	balloon := func(cpu string) *v1.Pod {
		pod := requestingCPU("balloon", metav1.NamespaceSystem, cpu)
		pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
		pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
		pod.Spec.Priority = ptr.To(scheduling.SystemCriticalPriority + 1000)
		return pod
	}

	result := admit.Admit(tCtx, &lifecycle.PodAdmitAttributes{Pod: balloon("500m"), OtherPods: pods, Operation: lifecycle.AddOperation})
	if result.Admit || result.Reason != lifecycle.OutOfCPU {
		t.Errorf("want the balloon rejected with %s, got %+v", lifecycle.OutOfCPU, result)
	}
	if len(preempted) != 0 {
		t.Errorf("admitting a balloon preempted %v", preempted)
	}

	// A critical pod of the same priority in the same place is admitted by preemption.
	critical := balloon("500m")
	critical.Spec.PriorityClassName = scheduling.SystemNodeCritical
	if result := admit.Admit(tCtx, &lifecycle.PodAdmitAttributes{Pod: critical, OtherPods: pods, Operation: lifecycle.AddOperation}); !result.Admit || len(preempted) != 1 {
		t.Errorf("want the system-node-critical pod admitted by preempting the workload, got %+v, preempted %v", result, preempted)
	}

	if result := admit.Admit(tCtx, &lifecycle.PodAdmitAttributes{Pod: balloon("100m"), OtherPods: pods, Operation: lifecycle.AddOperation}); !result.Admit {
		t.Errorf("want a balloon that fits admitted, got %+v", result)
	}
}
