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

package app

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
)

// setSizeCluster has node-a with an actuated balloon of cpu 2, memory 4Gi.
func setSizeCluster() []runtime.Object {
	return []runtime.Object{newNode("node-a", "4", "16Gi"), newBalloon("balloon-a", "node-a", "2", "4Gi")}
}

func TestSetSizeComputesBalloonRequests(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		wantRequests  v1.ResourceList
		wantEffective string
		wantNote      string
	}{{
		name:          "cpu only keeps the memory request",
		args:          []string{"--cpu", "3"},
		wantRequests:  resources("1", "4Gi"),
		wantEffective: "cpu=3,memory=12Gi",
	}, {
		name:          "memory only keeps the cpu request",
		args:          []string{"--memory", "10Gi"},
		wantRequests:  resources("2", "6Gi"),
		wantEffective: "cpu=2,memory=10Gi",
	}, {
		name:          "both",
		args:          []string{"--cpu", "1500m", "--memory", "15Gi"},
		wantRequests:  resources("2500m", "1Gi"),
		wantEffective: "cpu=1500m,memory=15Gi",
	}, {
		name:          "zero effective size takes everything",
		args:          []string{"--cpu", "0", "--memory", "0"},
		wantRequests:  resources("4", "16Gi"),
		wantEffective: "cpu=0,memory=0",
	}, {
		name:          "cpu floor",
		args:          []string{"--cpu", "4"},
		wantRequests:  resources("1m", "4Gi"),
		wantEffective: "cpu=3999m,memory=12Gi",
		wantNote:      "note: the balloon does not go below its minimum size, cpu 1m; the effective cpu will be 3999m, not 4",
	}, {
		name:          "memory floor",
		args:          []string{"--memory", "16Gi"},
		wantRequests:  resources("2", "1Mi"),
		wantEffective: "cpu=2,memory=16383Mi",
		wantNote:      "note: the balloon does not go below its minimum size, memory 1Mi; the effective memory will be 16383Mi, not 16Gi",
	}, {
		name:          "cpu rounded up to a millicore",
		args:          []string{"--cpu", "1.0005"},
		wantRequests:  resources("3", "4Gi"),
		wantEffective: "cpu=1,memory=12Gi",
		wantNote:      "note: the kubelet accounts cpu in whole millicores: the balloon is rounded up to cpu 3, and the effective cpu will be 1, not 1.0005",
	}, {
		name:          "memory rounded up to a byte",
		args:          []string{"--memory", "10737418239.5"},
		wantRequests:  resources("2", "6442450945"),
		wantEffective: "cpu=2,memory=10239Mi",
		wantNote:      "note: the kubelet accounts memory in whole bytes: the balloon is rounded up to memory 6442450945, and the effective memory will be 10737418239, not 10737418239.5",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, setSizeCluster()...)
			e.kubelet = actuate
			if code := e.run(append([]string{"set-size", "node-a"}, tc.args...)...); code != 0 {
				t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
			}
			resizes := e.resizes()
			if len(resizes) != 1 {
				t.Fatalf("sent %d resizes, want 1", len(resizes))
			}
			assertResources(t, resizes[0], tc.wantRequests)
			assertResources(t, e.getPod("balloon-a").Spec.Containers[0].Resources.Requests, tc.wantRequests)
			out := e.out.String()
			if want := "node node-a: effective size is now " + tc.wantEffective; !strings.Contains(out, want) {
				t.Errorf("output %q does not contain %q", out, want)
			}
			if tc.wantNote != "" && !strings.Contains(out, tc.wantNote) {
				t.Errorf("output %q does not contain %q", out, tc.wantNote)
			}
			if tc.wantNote == "" && strings.Contains(out, "note:") {
				t.Errorf("unexpected note in output %q", out)
			}
		})
	}
}

