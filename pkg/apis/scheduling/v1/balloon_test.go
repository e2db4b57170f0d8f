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

package v1

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

const balloonPriority = scheduling.SystemCriticalPriority + 1000

func TestSystemPriorityClassesBalloon(t *testing.T) {
	upstream := []string{scheduling.SystemNodeCritical, scheduling.SystemClusterCritical}
	tests := []struct {
		name    string
		enabled bool
		want    []string
	}{
		{
			name:    "gate off",
			enabled: false,
			want:    upstream,
		},
		{
			name:    "gate on",
			enabled: true,
			want:    append(slices.Clone(upstream), scheduling.SystemNodeBalloon),
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, test.enabled)

			if names := SystemPriorityClassNames(); !slices.Equal(names, test.want) {
				t.Errorf("SystemPriorityClassNames() = %v, want %v", names, test.want)
			}
			classes := SystemPriorityClasses()
			var names []string
			for _, pc := range classes {
				names = append(names, pc.Name)
			}
			if !slices.Equal(names, test.want) {
				t.Fatalf("SystemPriorityClasses() names = %v, want %v", names, test.want)
			}
			for _, pc := range classes {
				if is, err := IsKnownSystemPriorityClass(pc.Name, pc.Value, pc.GlobalDefault); !is {
					t.Errorf("system priority class %s is not known: %v", pc.Name, err)
				}
				if pc.Name != scheduling.SystemNodeBalloon {
					continue
				}
				if pc.Value != balloonPriority {
					t.Errorf("value of %s = %d, want %d", pc.Name, pc.Value, balloonPriority)
				}
				if pc.GlobalDefault {
					t.Errorf("%s must not be the global default", pc.Name)
				}
				if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != corev1.PreemptNever {
					t.Errorf("preemptionPolicy of %s = %v, want %s", pc.Name, pc.PreemptionPolicy, corev1.PreemptNever)
				}
				if pc.Description == "" {
					t.Errorf("%s has no description", pc.Name)
				}
			}

			// The returned classes are copies: changing them changes nothing.
			for _, pc := range classes {
				pc.Value = 1
				pc.PreemptionPolicy = nil
			}
			for _, pc := range SystemPriorityClasses() {
				if pc.Value == 1 {
					t.Errorf("SystemPriorityClasses() returned a class that a caller changed: %s", pc.Name)
				}
				if pc.Name == scheduling.SystemNodeBalloon && pc.PreemptionPolicy == nil {
					t.Errorf("SystemPriorityClasses() returned a %s that a caller changed", pc.Name)
				}
			}
		})
	}
}

// TestSystemPriorityClassesBalloonToggle checks that enabling the gate does not
// leave the balloon class behind in the upstream list once the gate is off.
func TestSystemPriorityClassesBalloonToggle(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	for range 2 {
		if n := len(SystemPriorityClasses()); n != len(systemPriorityClasses)+1 {
			t.Fatalf("gate on: got %d system priority classes, want %d", n, len(systemPriorityClasses)+1)
		}
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, false)
	if names := SystemPriorityClassNames(); slices.Contains(names, scheduling.SystemNodeBalloon) {
		t.Errorf("gate off: SystemPriorityClassNames() = %v, must not contain %s", names, scheduling.SystemNodeBalloon)
	}
	if len(systemPriorityClasses) != 2 {
		t.Errorf("the upstream system priority classes changed: %d classes", len(systemPriorityClasses))
	}
}

func TestIsKnownSystemPriorityClassBalloon(t *testing.T) {
	tests := []struct {
		name          string
		enabled       bool
		value         int32
		globalDefault bool
		want          bool
		wantErr       string
	}{
		{
			name:    "gate on, right value",
			enabled: true,
			value:   balloonPriority,
			want:    true,
		},
		{
			name:    "gate on, value of system-cluster-critical",
			enabled: true,
			value:   scheduling.SystemCriticalPriority,
			wantErr: "value of system-node-balloon PriorityClass must be 2000001000",
		},
		{
			name:    "gate on, user value",
			enabled: true,
			value:   1000,
			wantErr: "value of system-node-balloon PriorityClass must be 2000001000",
		},
		{
			name:          "gate on, global default",
			enabled:       true,
			value:         balloonPriority,
			globalDefault: true,
			wantErr:       "globalDefault of system-node-balloon PriorityClass must be false",
		},
		{
			name:    "gate off",
			enabled: false,
			value:   balloonPriority,
			wantErr: "system-node-balloon is not a known system priority class",
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, test.enabled)
			is, err := IsKnownSystemPriorityClass(scheduling.SystemNodeBalloon, test.value, test.globalDefault)
			if is != test.want {
				t.Errorf("IsKnownSystemPriorityClass() = %v, want %v (error: %v)", is, test.want, err)
			}
			switch {
			case test.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case test.wantErr != "" && err == nil:
				t.Errorf("expected error %q, got none", test.wantErr)
			case test.wantErr != "" && !strings.Contains(err.Error(), test.wantErr):
				t.Errorf("error %q does not contain %q", err, test.wantErr)
			}
		})
	}
}
