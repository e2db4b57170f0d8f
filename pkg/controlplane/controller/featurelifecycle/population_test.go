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

package featurelifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func heldLease(namespace, name, holder string, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renewed)), LeaseDurationSeconds: ptr.To[int32](40)},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

// TestWaitForUsesWaitsForThePopulationToReport turns a feature off in a
// cluster of five nodes (one of them gone: its lease expired), one
// kube-apiserver and a kube-controller-manager leader. WaitForUses names how
// many of each component's live instances reported, and is not done at the
// end of its period while a component has begun to report but fewer of its
// instances have than would if all had; it is done once they have, or at its
// longest wait.
func TestWaitForUsesWaitsForThePopulationToReport(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	period, maxPeriod := time.Minute, 16*time.Minute
	use := func(component string, instances ...string) featuresv1alpha1.FeatureUse {
		return featuresv1alpha1.FeatureUse{Component: component, Value: false, Instances: instances}
	}
	apiserver := use("kube-apiserver", "apiserver-a")
	for _, tc := range []struct {
		name string
		// at is the time of the run, after the task's start.
		at   time.Duration
		uses []featuresv1alpha1.FeatureUse
		// done, and what the message says (all of the parts).
		done    bool
		message []string
	}{{
		name:    "while it waits, it says who reported of whom",
		at:      30 * time.Second,
		uses:    []featuresv1alpha1.FeatureUse{apiserver, use("kubelet", "node-1")},
		message: []string{"no component reports true; waiting until 2026-11-22T10:01:00Z for late reports (reported: kube-apiserver 1 of 1, kube-controller-manager 0 of at least 1, kubelet 1 of 4)"},
	}, {
		name:    "the period is over, but one kubelet of four reported",
		at:      period + time.Second,
		uses:    []featuresv1alpha1.FeatureUse{apiserver, use("kubelet", "node-1")},
		message: []string{"waiting until 2026-11-22T10:16:00Z at most for the components that have not all reported: kubelet 1 of 4"},
	}, {
		name:    "kube-apiserver reports every feature: it is waited for",
		at:      period + time.Second,
		uses:    []featuresv1alpha1.FeatureUse{use("kubelet", "node-1", "node-2", "node-3")},
		message: []string{"have not all reported: kube-apiserver 0 of 1"},
	}, {
		// A full sample: the other kubelets that agree do not write.
		name: "as many kubelets reported as a sample holds",
		at:   period + time.Second,
		uses: []featuresv1alpha1.FeatureUse{apiserver, use("kubelet", "node-1", "node-2", "node-3")},
		done: true,
	}, {
		name:    "the gone node's name does not count",
		at:      period + time.Second,
		uses:    []featuresv1alpha1.FeatureUse{apiserver, use("kubelet", "node-1", "node-5")},
		message: []string{"kubelet 1 of 4"},
	}, {
		// The feature may not be checked by kubelets or the controller manager.
		name: "components none of whose instances reported do not hold it",
		at:   period + time.Second,
		uses: []featuresv1alpha1.FeatureUse{apiserver},
		done: true,
	}, {
		name:    "at its longest wait it is done, and says who did not report",
		at:      maxPeriod,
		uses:    []featuresv1alpha1.FeatureUse{apiserver, use("kubelet", "node-1")},
		done:    true,
		message: []string{"no component reports true; not all reported within 16m0s: kubelet 1 of 4"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			now := start.Add(tc.at)
			objs := []runtime.Object{
				heldLease(metav1.NamespaceSystem, "kube-controller-manager", "host-a_0a1b2c", now.Add(-5*time.Second)),
				heldLease(corev1.NamespaceNodeLease, "node-5", "node-5", now.Add(-time.Hour)),
			}
			for i := 1; i <= 4; i++ {
				name := fmt.Sprintf("node-%d", i)
				objs = append(objs, heldLease(corev1.NamespaceNodeLease, name, name, now.Add(-10*time.Second)))
			}
			f := &featuresv1alpha1.Feature{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bar"},
				Status: featuresv1alpha1.FeatureStatus{
					State: featuresv1alpha1.FeatureStateTurningOff,
					Tasks: []featuresv1alpha1.FeatureTask{{Name: WaitForUsesName, StartTime: ptr.To(metav1.NewTime(start))}},
					Uses:  tc.uses,
				},
			}
			result, err := NewWaitForUses(period, maxPeriod).Run(context.Background(), &TaskContext{
				Feature: f, Task: f.Status.Tasks[0], Transition: TurnOff, Client: fake.NewClientset(objs...),
				Now: now, LiveAPIServers: []string{"apiserver-a"}, ages: seenWhenStamped(f, objs),
			})
			if err != nil {
				t.Fatal(err)
			}
			if result.Done != tc.done || result.Restart {
				t.Errorf("done %t, restart %t (%q); want done %t", result.Done, result.Restart, result.Message, tc.done)
			}
			for _, part := range tc.message {
				if !strings.Contains(result.Message, part) {
					t.Errorf("message %q, want it to say %q", result.Message, part)
				}
			}
		})
	}
}

