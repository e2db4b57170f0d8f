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
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

const zombieLeaderEnv = "KUBE_CARRY_TEST_ZOMBIE_LEADER"

// With zombieLeaderEnv set, the test binary's main thread exits (during init,
// the main goroutine runs on it) and its other threads live on.
func init() {
	if os.Getenv(zombieLeaderEnv) != "1" {
		return
	}
	runtime.LockOSThread()
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// TestAliveWhileThreadsLive: a process whose main thread exited first is a
// zombie to /proc/PID/stat while its other threads still hold its files (a
// stopped daemon's listening port stayed in use); alive must see them.
func TestAliveWhileThreadsLive(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), zombieLeaderEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for threadAlive(fmt.Sprintf("/proc/%d/stat", pid)) {
		if time.Now().After(deadline) {
			t.Fatalf("the main thread of %d did not exit", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !alive(pid) {
		t.Errorf("alive(%d) is false while the process's other threads run", pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if alive(pid) {
		t.Errorf("alive(%d) is true after the process was killed and reaped", pid)
	}
}
