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
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
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
// and anything that failed, suite setup included, but for the specs blocked lists
// (counted apart). Specs that were not selected (skipped) are left out, since a
// focused e2e run skips thousands.
func junitCounts(r io.Reader, blocked blockList) (counts, error) {
	var c counts
	cases, err := readJUnit(r)
	if err != nil {
		return c, err
	}
	for _, tc := range cases {
		switch {
		case tc.result == specFailed:
			if reason, ok := blocked.reason(tc.name); ok {
				c.blocked = append(c.blocked, fmt.Sprintf("--- BLOCKED: %s\n    by the environment: %s\n", tc.name, reason))
				continue
			}
			c.failed++
			c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s\n%s\n", tc.name, tc.message))
		case tc.result == specPassed && strings.HasPrefix(tc.name, "[It] "):
			c.passed++
		}
	}
	return c, nil
}

// blockList is the list of the e2e specs the environment keeps from passing on
// either side (hack/kind-e2e-blocked.txt): one regular expression a line, matched
// against ginkgo's full spec name as the skip list is, then " # " and why. A spec
// it matches may fail without failing the run; every other failure fails it.
type blockList []blocked

type blocked struct {
	spec   *regexp.Regexp
	reason string
}

func readBlockList(name string) (blockList, error) {
	if name == "" {
		return nil, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var list blockList
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		expr, reason, ok := strings.Cut(line, " # ")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want a regular expression, \" # \" and the reason", name, n)
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		list = append(list, blocked{spec: re, reason: strings.TrimSpace(reason)})
	}
	return list, sc.Err()
}

