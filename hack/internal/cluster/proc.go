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

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Daemon is one process the cluster runs, with its pid file and log under the cluster folder.
type Daemon struct {
	Name string
	Args []string // argv, Args[0] is the binary
	env  []string
	// Port the daemon listens on, checked before it starts ("" for none).
	Port string
	// Healthy reports whether the daemon serves; started is when this run started
	// it (zero when it was running already). nil when starting is enough.
	Healthy func(ctx context.Context, started time.Time) error
}

func (c *Cluster) pidFile(name string) string { return filepath.Join(c.Dir, "run", name+".pid") }
func (c *Cluster) logFile(name string) string { return filepath.Join(c.Dir, "logs", name+".log") }

// Running returns the pid of the daemon when its recorded process is alive and is
// still the process this cluster started: the pid file records the pid with its
// start time, so a reused pid is not mistaken for the daemon.
func (c *Cluster) Running(name string) (int, bool) {
	data, err := os.ReadFile(c.pidFile(name))
	if err != nil {
		return 0, false
	}
	var pid int
	var started string
	if _, err := fmt.Sscan(string(data), &pid, &started); err != nil || pid <= 0 {
		return 0, false
	}
	if st, ok := startTime(pid); !ok || st != started || !alive(pid) {
		return 0, false
	}
	return pid, true
}

// startTime is field 22 of /proc/PID/stat: when the process started, in clock ticks.
func startTime(pid int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return "", false
	}
	return fields[19], true
}

// Start starts the daemon unless it already runs, then waits until it is healthy.
func (c *Cluster) Start(ctx context.Context, d Daemon) error {
	if pid, ok := c.Running(d.Name); ok {
		c.Logf("%-24s already running (pid %d)", d.Name, pid)
		return c.waitHealthy(ctx, d, time.Time{})
	}
	if d.Port != "" {
		if err := PortFree(d.Port); err != nil {
			return fmt.Errorf("%s cannot start: %w", d.Name, err)
		}
	}
	if _, err := exec.LookPath(d.Args[0]); err != nil {
		return fmt.Errorf("%s: %w", d.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(c.logFile(d.Name)), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(c.logFile(d.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(d.Args[0], d.Args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), d.env...)
	cmd.Dir = c.Dir
	// A session of its own: the daemon outlives this command and its terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.Name, err)
	}
	startedAt := time.Now()
	pid := cmd.Process.Pid
	started, _ := startTime(pid)
	if err := os.WriteFile(c.pidFile(d.Name), []byte(fmt.Sprintf("%d %s\n", pid, started)), 0o644); err != nil {
		return err
	}
	// Reap the child if it exits while this command still runs.
	go cmd.Wait()
	c.Logf("%-24s started (pid %d, log %s)", d.Name, pid, c.Rel(c.logFile(d.Name)))
	return c.waitHealthy(ctx, d, startedAt)
}

func (c *Cluster) waitHealthy(ctx context.Context, d Daemon, started time.Time) error {
	if d.Healthy == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var last error
	for {
		if _, ok := c.Running(d.Name); !ok {
			return fmt.Errorf("%s exited; the last lines of %s:\n%s", d.Name, c.logFile(d.Name), Tail(c.logFile(d.Name), 25))
		}
		if last = d.Healthy(ctx, started); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become healthy within %s (%v); the last lines of %s:\n%s", d.Name, c.Timeout, last, c.logFile(d.Name), Tail(c.logFile(d.Name), 25))
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Stop stops the daemon: SIGTERM, then SIGKILL after grace.
func (c *Cluster) Stop(name string, grace time.Duration) error {
	pid, ok := c.Running(name)
	if !ok {
		os.Remove(c.pidFile(name))
		return nil
	}
	if err := KillAndWait(pid, grace); err != nil {
		return fmt.Errorf("stopping %s: %w", name, err)
	}
	c.Logf("%-24s stopped", name)
	return os.Remove(c.pidFile(name))
}

// crash kills the daemon with SIGKILL, as a crash would: it runs none of its
// shutdown.
func (c *Cluster) crash(name string) error {
	pid, ok := c.Running(name)
	if !ok {
		return fmt.Errorf("%s is not running", name)
	}
	if err := KillAndWait(pid, 0); err != nil {
		return fmt.Errorf("killing %s: %w", name, err)
	}
	c.Logf("%-24s killed", name)
	return os.Remove(c.pidFile(name))
}

// KillAndWait sends SIGTERM and waits grace for the process to exit, then
// sends SIGKILL; a grace of zero sends SIGKILL only.
func KillAndWait(pid int, grace time.Duration) error {
	if grace > 0 {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 50; i++ {
		if !alive(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("pid %d survives SIGKILL", pid)
}

// alive is false for a process that is gone or a zombie. A Go program's main
// thread may exit before its other threads: it is then a zombie while they
// still hold the process's files, its listening ports among them, so the
// process is alive while any of its threads is.
func alive(pid int) bool {
	if threadAlive(fmt.Sprintf("/proc/%d/stat", pid)) {
		return true
	}
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, t := range threads {
		if threadAlive(t) {
			return true
		}
	}
	return false
}

// threadAlive reads a stat file of /proc: false when it is gone or its state
// is zombie or dead.
func threadAlive(stat string) bool {
	data, err := os.ReadFile(stat)
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z' && data[i+2] != 'X'
}

// PortFree fails with a clear message when something listens on host:port already.
func PortFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		msg := fmt.Sprintf("%s is in use by another process", addr)
		if out, err := exec.Command("ss", "-Hltnp", "sport", "= :"+addr[strings.LastIndex(addr, ":")+1:]).Output(); err == nil && len(out) > 0 {
			msg += ":\n" + strings.TrimSpace(string(out))
		}
		return errors.New(msg + "\nstop it, or stop the cluster that uses it ('make cluster-down')")
	}
	return l.Close()
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
