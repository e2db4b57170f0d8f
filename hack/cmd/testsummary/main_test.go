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
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCountsTestsAndBuildFailures(t *testing.T) {
	stream := strings.Join([]string{
		`# example.io/broken`,
		`{"Action":"run","Package":"example.io/a","Test":"TestOK"}`,
		`{"Action":"pass","Package":"example.io/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"example.io/a","Test":"TestBad","Output":"a_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"example.io/a","Test":"TestBad"}`,
		`{"Action":"fail","Package":"example.io/a"}`,
		`{"Action":"skip","Package":"example.io/a","Test":"TestSkipped"}`,
		`{"Action":"output","Package":"example.io/broken","Output":"FAIL\texample.io/broken [build failed]\n"}`,
		`{"Action":"fail","Package":"example.io/broken"}`,
		`{"Action":"pass","Package":"example.io/ok"}`,
	}, "\n")
	var c counts
	if err := c.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if c.passed != 1 || c.failed != 2 || c.skipped != 1 {
		t.Errorf("got %d passed, %d failed, %d skipped; want 1, 2, 1", c.passed, c.failed, c.skipped)
	}
	all := strings.Join(c.failures, "")
	if !strings.Contains(all, "TestBad") || !strings.Contains(all, "boom") || !strings.Contains(all, "example.io/broken (package)") {
		t.Errorf("failures:\n%s", all)
	}
}

// A test that starts servers in its process prints their logs between its own
// lines: its failure shows what it reported, however long the logs before it.
func TestAFailureShowsTheTestsOwnLinesAfterLongLogs(t *testing.T) {
	outputLine := func(output string) string {
		b, err := json.Marshal(event{Action: "output", Package: "example.io/a", Test: "TestServers", Output: output})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lines := []string{outputLine("=== RUN   TestServers\n")}
	for i := range 200 {
		lines = append(lines, outputLine(fmt.Sprintf("I1129 10:48:19.%06d    6755 handler.go:309] Adding GroupVersion %d to ResourceManager\n", i, i)))
	}
	lines = append(lines,
		outputLine("    servers_test.go:183: the leader wrote after the lease expired:\n"),
		outputLine("          +1.2s MODIFIED TurningOff by apiserver-a\n"),
		outputLine("    feature_gate.go:170: I1129 10:48:20.0] Updated featureGates\n"),
		outputLine("I1129 10:48:21.000000    6755 handler.go:309] more server logs\n"),
		outputLine("--- FAIL: TestServers (63.15s)\n"),
		`{"Action":"fail","Package":"example.io/a","Test":"TestServers"}`,
	)
	var c counts
	if err := c.read(strings.NewReader(strings.Join(lines, "\n"))); err != nil {
		t.Fatal(err)
	}
	if len(c.failures) != 1 {
		t.Fatalf("failures: %q", c.failures)
	}
	shown := c.failures[0]
	for _, want := range []string{"servers_test.go:183: the leader wrote after the lease expired", "+1.2s MODIFIED TurningOff by apiserver-a", "=== RUN   TestServers"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the failure does not show %q:\n%s", want, shown)
		}
	}
	own, _, found := strings.Cut(shown, "its output from the start")
	if !found || strings.Contains(own, "feature_gate.go") || strings.Contains(own, "more server logs") {
		t.Errorf("want the test's own lines first, without log lines:\n%s", own)
	}
}

func TestRecordedChecksAreCounted(t *testing.T) {
	var b strings.Builder
	if err := record(&b, "verify", "gofmt", "pass", []byte("ok\n")); err != nil {
		t.Fatal(err)
	}
	if err := record(&b, "verify", "roundtrip", "fail", []byte("does not apply\n")); err != nil {
		t.Fatal(err)
	}
	var c counts
	if err := c.read(strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
	if c.passed != 1 || c.failed != 1 || !strings.Contains(strings.Join(c.failures, ""), "does not apply") {
		t.Errorf("got %+v", c)
	}
}

func TestJUnitLeavesUnselectedSpecsOut(t *testing.T) {
	report := `<?xml version="1.0"?>
<testsuites><testsuite name="Kubernetes e2e suite">
<testcase name="[SynchronizedBeforeSuite]"></testcase>
<testcase name="[It] [sig-node] Pods should get a host IP"></testcase>
<testcase name="[sig-node] other"><skipped message="skipped"/></testcase>
<testcase name="[It] [sig-storage] broken"><failure message="timed out">trace</failure></testcase>
</testsuite></testsuites>`
	c, err := junitCounts(strings.NewReader(report), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.passed != 1 || c.failed != 1 || c.skipped != 0 || !strings.Contains(strings.Join(c.failures, ""), "timed out") {
		t.Errorf("got %+v", c)
	}
}

// fixtureRepo makes a git repository whose first commit plays pristine upstream and
// whose second plays the series: it adds a test and changes an upstream one. Every
// test named *Flaky fails on its first run and passes after (marks in FIXTURE_MARKS).
func fixtureRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	write("go.mod", "module example.com/fixture\n\ngo 1.22\n")
	write("helper_test.go", `package fixture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func failOnce(t *testing.T) {
	mark := filepath.Join(os.Getenv("FIXTURE_MARKS"), strings.ReplaceAll(t.Name(), "/", "_"))
	if _, err := os.Stat(mark); err != nil {
		os.WriteFile(mark, nil, 0o644)
		t.Fatal("first run")
	}
}
`)
	write("upstream_test.go", `package fixture

import "testing"

func TestUpstreamFlaky(t *testing.T) {
	t.Run("sub", func(t *testing.T) { failOnce(t) })
}

func TestUpstreamBroken(t *testing.T) { t.Fatal("always") }

func TestUpstreamChangedFlaky(t *testing.T) { failOnce(t) }

func TestUpstreamStable(t *testing.T) {}
`)
	run("git", "init", "-q")
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "pristine")
	write("upstream_test.go", `package fixture

import "testing"

func TestUpstreamFlaky(t *testing.T) {
	t.Run("sub", func(t *testing.T) { failOnce(t) })
}

func TestUpstreamBroken(t *testing.T) { t.Fatal("always") }

func TestUpstreamChangedFlaky(t *testing.T) {
	// changed by the series
	failOnce(t)
}

func TestUpstreamStable(t *testing.T) {}
`)
	write("ours_test.go", `package fixture

import "testing"

func TestOursFlaky(t *testing.T) { failOnce(t) }
`)
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "series")
	return dir
}

