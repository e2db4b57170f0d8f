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

// The steps' manifest: what make test must have run. A step that vanished (its
// script exited early, its go command failed before printing an event, a shell
// condition skipped it) writes no results, which a summary of the results alone
// cannot tell from a step with nothing to report. The manifest names each step's
// result file; one that is missing or holds no event fails the run.
//
// One line a step, '#' starts a comment:
//
//	RESULT-FILE MODE STEP NAME...
//
// MODE is "-", or "must-run" for a step whose tests skip themselves when they
// cannot run (not root, a cluster already up): under CI (CI=true) such a skip
// fails the run, with the test's reason.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

type step struct {
	file, name string
	mustRun    bool
}

func readManifest(name string) ([]step, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []step
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 || (fields[1] != "-" && fields[1] != "must-run") {
			return nil, fmt.Errorf("%s:%d: want RESULT-FILE -|must-run STEP NAME, got %q", name, n, sc.Text())
		}
		steps = append(steps, step{file: fields[0], name: strings.Join(fields[2:], " "), mustRun: fields[1] == "must-run"})
	}
	return steps, sc.Err()
}

// checkSteps counts a failure for each step whose result file in dir is missing
// or holds no event, and, under CI, for each test of a must-run step that
// skipped itself.
func (c *counts) checkSteps(steps []step, dir string, ci bool) error {
	for _, s := range steps {
		path := filepath.Join(dir, s.file)
		events, err := readEventsFile(path)
		if os.IsNotExist(err) {
			c.fail(fmt.Sprintf("--- FAIL: step %q wrote no results: %s is missing\n", s.name, path))
			continue
		}
		if err != nil {
			return err
		}
		var results, skips []event
		output := outputs{}
		for _, e := range events {
			switch e.Action {
			case "pass", "fail", "skip":
				results = append(results, e)
				if e.Action == "skip" && e.Test != "" {
					skips = append(skips, e)
				}
			case "output":
				output.add(e.Package+" "+e.Test, e.Output)
			}
		}
		if len(results) == 0 {
			c.fail(fmt.Sprintf("--- FAIL: step %q wrote no results: %s holds no test event\n", s.name, path))
			continue
		}
		if !s.mustRun || !ci {
			continue
		}
		for _, e := range skips {
			c.fail(fmt.Sprintf("--- FAIL: %s %s skipped itself under CI (step %q must run):\n%s", e.Package, e.Test, s.name, output[e.Package+" "+e.Test]))
		}
	}
	return nil
}

func (c *counts) fail(failure string) {
	c.failed++
	c.failures = append(c.failures, failure)
}
