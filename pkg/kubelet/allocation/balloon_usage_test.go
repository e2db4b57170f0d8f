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
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/features"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// memoryUsage is what the eviction manager's last summary says the node and
// its pods use.
type memoryUsage struct {
	nodeAvailable, nodeWorkingSet string
	pods                          map[*v1.Pod]string
	// unobserved: the eviction manager has not observed the node yet.
	unobserved bool
	// age is how old the summary is.
	age time.Duration
}

// usageClock is the time the usage check runs at.
var usageClock = testingclock.NewFakePassiveClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))

// scheduledRetries is the usage check's clock: it keeps what the check
// schedules for the test to run, in order, where a fake clock's Step would run
// it under the clock's lock.
type scheduledRetries struct {
	*testingclock.FakePassiveClock
	delays []time.Duration
	funcs  []func()
}

func (c *scheduledRetries) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.delays = append(c.delays, d)
	c.funcs = append(c.funcs, f)
	return nil
}

func (c *scheduledRetries) After(time.Duration) <-chan time.Time { panic("not used") }
func (c *scheduledRetries) NewTimer(time.Duration) clock.Timer   { panic("not used") }
func (c *scheduledRetries) Sleep(time.Duration)                  { panic("not used") }
func (c *scheduledRetries) Tick(time.Duration) <-chan time.Time  { panic("not used") }

func (u *memoryUsage) summary() *statsapi.Summary {
	if u.unobserved {
		return nil
	}
	bytes := func(q string) *uint64 { v := resource.MustParse(q); return ptr.To(uint64(v.Value())) }
	s := &statsapi.Summary{Node: statsapi.NodeStats{Memory: &statsapi.MemoryStats{
		Time:            metav1.NewTime(usageClock.Now().Add(-u.age)),
		AvailableBytes:  bytes(u.nodeAvailable),
		WorkingSetBytes: bytes(u.nodeWorkingSet),
	}}}
	for pod, ws := range u.pods {
		s.Pods = append(s.Pods, statsapi.PodStats{
			PodRef: statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			Memory: &statsapi.MemoryStats{WorkingSetBytes: bytes(ws)},
		})
	}
	return s
}

// withUsageCheck adds the usage-aware balloon check after the node's admission
// chain, as the kubelet does, with a hard memory.available threshold of 500Mi.
func (n *balloonNode) withUsageCheck(usage *memoryUsage) *balloonNode {
	getNode := func(context.Context, bool) (*v1.Node, error) {
		return &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourceMemory: resource.MustParse("4Gi")}}}, nil
	}
	thresholds := []evictionapi.Threshold{
		{Signal: evictionapi.SignalMemoryAvailable, Operator: evictionapi.OpLessThan, Value: evictionapi.ThresholdValue{Quantity: ptr.To(resource.MustParse("500Mi"))}},
		// A soft threshold decides nothing here.
		{Signal: evictionapi.SignalMemoryAvailable, Operator: evictionapi.OpLessThan, Value: evictionapi.ThresholdValue{Quantity: ptr.To(resource.MustParse("3Gi"))}, GracePeriod: 60e9},
	}
	n.usageRetries = &scheduledRetries{FakePassiveClock: usageClock}
	n.manager.AddPodAdmitHandlers(lifecycle.PodAdmitHandlers{NewBalloonUsageAdmitHandler(n.manager, usage.summary, getNode, thresholds, n.usageRetries)})
	return n
}

func (n *balloonNode) allocatedMemory(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	alloc, ok := n.manager.GetContainerResourceAllocation(pod.UID, pod.Spec.Containers[0].Name)
	if !ok {
		t.Fatalf("no allocation for %s", pod.Name)
	}
	return alloc.Requests.Memory().String()
}

