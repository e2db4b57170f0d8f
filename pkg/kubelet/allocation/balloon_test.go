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

package allocation

import (
	"context"
	goruntime "runtime"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/config"
	containertest "k8s.io/kubernetes/pkg/kubelet/container/testing"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubepod "k8s.io/kubernetes/pkg/kubelet/pod"
	"k8s.io/kubernetes/pkg/kubelet/preemption"
	"k8s.io/kubernetes/pkg/kubelet/status"
	statustest "k8s.io/kubernetes/pkg/kubelet/status/testing"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/utils/ptr"
)

// balloonNode is a node of 4 cpu and 4Gi memory.
type balloonNode struct {
	pods      []*v1.Pod
	manager   Manager
	status    status.Manager
	recorder  *record.FakeRecorder
	preempted []string
	ctx       context.Context
	// usageRetries are the retries the usage check scheduled (withUsageCheck).
	usageRetries *scheduledRetries
}

// newBalloonNode admits pods at their spec resources and wires the kubelet's
// real admission chain: the resize handler, then the predicate handler with
// critical pod preemption on failure.
func newBalloonNode(t *testing.T, pods ...*v1.Pod) *balloonNode {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	n := &balloonNode{pods: pods, recorder: record.NewFakeRecorder(100), ctx: ctx}
	n.status = status.NewManager(&fake.Clientset{}, kubepod.NewBasicPodManager(), &statustest.FakePodDeletionSafetyProvider{}, kubeletutil.NewPodStartupLatencyTracker())
	getPods := func() []*v1.Pod { return n.pods }
	n.manager = NewInMemoryManager(logger, n.status, func(context.Context, *v1.Pod) {}, getPods,
		func(uid types.UID) (*v1.Pod, bool) {
			for _, p := range n.pods {
				if p.UID == uid {
					return p, true
				}
			}
			return nil, false
		},
		config.NewSourcesReady(func(sets.Set[string]) bool { return true }),
		n.recorder,
	)
	runtime := &containertest.FakeRuntime{}
	getNode := func(context.Context, bool) (*v1.Node, error) {
		return &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("4"),
			v1.ResourceMemory: resource.MustParse("4Gi"),
			v1.ResourcePods:   resource.MustParse("40"),
		}}}, nil
	}
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		n.preempted = append(n.preempted, pod.Name)
		return nil
	}
	containerManager := cm.NewFakeContainerManager(logger)
	n.manager.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{
		NewPodResizesAdmitHandler(containerManager, runtime, n.manager),
		lifecycle.NewPredicateAdmitHandler(getNode, preemption.NewCriticalPodAdmissionHandler(getPods, kill, n.recorder), containerManager.UpdatePluginResources),
	})
	for _, pod := range pods {
		if err := n.manager.SetAllocatedResources(logger, pod); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// resize asks for new requests of the pod's only container and lets the
// manager evaluate every pending resize, as the kubelet does on a pod update.
func (n *balloonNode) resize(pod *v1.Pod, cpu, memory string) {
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(cpu),
		v1.ResourceMemory: resource.MustParse(memory),
	}
	pod.Generation++
	n.manager.PushPendingResize(klog.FromContext(n.ctx), pod.UID)
}

func (n *balloonNode) allocatedCPU(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	alloc, ok := n.manager.GetContainerResourceAllocation(pod.UID, pod.Spec.Containers[0].Name)
	if !ok {
		t.Fatalf("no allocation for %s", pod.Name)
	}
	return alloc.Requests.Cpu().String()
}

func (n *balloonNode) pendingCondition(pod *v1.Pod) *v1.PodCondition {
	for _, c := range n.status.GetPodResizeConditions(pod.UID) {
		if c.Type == v1.PodResizePending {
			return c
		}
	}
	return nil
}

func (n *balloonNode) events() string {
	var all []string
	for len(n.recorder.Events) > 0 {
		all = append(all, <-n.recorder.Events)
	}
	return strings.Join(all, "\n")
}

