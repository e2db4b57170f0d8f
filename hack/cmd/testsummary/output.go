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

package main

import (
	"regexp"
	"strings"
)

// outputLimit is how much of a test's output, and of the lines it reported
// itself, a failure shows.
const outputLimit = 8192

var (
	// reportLine is a line a test reported itself (t.Log, t.Error, testify's
	// Error Trace) from one of its _test.go files.
	reportLine = regexp.MustCompile(`^\s+[\w.-]+_test\.go:\d+: `)
	// logLine is any line logged through t.Log, the test's or a helper's
	// (a server's klog through ktesting).
	logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)
)

// testOutput keeps what a failure shows of a test's output: its first
// outputLimit bytes and the lines the test reported itself, with their
// continuation lines. A test that starts servers in its process prints their
// logs between its own lines: the head alone shows the servers starting and
// cuts the t.Error that says what failed.
type testOutput struct {
	head, reports strings.Builder
	cut           bool
	inReport      bool
}

func (o *testOutput) add(line string) {
	if o.head.Len() < outputLimit {
		o.head.WriteString(line)
	} else {
		o.cut = true
	}
	switch {
	case reportLine.MatchString(line):
		o.inReport = true
	case o.inReport && strings.HasPrefix(line, " ") && !logLine.MatchString(line):
	default:
		o.inReport = false
		return
	}
	if o.reports.Len() < outputLimit {
		o.reports.WriteString(line)
	}
}

// String is the output when it was short; when it was cut, the test's own
// lines first, then the head.
func (o *testOutput) String() string {
	if o == nil {
		return ""
	}
	if !o.cut {
		return o.head.String()
	}
	return "the test's own lines (its output was longer than it shows here):\n" + o.reports.String() +
		"its output from the start:\n" + o.head.String()
}

// outputs collects the output of each key (a package and a test).
type outputs map[string]*testOutput

func (m outputs) add(key, line string) {
	if m[key] == nil {
		m[key] = &testOutput{}
	}
	m[key].add(line)
}