// Without the leases (the API failing), the decision is the time's, and the
// message says the coverage is unknown.
func TestWaitForUsesWithoutThePopulationDecidesByTime(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	client := fake.NewClientset()
	client.PrependReactor("list", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("the server is unavailable")
	})
	f := &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bar"},
		Status: featuresv1alpha1.FeatureStatus{
			State: featuresv1alpha1.FeatureStateTurningOn,
			Tasks: []featuresv1alpha1.FeatureTask{{Name: WaitForUsesName, StartTime: ptr.To(metav1.NewTime(start))}},
		},
	}
	w := NewWaitForUses(time.Minute, 16*time.Minute)
	tc := &TaskContext{Feature: f, Task: f.Status.Tasks[0], Transition: TurnOn, Client: client, Now: start.Add(30 * time.Second), LiveAPIServers: []string{"apiserver-a"}, ages: seenWhenStamped(f, nil)}
	result, err := w.Run(context.Background(), tc)
	if err != nil || result.Done || !strings.Contains(result.Message, "reported: unknown (listing the node leases: the server is unavailable)") {
		t.Errorf("done %t, message %q, err %v; want a wait that says the coverage is unknown", result.Done, result.Message, err)
	}
	tc.Now = start.Add(time.Minute)
	if result, err := w.Run(context.Background(), tc); err != nil || !result.Done {
		t.Errorf("done %t, message %q, err %v; want done at the end of the period", result.Done, result.Message, err)
	}
}

// A WaitForUses that ends at its longest wait with some components not all
// reported leaves an event that names them.
func TestWaitForUsesDoneWithoutEveryoneLeavesAnEvent(t *testing.T) {
	e := newTestEnv(t, NewRegistry(NewWaitForUses(0, 0)))
	e.sync("bar")
	e.sync("bar") // On, the default
	e.set(bar, false)
	e.sync("bar") // TurningOff, the uses cleared
	e.clock.Step(10 * time.Second)
	e.sync("bar") // no kube-apiserver reported, and the longest wait is over
	if f := e.get("bar"); f.Status.State != featuresv1alpha1.FeatureStateOff {
		t.Fatalf("state %s, want Off: %s", f.Status.State, dump(f))
	}
	if !e.event("not all reported within 0s: kube-apiserver 0 of 1") {
		t.Error("no TaskDone event naming kube-apiserver, which did not report")
	}
}

// A stable Feature's uses that contradict its state stay while an instance
// they name is live: clearing them made the Feature read Safe to upgrade
// until the instances reported again, every StaleUseAge, for ever. The names
// of instances that are gone go, and an entry that names none that is live.
func TestDanglingUsesOfLiveInstancesStay(t *testing.T) {
	e := newTestEnv(t, nil)
	e.gate.Enabled(bar) // kube-apiserver checks Bar: it has the cluster's value
	e.sync("bar")
	e.sync("bar") // On
	e.setUses("bar",
		// Kubelets configured off on their own: node-1 runs, node-9 is gone.
		e.use("kubelet", false, "node-1", "node-9"),
		// A kube-apiserver that left.
		e.use("kube-apiserver", false, "apiserver-gone"),
		e.use("kube-apiserver", true, "apiserver-a"),
	)
	e.sync("bar")             // the write's watch event
	e.clock.Step(time.Minute) // PruneInterval
	if _, err := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(context.Background(),
		heldLease(corev1.NamespaceNodeLease, "node-1", "node-1", e.clock.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.sync("bar")
		e.clock.Step(10 * time.Second)
	}
	f := e.get("bar")
	if len(f.Status.Uses) != 2 || f.Status.Uses[0].Component != "kubelet" || strings.Join(f.Status.Uses[0].Instances, ",") != "node-1" {
		t.Errorf("want the kubelet entry naming node-1 only, and kube-apiserver's own: %s", dump(f))
	}
	if c := condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe); c.Reason != "DanglingUses" || !strings.Contains(c.Message, "kubelet off at 1.36 (node-1)") {
		t.Errorf("UpgradeSafe %+v; want it unsafe while node-1 runs the feature off", c)
	}
}

// seenWhenStamped are the sightings of a server whose clock agrees with the
// servers that stamped the leases and f's first task, and that saw each stamp
// as it was written.
func seenWhenStamped(f *featuresv1alpha1.Feature, objs []runtime.Object) *localAges {
	ages := newLocalAges()
	for _, obj := range objs {
		if lease, ok := obj.(*coordinationv1.Lease); ok && lease.Spec.RenewTime != nil {
			renewedWithin(lease, ages, lease.Spec.RenewTime.Time, 0)
		}
	}
	if len(f.Status.Tasks) > 0 && f.Status.Tasks[0].StartTime != nil {
		start := f.Status.Tasks[0].StartTime.Time
		ages.age(taskStartKey(f.Name, f.Status.Tasks[0].Name), stamp(start), start)
	}
	return ages
}