func balloonTestPod(name, namespace, priorityClass string, priority int32, cpu, memory string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(name), Generation: 1},
		Spec: v1.PodSpec{
			PriorityClassName: priorityClass,
			Priority:          ptr.To(priority),
			Containers: []v1.Container{{
				Name:  "c",
				Image: "pause",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
					v1.ResourceCPU:    resource.MustParse(cpu),
					v1.ResourceMemory: resource.MustParse(memory),
				}},
			}},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
}

func newBalloon(cpu, memory string) *v1.Pod {
	pod := balloonTestPod("balloon", metav1.NamespaceSystem, scheduling.SystemNodeBalloon, scheduling.SystemCriticalPriority+1000, cpu, memory)
	pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
	return pod
}

func newWorkload(name, cpu, memory string) *v1.Pod {
	return balloonTestPod(name, "default", "", 0, cpu, memory)
}

func TestBalloonUpsizeNeverPreempts(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	// KEP-5836 moves resize preemption to the scheduler: with its gate on the kubelet
	// never preempts for a resize, balloon or not; the balloon's guard still holds.
	for _, enabled := range []bool{true, false} {
		for _, schedulerPreemption := range []bool{false, true} {
			name := "BalloonPod=" + map[bool]string{true: "on", false: "off"}[enabled] +
				"/InPlacePodVerticalScalingSchedulerPreemption=" + map[bool]string{true: "on", false: "off"}[schedulerPreemption]
			t.Run(name, func(t *testing.T) {
				featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
					features.BalloonPod: enabled,
					features.InPlacePodVerticalScalingSchedulerPreemption: schedulerPreemption,
				})
				balloon, workload := newBalloon("1", "1Gi"), newWorkload("busy", "2", "1Gi")
				n := newBalloonNode(t, balloon, workload)

				n.resize(balloon, "3", "1Gi")
				n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)

				if !enabled {
					if schedulerPreemption {
						// Upstream with KEP-5836: the kubelet defers the resize and leaves preemption to the scheduler.
						if len(n.preempted) != 0 {
							t.Fatalf("with resize preemption in the scheduler, the kubelet preempted %v", n.preempted)
						}
						return
					}
					// Upstream: the balloon is just a critical pod and preempts the workload (#139996).
					if len(n.preempted) != 1 || n.preempted[0] != "busy" {
						t.Fatalf("with the gate off, expected the critical pod's resize to preempt busy, preempted %v", n.preempted)
					}
					return
				}
				if len(n.preempted) != 0 {
					t.Fatalf("a balloon upsize preempted %v", n.preempted)
				}
				if got := n.allocatedCPU(t, balloon); got != "1" {
					t.Errorf("balloon allocated cpu = %s, want it unchanged at 1", got)
				}
				c := n.pendingCondition(balloon)
				if c == nil || c.Reason != v1.PodReasonDeferred {
					t.Fatalf("want a Deferred PodResizePending condition, got %+v", c)
				}
				if !strings.Contains(c.Message, "Node didn't have enough resource: cpu") || !strings.Contains(c.Message, "never preempts running pods") {
					t.Errorf("the Deferred message does not say why: %q", c.Message)
				}
				if ev := n.events(); !strings.Contains(ev, events.ResizeDeferred) || !strings.Contains(ev, "never preempts running pods") {
					t.Errorf("want a %s event that says why, got %q", events.ResizeDeferred, ev)
				}
				if !n.manager.HasPendingResizes() {
					t.Error("the deferred balloon upsize must stay pending for a retry")
				}
			})
		}
	}
}

