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
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/test/utils/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// asBalloon turns a test pod into a balloon; labelOnly leaves out the class.
func asBalloon(pod *v1.Pod, labelOnly bool) *v1.Pod {
	pod.Namespace = metav1.NamespaceSystem
	pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
	if !labelOnly {
		pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
		pod.Spec.Priority = ptr.To(scheduling.SystemCriticalPriority + 1000)
	}
	return pod
}

// killAttempts records every pod the manager tries to kill.
type killAttempts []string

func (k *killAttempts) killPodNow(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
	*k = append(*k, pod.Name)
	return nil
}

func TestBalloonsAreNeverEvictionCandidates(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	memoryPressure := func(pods map[*v1.Pod]statsapi.PodStats) (*statsapi.Summary, evictionapi.Threshold) {
		return makeMemoryStats("1500Mi", pods), evictionapi.Threshold{
			Signal:   evictionapi.SignalMemoryAvailable,
			Operator: evictionapi.OpLessThan,
			Value:    evictionapi.ThresholdValue{Quantity: quantityMustParse("2Gi")},
		}
	}
	pidPressure := func(pods map[*v1.Pod]statsapi.PodStats) (*statsapi.Summary, evictionapi.Threshold) {
		return makePIDStats("2000", "1900", pods), evictionapi.Threshold{
			Signal:   evictionapi.SignalPIDAvailable,
			Operator: evictionapi.OpLessThan,
			Value:    evictionapi.ThresholdValue{Quantity: quantityMustParse("1200")},
		}
	}
	memoryPod := func(name string) (*v1.Pod, statsapi.PodStats) {
		// The balloon candidate uses far more than it requests: without the
		// filter it would rank first.
		usage := map[string]string{"balloon": "1Gi", "fake-balloon": "1Gi"}[name]
		if usage == "" {
			usage = "200Mi"
		}
		return makePodWithMemoryStats(name, defaultPriority, newResourceList("", "100Mi", ""), newResourceList("", "", ""), usage)
	}
	pidPod := func(name string) (*v1.Pod, statsapi.PodStats) {
		processes := map[string]uint64{"balloon": 1000, "fake-balloon": 1000}[name]
		return makePodWithPIDStats(name, defaultPriority, processes+10)
	}

	for signal, tc := range map[string]struct {
		pressure func(map[*v1.Pod]statsapi.PodStats) (*statsapi.Summary, evictionapi.Threshold)
		pod      func(string) (*v1.Pod, statsapi.PodStats)
	}{
		"memory": {memoryPressure, memoryPod},
		"pid":    {pidPressure, pidPod},
	} {
		for _, scenario := range []struct {
			name string
			pods []string
			want []string
		}{
			{name: "balloon and workload", pods: []string{"balloon", "workload"}, want: []string{"workload"}},
			{name: "only a balloon", pods: []string{"balloon"}, want: nil},
			{name: "label only", pods: []string{"fake-balloon", "workload"}, want: []string{"fake-balloon"}},
		} {
			t.Run(signal+"/"+scenario.name, func(t *testing.T) {
				tCtx := ktesting.Init(t)
				var pods []*v1.Pod
				stats := map[*v1.Pod]statsapi.PodStats{}
				for _, name := range scenario.pods {
					pod, podStats := tc.pod(name)
					switch name {
					case "balloon":
						asBalloon(pod, false)
					case "fake-balloon":
						asBalloon(pod, true)
					}
					pods = append(pods, pod)
					stats[pod] = podStats
				}
				summary, threshold := tc.pressure(stats)
				var killed killAttempts
				manager := &managerImpl{
					clock:                        testingclock.NewFakeClock(time.Now()),
					killPodFunc:                  killed.killPodNow,
					imageGC:                      &mockDiskGC{},
					containerGC:                  &mockDiskGC{},
					config:                       Config{PressureTransitionPeriod: time.Minute, Thresholds: []evictionapi.Threshold{threshold}},
					recorder:                     &record.FakeRecorder{},
					summaryProvider:              &fakeSummaryProvider{result: summary},
					nodeRef:                      &v1.ObjectReference{Kind: "Node", Name: "test", UID: types.UID("test")},
					nodeConditionsLastObservedAt: nodeConditionsObservedAt{},
					thresholdsFirstObservedAt:    thresholdsObservedAt{},
				}
				if _, err := manager.synchronize(tCtx, &mockDiskInfoProvider{dedicatedImageFs: ptr.To(false)}, func() []*v1.Pod { return pods }); err != nil {
					t.Fatal(err)
				}
				if len(killed) != len(scenario.want) || (len(killed) > 0 && killed[0] != scenario.want[0]) {
					t.Errorf("kill attempts %v, want %v", killed, scenario.want)
				}
			})
		}
	}
}

func TestEvictionCandidatesLeaveOutBalloons(t *testing.T) {
	balloon := asBalloon(newPod("balloon", defaultPriority, nil, nil), false)
	fake := asBalloon(newPod("fake-balloon", defaultPriority, nil, nil), true)
	workload := newPod("workload", defaultPriority, nil, nil)
	for _, enabled := range []bool{true, false} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, enabled)
		var got []string
		for _, pod := range evictionCandidates([]*v1.Pod{balloon, fake, workload}) {
			got = append(got, pod.Name)
		}
		want := []string{"fake-balloon", "workload"}
		if !enabled {
			want = []string{"balloon", "fake-balloon", "workload"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("BalloonPod=%v: candidates %v, want %v", enabled, got, want)
		}
	}
}