func TestSetSizeRejectsBadInputWithoutWriting(t *testing.T) {
	labelOnly := newBalloon("label-only", "node-b", "1", "1Gi")
	labelOnly.Spec.PriorityClassName = scheduling.SystemNodeCritical
	classOnly := newBalloon("class-only", "node-b", "1", "1Gi")
	classOnly.Labels = nil
	sidecar := newBalloon("balloon-d", "node-d", "1", "1Gi")
	sidecar.Spec.Containers = append(sidecar.Spec.Containers, v1.Container{Name: "sidecar"})
	renamed := newBalloon("balloon-e", "node-e", "1", "1Gi")
	renamed.Spec.Containers[0].Name = "pause"
	limited := newBalloon("balloon-f", "node-f", "1", "1Gi")
	limited.Spec.Containers[0].Resources.Limits = resources("1", "1Gi")
	podLevel := newBalloon("balloon-h", "node-h", "1", "1Gi")
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: resources("1", "1Gi")}
	unscheduled := newBalloon("balloon-i", "", "1m", "1Mi")
	unscheduled.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{
		Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "0/3 nodes are available",
	}}}
	forNode(unscheduled, "node-i")
	noMemory := newNode("node-g", "4", "16Gi")
	delete(noMemory.Status.Allocatable, v1.ResourceMemory)
	objects := append(setSizeCluster(),
		newNode("node-b", "4", "16Gi"), labelOnly, classOnly,
		newNode("node-c", "4", "16Gi"), newBalloon("balloon-c2", "node-c", "1", "1Gi"), newBalloon("balloon-c1", "node-c", "1", "1Gi"),
		newNode("node-d", "4", "16Gi"), sidecar,
		newNode("node-e", "4", "16Gi"), renamed,
		newNode("node-f", "4", "16Gi"), limited,
		noMemory, newBalloon("balloon-g", "node-g", "1", "1Gi"),
		newNode("node-h", "4", "16Gi"), podLevel,
		newNode("node-i", "4", "16Gi"), unscheduled,
	)

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no flags", []string{"node-a"}, "at least one of --cpu and --memory is required"},
		{"no node", []string{"--cpu", "1"}, "accepts 1 arg(s), received 0"},
		{"negative cpu", []string{"node-a", "--cpu=-1"}, `invalid --cpu "-1": must not be negative`},
		{"negative memory", []string{"node-a", "--memory=-1Gi"}, `invalid --memory "-1Gi": must not be negative`},
		{"unparsable cpu", []string{"node-a", "--cpu", "lots"}, `invalid --cpu "lots"`},
		{"empty memory", []string{"node-a", "--memory="}, `invalid --memory ""`},
		{"zero timeout", []string{"node-a", "--cpu", "1", "--timeout", "0s"}, "--timeout must be positive"},
		{"cpu above allocatable", []string{"node-a", "--cpu", "4001m"}, `desired cpu 4001m is larger than node "node-a" allocatable 4: the balloon would have to be negative`},
		{"memory above allocatable", []string{"node-a", "--cpu", "1", "--memory", "17Gi"}, `desired memory 17Gi is larger than node "node-a" allocatable 16Gi`},
		{"unknown node", []string{"nope", "--cpu", "1"}, `node "nope" not found`},
		{"label or class alone is no balloon", []string{"node-b", "--cpu", "1"}, `node "node-b" has no balloon`},
		{"two balloons", []string{"node-c", "--cpu", "1"}, `node "node-c" has 2 balloons (kube-system/balloon-c1, kube-system/balloon-c2); expected exactly one`},
		{"two containers", []string{"node-d", "--cpu", "1"}, `balloon kube-system/balloon-d must have exactly one container named "balloon", has [balloon, sidecar]`},
		{"wrong container name", []string{"node-e", "--cpu", "1"}, `balloon kube-system/balloon-e must have exactly one container named "balloon", has [pause]`},
		{"limits", []string{"node-f", "--cpu", "1"}, `balloon kube-system/balloon-f container "balloon" sets limits; a balloon must set requests only`},
		{"no allocatable", []string{"node-g", "--memory", "1Gi"}, `node "node-g" reports no allocatable memory`},
		{"pod-level resources", []string{"node-h", "--cpu", "1"}, `balloon kube-system/balloon-h sets pod-level resources; a balloon must set its container's requests only`},
		{"balloon not scheduled", []string{"node-i", "--cpu", "1"}, `node "node-i" has no balloon running: balloon kube-system/balloon-i is not scheduled yet (Unschedulable: 0/3 nodes are available)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, objects...)
			e.kubelet = actuate
			if code := e.run(append([]string{"set-size"}, tc.args...)...); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			if got := e.errOut.String(); !strings.HasPrefix(got, "error: ") || !strings.Contains(got, tc.wantErr) {
				t.Errorf("stderr %q, want an error containing %q", got, tc.wantErr)
			}
			if writes := e.writes(); len(writes) != 0 {
				t.Errorf("bad input wrote to the cluster: %v", writes)
			}
		})
	}
}

func TestSetSizeWaitsForTheKubelet(t *testing.T) {
	// The balloon still carries the kubelet's verdict on an earlier upsize;
	// that verdict is not the one for this resize.
	pod := newBalloon("balloon-a", "node-a", "2", "4Gi")
	pod.Spec.Containers[0].Resources.Requests = resources("3", "4Gi")
	pod.Generation = 3
	refuse(v1.PodReasonDeferred, deferredMessage)(pod)
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), pod)

	polls := 0
	e.kubelet = func(pod *v1.Pod) {
		polls++
		switch polls {
		case 1: // not evaluated yet: the old verdict is still there
		case 2, 3:
			pod.Status.ContainerStatuses[0].AllocatedResources = pod.Spec.Containers[0].Resources.Requests.DeepCopy()
			pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue, ObservedGeneration: pod.Generation}}
		default:
			actuate(pod)
		}
	}
	start := e.clock.Now()
	if code := e.run("set-size", "node-a", "--cpu", "3"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	if polls != 4 {
		t.Errorf("polled %d times, want 4", polls)
	}
	if waited := e.clock.Since(start); waited != 4*time.Second {
		t.Errorf("waited %v, want 4s", waited)
	}
	for _, want := range []string{
		"resizing balloon kube-system/balloon-a on node node-a: requests cpu=3,memory=4Gi -> cpu=1,memory=4Gi",
		"node node-a: effective size is now cpu=3,memory=12Gi (balloon kube-system/balloon-a holds cpu=1,memory=4Gi)",
	} {
		if !strings.Contains(e.out.String(), want) {
			t.Errorf("output %q does not contain %q", e.out.String(), want)
		}
	}
}

// undoHint is how set-size tells to undo a resize to cpu 1 or memory 8Gi on
// setSizeCluster's node.
const undoHint = "To undo it, run kubectl balloon set-size node-a --cpu 2 --memory 12Gi (the previous effective size)."

const closedUntilHeld = "Node node-a is closed to new workloads (taint node.kubernetes.io/balloon-pending) until its balloon holds the new size, which stays recorded and which kubectl balloon reconcile keeps. "

func TestSetSizeRefused(t *testing.T) {
	for _, tc := range []struct {
		reason, message string
		rollback        bool
	}{
		{v1.PodReasonDeferred, deferredMessage, false},
		{v1.PodReasonDeferred, deferredMessage, true},
		{v1.PodReasonInfeasible, "Node didn't have enough capacity: cpu, requested: 5000, node capacity: 4000", false},
		{v1.PodReasonInfeasible, "Node didn't have enough capacity: cpu, requested: 5000, node capacity: 4000", true},
	} {
		name := tc.reason
		if tc.rollback {
			name += " with rollback"
		}
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, setSizeCluster()...)
			e.kubelet = refuse(tc.reason, tc.message)
			args := []string{"set-size", "node-a", "--cpu", "1"}
			if tc.rollback {
				args = append(args, "--rollback-on-failure")
			}
			if code := e.run(args...); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			wantErr := "error: the kubelet did not resize balloon kube-system/balloon-a: " + tc.reason + ": " + tc.message + "\n"
			switch {
			case tc.rollback:
			case tc.reason == v1.PodReasonDeferred:
				wantErr += "The resize stays queued: the kubelet applies it once it fits. Until then node node-a is closed to new workloads (taint node.kubernetes.io/balloon-pending) and its recorded size is the new one, which kubectl balloon reconcile keeps. " + undoHint + "\n"
			default:
				wantErr += closedUntilHeld + undoHint + "\n"
			}
			if got := e.errOut.String(); got != wantErr {
				t.Errorf("stderr %q, want %q", got, wantErr)
			}
			// Without a rollback the intent stays, and the node closes until
			// the balloon holds it; a rollback restores both.
			wantRecord := map[bool]string{false: "cpu=3,memory=4Gi,uid=node-a-uid", true: ""}[tc.rollback]
			if got := e.recordedSize("node-a"); got != wantRecord {
				t.Errorf("recorded %q, want %q", got, wantRecord)
			}
			if tainted := e.hasPendingTaint("node-a"); tainted == tc.rollback {
				t.Errorf("tainted = %v, want %v", tainted, !tc.rollback)
			}
			wantResizes := []v1.ResourceList{resources("3", "4Gi")}
			if tc.rollback {
				wantResizes = append(wantResizes, resources("2", "4Gi"))
			}
			resizes := e.resizes()
			if len(resizes) != len(wantResizes) {
				t.Fatalf("sent %d resizes, want %d", len(resizes), len(wantResizes))
			}
			for i := range resizes {
				assertResources(t, resizes[i], wantResizes[i])
			}
			assertResources(t, e.getPod("balloon-a").Spec.Containers[0].Resources.Requests, wantResizes[len(wantResizes)-1])
			rolledBack := strings.Contains(e.out.String(), "rolled back: resized balloon kube-system/balloon-a back to its previous requests cpu=2,memory=4Gi")
			if rolledBack != tc.rollback {
				t.Errorf("output %q: reports rollback %v, want %v", e.out.String(), rolledBack, tc.rollback)
			}
		})
	}
}

func TestSetSizeTimeout(t *testing.T) {
	for _, rollback := range []bool{false, true} {
		t.Run(map[bool]string{false: "no rollback", true: "rollback"}[rollback], func(t *testing.T) {
			e := newTestEnv(t, setSizeCluster()...) // no kubelet answers
			args := []string{"set-size", "node-a", "--memory", "8Gi", "--timeout", "10s"}
			if rollback {
				args = append(args, "--rollback-on-failure")
			}
			start := e.clock.Now()
			if code := e.run(args...); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			if waited := e.clock.Since(start); waited != 10*time.Second {
				t.Errorf("waited %v, want 10s", waited)
			}
			wantErr := "error: timed out after 10s waiting for the kubelet to resize balloon kube-system/balloon-a: the kubelet has not answered yet (the balloon runs with cpu=2,memory=4Gi)\n"
			if !rollback {
				wantErr += closedUntilHeld + undoHint + "\n"
			}
			if got := e.errOut.String(); got != wantErr {
				t.Errorf("stderr %q, want %q", got, wantErr)
			}
			resizes := e.resizes()
			if want := map[bool]int{false: 1, true: 2}[rollback]; len(resizes) != want {
				t.Fatalf("sent %d resizes, want %d", len(resizes), want)
			}
			assertResources(t, resizes[0], resources("2", "8Gi"))
			if rollback {
				assertResources(t, resizes[1], resources("2", "4Gi"))
			}
		})
	}
}

func TestSetSizeRetriesConflictWithStatusUpdate(t *testing.T) {
	e := newTestEnv(t, setSizeCluster()...)
	e.kubelet = actuate
	statusUpdated := false
	e.client.PrependReactor("update", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if !statusUpdated {
			statusUpdated = true
			// A kubelet status update lands between the read and the resize.
			e.updatePod("balloon-a", func(pod *v1.Pod) { pod.Status.Message = "heartbeat" })
		}
		return false, nil, nil
	})
	if code := e.run("set-size", "node-a", "--cpu", "3"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	resizes := e.resizes()
	if len(resizes) != 2 {
		t.Fatalf("sent %d resizes, want 2 (one conflict, one retry)", len(resizes))
	}
	assertResources(t, e.getPod("balloon-a").Spec.Containers[0].Resources.Requests, resources("1", "4Gi"))
}

func TestSetSizeDoesNotOverwriteAConcurrentResize(t *testing.T) {
	e := newTestEnv(t, setSizeCluster()...)
	e.kubelet = actuate
	resizedByOther := false
	e.client.PrependReactor("update", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if !resizedByOther {
			resizedByOther = true
			// Another agent resizes the balloon between the read and the resize.
			e.updatePod("balloon-a", func(pod *v1.Pod) { pod.Spec.Containers[0].Resources.Requests = resources("500m", "4Gi") })
		}
		return false, nil, nil
	})
	if code := e.run("set-size", "node-a", "--cpu", "3"); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	wantErr := "balloon kube-system/balloon-a was resized by someone else meanwhile (requests cpu=500m,memory=4Gi, expected cpu=2,memory=4Gi); not overwriting"
	if got := e.errOut.String(); !strings.Contains(got, wantErr) {
		t.Errorf("stderr %q, want it to contain %q", got, wantErr)
	}
	if resizes := e.resizes(); len(resizes) != 1 {
		t.Errorf("sent %d resizes, want only the one that conflicted", len(resizes))
	}
	assertResources(t, e.getPod("balloon-a").Spec.Containers[0].Resources.Requests, resources("500m", "4Gi"))
}