func TestBalloonUpsizeRespectsMemoryUsage(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	// The node has 4Gi allocatable; the balloon holds 1Gi and a Burstable pod requests 1Gi.
	for _, tc := range []struct {
		name       string
		gate       bool
		usage      memoryUsage
		to         string
		wantMemory string
		wantMsg    string
	}{{
		name:       "fits requests but not the burstable pod's usage",
		gate:       true,
		usage:      memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "2500Mi"}},
		to:         "2Gi",
		wantMemory: "1Gi",
		wantMsg:    "memory in use: the working set of the node's pods and the memory its balloons would hold exceed the node's allocatable memory",
	}, {
		name:       "fits requests and usage",
		gate:       true,
		usage:      memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "1500Mi"}},
		to:         "2Gi",
		wantMemory: "2Gi",
	}, {
		name:       "fits the node's pods but would cross the hard eviction threshold",
		gate:       true,
		usage:      memoryUsage{nodeAvailable: "1Gi", nodeWorkingSet: "7Gi", pods: map[*v1.Pod]string{nil: "500Mi"}},
		to:         "2Gi",
		wantMemory: "1Gi",
		wantMsg:    "memory in use: growing the balloon would take memory.available below the hard eviction threshold",
	}, {
		name:       "usage not observed yet",
		gate:       true,
		usage:      memoryUsage{unobserved: true},
		to:         "2Gi",
		wantMemory: "1Gi",
		wantMsg:    "the node's memory usage is not known yet",
	}, {
		// A summary without the pod's usage would count it as using nothing.
		name:       "usage of the burstable pod missing from the summary",
		gate:       true,
		usage:      memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{}},
		to:         "2Gi",
		wantMemory: "1Gi",
		wantMsg:    "the memory usage of some of the node's pods is not known yet",
	}, {
		name:       "usage older than the bound",
		gate:       true,
		usage:      memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "1500Mi"}, age: time.Minute},
		to:         "2Gi",
		wantMemory: "1Gi",
		wantMsg:    "the node's memory usage is older than 30s",
	}, {
		name:       "a downsize is never held back by usage",
		gate:       true,
		usage:      memoryUsage{nodeAvailable: "100Mi", nodeWorkingSet: "8Gi", pods: map[*v1.Pod]string{nil: "4Gi"}},
		to:         "512Mi",
		wantMemory: "512Mi",
	}, {
		name:       "gate off: requests decide, as upstream",
		gate:       false,
		usage:      memoryUsage{nodeAvailable: "1Gi", nodeWorkingSet: "7Gi", pods: map[*v1.Pod]string{nil: "2500Mi"}},
		to:         "2Gi",
		wantMemory: "2Gi",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, tc.gate)
			balloon, workload := newBalloon("100m", "1Gi"), newWorkload("burstable", "100m", "1Gi")
			usage := tc.usage
			if ws, ok := usage.pods[nil]; ok {
				// The balloon's own working set is not usage that its growth would displace.
				usage.pods = map[*v1.Pod]string{workload: ws, balloon: "1Gi"}
			}
			n := newBalloonNode(t, balloon, workload).withUsageCheck(&usage)

			n.resize(balloon, "100m", tc.to)
			n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)

			if len(n.preempted) != 0 {
				t.Fatalf("the resize preempted %v", n.preempted)
			}
			if got := n.allocatedMemory(t, balloon); got != tc.wantMemory {
				t.Errorf("balloon allocated memory = %s, want %s", got, tc.wantMemory)
			}
			c := n.pendingCondition(balloon)
			if tc.wantMsg == "" {
				if c != nil {
					t.Errorf("want the resize admitted, got %+v", c)
				}
				return
			}
			if c == nil || c.Reason != v1.PodReasonDeferred {
				t.Fatalf("want a Deferred PodResizePending condition, got %+v", c)
			}
			// Preemption would not have made room for usage: the message
			// says what the balloon waits for, not that it never preempts.
			if c.Message != tc.wantMsg {
				t.Errorf("Deferred message = %q, want %q", c.Message, tc.wantMsg)
			}
			if !n.manager.HasPendingResizes() {
				t.Error("the deferred balloon upsize must stay pending for a retry")
			}
		})
	}
}

// The Deferred message says why, not by how much: a retry whose numbers
// changed writes the same condition, so no new status write and no new event.
func TestBalloonUpsizeDeferredMessageIsStable(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	balloon, workload := newBalloon("100m", "1Gi"), newWorkload("besteffort", "0", "0")
	workload.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	usage := &memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{workload: "3Gi", balloon: "1Gi"}}
	n := newBalloonNode(t, balloon, workload).withUsageCheck(usage)

	n.resize(balloon, "100m", "2Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	first := n.pendingCondition(balloon)
	usage.pods[workload] = "3500Mi"
	n.manager.RetryPendingResizes(n.ctx, triggerReasonPeriodic)
	second := n.pendingCondition(balloon)
	if first == nil || second == nil || first.Reason != v1.PodReasonDeferred || first.Message != second.Message {
		t.Errorf("Deferred conditions %+v and %+v: want the same message after the usage changed", first, second)
	}
}

func TestBalloonUpsizeDeferredByUsageAppliesOnRetry(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	balloon, workload := newBalloon("100m", "1Gi"), newWorkload("besteffort", "0", "0")
	workload.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	usage := &memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{workload: "3Gi"}}
	n := newBalloonNode(t, balloon, workload).withUsageCheck(usage)

	n.resize(balloon, "100m", "2Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	if c := n.pendingCondition(balloon); c == nil || c.Reason != v1.PodReasonDeferred {
		t.Fatalf("a BestEffort pod's usage must defer the upsize, got %+v", c)
	}
	if len(n.usageRetries.funcs) != 0 {
		t.Error("usage that was observed defers the upsize to the allocation manager's retries, no sooner one")
	}

	// The pod's usage falls: the periodic retry applies the upsize.
	usage.pods[workload] = "1Gi"
	n.manager.RetryPendingResizes(n.ctx, triggerReasonPeriodic)
	if got := n.allocatedMemory(t, balloon); got != "2Gi" {
		t.Errorf("balloon allocated memory = %s, want 2Gi once usage allows it", got)
	}
	if n.manager.HasPendingResizes() {
		t.Error("no resize should be pending")
	}
}

