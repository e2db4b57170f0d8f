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

package upgradelane

import (
	"slices"
	"strings"
	"testing"
)

func TestCompareForgivesOnlyDrains(t *testing.T) {
	before := State{
		Objects: []string{"Deployment/web", "StatefulSet/data"},
		Marker:  "abc",
		Pods: map[string]PodState{
			"web-1":   {UID: "1", Node: "worker"},
			"web-2":   {UID: "2", Node: "worker2"},
			"agent-1": {UID: "3", Node: "worker2"},
			"agent-2": {UID: "7", Node: "worker"}, // left by the drain of worker
			"data-0":  {UID: "4", Node: "control-plane"},
		},
	}
	after := State{
		Objects: []string{"Deployment/web"},
		Marker:  "abd",
		Pods: map[string]PodState{
			"web-3":   {UID: "5", Node: "worker2"}, // web-1's replacement: worker was drained
			"agent-1": {UID: "3", Node: "worker2", Restarts: 1},
			"agent-2": {UID: "7", Node: "worker", Restarts: 2},
			"data-0":  {UID: "6", Node: "control-plane"},
		},
	}
	got := Compare(before, after, []string{"worker"})
	want := []string{
		"StatefulSet/data is gone",
		`the StatefulSet's data changed: "abc", then "abd"`,
		"pod agent-1 on worker2 restarted 1 times",
		"pod agent-2 on worker restarted 2 times",
		"pod data-0 on control-plane was replaced, and its node was not drained",
		"pod web-2 on worker2 is gone, and its node was not drained",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Compare =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := Compare(before, before, nil); len(got) != 0 {
		t.Errorf("Compare of a state with itself = %v", got)
	}
}

func TestProberProbesOnlyPrivateAddresses(t *testing.T) {
	if _, err := NewProber([]string{"172.18.0.2", "10.0.0.1"}, 0); err != nil {
		t.Errorf("the kind network's addresses: %v", err)
	}
	for _, bad := range []string{"8.8.8.8", "kube-carry-worker", ""} {
		if _, err := NewProber([]string{bad}, 0); err == nil {
			t.Errorf("NewProber(%q) accepted", bad)
		}
	}
	if _, err := NewProber(nil, 0); err == nil {
		t.Error("a prober of no address")
	}
}

func TestProberCountsPerStep(t *testing.T) {
	p, err := NewProber([]string{"172.18.0.2"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Step("upgrade")
	p.record("a", nil)
	p.record("a", errString("refused"))
	p.Step("rollback")
	p.record("a", nil)
	if got := p.Counts("upgrade"); got.Sent != 2 || got.Failed != 1 || len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "refused") {
		t.Errorf("upgrade: %+v", got)
	}
	if got := p.Counts("rollback"); got.Sent != 1 || got.Failed != 0 {
		t.Errorf("rollback: %+v", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// A step passes the prober's check only when requests were sent and none failed.
func TestCountsProblems(t *testing.T) {
	if got := (Counts{}).problems(); len(got) != 1 || !strings.Contains(got[0], "no request") {
		t.Errorf("a step without requests: %v", got)
	}
	if got := (Counts{Sent: 10, Failed: 1, Errors: []string{"refused"}}).problems(); len(got) != 1 || !strings.Contains(got[0], "1 of 10") {
		t.Errorf("a step with a failure: %v", got)
	}
	if got := (Counts{Sent: 10}).problems(); len(got) != 0 {
		t.Errorf("a step with every request answered: %v", got)
	}
}

// A feature rollback that leaves a gate on, a Feature stuck in a transition, a
// series Feature unsafe to upgrade, and Features recreated instead of kept:
// each is a problem of the step, named.
func TestCheckFeaturesNamesWhatAStepLeftWrong(t *testing.T) {
	safe := map[string]string{"UpgradeSafe": "True/Safe"}
	got := Features{
		"balloonpod":           {UID: "1", State: "On", Conditions: safe},
		"kubeletimagepullgate": {UID: "2", State: "Off", Conditions: map[string]string{"UpgradeSafe": "False/VersionSkew"}},
		"selinuxmount":         {UID: "3", State: "TurningOn", Tasks: []string{"WaitForUses"}},
	}
	problems := strings.Join(CheckFeatures(got, FeatureExpectation{
		Served:  true,
		Settled: true,
		States:  map[string]string{"BalloonPod": "Off", "KubeletImagePullGate": "Off", "FeatureLifecycle": "On"},
		Kept:    Features{"balloonpod": {UID: "9"}},
	}), "\n")
	for _, want := range []string{
		"Feature balloonpod is On with tasks [], want Off",
		"Feature featurelifecycle is missing",
		"Feature kubeletimagepullgate: UpgradeSafe False/VersionSkew",
		"1 Features in a transition: selinuxmount TurningOn",
		"Feature balloonpod did not come back as it was kept (uid 9",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
	if p := CheckFeatures(nil, FeatureExpectation{}); len(p) != 0 {
		t.Errorf("pristine, not serving the API: %v", p)
	}
	if p := CheckFeatures(Features{}, FeatureExpectation{}); len(p) != 1 {
		t.Errorf("pristine serving features.k8s.io: %v, want one problem", p)
	}
	if p := CheckFeatures(nil, FeatureExpectation{Served: true}); len(p) != 1 {
		t.Errorf("the fork not serving features.k8s.io: %v, want one problem", p)
	}
}

func TestCheckTransitionsAllowsOnlyTheStepsOwn(t *testing.T) {
	if p := checkTransitions([]string{"balloonpod"}, []string{"balloonpod"}); len(p) != 0 {
		t.Errorf("the step's own transition: %v", p)
	}
	p := strings.Join(checkTransitions([]string{"selinuxmount"}, []string{"balloonpod"}), "\n")
	if !strings.Contains(p, "started a transition of selinuxmount") || !strings.Contains(p, "no transition of balloonpod was started") {
		t.Errorf("problems: %s", p)
	}
}
