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
	"strings"
	"testing"
)

func junitReport(cases string) string {
	return `<?xml version="1.0"?><testsuites><testsuite name="Kubernetes e2e suite">` + cases + `</testsuite></testsuites>`
}

func TestParityNamesEverySpecThatDiffersAndCountsRegressions(t *testing.T) {
	pristine := junitReport(`
<testcase name="[It] both pass"></testcase>
<testcase name="[It] both fail"><failure message="x"/></testcase>
<testcase name="[It] fork breaks it"></testcase>
<testcase name="[It] fork fixes it"><failure message="x"/></testcase>
<testcase name="[It] fork skips it"></testcase>
<testcase name="[It] not selected"><skipped message="skipped"/></testcase>
<testcase name="[SynchronizedBeforeSuite]"></testcase>`)
	fork := junitReport(`
<testcase name="[It] both pass"></testcase>
<testcase name="[It] both fail"><failure message="x"/></testcase>
<testcase name="[It] fork breaks it"><failure message="timed out"/></testcase>
<testcase name="[It] fork fixes it"></testcase>
<testcase name="[It] fork skips it"><skipped message="skipped"/></testcase>
<testcase name="[It] not selected"><skipped message="skipped"/></testcase>
<testcase name="[It] [Feature:BalloonPod] only in the fork"></testcase>
<testcase name="[SynchronizedBeforeSuite]"></testcase>`)
	p, err := specResults(strings.NewReader(pristine))
	if err != nil {
		t.Fatal(err)
	}
	f, err := specResults(strings.NewReader(fork))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if got := parity(&out, p, f); got != 2 {
		t.Errorf("regressions: got %d, want 2 (broken and skipped)\n%s", got, out.String())
	}
	want := []string{
		"passed             3         3",
		"failed             2         2",
		"  passed -> failed REGRESSION: [It] fork breaks it",
		"  failed -> passed: [It] fork fixes it",
		"  passed -> skipped REGRESSION: [It] fork skips it",
		"  absent -> passed: [It] [Feature:BalloonPod] only in the fork",
		"4 specs differ, 2 regressions",
	}
	for _, line := range want {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	for _, name := range []string{"both pass", "both fail", "not selected", "SynchronizedBeforeSuite"} {
		if strings.Contains(out.String(), name) {
			t.Errorf("output names %q, whose results agree:\n%s", name, out.String())
		}
	}
}

func TestParityOfEqualRunsHasNoRegressions(t *testing.T) {
	report := junitReport(`<testcase name="[It] a"></testcase><testcase name="[It] b"><failure message="x"/></testcase>`)
	p, _ := specResults(strings.NewReader(report))
	f, _ := specResults(strings.NewReader(report))
	var out strings.Builder
	if got := parity(&out, p, f); got != 0 || !strings.Contains(out.String(), "0 specs differ, 0 regressions") {
		t.Errorf("got %d regressions:\n%s", got, out.String())
	}
}