// A balloon created at a recorded size is checked as an upsize from nothing
// would be: before, it was admitted on requests alone, and the pods using the
// memory it took were evicted.
func TestNewBalloonRespectsMemoryUsage(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	// The node has 4Gi allocatable; a BestEffort pod uses 3Gi.
	for _, tc := range []struct {
		name       string
		gate       bool
		memory     string
		usage      memoryUsage
		restarted  bool
		wantReason string
		wantMsg    string
	}{{
		name:       "the workload's usage leaves no room",
		gate:       true,
		memory:     "2Gi",
		usage:      memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "3Gi"}},
		wantReason: BalloonMemoryInUse,
		wantMsg:    "memory in use: the working set of the node's pods and the memory its balloons would hold exceed the node's allocatable memory",
	}, {
		name:   "the workload's usage leaves room",
		gate:   true,
		memory: "512Mi",
		usage:  memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "3Gi"}},
	}, {
		name:       "usage not observed yet",
		gate:       true,
		memory:     "512Mi",
		usage:      memoryUsage{unobserved: true},
		wantReason: BalloonMemoryInUse,
		wantMsg:    "the node's memory usage is not known yet",
	}, {
		name:       "usage older than the bound",
		gate:       true,
		memory:     "512Mi",
		usage:      memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "1Gi"}, age: time.Minute},
		wantReason: BalloonMemoryInUse,
		wantMsg:    "the node's memory usage is older than 30s",
	}, {
		// The template's size, at a node's start when nothing is observed yet.
		name:   "an unsized balloon",
		gate:   true,
		memory: "1Mi",
		usage:  memoryUsage{unobserved: true},
	}, {
		// A kubelet restart admits the pods it ran again.
		name:      "a balloon the kubelet admitted before",
		gate:      true,
		memory:    "2Gi",
		usage:     memoryUsage{unobserved: true},
		restarted: true,
	}, {
		name:   "gate off: requests decide, as upstream",
		gate:   false,
		memory: "2Gi",
		usage:  memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "3Gi", pods: map[*v1.Pod]string{nil: "3Gi"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, tc.gate)
			workload := newWorkload("besteffort", "0", "0")
			workload.Spec.Containers[0].Resources = v1.ResourceRequirements{}
			balloon := newBalloon("100m", tc.memory)
			usage := tc.usage
			if ws, ok := usage.pods[nil]; ok {
				usage.pods = map[*v1.Pod]string{workload: ws}
			}
			n := newBalloonNode(t, workload).withUsageCheck(&usage)
			if tc.restarted {
				if err := n.manager.SetAllocatedResources(klog.FromContext(n.ctx), balloon); err != nil {
					t.Fatal(err)
				}
			}

			ok, reason, message := n.manager.AddPod(n.ctx, n.pods, balloon)
			if tc.wantReason == "" {
				if !ok {
					t.Errorf("want the balloon admitted, got %s: %s", reason, message)
				}
				return
			}
			if ok || reason != tc.wantReason || message != tc.wantMsg {
				t.Errorf("admitted %v (%s: %q), want rejected with %s: %q", ok, reason, message, tc.wantReason, tc.wantMsg)
			}
			if n.manager.HasPodAllocatedResources(balloon.UID) {
				t.Error("a rejected balloon must not be allocated")
			}
		})
	}
}

// A node's first upsize comes at its start, before the eviction manager has
// observed its usage: the upsize is deferred and tried again one eviction pass
// later, not at the allocation manager's periodic retry minutes later.
func TestBalloonUpsizeWaitsForUsageToBeObserved(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("InPlacePodVerticalScaling is not currently supported for Windows")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	balloon, workload := newBalloon("100m", "1Gi"), newWorkload("besteffort", "0", "0")
	workload.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	usage := &memoryUsage{unobserved: true}
	n := newBalloonNode(t, balloon, workload).withUsageCheck(usage)

	n.resize(balloon, "100m", "2Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	if c := n.pendingCondition(balloon); c == nil || c.Reason != v1.PodReasonDeferred || c.Message != "the node's memory usage is not known yet" {
		t.Fatalf("an upsize before any observation must be deferred, got %+v", c)
	}
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodsAdded)
	retries := n.usageRetries
	if len(retries.funcs) != 1 || retries.delays[0] != balloonUsageRetryDelay {
		t.Fatalf("scheduled retries after %v, want one after %v", retries.delays, balloonUsageRetryDelay)
	}

	// The eviction manager observes: the retry applies the upsize.
	*usage = memoryUsage{nodeAvailable: "10Gi", nodeWorkingSet: "1Gi", pods: map[*v1.Pod]string{workload: "1Gi"}}
	retries.funcs[0]()
	if got := n.allocatedMemory(t, balloon); got != "2Gi" {
		t.Errorf("balloon allocated memory = %s after the usage was observed, want 2Gi", got)
	}
	if n.manager.HasPendingResizes() {
		t.Error("no resize should be pending")
	}

	// A retry that finds the usage still unobserved schedules the next one.
	*usage = memoryUsage{unobserved: true}
	n.resize(balloon, "100m", "3Gi")
	n.manager.RetryPendingResizes(n.ctx, TriggerReasonPodUpdated)
	if len(retries.funcs) != 2 {
		t.Errorf("scheduled %d retries, want a second one once the first ran", len(retries.funcs))
	}
}
