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

package eviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/features"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/test/utils/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// The balloon usage check reads what the last pass observed, and only with
// the gate on does the manager keep it.
func TestObservedSummaryIsKeptWithTheGate(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		t.Run(map[bool]string{true: "BalloonPod=on", false: "BalloonPod=off"}[enabled], func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, enabled)
			tCtx := ktesting.Init(t)
			pod, podStats := makePodWithMemoryStats("workload", defaultPriority, newResourceList("", "100Mi", ""), newResourceList("", "", ""), "200Mi")
			summary := makeMemoryStats("3Gi", map[*v1.Pod]statsapi.PodStats{pod: podStats})
			manager := &managerImpl{
				clock:       testingclock.NewFakeClock(time.Now()),
				killPodFunc: func(*v1.Pod, bool, *int64, func(*v1.PodStatus)) error { return nil },
				imageGC:     &mockDiskGC{},
				containerGC: &mockDiskGC{},
				config: Config{PressureTransitionPeriod: time.Minute, Thresholds: []evictionapi.Threshold{{
					Signal:   evictionapi.SignalMemoryAvailable,
					Operator: evictionapi.OpLessThan,
					Value:    evictionapi.ThresholdValue{Quantity: quantityMustParse("1Gi")},
				}}},
				recorder:                     &record.FakeRecorder{},
				summaryProvider:              &fakeSummaryProvider{result: summary},
				nodeRef:                      &v1.ObjectReference{Kind: "Node", Name: "test", UID: types.UID("test")},
				nodeConditionsLastObservedAt: nodeConditionsObservedAt{},
				thresholdsFirstObservedAt:    thresholdsObservedAt{},
			}
			if manager.ObservedSummary() != nil {
				t.Fatal("a summary before the first pass")
			}
			if _, err := manager.synchronize(tCtx, &mockDiskInfoProvider{dedicatedImageFs: ptr.To(false)}, func() []*v1.Pod { return []*v1.Pod{pod} }); err != nil {
				t.Fatal(err)
			}
			got := manager.ObservedSummary()
			if enabled && got != summary {
				t.Errorf("ObservedSummary() = %v, want the summary of the pass", got)
			}
			if !enabled && got != nil {
				t.Error("the summary is kept with the gate off")
			}
		})
	}
}
