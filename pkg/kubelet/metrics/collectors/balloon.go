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

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/metrics"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// The metrics carry their unit in the name, as the instrumentation guidelines
// ask: one gauge per resource, cpu in cores and memory in bytes.
var (
	balloonRequestsCPUDesc = metrics.NewDesc(
		metrics.BuildFQName("", kubeletmetrics.KubeletSubsystem, "balloon_requests_cpu_cores"),
		"CPU held by balloon pods on this node, as allocated by the kubelet: capacity that does not exist rather than capacity in use.",
		nil, nil, metrics.ALPHA, "",
	)
	balloonRequestsMemoryDesc = metrics.NewDesc(
		metrics.BuildFQName("", kubeletmetrics.KubeletSubsystem, "balloon_requests_memory_bytes"),
		"Memory held by balloon pods on this node, as allocated by the kubelet: capacity that does not exist rather than capacity in use.",
		nil, nil, metrics.ALPHA, "",
	)
	nodeEffectiveAllocatableCPUDesc = metrics.NewDesc(
		metrics.BuildFQName("", kubeletmetrics.KubeletSubsystem, "node_effective_allocatable_cpu_cores"),
		"The node's allocatable CPU minus that held by balloon pods, and never below zero: the size of the node as its workloads see it.",
		nil, nil, metrics.ALPHA, "",
	)
	nodeEffectiveAllocatableMemoryDesc = metrics.NewDesc(
		metrics.BuildFQName("", kubeletmetrics.KubeletSubsystem, "node_effective_allocatable_memory_bytes"),
		"The node's allocatable memory minus that held by balloon pods, and never below zero: the size of the node as its workloads see it.",
		nil, nil, metrics.ALPHA, "",
	)
)

// balloonResources are the resources that balloons resize, with their gauges.
var balloonResources = []struct {
	name                v1.ResourceName
	requests, effective *metrics.Desc
}{
	{v1.ResourceCPU, balloonRequestsCPUDesc, nodeEffectiveAllocatableCPUDesc},
	{v1.ResourceMemory, balloonRequestsMemoryDesc, nodeEffectiveAllocatableMemoryDesc},
}

type balloonCollector struct {
	metrics.BaseStableCollector
	allocatedPods func() []*v1.Pod
	node          func(context.Context) (*v1.Node, error)
}

// NewBalloonCollector returns a collector of the resources held by balloon
// pods and of the node's effective allocatable, so that monitoring can tell
// capacity that does not exist from capacity in use. allocatedPods returns the
// active pods with their allocated resources.
func NewBalloonCollector(allocatedPods func() []*v1.Pod, node func(context.Context) (*v1.Node, error)) metrics.StableCollector {
	return &balloonCollector{allocatedPods: allocatedPods, node: node}
}

func (c *balloonCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, r := range balloonResources {
		ch <- r.requests
		ch <- r.effective
	}
}

func (c *balloonCollector) CollectWithStability(ch chan<- metrics.Metric) {
	node, err := c.node(context.TODO())
	if err != nil {
		klog.V(4).InfoS("Cannot collect balloon metrics without the node", "err", err)
		return
	}
	held := make(map[v1.ResourceName]*resource.Quantity, len(balloonResources))
	for _, r := range balloonResources {
		held[r.name] = resource.NewQuantity(0, resource.DecimalSI)
	}
	for _, pod := range c.allocatedPods() {
		if !kubetypes.IsBalloonPod(pod) {
			continue
		}
		requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		for _, r := range balloonResources {
			held[r.name].Add(requests[r.name])
		}
	}
	for _, r := range balloonResources {
		effective := node.Status.Allocatable[r.name]
		effective.Sub(*held[r.name])
		// Balloons can hold more than a node whose allocatable shrank; it
		// then has nothing left for workloads, not a negative size.
		if effective.Sign() < 0 {
			effective = resource.Quantity{}
		}
		ch <- metrics.NewLazyConstMetric(r.requests, metrics.GaugeValue, held[r.name].AsApproximateFloat64())
		ch <- metrics.NewLazyConstMetric(r.effective, metrics.GaugeValue, effective.AsApproximateFloat64())
	}
}
