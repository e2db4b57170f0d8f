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
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/features"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/utils/clock"
)

// NewBalloonUsageAdmitHandler returns a PodAdmitHandler that holds back a
// balloon's memory, on its creation and on an upsize, that fits the node's
// requests but not what its pods actually use. Requests alone would let a
// balloon take memory that Burstable and BestEffort pods use above their
// requests, and the eviction manager would then evict them: the reclaim must
// wait instead.
//
// observedUsage returns the eviction manager's last summary, getNode the
// kubelet's node and thresholds its eviction thresholds.
func NewBalloonUsageAdmitHandler(allocationManager Manager, observedUsage func() *statsapi.Summary, getNode func(context.Context, bool) (*v1.Node, error), thresholds []evictionapi.Threshold, clock clock.WithDelayedExecution) lifecycle.PodAdmitHandler {
	return &balloonUsageAdmitHandler{
		allocationManager: allocationManager,
		observedUsage:     observedUsage,
		getNode:           getNode,
		thresholds:        thresholds,
		clock:             clock,
	}
}

type balloonUsageAdmitHandler struct {
	allocationManager Manager
	observedUsage     func() *statsapi.Summary
	getNode           func(context.Context, bool) (*v1.Node, error)
	thresholds        []evictionapi.Threshold
	clock             clock.WithDelayedExecution
	// retryScheduled is set while a retry of the pending resizes is scheduled.
	retryScheduled atomic.Bool
}

// BalloonMemoryInUse is the reason a new balloon is rejected with when the
// node's pods use the memory it would hold.
const BalloonMemoryInUse = "BalloonMemoryInUse"

