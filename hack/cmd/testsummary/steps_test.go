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
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runGoTest runs go test -json in a module of one passing test, as make test's
// gotest does: the stream into name, the exit status beside it.
func runGoTest(t *testing.T, name string, flags ...string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/fixture\n\ngo 1.22\n")
	writeFile(t, filepath.Join(dir, "a_test.go"), "package fixture\n\nimport \"testing\"\n\nfunc TestA(t *testing.T) {}\n")
	cmd := exec.Command("go", append(append([]string{"test", "-count=1", "-json"}, flags...), "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	status := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	writeFile(t, name, string(out))
	writeFile(t, exitName(name), strconv.Itoa(status)+"\n")
}

func TestAGoCommandErrorFails(t *testing.T) {
	for name, flags := range map[string][]string{
		"bad flag value": {"-p=none"},
		"bad overlay":    {"-overlay", "/nonexistent/overlay.json"},
	} {
		t.Run(name, func(t *testing.T) {
			stream := filepath.Join(t.TempDir(), "step.json")
			runGoTest(t, stream, flags...)
			var c counts
			if err := c.readFile(stream); err != nil {
				t.Fatal(err)
			}
			all := strings.Join(c.failures, "")
			if c.failed != 1 || !strings.Contains(all, "without a failed test or package") {
				t.Errorf("got %d failed, want 1 for the go command's error; failures:\n%s", c.failed, all)
			}
			out, _ := os.ReadFile(stream)
			if first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n"); !strings.Contains(all, first) {
				t.Errorf("the failure does not show the go command's error %q:\n%s", first, all)
			}
		})
	}
}

func TestAPassingGoTestHasNoExitFailure(t *testing.T) {
	stream := filepath.Join(t.TempDir(), "step.json")
	runGoTest(t, stream)
	var c counts
	if err := c.readFile(stream); err != nil {
		t.Fatal(err)
	}
	if c.passed != 1 || c.failed != 0 {
		t.Errorf("got %d passed, %d failed; want 1, 0:\n%s", c.passed, c.failed, strings.Join(c.failures, ""))
	}
}

func TestAFailedTestExplainsTheExitStatus(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "step.json")
	writeFile(t, stream, `{"Action":"fail","Package":"example.io/a","Test":"TestA"}
{"Action":"fail","Package":"example.io/a"}
`)
	writeFile(t, exitName(stream), "1\n")
	var c counts
	if err := c.readFile(stream); err != nil {
		t.Fatal(err)
	}
	if c.failed != 1 {
		t.Errorf("got %d failed, want 1 (the test alone):\n%s", c.failed, strings.Join(c.failures, ""))
	}
}

func TestStepsThatWroteNoResultsFail(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "steps.txt")
	writeFile(t, manifest, `# result file, mode, step
ran.json      -         the step that ran
empty.json    -         a step whose script exited before its go test
missing.json  -         a step that never started
smoke.json    must-run  the cluster smoke
`)
	results := filepath.Join(dir, "results")
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(results, "ran.json"), `{"Action":"pass","Package":"p","Test":"TestA"}`+"\n")
	writeFile(t, filepath.Join(results, "empty.json"), "go: build flag -race is broken\n")
	writeFile(t, filepath.Join(results, "smoke.json"), `{"Action":"output","Package":"c","Test":"TestSmoke","Output":"smoke_test.go:45: the local cluster needs root\n"}
{"Action":"skip","Package":"c","Test":"TestSmoke"}
{"Action":"pass","Package":"c"}
`)
	steps, err := readManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range []bool{false, true} {
		var c counts
		if err := c.checkSteps(steps, results, ci); err != nil {
			t.Fatal(err)
		}
		all := strings.Join(c.failures, "")
		for _, want := range []string{
			`step "a step whose script exited before its go test" wrote no results: ` + filepath.Join(results, "empty.json") + " holds no test event",
			`step "a step that never started" wrote no results: ` + filepath.Join(results, "missing.json") + " is missing",
		} {
			if !strings.Contains(all, want) {
				t.Errorf("CI=%v: no failure %q in:\n%s", ci, want, all)
			}
		}
		skipped := strings.Contains(all, `c TestSmoke skipped itself under CI (step "the cluster smoke" must run):`) &&
			strings.Contains(all, "the local cluster needs root")
		if want := 2; !ci && (c.failed != want || skipped) {
			t.Errorf("CI=false: got %d failures, want %d (a skip outside CI is a skip):\n%s", c.failed, want, all)
		}
		if want := 3; ci && (c.failed != want || !skipped) {
			t.Errorf("CI=true: got %d failures, want %d with the smoke's skip and its reason:\n%s", c.failed, want, all)
		}
	}
}

func TestAManifestLineWithoutAModeIsAnError(t *testing.T) {
	manifest := filepath.Join(t.TempDir(), "steps.txt")
	writeFile(t, manifest, "verify.json verify\n")
	if _, err := readManifest(manifest); err == nil || !strings.Contains(err.Error(), "steps.txt:1: want RESULT-FILE") {
		t.Errorf("got %v, want an error naming the line", err)
	}
}
