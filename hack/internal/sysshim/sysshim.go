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

// Package sysshim stands in for sudo, systemd-run and systemctl on a machine
// where the caller is root and systemd is not PID 1, as far as upstream's node
// e2e suite (test/e2e_node) uses them: it starts the kubelet as a "transient
// unit" with systemd-run, and kills and restarts it with systemctl
// (docs/kubelet-image-pull-gate-node-e2e.md). A unit is a process started in a
// session of its own, recorded in a folder: UNIT.cmd (its argv, NUL-separated),
// UNIT.logpath (the file its output is appended to, UNIT.log unless systemd-run
// got StandardError=append:FILE) and UNIT.pid (pid and start time).
package sysshim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// UnitsEnv names the environment variable that holds the folder of the units.
const UnitsEnv = "KUBE_CARRY_SHIM_UNITS"

// Names are the commands this package stands in for.
var Names = []string{"sudo", "systemd-run", "systemctl"}

// Main runs the command name (one of Names) with args and returns its exit code.
func Main(name string, args []string, stdout, stderr io.Writer) int {
	if name == "sudo" {
		return sudo(args, stderr)
	}
	u := Units{Dir: os.Getenv(UnitsEnv)}
	if u.Dir == "" {
		fmt.Fprintf(stderr, "%s (kube-carry shim): %s is not set\n", name, UnitsEnv)
		return 1
	}
	var err error
	switch name {
	case "systemd-run":
		err = u.systemdRun(args, stdout)
	case "systemctl":
		err = u.systemctl(args, stdout)
	default:
		err = fmt.Errorf("unknown command")
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s (kube-carry shim): %v\n", name, err)
		return 1
	}
	return 0
}

// sudo runs its command as it is: the caller is root already. It keeps the
// environment, as the suite's callers need (PATH with the shims, KUBE_TEST_REPO_LIST).
func sudo(args []string, stderr io.Writer) int {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-v", "--validate":
			return 0
		case "--":
			args = args[1:]
			goto run
		}
		args = args[1:]
	}
run:
	if len(args) == 0 {
		return 0
	}
	bin, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "sudo (kube-carry shim): %v\n", err)
		return 1
	}
	if err := syscall.Exec(bin, args, os.Environ()); err != nil {
		fmt.Fprintf(stderr, "sudo (kube-carry shim): %v\n", err)
	}
	return 1
}

// Units is the folder of the units.
type Units struct{ Dir string }

func (u Units) file(unit, ext string) string { return filepath.Join(u.Dir, unit+ext) }

// unitName drops the ".service" suffix systemctl accepts and adds.
func unitName(s string) string { return strings.TrimSuffix(s, ".service") }

