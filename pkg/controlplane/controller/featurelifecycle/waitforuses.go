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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
)

// WaitForUsesName is the name of the task every transition between On and Off
// starts with.
const WaitForUsesName = "WaitForUses"

// waitForUses clears the uses on its first run, waits for the components to
// report again, and is done when none reports the old value: every
// component then runs with the new one. Otherwise it names them, clears the
// uses again and waits another period. It knows who to wait for: the live
// instances of each component (population), and it waits beyond the period,
// up to maxPeriod, while a component has begun to report but fewer of its
// instances have than would if all had.
type waitForUses struct {
	period, maxPeriod time.Duration
	// sample is how many instances a component's entry names at most.
	sample int
}

// NewWaitForUses returns the WaitForUses task, which gives the components
// period to report after it cleared the uses, and up to maxPeriod when some
// have not all reported by then. The period must be longer than a reporter's
// longest delay, or a component still on the old value could be missed;
// maxPeriod covers a reporter's back-off. A maxPeriod not longer than period
// waits period only.
func NewWaitForUses(period, maxPeriod time.Duration) Task {
	return waitForUses{period: period, maxPeriod: max(period, maxPeriod), sample: featurereporting.DefaultOptions("", "", "").SampleSize}
}

func (waitForUses) Name() string { return WaitForUsesName }

func (waitForUses) AppliesTo(t Transition) bool { return t == TurnOn || t == TurnOff }

func (w waitForUses) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	if tc.Task.StartTime == nil {
		// The first run: the controller records the start once this returns,
		// so an interrupted first run clears again, which is harmless.
		if err := w.clear(ctx, tc); err != nil {
			return Result{}, err
		}
		return NotYet(fmt.Sprintf("cleared the uses, waiting %v for the components to report", w.period)), nil
	}
	old := tc.Transition == TurnOff
	stale := reporting(tc.Feature, old)
	// Who has reported of whom: a failure to count leaves the decision to
	// the time alone, and says so.
	var reported string
	var uncovered []string
	if pop, err := population(ctx, tc.Client, tc.Now, tc.LiveAPIServers); err != nil {
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
	end := tc.Task.StartTime.Add(w.period)
	if tc.Now.Before(end) {
		message := fmt.Sprintf("waiting until %s for the components to report (%s)", end.UTC().Format(time.RFC3339), reported)
		if len(stale) > 0 {
			// Those already known to run the old value, so that an admin
			// can act before the wait is over.
			message += fmt.Sprintf("; reporting %t so far: %s", old, strings.Join(stale, "; "))
		}
		return NotYet(message), nil
	}
	if len(stale) > 0 {
		// Sample again: an entry may be stale, written by a component just
		// before the last clear and since restarted with the new value.
		if err := w.clear(ctx, tc); err != nil {
			return Result{}, err
		}
		return Result{Message: fmt.Sprintf("still reporting %t: %s; cleared the uses to check again", old, strings.Join(stale, "; ")), Restart: true}, nil
	}
	if last := tc.Task.StartTime.Add(w.maxPeriod); len(uncovered) > 0 && tc.Now.Before(last) {
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

func (w waitForUses) clear(ctx context.Context, tc *TaskContext) error {
	f := tc.Feature
	if len(f.Status.Uses) == 0 {
		return nil
	}
	cleared := f.DeepCopy()
	cleared.Status.Uses = nil
	updated, err := tc.Client.FeaturesV1alpha1().Features(f.Namespace).UpdateUses(ctx, f.Name, cleared, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// A component reported or another server cleared meanwhile: the
		// entries left are looked at, and cleared, after the next period.
		return nil
	}
	if err != nil {
		return fmt.Errorf("clearing the uses: %w", err)
	}
	tc.Feature = updated
	return nil
}
