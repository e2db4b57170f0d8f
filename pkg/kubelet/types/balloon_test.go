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

package types

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"
)

func testBalloon(mutate func(*v1.Pod)) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "balloon",
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{v1.LabelBalloonPod: "true"},
		},
		Spec: v1.PodSpec{
			PriorityClassName: scheduling.SystemNodeBalloon,
			Priority:          ptr.To(scheduling.SystemCriticalPriority + 1000),
		},
	}
	if mutate != nil {
		mutate(pod)
	}
	return pod
}

func TestIsBalloonPod(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		gate bool
		want bool
	}{
		{name: "balloon", pod: testBalloon(nil), gate: true, want: true},
		{name: "gate off", pod: testBalloon(nil), gate: false, want: false},
		{name: "nil pod", pod: nil, gate: true, want: false},
		{name: "label only", pod: testBalloon(func(p *v1.Pod) { p.Spec.PriorityClassName = ""; p.Spec.Priority = nil }), gate: true, want: false},
		// Labels can change; admission keeps the label on the class's pods.
		{name: "class without the label", pod: testBalloon(func(p *v1.Pod) { p.Labels = nil }), gate: true, want: true},
		{name: "static pod claiming the class", pod: testBalloon(func(p *v1.Pod) {
			p.Annotations = map[string]string{ConfigSourceAnnotationKey: FileSource}
		}), gate: true, want: false},
		{name: "outside kube-system", pod: testBalloon(func(p *v1.Pod) { p.Namespace = "default" }), gate: true, want: false},
		{name: "system-node-critical with the label", pod: testBalloon(func(p *v1.Pod) { p.Spec.PriorityClassName = scheduling.SystemNodeCritical }), gate: true, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, tc.gate)
			if got := IsBalloonPod(tc.pod); got != tc.want {
				t.Errorf("IsBalloonPod() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUsesBalloonClass(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want bool
	}{
		"balloon":                  {testBalloon(nil), true},
		"static pod of the class":  {testBalloon(func(p *v1.Pod) { p.Annotations = map[string]string{ConfigSourceAnnotationKey: FileSource} }), true},
		"the class in a namespace": {testBalloon(func(p *v1.Pod) { p.Namespace = "default" }), true},
		"another class":            {testBalloon(func(p *v1.Pod) { p.Spec.PriorityClassName = scheduling.SystemNodeCritical }), false},
		"nil":                      {nil, false},
	} {
		if got := UsesBalloonClass(tc.pod); got != tc.want {
			t.Errorf("%s: UsesBalloonClass() = %v, want %v", name, got, tc.want)
		}
	}
}

func TestPreemptableBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	balloon := testBalloon(nil)
	nodeCritical := &v1.Pod{Spec: v1.PodSpec{PriorityClassName: scheduling.SystemNodeCritical, Priority: ptr.To(scheduling.SystemCriticalPriority + 1000)}}
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ConfigSourceAnnotationKey: FileSource}}}
	workload := &v1.Pod{Spec: v1.PodSpec{Priority: ptr.To[int32](0)}}
	labelOnly := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.LabelBalloonPod: "true"}}, Spec: v1.PodSpec{Priority: ptr.To[int32](0)}}

	// A static pod's priority is whatever its manifest says: above the
	// balloon class's, upstream's rules let it preempt the balloon.
	aboveTheBalloon := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ConfigSourceAnnotationKey: FileSource}},
		Spec:       v1.PodSpec{Priority: ptr.To(scheduling.SystemCriticalPriority + 1001)},
	}
	if Preemptable(aboveTheBalloon, balloon) {
		t.Error("a static pod above the balloon's priority may preempt a balloon")
	}
	for _, preemptor := range []*v1.Pod{nodeCritical, static} {
		if Preemptable(preemptor, balloon) {
			t.Errorf("%s may preempt a balloon", preemptor.Spec.PriorityClassName+preemptor.Annotations[ConfigSourceAnnotationKey])
		}
	}
	for _, preemptee := range []*v1.Pod{workload, labelOnly} {
		if Preemptable(balloon, preemptee) {
			t.Error("a balloon may preempt a workload")
		}
	}
	classOnly := testBalloon(func(p *v1.Pod) { p.Labels = nil })
	staticOfTheClass := testBalloon(func(p *v1.Pod) { p.Annotations = map[string]string{ConfigSourceAnnotationKey: FileSource} })
	for _, preemptor := range []*v1.Pod{classOnly, staticOfTheClass} {
		if Preemptable(preemptor, workload) {
			t.Errorf("a pod of the balloon class (labels %v, annotations %v) may preempt a workload", preemptor.Labels, preemptor.Annotations)
		}
	}
	if !Preemptable(nodeCritical, labelOnly) {
		t.Error("a workload with only the balloon label must stay preemptable")
	}
}