func TestBalloonDownsizeFreesCapacityForWaitingWork(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	balloon, workload := newBalloon("2500m", "1Gi"), newWorkload("busy", "1", "1Gi")
	n := newBalloonNode(t, balloon, workload)

	// The workload wants to grow into capacity the balloon holds: deferred.
	n.resize(workload, "2", "1Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	if c := n.pendingCondition(workload); c == nil || c.Reason != v1.PodReasonDeferred {
		t.Fatalf("want the workload upsize deferred, got %+v", c)
	}

	// The balloon shrinks: its downsize and the waiting upsize are both allocated in one pass.
	n.resize(balloon, "500m", "1Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	if got := n.allocatedCPU(t, balloon); got != "500m" {
		t.Errorf("balloon allocated cpu = %s, want 500m", got)
	}
	if got := n.allocatedCPU(t, workload); got != "2" {
		t.Errorf("workload allocated cpu = %s, want 2 after the balloon shrank", got)
	}
	if n.manager.HasPendingResizes() {
		t.Error("no resize should be pending")
	}

	// A new pod is admitted into what is left.
	if ok, reason, msg := n.manager.AddPod(n.ctx, n.pods, newWorkload("new", "1500m", "1Gi")); !ok {
		t.Errorf("a new pod that fits after the downsize was rejected: %s: %s", reason, msg)
	}
}

func TestWaitingWorkGoesBeforeBalloonUpsize(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	balloon, workload := newBalloon("1", "1Gi"), newWorkload("busy", "1", "1Gi")
	n := newBalloonNode(t, balloon, workload, newWorkload("leaving", "1", "1Gi"), newWorkload("staying", "1", "1Gi"))

	n.resize(balloon, "2", "1Gi")
	n.resize(workload, "2", "1Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	if len(n.preempted) != 0 {
		t.Fatalf("resizes preempted %v", n.preempted)
	}

	// One cpu is freed: the workload's resize gets it, the balloon keeps waiting.
	n.pods = append(n.pods[:2], n.pods[3])
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodsRemoved)
	if got := n.allocatedCPU(t, workload); got != "2" {
		t.Errorf("workload allocated cpu = %s, want 2", got)
	}
	if got := n.allocatedCPU(t, balloon); got != "1" {
		t.Errorf("balloon allocated cpu = %s, want 1 (the freed cpu goes to the waiting workload)", got)
	}
	if c := n.pendingCondition(balloon); c == nil || c.Reason != v1.PodReasonDeferred {
		t.Errorf("want the balloon upsize still deferred, got %+v", c)
	}
}

func TestCriticalResizeNeverPreemptsBalloon(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	for _, schedulerPreemption := range []bool{false, true} {
		t.Run("InPlacePodVerticalScalingSchedulerPreemption="+map[bool]string{true: "on", false: "off"}[schedulerPreemption], func(t *testing.T) {
			featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
				features.BalloonPod: true,
				features.InPlacePodVerticalScalingSchedulerPreemption: schedulerPreemption,
			})
			balloon := newBalloon("2", "1Gi")
			critical := balloonTestPod("critical", metav1.NamespaceSystem, scheduling.SystemNodeCritical, scheduling.SystemCriticalPriority+1000, "1", "1Gi")
			fakeBalloon := newWorkload("fake-balloon", "1", "1Gi")
			fakeBalloon.Labels = map[string]string{v1.LabelBalloonPod: "true"}
			n := newBalloonNode(t, balloon, critical, fakeBalloon)

			n.resize(critical, "2", "1Gi")
			n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)

			if got := n.allocatedCPU(t, balloon); got != "2" {
				t.Errorf("balloon allocated cpu = %s, want 2", got)
			}
			if schedulerPreemption {
				// The kubelet defers the resize; the scheduler, which never picks the
				// balloon (the highest priority there is), preempts if anyone does.
				if len(n.preempted) != 0 {
					t.Fatalf("preempted %v, want nothing: the scheduler owns resize preemption", n.preempted)
				}
				return
			}
			// The label alone grants nothing: the fake balloon is preempted, the real one never.
			if len(n.preempted) != 1 || n.preempted[0] != "fake-balloon" {
				t.Fatalf("preempted %v, want only fake-balloon", n.preempted)
			}
		})
	}
}
