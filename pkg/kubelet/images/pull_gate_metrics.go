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

package images

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
)

// Metrics of the image pull gate (KubeletImagePullGate).
var (
	pullGateInFlight = metrics.NewGauge(
		&metrics.GaugeOpts{
			Subsystem:      kubeletmetrics.KubeletSubsystem,
			Name:           "image_pull_gate_in_flight",
			Help:           "Number of image pulls the kubelet's pull gate has handed to the container runtime and that have not finished.",
			StabilityLevel: metrics.ALPHA,
		},
	)
	pullGateQueued = metrics.NewGauge(
		&metrics.GaugeOpts{
			Subsystem:      kubeletmetrics.KubeletSubsystem,
			Name:           "image_pull_gate_queued",
			Help:           "Number of image pulls waiting for one of the maxParallelImagePulls slots.",
			StabilityLevel: metrics.ALPHA,
		},
	)
	pullGateSlotWait = metrics.NewHistogram(
		&metrics.HistogramOpts{
			Subsystem:      kubeletmetrics.KubeletSubsystem,
			Name:           "image_pull_gate_slot_wait_duration_seconds",
			Help:           "Time image pulls waited for one of the maxParallelImagePulls slots, whether they got one, timed out or were cancelled.",
			Buckets:        metrics.ExponentialBuckets(0.001, 4, 10),
			StabilityLevel: metrics.ALPHA,
		},
	)
	pullGateDeduplicated = metrics.NewCounter(
		&metrics.CounterOpts{
			Subsystem:      kubeletmetrics.KubeletSubsystem,
			Name:           "image_pull_gate_deduplicated_total",
			Help:           "Number of image pull requests that joined a pull of the same image, runtime handler and credentials instead of starting their own.",
			StabilityLevel: metrics.ALPHA,
		},
	)
	pullGateCancelledWaits = metrics.NewCounter(
		&metrics.CounterOpts{
			Subsystem:      kubeletmetrics.KubeletSubsystem,
			Name:           "image_pull_gate_cancelled_waits_total",
			Help:           "Number of image pull requests abandoned before the pull finished, because their pod was terminated or deleted.",
			StabilityLevel: metrics.ALPHA,
		},
	)
	pullGateQueueTimeouts = metrics.NewCounter(
		&metrics.CounterOpts{
			Subsystem:      kubeletmetrics.KubeletSubsystem,
			Name:           "image_pull_gate_queue_timeouts_total",
			Help:           "Number of image pulls that failed because they waited longer than imagePullQueueTimeout for a slot.",
			StabilityLevel: metrics.ALPHA,
		},
	)
)

func init() {
	legacyregistry.MustRegister(pullGateInFlight, pullGateQueued, pullGateSlotWait,
		pullGateDeduplicated, pullGateCancelledWaits, pullGateQueueTimeouts)
}