// systemdRun: systemd-run [-p K=V]... [--unit=U] [--slice=S] [--remain-after-exit] CMD...
func (u Units) systemdRun(args []string, stdout io.Writer) error {
	if len(args) == 1 && args[0] == "--version" {
		// 240 or newer makes the suite ask for StandardError=append:.
		fmt.Fprintln(stdout, "systemd 252 (kube-carry shim)")
		return nil
	}
	var unit, log string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		args = args[1:]
		switch {
		case a == "-p" || a == "--property":
			if len(args) == 0 {
				return fmt.Errorf("%s needs a value", a)
			}
			k, v, _ := strings.Cut(args[0], "=")
			args = args[1:]
			if k == "StandardError" || k == "StandardOutput" {
				for _, p := range []string{"append:", "file:"} {
					if f, ok := strings.CutPrefix(v, p); ok {
						log = f
					}
				}
			}
		case strings.HasPrefix(a, "--unit="):
			unit = unitName(strings.TrimPrefix(a, "--unit="))
		case strings.HasPrefix(a, "--slice="), a == "--remain-after-exit", a == "--no-block", a == "--quiet":
		default:
			return fmt.Errorf("unsupported option %s", a)
		}
	}
	if len(args) == 0 || unit == "" {
		return errors.New("usage: systemd-run --unit=U [-p K=V]... CMD...")
	}
	if log == "" {
		log = u.file(unit, ".log")
	}
	// systemd unescapes % and $ in the command line; the suite escapes them.
	r := strings.NewReplacer("%%", "%", "$$", "$")
	for i := range args {
		args[i] = r.Replace(args[i])
	}
	if err := os.MkdirAll(u.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(u.file(unit, ".cmd"), []byte(strings.Join(args, "\x00")), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(u.file(unit, ".logpath"), []byte(log), 0o644); err != nil {
		return err
	}
	return u.start(unit)
}

// start starts a unit's command in a session of its own, its output appended to its log.
func (u Units) start(unit string) error {
	cmdline, err := os.ReadFile(u.file(unit, ".cmd"))
	if err != nil {
		return fmt.Errorf("unit %s not found", unit)
	}
	logPath, err := os.ReadFile(u.file(unit, ".logpath"))
	if err != nil {
		return err
	}
	args := strings.Split(string(cmdline), "\x00")
	if err := os.MkdirAll(filepath.Dir(string(logPath)), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(string(logPath), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	started, _ := startTime(pid)
	if err := os.WriteFile(u.file(unit, ".pid"), []byte(fmt.Sprintf("%d %s\n", pid, started)), 0o644); err != nil {
		return err
	}
	// Not waited for: the unit outlives this command; its parent is init then.
	return cmd.Process.Release()
}

// List returns the units, sorted, and for each whether its process runs.
func (u Units) List() (map[string]bool, []string) {
	cmds, _ := filepath.Glob(filepath.Join(u.Dir, "*.cmd"))
	state := map[string]bool{}
	var names []string
	for _, c := range cmds {
		unit := strings.TrimSuffix(filepath.Base(c), ".cmd")
		_, ok := u.Running(unit)
		state[unit] = ok
		names = append(names, unit)
	}
	sort.Strings(names)
	return state, names
}

// Running returns the pid of a unit whose recorded process is alive and still the
// one it started (pid and start time, so that a reused pid does not count).
func (u Units) Running(unit string) (int, bool) {
	data, err := os.ReadFile(u.file(unit, ".pid"))
	if err != nil {
		return 0, false
	}
	var pid int
	var started string
	if _, err := fmt.Sscan(string(data), &pid, &started); err != nil || pid <= 0 {
		return 0, false
	}
	if st, ok := startTime(pid); !ok || st != started {
		return 0, false
	}
	return pid, true
}

// Kill stops a unit's process: SIGTERM, SIGKILL after grace, and waits until it is gone.
func (u Units) Kill(unit string, grace time.Duration) error {
	pid, ok := u.Running(unit)
	if !ok {
		return nil
	}
	syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, ok := u.Running(unit); !ok {
			return nil
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if _, ok := u.Running(unit); !ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("unit %s (pid %d) survives SIGKILL", unit, pid)
}

// Stop kills a unit and forgets it.
func (u Units) Stop(unit string) error {
	if err := u.Kill(unit, 10*time.Second); err != nil {
		return err
	}
	for _, ext := range []string{".cmd", ".logpath", ".pid"} {
		os.Remove(u.file(unit, ext))
	}
	return nil
}

func (u Units) systemctl(args []string, stdout io.Writer) error {
	var opts, rest []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			opts = append(opts, a)
		} else {
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return errors.New("no command")
	}
	verb, units := rest[0], rest[1:]
	switch verb {
	case "list-units":
		onlyRunning := false
		for _, o := range opts {
			if o == "--state=running" {
				onlyRunning = true
			}
		}
		state, names := u.List()
		for _, unit := range names {
			if len(units) > 0 && !matchAny(units, unit) {
				continue
			}
			if state[unit] {
				fmt.Fprintf(stdout, "%s.service loaded active running kube-carry shim unit\n", unit)
			} else if !onlyRunning {
				fmt.Fprintf(stdout, "%s.service loaded inactive dead kube-carry shim unit\n", unit)
			}
		}
		return nil
	case "reset-failed", "daemon-reload":
		return nil
	}
	if len(units) == 0 {
		return fmt.Errorf("%s needs a unit", verb)
	}
	var errs []error
	for _, unit := range units {
		unit = unitName(unit)
		if _, err := os.Stat(u.file(unit, ".cmd")); err != nil {
			errs = append(errs, fmt.Errorf("unit %s not found", unit))
			continue
		}
		switch verb {
		case "kill":
			errs = append(errs, u.Kill(unit, 10*time.Second))
		case "stop":
			errs = append(errs, u.Stop(unit))
		case "start":
			if _, ok := u.Running(unit); !ok {
				errs = append(errs, u.start(unit))
			}
		case "restart":
			if err := u.Kill(unit, 10*time.Second); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, u.start(unit))
		case "is-active":
			if _, ok := u.Running(unit); !ok {
				errs = append(errs, fmt.Errorf("unit %s is inactive", unit))
			}
		default:
			// A spec that needs real systemd fails loudly.
			return fmt.Errorf("unsupported command %s", verb)
		}
	}
	return errors.Join(errs...)
}

func matchAny(patterns []string, unit string) bool {
	for _, p := range patterns {
		for _, name := range []string{unit, unit + ".service"} {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
	}
	return false
}

// startTime is field 22 of /proc/PID/stat, when the process started; false for a
// process that is gone or a zombie.
func startTime(pid int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return "", false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 || fields[0] == "Z" || fields[0] == "X" {
		return "", false
	}
	return fields[19], true
}
