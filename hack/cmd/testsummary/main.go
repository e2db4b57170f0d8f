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

// Command testsummary reads `go test -json` streams (files or standard input) and
// prints every failed test and a last line "N passed, N failed[, N skipped]". It exits
// 1 when anything failed, including a package that failed to build. A stream's
// reruns (see rerun.go) are read with it: a test that passed on its rerun is listed
// as flaky, right above the last line, and not counted as failed. A stream whose go
// test exited non-zero (its exit status in FILE.exit, beside it) without a failing
// test or package failed too: the go command stopped before any test (a bad flag,
// overlay or module), and its error is shown.
//
//	testsummary [-steps MANIFEST -dir DIR] FILE...  summarize; with -steps, every *.json
//	                                        of DIR, and each step of MANIFEST (steps.go)
//	                                        that wrote no results is a failure
//	testsummary record PKG NAME pass|fail   turn a check's output (stdin) into test events
//	testsummary rerun -C DIR FILE -- GO TEST...  the flake rule: rerun FILE's failed upstream tests on their own
//	testsummary junit [-blocked LIST] FILE  summarize a JUnit report (ginkgo's), not counting specs it skipped;
//	                                        a failed spec LIST blocks (junit.go) does not fail it
//	testsummary parity [-blocked LIST] PRISTINE FORK  compare two JUnit reports of the same suite spec by
//	                                        spec; fails on a regression and on any failed spec LIST does not block
//	testsummary kind-e2e -dir DIR [-sides S] [-passes P] [-blocked LIST]  judge a make kind-e2e run: every
//	                                        side wrote each pass's report, and parity (both sides) or junit
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string `json:",omitempty"`
	Output  string `json:",omitempty"`
}

type counts struct {
	passed, failed, skipped int
	failures                []string
	flaky                   []string
	// blocked are the e2e specs that failed where the environment keeps them from
	// passing (junit): listed, not counted as failed.
	blocked []string
}

// actionStray marks a line of a stream that is not an event: what the go command
// printed itself (its errors, build output). Only a failed stream shows them.
const actionStray = "stray"

// readEvents reads a go test -json stream; a line that is not an event becomes an
// event of actionStray.
func readEvents(r io.Reader) ([]event, error) {
	var events []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				events = append(events, event{Action: actionStray, Output: line + "\n"})
			}
			continue
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

func readEventsFile(name string) ([]event, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readEvents(f)
}

func (c *counts) read(r io.Reader) error {
	events, err := readEvents(r)
	c.add(events)
	return err
}

// readFile counts the stream in name together with its reruns (rerunName), if any:
// a top-level test that failed and passed when rerun on its own counts as flaky, and
// its rerun's results stand in for its first ones.
func (c *counts) readFile(name string) error {
	events, err := readEventsFile(name)
	if err != nil {
		return err
	}
	if err := c.checkExit(name, events); err != nil {
		return err
	}
	reruns, err := readEventsFile(rerunName(name))
	switch {
	case err == nil:
		events = c.mergeReruns(events, reruns)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	c.add(events)
	return nil
}

// exitName is where a step writes the exit status of the go test that wrote name.
func exitName(name string) string {
	return strings.TrimSuffix(name, ".json") + ".exit"
}

// checkExit counts a failure when the go test that wrote events exited non-zero
// and the stream holds no failed test or package to say why: the go command
// failed before running anything, and printed its error instead of events.
func (c *counts) checkExit(name string, events []event) error {
	b, err := os.ReadFile(exitName(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	status, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: not an exit status: %q", exitName(name), b)
	}
	if status == 0 {
		return nil
	}
	var stray strings.Builder
	for _, e := range events {
		if e.Action == "fail" {
			return nil
		}
		if e.Action == actionStray && stray.Len() < 8192 {
			stray.WriteString(e.Output)
		}
	}
	c.failed++
	c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s: go test exited %d without a failed test or package:\n%s", name, status, stray.String()))
	return nil
}

// mergeReruns replaces the events of each top-level test that failed in first and
// passed in reruns by its rerun's events, and records it as flaky.
func (c *counts) mergeReruns(first, reruns []event) []event {
	type test struct{ pkg, root string }
	failed, passed, flaky := map[test]bool{}, map[test]bool{}, map[test]bool{}
	for _, e := range first {
		if e.Action == "fail" && e.Test != "" {
			failed[test{e.Package, rootTest(e.Test)}] = true
		}
	}
	for _, e := range reruns {
		if e.Action == "pass" && e.Test != "" && e.Test == rootTest(e.Test) {
			passed[test{e.Package, e.Test}] = true
		}
	}
	for t := range failed {
		if passed[t] {
			flaky[t] = true
		}
	}
	if len(flaky) == 0 {
		return first
	}
	output := outputs{}
	stillFailing := map[string]bool{}
	var merged []event
	for _, e := range first {
		t := test{e.Package, rootTest(e.Test)}
		if e.Test != "" && flaky[t] {
			if e.Action == "output" {
				output.add(t.pkg+" "+t.root, e.Output)
			}
			continue
		}
		if e.Action == "fail" && e.Test != "" {
			stillFailing[e.Package] = true
		}
		merged = append(merged, e)
	}
	// The package failed because of its flaky tests alone: its own fail event goes too.
	flakyPkg := map[string]bool{}
	for t := range flaky {
		flakyPkg[t.pkg] = true
	}
	kept := merged[:0]
	for _, e := range merged {
		if e.Action == "fail" && e.Test == "" && flakyPkg[e.Package] && !stillFailing[e.Package] {
			continue
		}
		kept = append(kept, e)
	}
	for _, e := range reruns {
		if e.Test != "" && flaky[test{e.Package, rootTest(e.Test)}] {
			kept = append(kept, e)
		}
	}
	var names []test
	for t := range flaky {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].pkg+" "+names[i].root < names[j].pkg+" "+names[j].root })
	for _, t := range names {
		c.flaky = append(c.flaky, fmt.Sprintf("--- FLAKY: %s %s (failed, then passed when rerun on its own)\n%s", t.pkg, t.root, output[t.pkg+" "+t.root]))
	}
	return kept
}

