//go:build smoke || vpae2e

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

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// testWriter logs the cluster's progress into the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// deadlineContext ends margin before go test's -timeout, which would kill the
// test binary without its cleanup and leave its processes running: a slow
// machine makes the whole test late, and the test fails with its own message
// and stops what it started.
func deadlineContext(t *testing.T, margin time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := t.Deadline()
	if !ok {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), deadline.Add(-margin))
}

// waitBound says which bound a failed wait ran into: its own timeout, or the
// test's deadline (a whole test late on a slow machine, not a slow step).
func waitBound(ctx context.Context, timeout time.Duration) string {
	if ctx.Err() != nil {
		deadline, _ := ctx.Deadline()
		return fmt.Sprintf("by the test's deadline (%s, go test's -timeout less its cleanup)", deadline.Format(time.TimeOnly))
	}
	return fmt.Sprintf("within %v", timeout)
}