// Admit holds back a balloon's growth, a new balloon's whole memory request or
// an upsize's increase, when, with the balloon at its new size:
//   - the working set of the node's other pods plus the memory requests of its
//     balloons exceeds the node's allocatable memory, which is capacity less the
//     system and kube reservations and the hard memory.available threshold; or
//   - memory.available less the balloon's growth falls below the hard
//     memory.available eviction threshold.
//
// An upsize is Deferred and retried. A new balloon is rejected: the DaemonSet
// controller creates it again with its backoff, and its node stays tainted
// until a balloon holds the recorded size. A new balloon of the template's
// size (kubetypes.UnsizedBalloonMemory) holds nothing worth checking, and one
// the kubelet admitted before (a kubelet restart) holds its memory already.
//
// The usage is the eviction manager's last observation. Usage it has not made
// yet holds the balloon back too, as does usage older than balloonUsageMaxAge
// and a workload pod whose usage the summary lacks: a reclaim is retried, an
// eviction is not undone. An upsize held back for those reasons only is retried
// after balloonUsageRetryDelay, by when the eviction manager has observed
// again. The message names the cause, not the numbers, so that a retry with
// other numbers writes no new status and no new event; the numbers are logged.
func (h *balloonUsageAdmitHandler) Admit(ctx context.Context, attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	pod := attrs.Pod
	if !kubetypes.IsBalloonPod(pod) {
		return lifecycle.PodAdmitResult{Admit: true}
	}
	growth := podMemoryRequest(pod)
	reason := v1.PodReasonDeferred
	switch attrs.Operation {
	case lifecycle.ResizeOperation:
		allocatedPod, _ := h.allocationManager.UpdatePodFromAllocation(pod)
		growth.Sub(podMemoryRequest(allocatedPod))
	case lifecycle.AddOperation:
		if h.allocationManager.HasPodAllocatedResources(pod.UID) || growth.Cmp(kubetypes.UnsizedBalloonMemory) <= 0 {
			return lifecycle.PodAdmitResult{Admit: true}
		}
		reason = BalloonMemoryInUse
	default:
		return lifecycle.PodAdmitResult{Admit: true}
	}
	if growth.Sign() <= 0 {
		return lifecycle.PodAdmitResult{Admit: true}
	}
	holdBack := func(format string, args ...any) lifecycle.PodAdmitResult {
		return lifecycle.PodAdmitResult{Admit: false, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	// waitForUsage holds the balloon back until the eviction manager's next
	// observation: the allocation manager's own retry of a deferred resize
	// comes minutes later, and a node's first upsize comes at its start, when
	// nothing is observed yet.
	waitForUsage := func(format string, args ...any) lifecycle.PodAdmitResult {
		if attrs.Operation == lifecycle.ResizeOperation {
			h.retrySoon(ctx)
		}
		return holdBack(format, args...)
	}

	summary := h.observedUsage()
	if summary == nil || summary.Node.Memory == nil || summary.Node.Memory.WorkingSetBytes == nil || summary.Node.Memory.AvailableBytes == nil {
		return waitForUsage("the node's memory usage is not known yet")
	}
	if age := h.clock.Since(summary.Node.Memory.Time.Time); age > balloonUsageMaxAge {
		klog.FromContext(ctx).V(2).Info("Holding back a balloon: the node's memory usage is old", "pod", klog.KObj(pod), "age", age)
		return waitForUsage("the node's memory usage is older than %v", balloonUsageMaxAge)
	}
	node, err := h.getNode(ctx, true)
	if err != nil {
		return waitForUsage("the node's allocatable memory is not known (%v)", err)
	}

	balloons := podMemoryRequest(pod)
	workloads := sets.New[types.UID]()
	for _, p := range attrs.OtherPods {
		if kubetypes.IsBalloonPod(p) {
			balloons.Add(podMemoryRequest(p))
		} else {
			workloads.Insert(p.UID)
		}
	}
	inUse := resource.NewQuantity(0, resource.BinarySI)
	for _, ps := range summary.Pods {
		if workloads.Has(types.UID(ps.PodRef.UID)) && ps.Memory != nil && ps.Memory.WorkingSetBytes != nil {
			inUse.Add(*resource.NewQuantity(int64(*ps.Memory.WorkingSetBytes), resource.BinarySI))
			workloads.Delete(types.UID(ps.PodRef.UID))
		}
	}
	if workloads.Len() > 0 {
		// The summary may be partial (cadvisor has not seen a new pod yet):
		// a pod it lacks would count as using nothing.
		klog.FromContext(ctx).V(2).Info("Holding back a balloon: pods without memory usage in the summary", "pod", klog.KObj(pod), "pods", sets.List(workloads))
		return waitForUsage("the memory usage of some of the node's pods is not known yet")
	}
	allocatable := node.Status.Allocatable.Memory()
	needed := inUse.DeepCopy()
	needed.Add(balloons)
	if needed.Cmp(*allocatable) > 0 {
		klog.FromContext(ctx).V(2).Info("Holding back a balloon: memory in use", "pod", klog.KObj(pod), "workingSet", inUse, "balloons", &balloons, "allocatable", allocatable)
		return holdBack("memory in use: the working set of the node's pods and the memory its balloons would hold exceed the node's allocatable memory")
	}

	available := resource.NewQuantity(int64(*summary.Node.Memory.AvailableBytes), resource.BinarySI)
	capacity := resource.NewQuantity(int64(*summary.Node.Memory.AvailableBytes+*summary.Node.Memory.WorkingSetBytes), resource.BinarySI)
	for _, t := range h.thresholds {
		if t.Signal != evictionapi.SignalMemoryAvailable || t.GracePeriod != 0 {
			continue
		}
		left := available.DeepCopy()
		left.Sub(growth)
		if threshold := evictionapi.GetThresholdQuantity(t.Value, capacity); left.Cmp(*threshold) < 0 {
			klog.FromContext(ctx).V(2).Info("Holding back a balloon: memory.available", "pod", klog.KObj(pod), "available", available, "growth", &growth, "left", &left, "threshold", threshold)
			return holdBack("memory in use: growing the balloon would take memory.available below the hard eviction threshold")
		}
	}
	return lifecycle.PodAdmitResult{Admit: true}
}

const (
	// balloonUsageMaxAge is the oldest memory usage a balloon is admitted on:
	// the eviction manager observes every 10 seconds.
	balloonUsageMaxAge = 30 * time.Second
	// balloonUsageRetryDelay is when an upsize held back for usage not observed
	// yet is tried again: one pass of the eviction manager later.
	balloonUsageRetryDelay = 10 * time.Second

	triggerReasonBalloonUsage = "balloon_usage"
)

// retrySoon schedules one retry of the pending resizes after
// balloonUsageRetryDelay, unless one is scheduled already. It runs under the
// allocation manager's lock; the retry takes it on a goroutine of its own.
func (h *balloonUsageAdmitHandler) retrySoon(ctx context.Context) {
	if !h.retryScheduled.CompareAndSwap(false, true) {
		return
	}
	h.clock.AfterFunc(balloonUsageRetryDelay, func() {
		h.retryScheduled.Store(false)
		h.allocationManager.RetryPendingResizes(ctx, triggerReasonBalloonUsage)
	})
}

func podMemoryRequest(pod *v1.Pod) resource.Quantity {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		SkipPodLevelResources: !utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResources),
	})
	return requests.Memory().DeepCopy()
}