// add counts the events of one stream.
func (c *counts) add(events []event) {
	// Output collected per package and test, to show with a failure.
	output := outputs{}
	testFailedIn := map[string]bool{}
	// The tests of each package that started and have not ended, and the
	// panic each printed: a test binary that times out or crashes ends the
	// package with the running tests' output (the panic and which tests ran)
	// attributed to them and no event that ends them.
	running := map[string][]string{}
	panics := map[string]*panicText{}
	for _, e := range events {
		key := e.Package + " " + e.Test
		if e.Action == "pass" || e.Action == "skip" || e.Action == "fail" {
			running[e.Package] = slices.DeleteFunc(running[e.Package], func(t string) bool { return t == e.Test })
		}
		switch e.Action {
		case "run":
			running[e.Package] = append(running[e.Package], e.Test)
		case "output":
			output.add(key, e.Output)
			if panics[key] == nil && strings.HasPrefix(e.Output, "panic: ") {
				panics[key] = &panicText{}
			}
			if p := panics[key]; p != nil {
				p.add(e.Output)
			}
		case "pass":
			if e.Test != "" {
				c.passed++
			}
		case "skip":
			if e.Test != "" {
				c.skipped++
			}
		case "fail":
			if e.Test != "" {
				c.failed++
				testFailedIn[e.Package] = true
				c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s %s\n%s", e.Package, e.Test, output[key]))
			} else if !testFailedIn[e.Package] {
				// A package that fails without a failing test did not build or crashed.
				c.failed++
				var unended strings.Builder
				for _, t := range running[e.Package] {
					fmt.Fprintf(&unended, "--- %s did not end; its output:\n%s", t, output[e.Package+" "+t].String())
					if p := panics[e.Package+" "+t]; p != nil && p.text.Len() > 0 && !strings.Contains(output[e.Package+" "+t].String(), p.text.String()) {
						fmt.Fprintf(&unended, "...\n%s", p.text.String())
					}
				}
				c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s (package)\n%s%s", e.Package, output[key], unended.String()))
			}
		}
	}
}

// panicText keeps the first panic of a test's output up to the first empty line:
// its message and, for a timeout, the tests that were running.
type panicText struct {
	text    strings.Builder
	started bool
	done    bool
}

func (p *panicText) add(line string) {
	switch {
	case p.done:
	case !p.started && strings.HasPrefix(line, "panic: "):
		p.started = true
		p.text.WriteString(line)
	case p.started && strings.TrimSpace(line) == "":
		p.done = true
	case p.started && p.text.Len() < 4096:
		p.text.WriteString(line)
	}
}

