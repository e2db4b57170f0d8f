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

package collectors

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

func balloonMetricsPod(name string, balloon, labelOnly bool, cpu, memory string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "c",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceCPU:    resource.MustParse(cpu),
				v1.ResourceMemory: resource.MustParse(memory),
			}},
		}}},
	}
	if balloon || labelOnly {
		pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
	}
	if balloon {
		pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
	}
	return pod
}

func TestBalloonCollector(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	node := &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("4"),
		v1.ResourceMemory: resource.MustParse("8Gi"),
	}}}
	pods := []*v1.Pod{
		balloonMetricsPod("balloon-a", true, false, "1500m", "2Gi"),
		balloonMetricsPod("balloon-b", true, false, "500m", "1Gi"),
		balloonMetricsPod("fake", false, true, "1", "1Gi"),
		balloonMetricsPod("workload", false, false, "1", "1Gi"),
	}
	collector := NewBalloonCollector(func() []*v1.Pod { return pods }, func(context.Context) (*v1.Node, error) { return node, nil })
	want := `
		# HELP kubelet_balloon_requests_cpu_cores [ALPHA] CPU held by balloon pods on this node, as allocated by the kubelet: capacity that does not exist rather than capacity in use.
		# TYPE kubelet_balloon_requests_cpu_cores gauge
		kubelet_balloon_requests_cpu_cores 2
		# HELP kubelet_balloon_requests_memory_bytes [ALPHA] Memory held by balloon pods on this node, as allocated by the kubelet: capacity that does not exist rather than capacity in use.
		# TYPE kubelet_balloon_requests_memory_bytes gauge
		kubelet_balloon_requests_memory_bytes 3.221225472e+09
		# HELP kubelet_node_effective_allocatable_cpu_cores [ALPHA] The node's allocatable CPU minus that held by balloon pods, and never below zero: the size of the node as its workloads see it.
		# TYPE kubelet_node_effective_allocatable_cpu_cores gauge
		kubelet_node_effective_allocatable_cpu_cores 2
		# HELP kubelet_node_effective_allocatable_memory_bytes [ALPHA] The node's allocatable memory minus that held by balloon pods, and never below zero: the size of the node as its workloads see it.
		# TYPE kubelet_node_effective_allocatable_memory_bytes gauge
		kubelet_node_effective_allocatable_memory_bytes 5.36870912e+09
	`
	if err := testutil.CustomCollectAndCompare(collector, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// Balloons that hold more than the node's allocatable (it shrank under them)
// leave workloads nothing, not a negative size.
func TestBalloonCollectorEffectiveNeverNegative(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	node := &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("1"),
		v1.ResourceMemory: resource.MustParse("1Gi"),
	}}}
	pods := []*v1.Pod{balloonMetricsPod("balloon", true, false, "1500m", "2Gi")}
	collector := NewBalloonCollector(func() []*v1.Pod { return pods }, func(context.Context) (*v1.Node, error) { return node, nil })
	want := `
		# HELP kubelet_node_effective_allocatable_cpu_cores [ALPHA] The node's allocatable CPU minus that held by balloon pods, and never below zero: the size of the node as its workloads see it.
		# TYPE kubelet_node_effective_allocatable_cpu_cores gauge
		kubelet_node_effective_allocatable_cpu_cores 0
		# HELP kubelet_node_effective_allocatable_memory_bytes [ALPHA] The node's allocatable memory minus that held by balloon pods, and never below zero: the size of the node as its workloads see it.
		# TYPE kubelet_node_effective_allocatable_memory_bytes gauge
		kubelet_node_effective_allocatable_memory_bytes 0
	`
	if err := testutil.CustomCollectAndCompare(collector, strings.NewReader(want), "kubelet_node_effective_allocatable_cpu_cores", "kubelet_node_effective_allocatable_memory_bytes"); err != nil {
		t.Error(err)
	}
}

func TestBalloonCollectorWithoutNode(t *testing.T) {
	collector := NewBalloonCollector(func() []*v1.Pod { return nil }, func(context.Context) (*v1.Node, error) { return nil, errors.New("no node yet") })
	if err := testutil.CustomCollectAndCompare(collector, strings.NewReader("")); err != nil {
		t.Error(err)
	}
}
