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

package scripts

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

var lib, _ = filepath.Abs("../../lib.sh")

// contents polls file until it holds want; the timeout only keeps a broken
// watcher from hanging the test.
func waitForContents(t *testing.T, file, want string) {
	t.Helper()
	var got []byte
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		got, err = os.ReadFile(file)
		return strings.TrimSpace(string(got)) == want, err
	})
	if err != nil {
		t.Fatalf("%s holds %q, want %q: %v", file, got, want, err)
	}
}

// TestTHPIsPutBackWhenTheRunIsKilled kills the shell that set transparent huge
// pages to always with SIGKILL, which runs no trap: the old value comes back.
func TestTHPIsPutBackWhenTheRunIsKilled(t *testing.T) {
	thp := filepath.Join(t.TempDir(), "enabled")
	if err := os.WriteFile(thp, []byte("always [madvise] never\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `source "$1" && thp_always "$2" && echo set && exec sleep 600`, "-", lib, thp)
	// Its own process group, as make test's: the kill below reaches the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var said []string
	for lines.Scan() && lines.Text() != "set" {
		said = append(said, lines.Text())
	}
	if len(said) != 1 || said[0] != "transparent huge pages: always for this run (was madvise)" {
		t.Errorf("it said %q", said)
	}
	waitForContents(t, thp, "always")
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitForContents(t, thp, "madvise")
}

func TestTHPAlreadyAlwaysIsLeftAlone(t *testing.T) {
	thp := filepath.Join(t.TempDir(), "enabled")
	if err := os.WriteFile(thp, []byte("[always] madvise never\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "-c", `source "$1" && thp_always "$2"`, "-", lib, thp).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("got %q, %v; want nothing said or done", out, err)
	}
	if b, _ := os.ReadFile(thp); string(b) != "[always] madvise never\n" {
		t.Errorf("the setting changed to %q", b)
	}
}

// TestGoJSONRecordsTheExitStatus: the summary tells a go command that failed
// before printing any event by the status gojson writes beside the stream.
func TestGoJSONRecordsTheExitStatus(t *testing.T) {
	dir := t.TempDir()
	for status, cmd := range map[string]string{"0": "true", "2": "exit 2"} {
		stream := filepath.Join(dir, "step"+status+".json")
		err := exec.Command("bash", "-c", `source "$1" && gojson "$2" bash -c "$3"`, "-", lib, stream, cmd).Run()
		if (err == nil) != (status == "0") {
			t.Errorf("%s: gojson returned %v", cmd, err)
		}
		b, err := os.ReadFile(strings.TrimSuffix(stream, ".json") + ".exit")
		if err != nil || strings.TrimSpace(string(b)) != status {
			t.Errorf("%s: exit file %q, %v; want %s", cmd, b, err, status)
		}
	}
}

// A check that passed is not run again while its inputs are the same: the trees'
// commits and the files named; a change of either asks for a new run.
func TestACheckPassedBeforeOnlyWithTheSameInputs(t *testing.T) {
	out := t.TempDir()
	for _, tree := range []string{"kubernetes", "autoscaler"} {
		dir := filepath.Join(out, tree)
		if out, err := exec.Command("bash", "-c", `git init -q "$1" && git -C "$1" -c user.name=t -c user.email=t@t commit -q --allow-empty -m base`, "-", dir).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	script := filepath.Join(t.TempDir(), "check.sh")
	if err := os.WriteFile(script, []byte("echo one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(cmds string) bool {
		t.Helper()
		err := exec.Command("bash", "-c", `source "$1" && OUT=$2 && `+cmds, "-", lib, out, script).Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return err == nil
	}
	if run(`passed_before c "$(inputs_key "$3")"`) {
		t.Error("passed before it ever ran")
	}
	if !run(`passed_with c "$(inputs_key "$3")" && passed_before c "$(inputs_key "$3")"`) {
		t.Error("not passed with the inputs it passed with")
	}
	if err := os.WriteFile(script, []byte("echo two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if run(`passed_before c "$(inputs_key "$3")"`) {
		t.Error("passed before although its script changed")
	}
	if !run(`passed_with c "$(inputs_key "$3")" && git -C "$OUT/kubernetes" -c user.name=t -c user.email=t@t commit -q --allow-empty -m next && ! passed_before c "$(inputs_key "$3")"`) {
		t.Error("passed before although a tree has a new commit")
	}
}

// A cluster step's pass is reused only with the same inputs, never under CI,
// and a failure forgets it.
func TestAServerStepIsReusedOnlyWithTheSameInputs(t *testing.T) {
	work := t.TempDir() // the repository: its hack/ and build/
	out := filepath.Join(work, "_output")
	for _, tree := range []string{"kubernetes", "autoscaler"} {
		dir := filepath.Join(out, tree)
		if b, err := exec.Command("bash", "-c", `git init -q "$1" && echo a >"$1/f" && git -C "$1" add f && git -C "$1" -c user.name=t -c user.email=t@t commit -q -m base`, "-", dir).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	for _, f := range []string{"hack/test.sh", "build/image.yaml", "go.mod", "go.sum"} {
		if err := os.MkdirAll(filepath.Join(work, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), []byte("one\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The summary's verdict: a stream with a failed event failed.
	summary := filepath.Join(t.TempDir(), "summary")
	if err := os.WriteFile(summary, []byte("#!/bin/sh\n! grep -q '\"Action\":\"fail\"' \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	results := t.TempDir()
	run := func(env, cmds string) bool {
		t.Helper()
		cmd := exec.Command("bash", "-c", `source "$1" && OUT=$2 SUMMARY=$3 T=$4 && cd "$OUT/.." && `+cmds, "-", lib, out, summary, results)
		cmd.Env = append(os.Environ(), "CI=")
		if env != "" {
			cmd.Env = append(cmd.Env, env)
		}
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return err == nil
	}
	const passed = `{"Action":"pass","Package":"smoke","Test":"TestSmoke"}`
	if err := os.WriteFile(filepath.Join(results, "run.json"), []byte(passed+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(results, "run.exit"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if run("", `reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
		t.Fatal("reused before any pass")
	}
	if !run("", `keep_pass smoke "$(servers_inputs_key)" "$T/run.json" && reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
		t.Fatal("a pass with the same inputs not reused")
	}
	b, err := os.ReadFile(filepath.Join(results, "again.json"))
	if err != nil || !strings.Contains(string(b), "not run again") || !strings.HasSuffix(string(b), passed+"\n") {
		t.Errorf("reused results %q, %v: want the note, then the pass's events", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(results, "again.exit")); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Errorf("reused exit file %q, %v", b, err)
	}
	if run("CI=true", `reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
		t.Error("reused under CI")
	}
	for _, c := range []struct{ what, change string }{
		{"an edit not committed in a tree", `echo b >"$OUT/kubernetes/f"`},
		{"a file not committed in a tree", `echo b >"$OUT/autoscaler/g"`},
		{"an edit of that file", `echo c >"$OUT/autoscaler/g"`},
		{"a new commit in a tree", `git -C "$OUT/kubernetes" -c user.name=t -c user.email=t@t commit -qam next`},
		{"a change of the harness", `echo two >hack/test.sh`},
		{"a change of an image's input", `echo two >build/image.yaml`},
		{"a change of the harness's dependencies", `echo two >go.sum`},
	} {
		what, change := c.what, c.change
		if run("", change+` && reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
			t.Errorf("reused after %s", what)
		}
		if !run("", `keep_pass smoke "$(servers_inputs_key)" "$T/run.json" && reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
			t.Fatalf("after %s: a new pass not reused", what)
		}
	}
	for name, c := range map[string]struct{ events, exit string }{
		"failed":  {`{"Action":"fail","Package":"smoke","Test":"TestSmoke"}`, "1"},
		"skipped": {`{"Action":"skip","Package":"smoke","Test":"TestSmoke"}` + "\n" + `{"Action":"pass","Package":"smoke"}`, "0"},
		// go test failed (a bad flag, a timeout) after events that passed.
		"exited": {passed, "2"},
	} {
		if err := os.WriteFile(filepath.Join(results, name+".json"), []byte(c.events+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(results, name+".exit"), []byte(c.exit+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if !run("", `keep_pass smoke "$(servers_inputs_key)" "$T/run.json" && reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
			t.Fatalf("%s: the pass before not reused", name)
		}
		if run("", `keep_pass smoke "$(servers_inputs_key)" "$T/`+name+`.json" && reuse_pass smoke "$(servers_inputs_key)" "$T/again.json"`) {
			t.Errorf("%s: kept, or the pass before it reused", name)
		}
	}
}