// record writes a check that is not a Go test as `go test -json` events.
func record(w io.Writer, pkg, name, status string, output []byte) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(event{Action: "output", Package: pkg, Test: name, Output: string(output)}); err != nil {
		return err
	}
	return enc.Encode(event{Action: status, Package: pkg, Test: name})
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "junit" || os.Args[1] == "parity" || os.Args[1] == "kind-e2e") {
		failing, err := e2eReports(os.Stdout, os.Args[1], os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		if failing {
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 5 && os.Args[1] == "record" {
		out, err := io.ReadAll(os.Stdin)
		if err == nil {
			err = record(os.Stdout, os.Args[2], os.Args[3], os.Args[4], out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "rerun" {
		if len(os.Args) < 7 || os.Args[2] != "-C" || os.Args[5] != "--" {
			fmt.Fprintln(os.Stderr, "testsummary: usage: testsummary rerun -C DIR FILE -- go test FLAGS...")
			os.Exit(2)
		}
		if err := rerun(os.Stdout, os.Args[3], os.Args[4], os.Args[6:]); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary: rerun:", err)
			os.Exit(2)
		}
		return
	}
	if err := summarize(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
}

// e2eReports summarizes one JUnit report of ginkgo (junit) or compares two
// (parity), with -blocked naming the environment's block list; it reports whether
// the run failed.
func e2eReports(w io.Writer, cmd string, args []string) (bool, error) {
	flags := flag.NewFlagSet("testsummary "+cmd, flag.ContinueOnError)
	blockFile := flags.String("blocked", "", "the specs the environment keeps from passing, with their reasons")
	dir := flags.String("dir", "", "kind-e2e: the reports' folder, SIDE/PASS/junit_01.xml in it")
	sides := flags.String("sides", "fork pristine", "kind-e2e: the sides that ran")
	passes := flags.String("passes", "run", "kind-e2e: the suite's passes")
	if err := flags.Parse(args); err != nil {
		return false, err
	}
	blocked, err := readBlockList(*blockFile)
	if err != nil {
		return false, err
	}
	if cmd == "kind-e2e" {
		s := strings.Fields(*sides)
		slices.Sort(s) // fork, then pristine
		if *dir == "" || len(s) == 0 || len(s) > 2 || (len(s) == 2 && (s[0] != "fork" || s[1] != "pristine")) {
			return false, errors.New("usage: testsummary kind-e2e -dir DIR [-sides 'fork pristine'] [-passes 'parallel serial'] [-blocked FILE]")
		}
		return e2eRun(w, *dir, s, strings.Fields(*passes), blocked)
	}
	files := flags.Args()
	if cmd == "parity" {
		if len(files) != 2 {
			return false, errors.New("usage: testsummary parity [-blocked FILE] PRISTINE FORK")
		}
		failing, err := parityFiles(w, pristineFork, files[0], files[1], blocked)
		return failing > 0, err
	}
	if len(files) != 1 {
		return false, errors.New("usage: testsummary junit [-blocked FILE] REPORT")
	}
	f, err := os.Open(files[0])
	if err != nil {
		return false, err
	}
	defer f.Close()
	c, err := junitCounts(f, blocked)
	if err != nil {
		return false, err
	}
	c.write(w)
	return c.failed > 0, nil
}

// summarize reads the streams args name (standard input when none), and with
// -steps every stream of -dir and the manifest's checks, and prints the summary.
func summarize(args []string) error {
	flags := flag.NewFlagSet("testsummary", flag.ContinueOnError)
	manifest := flags.String("steps", "", "the steps' manifest: each step's result file must hold results")
	dir := flags.String("dir", "", "with -steps: the directory of the result files, all of whose *.json are read")
	if err := flags.Parse(args); err != nil {
		return err
	}
	var c counts
	files := flags.Args()
	var steps []step
	if *manifest != "" {
		if *dir == "" {
			return errors.New("-steps needs -dir")
		}
		var err error
		if steps, err = readManifest(*manifest); err != nil {
			return err
		}
		all, err := filepath.Glob(filepath.Join(*dir, "*.json"))
		if err != nil {
			return err
		}
		files = append(files, all...)
	} else if len(files) == 0 {
		if err := c.read(os.Stdin); err != nil {
			return err
		}
	}
	sort.Strings(files)
	for _, name := range files {
		if err := c.readFile(name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := c.checkSteps(steps, *dir, os.Getenv("CI") == "true"); err != nil {
		return err
	}
	c.print()
	return nil
}

// print writes the failures and the summary line, and exits 1 when anything failed.
func (c *counts) print() {
	c.write(os.Stdout)
	if c.failed > 0 {
		os.Exit(1)
	}
}

// write writes the failures, the flaky and blocked tests, and the summary line.
func (c *counts) write(w io.Writer) {
	for _, f := range c.failures {
		fmt.Fprint(w, f)
	}
	for _, f := range c.flaky {
		fmt.Fprint(w, f)
	}
	for _, b := range c.blocked {
		fmt.Fprint(w, b)
	}
	if len(c.flaky) > 0 {
		fmt.Fprintf(w, "%d flaky: upstream tests that failed, then passed when rerun on their own (not counted as failed)\n", len(c.flaky))
	}
	line := fmt.Sprintf("%d passed, %d failed", c.passed, c.failed)
	if c.skipped > 0 {
		line += fmt.Sprintf(", %d skipped", c.skipped)
	}
	if len(c.blocked) > 0 {
		line += fmt.Sprintf(", %d blocked by the environment", len(c.blocked))
	}
	fmt.Fprintln(w, line)
}