func TestFlakeRule(t *testing.T) {
	dir := fixtureRepo(t)
	t.Setenv("FIXTURE_MARKS", t.TempDir())
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	goTest := []string{"go", "test", "-count=1", "-json"}
	stream := filepath.Join(t.TempDir(), "fixture.json")
	out, _ := exec.Command("bash", "-c", `cd "$1" && shift && "$@" ./...`, "-", dir, "go", "test", "-count=1", "-json").CombinedOutput()
	if err := os.WriteFile(stream, out, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := rerun(&log, dir, stream, goTest); err != nil {
		t.Fatal(err)
	}
	t.Logf("rerun:\n%s", log.String())
	reruns, err := os.ReadFile(rerunName(stream))
	if err != nil {
		t.Fatal(err)
	}
	for _, own := range []string{"TestOursFlaky", "TestUpstreamChangedFlaky"} {
		if strings.Contains(string(reruns), own) {
			t.Errorf("the project's own test %s was rerun", own)
		}
		if !strings.Contains(log.String(), "not rerun (the project's own test): example.com/fixture "+own) {
			t.Errorf("no word that %s is the project's own", own)
		}
	}
	var c counts
	if err := c.readFile(stream); err != nil {
		t.Fatal(err)
	}
	// Passed: TestUpstreamStable, then TestUpstreamFlaky and its subtest on the rerun.
	// Failed: both of ours and TestUpstreamBroken (twice), and nothing for the package.
	if c.passed != 3 || c.failed != 3 || len(c.flaky) != 1 {
		t.Errorf("got %d passed, %d failed, %d flaky; want 3, 3, 1\nfailures:\n%s", c.passed, c.failed, len(c.flaky), strings.Join(c.failures, ""))
	}
	if len(c.flaky) == 1 && !strings.HasPrefix(c.flaky[0], "--- FLAKY: example.com/fixture TestUpstreamFlaky ") {
		t.Errorf("flaky: %s", c.flaky[0])
	}
	for _, want := range []string{"TestOursFlaky", "TestUpstreamChangedFlaky", "TestUpstreamBroken"} {
		if !strings.Contains(strings.Join(c.failures, ""), "--- FAIL: example.com/fixture "+want) {
			t.Errorf("%s is not among the failures", want)
		}
	}
}

func TestCrashedPackagesAreNotRerun(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"fail","Package":"example.io/a","Test":"TestA"}`,
		`{"Action":"output","Package":"example.io/b","Test":"TestB","Output":"panic: boom\n"}`,
		`{"Action":"fail","Package":"example.io/b","Test":"TestB"}`,
		`{"Action":"output","Package":"example.io/c","Output":"panic: test timed out after 10m0s\n"}`,
		`{"Action":"fail","Package":"example.io/c","Test":"TestC/sub"}`,
	}, "\n")
	events, err := readEvents(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	got := failedRoots(events)
	if len(got) != 1 || len(got["example.io/a"]) != 1 || got["example.io/a"][0] != "TestA" {
		t.Errorf("got %v, want only example.io/a TestA", got)
	}
}

// A test binary that times out ends its package with the running test's output
// (its logs, the panic and which tests ran) and no event ending that test: the
// failure names the test and shows the panic, so that a run on CI can be read.
func TestATimedOutPackageNamesTheTestThatDidNotEnd(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.io/hang\n\ngo 1.26\n")
	writeFile(t, filepath.Join(dir, "a_test.go"), `package hang

import (
	"strings"
	"testing"
	"time"
)

func TestFast(t *testing.T) {}

func TestHang(t *testing.T) {
	t.Log("waiting for the server")
	for range 300 {
		t.Log(strings.Repeat("a log line that fills the kept output ", 2))
	}
	time.Sleep(time.Hour)
}
`)
	cmd := exec.Command("go", "test", "-json", "-timeout", "2s", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("the hanging test passed:\n%s", out)
	}
	var c counts
	if err := c.read(strings.NewReader(string(out))); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(c.failures, "")
	for _, want := range []string{"--- FAIL: example.io/hang (package)", "--- TestHang did not end", "waiting for the server", "panic: test timed out after 2s", "running tests:"} {
		if !strings.Contains(all, want) {
			t.Errorf("failures lack %q:\n%s", want, all)
		}
	}
	if c.passed != 1 || c.failed != 1 {
		t.Errorf("got %d passed, %d failed; want 1 and 1 (the package)", c.passed, c.failed)
	}
}
