package main

import (
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
	c, err := junitCounts(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	if c.passed != 1 || c.failed != 1 || c.skipped != 0 || !strings.Contains(strings.Join(c.failures, ""), "timed out") {
		t.Errorf("got %+v", c)
	}
}