// reason returns why the spec named so in a report is blocked, if it is. Suite
// setup and teardown never are.
func (l blockList) reason(name string) (string, bool) {
	spec, ok := strings.CutPrefix(name, "[It] ")
	if !ok {
		return "", false
	}
	for _, b := range l {
		if b.spec.MatchString(spec) {
			return b.reason, true
		}
	}
	return "", false
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

// pristineFork are the sides of a parity run: the baseline, pristine upstream,
// and the fork compared with it.
var pristineFork = [2]string{"pristine", "fork"}

// paritySides orders two sides of a run as parity compares them: pristine is the
// baseline of the fork, and a fresh fork cluster of the upgraded one (make
// kind-upgrade's cluster, which must not regress from a cluster created at the
// fork).
func paritySides(sides []string) [2]string {
	order := []string{"pristine", "fork", "upgraded"}
	a, b := sides[0], sides[1]
	if slices.Index(order, b) < slices.Index(order, a) {
		a, b = b, a
	}
	return [2]string{a, b}
}

// sideName names a side in prose.
func sideName(side string) string {
	if side == "pristine" {
		return side
	}
	return "the " + side
}

// parity writes the counts of two runs of the same suite side by side, the
// baseline's (names[0]: pristine upstream's, say) and the compared side's
// (names[1]: the fork's), then every spec whose results differ and every failed
// spec, and returns how many specs fail the run: those the baseline passed and
// the other did not (the regressions), and those that failed on either side and
// are not blocked by the environment (a spec only the fork has, say, or one that
// fails on both sides because both clusters are broken the same way).
func parity(w io.Writer, names [2]string, pristine, fork map[string]string, blocked blockList) int {
	count := func(results map[string]string, result string) int {
		n := 0
		for _, r := range results {
			if r == result {
				n++
			}
		}
		return n
	}
	fmt.Fprintf(w, "%-10s %9s %9s\n", "", names[0], names[1])
	for _, r := range []string{specPassed, specFailed} {
		fmt.Fprintf(w, "%-10s %9d %9d\n", r, count(pristine, r), count(fork, r))
	}
	result := func(results map[string]string, name string) string {
		if r, ok := results[name]; ok {
			return r
		}
		return specAbsent
	}
	specs := slices.Sorted(maps.Keys(pristine))
	for name := range fork {
		if _, ok := pristine[name]; !ok {
			specs = append(specs, name)
		}
	}
	slices.Sort(specs)
	regressions, differ, failing, blockedSpecs := 0, 0, 0, 0
	var failed []string
	for _, name := range specs {
		p, f := result(pristine, name), result(fork, name)
		var sides []string
		if p == specFailed {
			sides = append(sides, names[0])
		}
		if f == specFailed {
			sides = append(sides, names[1])
		}
		regression := p == specPassed && f != specPassed
		bad := regression
		if len(sides) > 0 {
			if reason, ok := blocked.reason(name); ok && !regression {
				blockedSpecs++
				failed = append(failed, fmt.Sprintf("  blocked on %s: %s: %s", strings.Join(sides, " and "), name, reason))
			} else {
				bad = true
				failed = append(failed, fmt.Sprintf("  FAILED on %s: %s", strings.Join(sides, " and "), name))
			}
		}
		if bad {
			failing++
		}
		if p == f {
			continue
		}
		if differ == 0 {
			fmt.Fprintf(w, "specs whose results differ (%s -> %s):\n", names[0], names[1])
		}
		differ++
		mark := ""
		if regression {
			regressions++
			mark = " REGRESSION"
		}
		fmt.Fprintf(w, "  %s -> %s%s: %s\n", p, f, mark, name)
	}
	if len(failed) > 0 {
		fmt.Fprintln(w, "specs that failed:")
		for _, line := range failed {
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintf(w, "%d specs differ, %d regressions (passed on %s, not on %s), %d failing the run, %d blocked by the environment\n",
		differ, regressions, sideName(names[0]), sideName(names[1]), failing, blockedSpecs)
	return failing
}

func parityFiles(w io.Writer, names [2]string, pristineFile, forkFile string, blocked blockList) (int, error) {
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
	return parity(w, names, sides[0], sides[1], blocked), nil
}

// e2eRun judges a make kind-e2e run: for each pass, the reports of the sides in
// dir/SIDE/PASS/junit_01.xml, compared when both sides ran (parity) or summarized
// (junit). A side without a report did not run its suite, which fails the run as
// any failing spec does. It reports whether the run failed.
func e2eRun(w io.Writer, dir string, sides, passes []string, blocked blockList) (bool, error) {
	failed := false
	for _, pass := range passes {
		reports := map[string]string{}
		for _, side := range sides {
			report := filepath.Join(dir, side, pass, "junit_01.xml")
			if _, err := os.Stat(report); err != nil {
				fmt.Fprintf(w, "FAILED: the %s side wrote no report of its %s pass (%s): its suite did not run\n", side, pass, report)
				failed = true
				continue
			}
			c, err := junitFile(report, blocked)
			if err != nil {
				return true, err
			}
			// A focus that selects nothing (a spec name that changed its
			// form) is a pass that tested nothing, not a passed one.
			if c.passed+c.failed+len(c.blocked) == 0 {
				fmt.Fprintf(w, "FAILED: the %s side's %s pass ran no spec: its focus selects none\n", side, pass)
				failed = true
			}
			reports[side] = report
		}
		if len(reports) != len(sides) {
			continue
		}
		if len(sides) == 2 {
			names := paritySides(sides)
			fmt.Fprintf(w, "== the %s pass: %s and %s, spec by spec\n", pass, names[0], names[1])
			failing, err := parityFiles(w, names, reports[names[0]], reports[names[1]], blocked)
			if err != nil {
				return true, err
			}
			failed = failed || failing > 0
			continue
		}
		fmt.Fprintf(w, "== the %s pass: %s\n", pass, sides[0])
		c, err := junitFile(reports[sides[0]], blocked)
		if err != nil {
			return true, err
		}
		c.write(w)
		failed = failed || c.failed > 0
	}
	return failed, nil
}

// junitFile counts the specs of one report.
func junitFile(name string, blocked blockList) (counts, error) {
	f, err := os.Open(name)
	if err != nil {
		return counts{}, err
	}
	defer f.Close()
	c, err := junitCounts(f, blocked)
	if err != nil {
		return counts{}, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}
