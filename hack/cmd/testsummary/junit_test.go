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
	"os"
	"path/filepath"
	"regexp"
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
	blocked := blockList{{spec: regexpOf(t, "^both fail$"), reason: "no CAP_SYS_RESOURCE here"}}
	if got := parity(&out, pristineFork, p, f, blocked); got != 3 {
		t.Errorf("failing: got %d, want 3 (broken, skipped, and fixed on the fork but failed on pristine)\n%s", got, out.String())
	}
	want := []string{
		"passed             3         3",
		"failed             2         2",
		"  passed -> failed REGRESSION: [It] fork breaks it",
		"  failed -> passed: [It] fork fixes it",
		"  passed -> skipped REGRESSION: [It] fork skips it",
		"  absent -> passed: [It] [Feature:BalloonPod] only in the fork",
		"  blocked on pristine and fork: [It] both fail: no CAP_SYS_RESOURCE here",
		"  FAILED on fork: [It] fork breaks it",
		"  FAILED on pristine: [It] fork fixes it",
		"4 specs differ, 2 regressions (passed on pristine, not on the fork), 3 failing the run, 1 blocked by the environment",
	}
	for _, line := range want {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	for _, name := range []string{"both pass", "not selected", "SynchronizedBeforeSuite"} {
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
	if got := parity(&out, pristineFork, p, f, blockList{{spec: regexpOf(t, "^b$"), reason: "why"}}); got != 0 || !strings.Contains(out.String(), "0 specs differ, 0 regressions (passed on pristine, not on the fork), 0 failing the run, 1 blocked") {
		t.Errorf("got %d failing:\n%s", got, out.String())
	}
}

// Both sides broken the same way is no parity: every failure that the block list
// does not name fails the run, on both sides.
func TestParityFailsOnFailuresBothSidesShare(t *testing.T) {
	report := junitReport(`<testcase name="[It] a"></testcase><testcase name="[It] [sig-network] pods reach each other"><failure message="x"/></testcase>`)
	p, _ := specResults(strings.NewReader(report))
	f, _ := specResults(strings.NewReader(report))
	var out strings.Builder
	if got := parity(&out, pristineFork, p, f, nil); got != 1 || !strings.Contains(out.String(), "  FAILED on pristine and fork: [It] [sig-network] pods reach each other") {
		t.Errorf("got %d failing, want 1:\n%s", got, out.String())
	}
}

// A spec only the fork has fails the run when it fails: "absent -> failed" is no
// regression, but it is the series' own spec failing.
func TestParityFailsOnAFailingForkOnlySpec(t *testing.T) {
	p, _ := specResults(strings.NewReader(junitReport(`<testcase name="[It] a"></testcase>`)))
	f, _ := specResults(strings.NewReader(junitReport(`<testcase name="[It] a"></testcase><testcase name="[It] [Feature:BalloonPod] ours"><failure message="x"/></testcase>`)))
	var out strings.Builder
	if got := parity(&out, pristineFork, p, f, nil); got != 1 || !strings.Contains(out.String(), "absent -> failed: [It] [Feature:BalloonPod] ours") {
		t.Errorf("got %d failing, want 1:\n%s", got, out.String())
	}
}

func TestJUnitCountsBlockedSpecsApart(t *testing.T) {
	list := filepath.Join(t.TempDir(), "blocked.txt")
	if err := os.WriteFile(list, []byte("# comment\n\\[sig-node\\] Pod InPlace Resize Container guaranteed qos # no CAP_SYS_RESOURCE: oom_score_adj stays 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	blocked, err := readBlockList(list)
	if err != nil {
		t.Fatal(err)
	}
	report := junitReport(`
<testcase name="[It] [sig-node] Pod InPlace Resize Container guaranteed qos - 1 container resizing cpu"><failure message="oom_score_adj"/></testcase>
<testcase name="[It] [sig-node] Pod InPlace Resize Container burstable"><failure message="x"/></testcase>
<testcase name="[It] [sig-node] Pods ok"></testcase>`)
	c, err := junitCounts(strings.NewReader(report), blocked)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	c.write(&out)
	if c.passed != 1 || c.failed != 1 || len(c.blocked) != 1 || !strings.Contains(out.String(), "1 passed, 1 failed, 1 blocked by the environment") ||
		!strings.Contains(out.String(), "by the environment: no CAP_SYS_RESOURCE: oom_score_adj stays 0") {
		t.Errorf("got %+v:\n%s", c, out.String())
	}
}

func TestABlockListLineNeedsItsReason(t *testing.T) {
	list := filepath.Join(t.TempDir(), "blocked.txt")
	if err := os.WriteFile(list, []byte("some spec\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readBlockList(list); err == nil || !strings.Contains(err.Error(), "blocked.txt:1:") {
		t.Errorf("got %v, want an error naming the line", err)
	}
}

func regexpOf(t *testing.T, expr string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

func writeReport(t *testing.T, dir, side, pass, cases string) {
	t.Helper()
	d := filepath.Join(dir, side, pass)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "junit_01.xml"), []byte(junitReport(cases)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The verdict of make kind-e2e: a side whose suite never ran, a failed spec on one
// side or both, each fails the run; failures the block list names do not.
func TestKindE2ERun(t *testing.T) {
	const (
		pass    = `<testcase name="[It] a"></testcase>`
		blocked = `<testcase name="[It] [sig-node] guaranteed resize"><failure message="oom_score_adj"/></testcase>`
		broken  = `<testcase name="[It] [sig-network] pods reach each other"><failure message="x"/></testcase>`
		skipped = `<testcase name="[It] b"><skipped message="not selected"/></testcase>`
	)
	list := blockList{{spec: regexpOf(t, "guaranteed resize"), reason: "no CAP_SYS_RESOURCE"}}
	for _, tc := range []struct {
		name    string
		reports map[string]string // side/pass: cases
		sides   []string
		passes  []string
		failed  bool
		says    string
	}{
		{"both sides pass but for blocked specs", map[string]string{"fork/parallel": pass + blocked, "pristine/parallel": pass + blocked, "fork/serial": pass, "pristine/serial": pass},
			[]string{"fork", "pristine"}, []string{"parallel", "serial"}, false, "0 failing the run, 1 blocked"},
		{"the pristine side never ran its serial pass", map[string]string{"fork/parallel": pass, "pristine/parallel": pass, "fork/serial": pass},
			[]string{"fork", "pristine"}, []string{"parallel", "serial"}, true, "FAILED: the pristine side wrote no report of its serial pass"},
		{"both sides broken the same way", map[string]string{"fork/run": pass + broken, "pristine/run": pass + broken},
			[]string{"fork", "pristine"}, []string{"run"}, true, "FAILED on pristine and fork: [It] [sig-network] pods reach each other"},
		{"one side, a blocked failure", map[string]string{"fork/run": pass + blocked}, []string{"fork"}, []string{"run"}, false, "1 passed, 0 failed, 1 blocked by the environment"},
		{"one side, a failure", map[string]string{"fork/run": pass + broken}, []string{"fork"}, []string{"run"}, true, "1 passed, 1 failed"},
		{"one side that never ran", map[string]string{}, []string{"fork"}, []string{"run"}, true, "FAILED: the fork side wrote no report of its run pass"},
		{"a serial pass whose focus selects nothing", map[string]string{"fork/parallel": pass, "pristine/parallel": pass, "fork/serial": skipped, "pristine/serial": skipped},
			[]string{"fork", "pristine"}, []string{"parallel", "serial"}, true, "FAILED: the fork side's serial pass ran no spec: its focus selects none"},
		{"one side, nothing selected", map[string]string{"fork/run": skipped}, []string{"fork"}, []string{"run"}, true, "FAILED: the fork side's run pass ran no spec"},
		// make kind-upgrade's cluster against a fresh fork cluster: the fresh
		// one is the baseline, whichever order the sides are named in.
		{"the upgraded cluster regresses from a fresh fork", map[string]string{"fork/parallel": pass + `<testcase name="[It] c"></testcase>`, "upgraded/parallel": pass + `<testcase name="[It] c"><failure message="x"/></testcase>`},
			[]string{"upgraded", "fork"}, []string{"parallel"}, true, "passed -> failed REGRESSION: [It] c"},
		{"the upgraded cluster as a fresh fork", map[string]string{"fork/parallel": pass, "upgraded/parallel": pass},
			[]string{"fork", "upgraded"}, []string{"parallel"}, false, "0 specs differ, 0 regressions (passed on the fork, not on the upgraded), 0 failing the run"},
	} {
		dir := t.TempDir()
		for where, cases := range tc.reports {
			side, p, _ := strings.Cut(where, "/")
			writeReport(t, dir, side, p, cases)
		}
		var out strings.Builder
		failed, err := e2eRun(&out, dir, tc.sides, tc.passes, list)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if failed != tc.failed || !strings.Contains(out.String(), tc.says) {
			t.Errorf("%s: failed %v, want %v, saying %q:\n%s", tc.name, failed, tc.failed, tc.says, out.String())
		}
	}
}
