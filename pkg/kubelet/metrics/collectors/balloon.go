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

var (
	balloonResourceRequestsDesc = metrics.NewDesc(
		metrics.BuildFQName("", kubeletmetrics.KubeletSubsystem, "balloon_resource_requests"),
		"Resources held by balloon pods on this node, as allocated by the kubelet: capacity that does not exist rather than capacity in use.",
		[]string{"resource", "unit"},
		nil,
		metrics.ALPHA,
		"",
	)
	nodeEffectiveAllocatableDesc = metrics.NewDesc(
		metrics.BuildFQName("", kubeletmetrics.KubeletSubsystem, "node_effective_allocatable"),
		"The node's allocatable resources minus those held by balloon pods: the size of the node as its workloads see it.",
		[]string{"resource", "unit"},
		nil,
		metrics.ALPHA,
		"",
	)
)

// balloonResources are the resources that balloons resize, with the units the
// metrics report them in.
var balloonResources = []struct {
	name v1.ResourceName
	unit string
}{
	{v1.ResourceCPU, "core"},
	{v1.ResourceMemory, "byte"},
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
	ch <- balloonResourceRequestsDesc
	ch <- nodeEffectiveAllocatableDesc
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
		ch <- metrics.NewLazyConstMetric(balloonResourceRequestsDesc, metrics.GaugeValue, held[r.name].AsApproximateFloat64(), string(r.name), r.unit)
		ch <- metrics.NewLazyConstMetric(nodeEffectiveAllocatableDesc, metrics.GaugeValue, effective.AsApproximateFloat64(), string(r.name), r.unit)
	}
}
