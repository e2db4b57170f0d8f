//go:build smoke || vpae2e

package cluster

import (
	"strings"
	"testing"
)

// testWriter logs the cluster's progress into the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
