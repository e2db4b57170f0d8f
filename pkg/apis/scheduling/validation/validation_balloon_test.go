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

package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

// wantError is an expected validation error: its type, its field and a part of its detail.
type wantError struct {
	typ    field.ErrorType
	field  string
	detail string
}

func checkErrors(t *testing.T, errs field.ErrorList, want []wantError) {
	t.Helper()
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d: %v", len(errs), len(want), errs)
	}
	for i, w := range want {
		err := errs[i]
		if err.Type != w.typ || err.Field != w.field || !strings.Contains(err.Detail, w.detail) {
			t.Errorf("error %d = %v, want %s on %s containing %q", i, err, w.typ, w.field, w.detail)
		}
	}
}

func balloonClass(value int32, policy *core.PreemptionPolicy) *scheduling.PriorityClass {
	return &scheduling.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: scheduling.SystemNodeBalloon},
		Value:            value,
		PreemptionPolicy: policy,
		Description:      "balloon",
	}
}

func TestValidatePriorityClassBalloon(t *testing.T) {
	never := core.PreemptNever
	lower := core.PreemptLowerPriority
	const balloonValue = scheduling.SystemCriticalPriority + 1000
	const mustNever = "the system-node-balloon PriorityClass must have preemptionPolicy Never"
	const reserved = "priority class names with 'system-' prefix are reserved for system use only"

	tests := []struct {
		name    string
		enabled bool
		pc      *scheduling.PriorityClass
		want    []wantError
	}{
		{
			name:    "gate on, preemptionPolicy Never",
			enabled: true,
			pc:      balloonClass(balloonValue, &never),
		},
		{
			name:    "gate on, preemptionPolicy PreemptLowerPriority",
			enabled: true,
			pc:      balloonClass(balloonValue, &lower),
			want:    []wantError{{field.ErrorTypeForbidden, "preemptionPolicy", mustNever}},
		},
		{
			name:    "gate on, no preemptionPolicy",
			enabled: true,
			pc:      balloonClass(balloonValue, nil),
			want:    []wantError{{field.ErrorTypeForbidden, "preemptionPolicy", mustNever}},
		},
		{
			name:    "gate on, value of system-cluster-critical",
			enabled: true,
			pc:      balloonClass(scheduling.SystemCriticalPriority, &never),
			want:    []wantError{{field.ErrorTypeForbidden, "metadata.name", reserved + ". error: value of system-node-balloon PriorityClass must be 2000001000"}},
		},
		{
			name:    "gate on, user value",
			enabled: true,
			pc:      balloonClass(100, &never),
			want:    []wantError{{field.ErrorTypeForbidden, "metadata.name", "value of system-node-balloon PriorityClass must be 2000001000"}},
		},
		{
			name:    "gate on, global default",
			enabled: true,
			pc: func() *scheduling.PriorityClass {
				pc := balloonClass(balloonValue, &never)
				pc.GlobalDefault = true
				return pc
			}(),
			want: []wantError{{field.ErrorTypeForbidden, "metadata.name", "globalDefault of system-node-balloon PriorityClass must be false"}},
		},
		{
			name:    "gate on, wrong value and preemptionPolicy",
			enabled: true,
			pc:      balloonClass(100, &lower),
			want: []wantError{
				{field.ErrorTypeForbidden, "metadata.name", "value of system-node-balloon PriorityClass must be 2000001000"},
				{field.ErrorTypeForbidden, "preemptionPolicy", mustNever},
			},
		},
		{
			name:    "gate off, the name is reserved",
			enabled: false,
			pc:      balloonClass(balloonValue, &never),
			want:    []wantError{{field.ErrorTypeForbidden, "metadata.name", reserved + ". error: system-node-balloon is not a known system priority class"}},
		},
		{
			name:    "gate off, user value",
			enabled: false,
			pc:      balloonClass(100, &never),
			want:    []wantError{{field.ErrorTypeForbidden, "metadata.name", "system-node-balloon is not a known system priority class"}},
		},
		{
			name:    "gate on, system-node-critical may preempt",
			enabled: true,
			pc: &scheduling.PriorityClass{
				ObjectMeta:       metav1.ObjectMeta{Name: scheduling.SystemNodeCritical},
				Value:            scheduling.SystemCriticalPriority + 1000,
				PreemptionPolicy: &lower,
			},
		},
		{
			name:    "gate on, system-cluster-critical without preemptionPolicy",
			enabled: true,
			pc: &scheduling.PriorityClass{
				ObjectMeta: metav1.ObjectMeta{Name: scheduling.SystemClusterCritical},
				Value:      scheduling.SystemCriticalPriority,
			},
		},
		{
			name:    "gate on, a user class named node-balloon may preempt",
			enabled: true,
			pc: &scheduling.PriorityClass{
				ObjectMeta:       metav1.ObjectMeta{Name: "node-balloon"},
				Value:            scheduling.HighestUserDefinablePriority,
				PreemptionPolicy: &lower,
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, test.enabled)
			checkErrors(t, ValidatePriorityClass(test.pc), test.want)
		})
	}
}

func TestValidatePriorityClassUpdateBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	never := core.PreemptNever
	lower := core.PreemptLowerPriority
	const balloonValue = scheduling.SystemCriticalPriority + 1000

	old := balloonClass(balloonValue, &never)
	old.ResourceVersion = "1"
	tests := []struct {
		name   string
		update func(pc *scheduling.PriorityClass)
		want   []wantError
	}{
		{
			name:   "change description",
			update: func(pc *scheduling.PriorityClass) { pc.Description = "another description" },
		},
		{
			name:   "change value",
			update: func(pc *scheduling.PriorityClass) { pc.Value = scheduling.SystemCriticalPriority },
			want:   []wantError{{field.ErrorTypeForbidden, "value", "may not be changed"}},
		},
		{
			name:   "change preemptionPolicy",
			update: func(pc *scheduling.PriorityClass) { pc.PreemptionPolicy = &lower },
			want:   []wantError{{field.ErrorTypeInvalid, "preemptionPolicy", "field is immutable"}},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			pc := old.DeepCopy()
			pc.ResourceVersion = "2"
			test.update(pc)
			checkErrors(t, ValidatePriorityClassUpdate(pc, old), test.want)
		})
	}
}
