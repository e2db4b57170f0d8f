// Command testsummary reads `go test -json` streams (files or standard input) and
// prints every failed test and a last line "N passed, N failed[, N skipped]". It exits
// 1 when anything failed, including a package that failed to build.
//
//	testsummary FILE...                     summarize
//	testsummary record PKG NAME pass|fail   turn a check's output (stdin) into test events
//	testsummary junit FILE                  summarize a JUnit report (ginkgo's), not counting specs it skipped
package main

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
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
}

func (c *counts) read(r io.Reader) error {
	// Output collected per package and test, to show with a failure.
	output := map[string]*strings.Builder{}
	testFailedIn := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			continue // build output and other non-JSON lines
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			b := output[key]
			if b == nil {
				b = &strings.Builder{}
				output[key] = b
			}
			if b.Len() < 8192 {
				b.WriteString(e.Output)
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
				c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s %s\n%s", e.Package, e.Test, text(output[key])))
			} else if !testFailedIn[e.Package] {
				// A package that fails without a failing test did not build or crashed.
				c.failed++
				c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s (package)\n%s", e.Package, text(output[key])))
			}
		}
	}
	return sc.Err()
}

func text(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	return b.String()
}

// record writes a check that is not a Go test as `go test -json` events.
func record(w io.Writer, pkg, name, status string, output []byte) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(event{Action: "output", Package: pkg, Test: name, Output: string(output)}); err != nil {
		return err
	}
	return enc.Encode(event{Action: status, Package: pkg, Test: name})
}

// junitCounts reads a JUnit XML report of ginkgo: specs ("[It] ...") that passed,
// and anything that failed, suite setup included. Specs that were not selected
// (skipped) are left out, since a focused e2e run skips thousands.
func junitCounts(r io.Reader) (counts, error) {
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
	var c counts
	if err := xml.NewDecoder(r).Decode(&report); err != nil {
		return c, err
	}
	for _, s := range report.Suites {
		for _, tc := range s.Cases {
			switch {
			case tc.Failure != nil:
				c.failed++
				c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s\n%s\n", tc.Name, tc.Failure.Message))
			case tc.Error != nil:
				c.failed++
				c.failures = append(c.failures, fmt.Sprintf("--- FAIL: %s\n%s\n", tc.Name, tc.Error.Message))
			case tc.Skipped == nil && strings.HasPrefix(tc.Name, "[It] "):
				c.passed++
			}
		}
	}
	return c, nil
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "junit" {
		f, err := os.Open(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		c, err := junitCounts(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		c.print()
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
	var c counts
	if len(os.Args) == 1 {
		if err := c.read(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	files := os.Args[1:]
	sort.Strings(files)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		err = c.read(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", name+":", err)
			os.Exit(2)
		}
	}
	c.print()
}

// print writes the failures and the summary line, and exits 1 when anything failed.
func (c *counts) print() {
	for _, f := range c.failures {
		fmt.Print(f)
	}
	line := fmt.Sprintf("%d passed, %d failed", c.passed, c.failed)
	if c.skipped > 0 {
		line += fmt.Sprintf(", %d skipped", c.skipped)
	}
	fmt.Println(line)
	if c.failed > 0 {
		os.Exit(1)
	}
}
