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
	"sync"
	"time"
)

// forgetSightingsAfter is how long a sighting nobody asks about is kept: the
// keys of gone leases, finished tasks and removed uses go after it. A key asked
// about again after that starts young, which only lengthens a wait.
const forgetSightingsAfter = time.Hour

// localAges measures how old a value that another server stamped with its own
// clock is (a lease's renewTime, a task's startTime, a use's lastReportTime) on
// this server's clock alone: from when this server first saw the value, as
// client-go's leader election ages a lease from the time it observed its last
// change. No decision then depends on two servers' clocks agreeing: a value
// seen just now is young however old its stamp reads, and a value that is no
// longer renewed ages from its first sighting. A value seen for the first time
// is young, so a server that starts takes a lease that stopped renewing for live
// until it has watched it for the liveness period.
type localAges struct {
	mu        sync.Mutex
	seen      map[string]sighting
	lastSwept time.Time
}

type sighting struct {
	value string
	// first is when this server first saw the key at value, last when it last
	// asked about the key.
	first, last time.Time
}

func newLocalAges() *localAges {
	return &localAges{seen: map[string]sighting{}}
}

// age returns how long before now this server first saw key at value. Without
// sightings (a TaskContext made outside the controller) it is the stamp's age.
func (a *localAges) age(key, value string, now time.Time) time.Duration {
	if a == nil {
		stamped, _ := time.Parse(time.RFC3339Nano, value)
		return now.Sub(stamped)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.seen[key]
	if !ok || s.value != value {
		s = sighting{value: value, first: now}
	}
	s.last = now
	a.seen[key] = s
	if now.Sub(a.lastSwept) >= forgetSightingsAfter {
		a.lastSwept = now
		for k, s := range a.seen {
			if now.Sub(s.last) >= forgetSightingsAfter {
				delete(a.seen, k)
			}
		}
	}
	return now.Sub(s.first)
}

// stamp is the form in which a time another server wrote is a sighting's value.
func stamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// taskStartKey is the sighting of a task's StartTime: the leader that records
// the start sees it then; a server that takes the Feature over, when it first
// runs the task.
func taskStartKey(feature, task string) string {
	return "task/" + feature + "/" + task
}
