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

package featurelifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
)

// WaitForUsesName is the name of the task every transition between On and Off
// starts with.
const WaitForUsesName = "WaitForUses"

// waitForUses is done when no component has reported the old value for a
// whole period: every component then runs with the new one. The uses are
// never cleared. An entry of the old value lives while any instance runs that
// value: its sampled instances renew it, and when they move to the new value
// or go, an instance still on the old value reports it again (an entry that
// is missing is reported within a reporter's delay). Each run that finds the
// old value reported names it and starts the wait over. It knows who to wait
// for: the live instances of each component (population), and it waits
// beyond the period, up to maxPeriod, while a component has begun to report
// but fewer of its instances have than would if all had.
type waitForUses struct {
	period, maxPeriod time.Duration
	// sample is how many instances a component's entry names at most.
	sample int
}

// NewWaitForUses returns the WaitForUses task, which is done after period
// without a report of the old value, or up to maxPeriod when some components
// have not all reported by then. The period must be longer than a
// reporter's longest delay, or an entry of the old value that is being
// reported again could be missed; maxPeriod covers a reporter's back-off. A
// maxPeriod not longer than period waits period only.
func NewWaitForUses(period, maxPeriod time.Duration) Task {
	return waitForUses{period: period, maxPeriod: max(period, maxPeriod), sample: featurereporting.DefaultOptions("", "", "").SampleSize}
}

func (waitForUses) Name() string { return WaitForUsesName }

func (waitForUses) WritesNothing() {}

func (waitForUses) AppliesTo(t Transition) bool { return t == TurnOn || t == TurnOff }

func (w waitForUses) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	old := tc.Transition == TurnOff
	stale := reporting(tc.Feature, old)
	// Who has reported of whom: a failure to count leaves the decision to
	// the time alone, and says so.
	var reported string
	var uncovered []string
	if pop, err := population(ctx, tc.Client, tc.ages, tc.Now, tc.LiveAPIServers); err != nil {
		reported = fmt.Sprintf("reported: unknown (%v)", err)
	} else {
		var parts []string
		for _, c := range coverage(tc.Feature, pop) {
			parts = append(parts, c.String())
			// A component none of whose instances reported may not check
			// the feature at all; kube-apiserver reports every feature.
			if !c.covered(w.sample) && (c.reported > 0 || c.component == kubeAPIServerComponent) {
				uncovered = append(uncovered, c.String())
			}
		}
		reported = "reported: " + strings.Join(parts, ", ")
	}
	if len(stale) > 0 {
		// The wait counts from the last run that found the old value.
		return Result{Message: fmt.Sprintf("waiting until no component reports %t for %v; reporting %t: %s (%s)", old, w.period, old, strings.Join(stale, "; "), reported), Restart: true}, nil
	}
	if tc.Task.StartTime == nil {
		// The first run: the controller records its start.
		return NotYet(fmt.Sprintf("no component reports %t; waiting %v for late reports (%s)", old, w.period, reported)), nil
	}
	// The start was stamped by the leader that began the wait, perhaps another
	// server: the wait counts from when this server first saw it, so that a
	// failover to a server whose clock runs ahead does not cut it short.
	started := tc.Now.Add(-tc.ages.age(taskStartKey(tc.Feature.Name, tc.Task.Name), stamp(tc.Task.StartTime.Time), tc.Now))
	if end := started.Add(w.period); tc.Now.Before(end) {
		return NotYet(fmt.Sprintf("no component reports %t; waiting until %s for late reports (%s)", old, end.UTC().Format(time.RFC3339), reported)), nil
	}
	// The longest wait counts from the first sighting too, but never goes
	// past twice its length after the recorded start: leadership that keeps
	// moving (a server that restarts over and over) must not hold the
	// transition for ever. It tolerates up to maxPeriod of clock skew.
	last := started.Add(w.maxPeriod)
	if bound := tc.Task.StartTime.Add(2 * w.maxPeriod); bound.Before(last) {
		last = bound
	}
	if len(uncovered) > 0 && tc.Now.Before(last) {
		// A reporter in back-off (the API unreachable, or not served when it
		// started) reports late: time alone would call the feature unused by
		// instances that have not said so yet.
		return NotYet(fmt.Sprintf("waiting until %s at most for the components that have not all reported: %s (%s)",
			last.UTC().Format(time.RFC3339), strings.Join(uncovered, ", "), reported)), nil
	}
	if len(uncovered) > 0 {
		return Result{Done: true, Message: fmt.Sprintf("no component reports %t; not all reported within %v: %s", old, w.maxPeriod, strings.Join(uncovered, ", "))}, nil
	}
	return Done, nil
}

// reporting names the components, with their sampled instances, that report
// value for the Feature.
func reporting(f *featuresv1alpha1.Feature, value bool) []string {
	var names []string
	for _, use := range f.Status.Uses {
		if use.Value == value {
			names = append(names, fmt.Sprintf("%s (%s)", use.Component, strings.Join(use.Instances, ", ")))
		}
	}
	slices.Sort(names)
	return names
}
