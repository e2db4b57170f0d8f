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

package sysshim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func run(t *testing.T, dir, name string, args ...string) (string, int) {
	t.Helper()
	t.Setenv(UnitsEnv, dir)
	var out, errOut bytes.Buffer
	code := Main(name, args, &out, &errOut)
	return out.String() + errOut.String(), code
}

// The suite's use, in order: systemd-run starts the kubelet, systemctl finds it
// running, kills it (it stays listed, dead), restarts it, and stops it at the end.
func TestUnitLifecycle(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "report", "kubelet.log")
	if out, code := run(t, dir, "systemd-run", "--version"); code != 0 || !strings.HasPrefix(out, "systemd 252") {
		t.Fatalf("--version: %d %q", code, out)
	}
	// The suite escapes $ as $$ for systemd.
	if out, code := run(t, dir, "systemd-run", "-p", "Delegate=true", "-p", "StandardError=append:"+log,
		"--unit=kubelet-20261124.service", "--slice=runtime.slice", "--remain-after-exit",
		"/bin/sh", "-c", "echo started $$0; exec sleep 60"); code != 0 {
		t.Fatalf("systemd-run: %d %s", code, out)
	}
	u := Units{Dir: dir}
	t.Cleanup(func() { u.Stop("kubelet-20261124") })
	listed := func(args ...string) string {
		out, code := run(t, dir, "systemctl", append([]string{"list-units", "*kubelet*"}, args...)...)
		if code != 0 {
			t.Fatalf("list-units: %d %s", code, out)
		}
		return out
	}
	if out := listed("--state=running"); !strings.Contains(out, "kubelet-20261124.service loaded active running") {
		t.Fatalf("running unit not listed: %q", out)
	}
	// A kill before the shell has echoed would lose the first start's line.
	waitForStarts(t, log, 1)
	if out, code := run(t, dir, "systemctl", "kill", "kubelet-20261124"); code != 0 {
		t.Fatalf("kill: %s", out)
	}
	if out := listed("--state=running"); out != "" {
		t.Fatalf("killed unit listed as running: %q", out)
	}
	if out := listed(); !strings.Contains(out, "kubelet-20261124.service loaded inactive dead") {
		t.Fatalf("killed unit not listed: %q", out)
	}
	for _, verb := range []string{"reset-failed", "restart"} {
		if out, code := run(t, dir, "systemctl", verb, "kubelet-20261124"); code != 0 {
			t.Fatalf("%s: %s", verb, out)
		}
	}
	pid, ok := u.Running("kubelet-20261124")
	if !ok {
		t.Fatal("restarted unit does not run")
	}
	// Both starts appended to the log, with $ unescaped.
	waitForStarts(t, log, 2)
	if out, code := run(t, dir, "systemctl", "stop", "kubelet-20261124.service"); code != 0 {
		t.Fatalf("stop: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet-20261124.cmd")); !os.IsNotExist(err) {
		t.Fatalf("stopped unit is still recorded: %v", err)
	}
	if startTimeOK(pid) {
		t.Fatalf("pid %d still runs", pid)
	}
}

func startTimeOK(pid int) bool { _, ok := startTime(pid); return ok }

func TestUnsupported(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"systemctl", "enable", "x"},
		{"systemctl", "kill", "missing"},
		{"systemd-run", "--user", "true"},
		{"systemd-run", "true"},
	} {
		if out, code := run(t, dir, args[0], args[1:]...); code == 0 {
			t.Errorf("%q succeeded: %s", args, out)
		}
	}
	t.Setenv(UnitsEnv, "")
	if code := Main("systemctl", []string{"list-units"}, &bytes.Buffer{}, &bytes.Buffer{}); code == 0 {
		t.Errorf("systemctl without %s succeeded", UnitsEnv)
	}
}

// waitForStarts waits until the unit's log has n lines of its starts.
func waitForStarts(t *testing.T, log string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(log)
		if strings.Count(string(data), "started /bin/sh") == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %q, want %d starts", data, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
