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
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// The results of a spec in a JUnit report of ginkgo.
const (
	specPassed  = "passed"
	specFailed  = "failed"
	specSkipped = "skipped" // not selected, or skipped when it ran
	specAbsent  = "absent"  // not in the report: the suite has no such spec
)

// junitCase is one testcase of a JUnit report: a spec ("[It] ..."), or suite setup
// and teardown, which count only when they fail.
type junitCase struct {
	name, result, message string
}

func readJUnit(r io.Reader) ([]junitCase, error) {
	var report struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Skipped *struct{} `xml:"skipped"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.NewDecoder(r).Decode(&report); err != nil {
		return nil, err
	}
	var cases []junitCase
	for _, s := range report.Suites {
		for _, tc := range s.Cases {
			c := junitCase{name: tc.Name, result: specPassed}
			switch {
			case tc.Failure != nil:
				c.result, c.message = specFailed, tc.Failure.Message
			case tc.Error != nil:
				c.result, c.message = specFailed, tc.Error.Message
			case tc.Skipped != nil:
				c.result = specSkipped
			}
			cases = append(cases, c)
		}
	}
	return cases, nil
}

// junitCounts reads a JUnit XML report of ginkgo: specs ("[It] ...") that passed,
// and anything that failed, suite setup included. Specs that were not selected
// (skipped) are left out, since a focused e2e run skips thousands.
func junitCounts(r io.Reader) (counts, error) {
	var c counts
	cases, err := readJUnit(r)
	if err != nil {
		return c, err
	}
	for _, tc := range cases {
		switch {
		case tc.result == specFailed:
			c.failed++
			c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s\n%s\n", tc.name, tc.message))
		case tc.result == specPassed && strings.HasPrefix(tc.name, "[It] "):
			c.passed++
		}
	}
	return c, nil
}

// specResults maps each spec and each failed setup of a report to its result.
func specResults(r io.Reader) (map[string]string, error) {
	cases, err := readJUnit(r)
	if err != nil {
		return nil, err
	}
	results := map[string]string{}
	for _, tc := range cases {
		if strings.HasPrefix(tc.name, "[It] ") || tc.result == specFailed {
			results[tc.name] = tc.result
		}
	}
	return results, nil
}

// parity writes the counts of two runs of the same suite side by side, pristine
// upstream's and the fork's, then every spec whose results differ, and returns how
// many specs pristine passed and the fork did not: the regressions.
func parity(w io.Writer, pristine, fork map[string]string) int {
	count := func(results map[string]string, result string) int {
		n := 0
		for _, r := range results {
			if r == result {
				n++
			}
		}
		return n
	}
	fmt.Fprintf(w, "%-10s %9s %9s\n", "", "pristine", "fork")
	for _, r := range []string{specPassed, specFailed} {
		fmt.Fprintf(w, "%-10s %9d %9d\n", r, count(pristine, r), count(fork, r))
	}
	result := func(results map[string]string, name string) string {
		if r, ok := results[name]; ok {
			return r
		}
		return specAbsent
	}
	names := slices.Sorted(maps.Keys(pristine))
	for name := range fork {
		if _, ok := pristine[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	regressions, differ := 0, 0
	for _, name := range names {
		p, f := result(pristine, name), result(fork, name)
		if p == f {
			continue
		}
		if differ == 0 {
			fmt.Fprintln(w, "specs whose results differ (pristine -> fork):")
		}
		differ++
		mark := ""
		if p == specPassed {
			regressions++
			mark = " REGRESSION"
		}
		fmt.Fprintf(w, "  %s -> %s%s: %s\n", p, f, mark, name)
	}
	fmt.Fprintf(w, "%d specs differ, %d regressions (passed on pristine, not on the fork)\n", differ, regressions)
	return regressions
}

func parityFiles(w io.Writer, pristineFile, forkFile string) (int, error) {
	var sides [2]map[string]string
	for i, name := range []string{pristineFile, forkFile} {
		f, err := os.Open(name)
		if err != nil {
			return 0, err
		}
		sides[i], err = specResults(f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	return parity(w, sides[0], sides[1]), nil
}