// A failover to a server whose clock runs ahead of the last leader's does not
// cut the wait short: the wait counts from when this server first saw the
// task's start, which the last leader stamped with its own clock.
func TestWaitForUsesWaitsOnItsOwnClockAfterAFailover(t *testing.T) {
	leaderStart := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	now := leaderStart.Add(2 * time.Minute) // this server's clock: two minutes ahead
	f := &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bar"},
		Status: featuresv1alpha1.FeatureStatus{
			State: featuresv1alpha1.FeatureStateTurningOn,
			Tasks: []featuresv1alpha1.FeatureTask{{Name: WaitForUsesName, StartTime: ptr.To(metav1.NewTime(leaderStart))}},
			Uses:  []featuresv1alpha1.FeatureUse{{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-b"}}},
		},
	}
	w := NewWaitForUses(time.Minute, time.Minute)
	tc := &TaskContext{Feature: f, Task: f.Status.Tasks[0], Transition: TurnOn, Client: fake.NewClientset(), Now: now,
		LiveAPIServers: []string{"apiserver-b"}, ages: newLocalAges()}
	if result, err := w.Run(context.Background(), tc); err != nil || result.Done || !strings.Contains(result.Message, "waiting until 2026-11-22T10:03:00Z") {
		t.Fatalf("done %t, message %q, err %v; want a wait of the full period on this server's clock", result.Done, result.Message, err)
	}
	tc.Now = now.Add(time.Minute)
	if result, err := w.Run(context.Background(), tc); err != nil || !result.Done {
		t.Errorf("done %t, message %q, err %v; want done a period after this server first saw the start", result.Done, result.Message, err)
	}
}

// A report stamped by a kube-apiserver whose clock runs behind this one's is
// not expired at once: its age counts from when this server first saw it.
func TestUsesExpireOnThisServersClock(t *testing.T) {
	e := newTestEnv(t, nil)
	e.sync("bar")
	e.sync("bar") // On
	left := e.use("kube-scheduler", false, "host-1")
	behind := metav1.NewTime(e.clock.Now().Add(-2 * time.Hour)) // stamped by a server two hours behind
	left.FirstReportTime, left.LastReportTime = &behind, &behind
	e.setUses("bar", left)
	e.sync("bar")
	e.clock.Step(time.Minute) // PruneInterval
	e.sync("bar")
	if f := e.get("bar"); len(f.Status.Uses) != 1 {
		t.Fatalf("a report this server saw a minute ago must stay: %s", dump(f))
	}
	e.clock.Step(30 * time.Minute) // UseExpiry
	e.sync("bar")
	e.sync("bar")
	if f := e.get("bar"); len(f.Status.Uses) != 0 {
		t.Errorf("a report not renewed for UseExpiry on this server's clock must go: %s", dump(f))
	}
}

// Leadership that keeps moving restarts the sightings, but the longest wait
// ends twice its length after the recorded start whatever the sightings say.
func TestWaitForUsesLongestWaitIsBoundedAcrossFailovers(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	now := start.Add(31 * time.Minute) // a new leader, which never saw the start
	var objs []runtime.Object
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("node-%d", i)
		lease := heldLease(corev1.NamespaceNodeLease, name, name, now)
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		objs = append(objs, lease)
	}
	f := &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bar"},
		Status: featuresv1alpha1.FeatureStatus{
			State: featuresv1alpha1.FeatureStateTurningOn,
			Tasks: []featuresv1alpha1.FeatureTask{{Name: WaitForUsesName, StartTime: ptr.To(metav1.NewTime(start))}},
			Uses: []featuresv1alpha1.FeatureUse{
				{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-a"}},
				{Component: "kubelet", Value: true, Instances: []string{"node-1"}},
			},
		},
	}
	ages := newLocalAges()
	run := func(now time.Time) Result {
		t.Helper()
		result, err := NewWaitForUses(time.Minute, 15*time.Minute).Run(context.Background(), &TaskContext{
			Feature: f, Task: f.Status.Tasks[0], Transition: TurnOn, Client: fake.NewClientset(objs...),
			Now: now, LiveAPIServers: []string{"apiserver-a"}, ages: ages,
		})
		if err != nil {
			t.Fatal(err)
		}
		return result
	}
	if result := run(now); result.Done {
		t.Fatalf("the period counts from this server's sighting: %q", result.Message)
	}
	if result := run(now.Add(time.Minute)); !result.Done || !strings.Contains(result.Message, "not all reported within 15m0s: kubelet 1 of 4") {
		t.Errorf("done %t, message %q; want done: the longest wait ended 30 minutes after the start", result.Done, result.Message)
	}
}
