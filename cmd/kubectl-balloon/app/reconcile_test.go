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
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// recorded says node-a's balloon holds cpu 2 and memory 4Gi.
var recorded = map[string]string{"node-a": "cpu=2,memory=4Gi,uid=node-a-uid"}

// pendingTaint is how a node registers with --register-with-taints.
var pendingTaint = v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule}

func taintedNode(name string) *v1.Node {
	node := newNode(name, "4", "16Gi")
	node.Spec.Taints = []v1.Taint{{Key: "other", Effect: v1.TaintEffectNoExecute}, pendingTaint}
	return node
}

// newPendingBalloon is a balloon the DaemonSet just created, not yet admitted.
func newPendingBalloon(name, nodeName string) *v1.Pod {
	pod := newBalloon(name, nodeName, "1m", "1Mi")
	pod.Status = v1.PodStatus{Phase: v1.PodPending}
	return pod
}

// admit is a kubelet that admits the balloon at its spec requests.
func admit(pod *v1.Pod) {
	requests := pod.Spec.Containers[0].Resources.Requests
	pod.Status = v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{
		Name:               balloonContainerName,
		AllocatedResources: requests.DeepCopy(),
		Resources:          &v1.ResourceRequirements{Requests: requests.DeepCopy()},
	}}}
}

func (e *testEnv) hasPendingTaint(name string) bool {
	e.t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == v1.TaintNodeBalloonPending {
			if t != pendingTaint {
				e.t.Errorf("taint = %+v, want %+v", t, pendingTaint)
			}
			return true
		}
	}
	return false
}

func (e *testEnv) reconcile() {
	e.t.Helper()
	e.client.ClearActions()
	e.out.Reset()
	if code := e.run("reconcile"); code != 0 {
		e.t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
}

// The DaemonSet recreates a deleted balloon at cpu 1m and memory 1Mi: the node
// closes until the balloon holds its recorded size again.
func TestReconcileRecreatedBalloon(t *testing.T) {
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), newPendingBalloon("balloon-new", "node-a"), recordedSizesConfigMap(recorded))

	e.reconcile()
	if !e.hasPendingTaint("node-a") {
		t.Fatal("the node must close while its new balloon does not hold its size")
	}
	if sent := e.resizes(); len(sent) != 1 {
		t.Fatalf("want one resize, sent %v", sent)
	} else {
		assertResources(t, sent[0], resources("2", "4Gi"))
	}

	// The kubelet admits the balloon at its new size: the node opens.
	e.updatePod("balloon-new", admit)
	e.reconcile()
	if e.hasPendingTaint("node-a") {
		t.Errorf("the node must open once its balloon holds its size; output %q", e.out.String())
	}
	if sent := e.resizes(); len(sent) != 0 {
		t.Errorf("no resize is needed any more, sent %v", sent)
	}
	// Other taints are left alone.
	node, _ := e.client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if len(node.Spec.Taints) != 0 {
		t.Errorf("taints = %v, want none", node.Spec.Taints)
	}
}

// A node that registers again (its Node object deleted) comes with the taint,
// from the kubelet's --register-with-taints, before its balloon exists.
// deletedBalloon is a balloon that was deleted and that the protection
// finalizer keeps, with another finalizer that must survive its release.
func deletedBalloon(name, nodeName string) *v1.Pod {
	pod := newBalloon(name, nodeName, "2", "4Gi")
	pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	pod.Finalizers = []string{"example.com/keep", kubetypes.BalloonProtectionFinalizer}
	return pod
}

// A deleted balloon is held by its finalizer until reconcile has closed its
// node; its successor, created at the recorded size by the addon's policy,
// then opens the node once it holds that size.
func TestReconcileReleasesADeletedBalloonAfterClosingItsNode(t *testing.T) {
	successor := newBalloon("balloon-new", "", "2", "4Gi")
	successor.Status = v1.PodStatus{Phase: v1.PodPending}
	forNode(successor, "node-a")
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), deletedBalloon("balloon-old", "node-a"), successor, recordedSizesConfigMap(recorded))

	// The first pass closes the node; the taint it wrote may not have reached
	// the scheduler yet, so the balloon stays for this pass.
	e.reconcile()
	if !e.hasPendingTaint("node-a") || !slices.Contains(e.getPod("balloon-old").Finalizers, kubetypes.BalloonProtectionFinalizer) {
		t.Fatalf("the first pass must taint the node and keep the balloon; output %q", e.out.String())
	}
	if !strings.Contains(e.out.String(), "node node-a: its deleted balloons are released on the next pass, once the taint is seen") {
		t.Errorf("output %q does not say the balloon goes on the next pass", e.out.String())
	}
	e.client.ClearActions()
	e.reconcile()
	order := []string{"taint"}
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "nodes" {
			order = append(order, "taint")
		}
		if a.GetVerb() == "patch" && a.GetResource().Resource == "pods" {
			order = append(order, "release")
		}
	}
	if diff := cmp.Diff([]string{"taint", "release"}, order); diff != "" {
		t.Errorf("the node must close before the balloon goes (-want +got):\n%s", diff)
	}
	if got := e.getPod("balloon-old").Finalizers; !slices.Equal(got, []string{"example.com/keep"}) {
		t.Errorf("finalizers %v, want only the other one kept", got)
	}
	if sent := e.resizes(); len(sent) != 0 {
		t.Errorf("the successor is not bound yet: no resize, sent %v", sent)
	}
	if !strings.Contains(e.out.String(), "node node-a: balloon kube-system/balloon-new is not scheduled yet; closed to workloads") {
		t.Errorf("output %q does not say why the node stays closed", e.out.String())
	}

	// The successor is bound and admitted at its recorded size: the node opens.
	e.updatePod("balloon-new", func(pod *v1.Pod) {
		pod.Spec.NodeName = "node-a"
		admit(pod)
	})
	e.reconcile()
	if e.hasPendingTaint("node-a") {
		t.Errorf("the node must open once the successor holds its size; output %q", e.out.String())
	}
}

// A deleted balloon beside one that already holds the recorded size (the
// kubelet rejected the DaemonSet's first balloon at admission, and its
// successor ran): the node stays closed until the deleted one is let go. The
// pass that closed the node opened it again at once, since its one bound
// balloon held the size, so the next pass found it open and closed it again,
// and the deleted balloon was never let go (the upgrade lane, 2026-12-07).
func TestReconcileReleasesADeletedBalloonBesideOneThatHoldsItsSize(t *testing.T) {
	rejected := deletedBalloon("balloon-rejected", "node-a")
	rejected.Status = v1.PodStatus{Phase: v1.PodFailed, Reason: "BalloonMemoryInUse"}
	successor := newBalloon("balloon-new", "node-a", "2", "4Gi")
	admit(successor)
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), rejected, successor, recordedSizesConfigMap(recorded))

	e.reconcile()
	if !e.hasPendingTaint("node-a") || !slices.Contains(e.getPod("balloon-rejected").Finalizers, kubetypes.BalloonProtectionFinalizer) {
		t.Fatalf("the first pass must leave the node closed and keep the deleted balloon; output %q", e.out.String())
	}
	e.reconcile()
	if got := e.getPod("balloon-rejected").Finalizers; !slices.Equal(got, []string{"example.com/keep"}) {
		t.Fatalf("the second pass must let the deleted balloon go: finalizers %v; output %q", got, e.out.String())
	}
	if !e.hasPendingTaint("node-a") {
		t.Errorf("the node must stay closed in the pass that lets the balloon go; output %q", e.out.String())
	}
	e.reconcile()
	if e.hasPendingTaint("node-a") {
		t.Errorf("the node must open once no deleted balloon is held and its balloon holds its size; output %q", e.out.String())
	}
}

// A deleted balloon of a node that was never sized (it holds the smallest
// balloon), or whose node is gone, is let go without closing anything.
func TestReconcileReleasesBalloonsOfUnsizedAndVanishedNodes(t *testing.T) {
	unsized := deletedBalloon("balloon-b", "node-b")
	unsized.Spec.Containers[0].Resources.Requests = resources("1m", "1Mi")
	unsized.Status.ContainerStatuses[0].AllocatedResources = resources("1m", "1Mi")
	e := newTestEnv(t, newNode("node-b", "4", "16Gi"), unsized, deletedBalloon("balloon-gone", "node-gone"), recordedSizesConfigMap(recorded))
	e.reconcile()
	for _, name := range []string{"balloon-b", "balloon-gone"} {
		if got := e.getPod(name).Finalizers; !slices.Equal(got, []string{"example.com/keep"}) {
			t.Errorf("%s: finalizers %v, want only the other one kept", name, got)
		}
	}
	if e.hasPendingTaint("node-b") {
		t.Error("a node that was never sized must not close")
	}
	if got := e.recordedSize("node-b"); got != "" {
		t.Errorf("recorded %q for a node that was never sized", got)
	}
}

// A lost record (the ConfigMap emptied or recreated) does not open a node that
// was sized: the size its balloon holds is recorded again, so a deleted
// balloon closes its node and its successor comes back at that size.
func TestReconcileRestoresALostRecord(t *testing.T) {
	e := newTestEnv(t, newNode("node-b", "4", "16Gi"), deletedBalloon("balloon-b", "node-b"),
		newNode("node-c", "4", "16Gi"), newBalloon("balloon-c", "node-c", "1", "2Gi"))
	e.reconcile()
	for node, want := range map[string]string{"node-b": "cpu=2,memory=4Gi,uid=node-b-uid", "node-c": "cpu=1,memory=2Gi,uid=node-c-uid"} {
		if got := e.recordedSize(node); got != want {
			t.Errorf("%s: recorded %q, want %q", node, got, want)
		}
	}
	if !e.hasPendingTaint("node-b") {
		t.Error("node-b must close before its deleted balloon goes")
	}
	e.reconcile()
	if got := e.getPod("balloon-b").Finalizers; !slices.Equal(got, []string{"example.com/keep"}) {
		t.Errorf("finalizers %v: the balloon goes once its node is closed", got)
	}
	if e.hasPendingTaint("node-c") {
		t.Error("node-c's balloon holds its size: the node stays open")
	}
	want := []string{
		"Warning BalloonSizeRestored Node node-b had no recorded balloon size; recorded the size its balloon holds, cpu=2,memory=4Gi",
		"Warning BalloonSizeRestored Node node-c had no recorded balloon size; recorded the size its balloon holds, cpu=1,memory=2Gi",
	}
	if diff := cmp.Diff(want, e.recordedEvents()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Without the ConfigMap no deleted balloon is let go: the kubelet keeps it
// running, so its capacity stays closed, and an event on it says why.
func TestReconcileHoldsDeletedBalloonsWithoutTheRecord(t *testing.T) {
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), deletedBalloon("balloon-a", "node-a"))
	if err := e.client.Tracker().Delete(v1.SchemeGroupVersion.WithResource("configmaps"), metav1.NamespaceSystem, balloonSizesConfigMap); err != nil {
		t.Fatal(err)
	}
	if code := e.run("reconcile"); code == 0 {
		t.Fatal("want an error without the ConfigMap")
	}
	if len(e.writes()) != 0 {
		t.Errorf("writes %v", e.writes())
	}
	events := e.recordedEvents()
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning BalloonHeld Deleted balloon kept running, its capacity closed: the ConfigMap kube-system/node-balloon-sizes that records the balloon sizes does not exist") {
		t.Errorf("events %q", events)
	}
}

// A finalizer added meanwhile is not dropped: the release fails and is tried
// again on the next pass.
func TestReconcileReleaseDoesNotDropAFinalizerAddedMeanwhile(t *testing.T) {
	e := newTestEnv(t, taintedNode("node-b"), deletedBalloon("balloon-b", "node-b"), recordedSizesConfigMap(recorded))
	e.client.PrependReactor("patch", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		pod := e.getPod("balloon-b")
		pod.Finalizers = append(pod.Finalizers, "example.com/late")
		if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), pod, pod.Namespace); err != nil {
			t.Fatal(err)
		}
		return false, nil, nil
	})
	if code := e.run("reconcile"); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if got := e.getPod("balloon-b").Finalizers; !slices.Contains(got, "example.com/late") || !slices.Contains(got, kubetypes.BalloonProtectionFinalizer) {
		t.Errorf("finalizers %v: the late one and the protection must stay", got)
	}
}

func TestReconcileReregisteredNode(t *testing.T) {
	e := newTestEnv(t, taintedNode("node-a"), recordedSizesConfigMap(recorded))

	e.reconcile()
	if !e.hasPendingTaint("node-a") || len(e.writes()) != 0 {
		t.Fatalf("a node without a balloon must stay closed, untouched; writes %v", e.writes())
	}
	if !strings.Contains(e.out.String(), "node node-a: no balloon yet; closed to workloads until its balloon holds cpu=2,memory=4Gi") {
		t.Errorf("output %q does not say why the node stays closed", e.out.String())
	}

	// The balloon is created and admitted at the DaemonSet's size.
	if err := e.client.Tracker().Add(newBalloon("balloon-new", "node-a", "1m", "1Mi")); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if !e.hasPendingTaint("node-a") {
		t.Fatal("the node must stay closed")
	}
	if sent := e.resizes(); len(sent) != 1 {
		t.Fatalf("want one resize, sent %v", sent)
	}

	e.updatePod("balloon-new", actuate)
	e.reconcile()
	if e.hasPendingTaint("node-a") {
		t.Error("the node must open once its balloon holds its size")
	}
	node, _ := e.client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "other" {
		t.Errorf("taints = %v, want only the other one", node.Spec.Taints)
	}
}

// After a kubelet restart the balloon keeps its allocation (the checkpoint) and
// holds its size: nothing changes. A taint left from an interrupted run goes.
func TestReconcileBalloonThatHoldsItsSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *v1.Node
	}{
		{"open node", newNode("node-a", "4", "16Gi")},
		{"node left tainted", taintedNode("node-a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, tc.node, newBalloon("balloon-a", "node-a", "2", "4Gi"), recordedSizesConfigMap(map[string]string{"node-a": "cpu=2000m,memory=4096Mi,uid=node-a-uid"}))
			e.reconcile()
			if e.hasPendingTaint("node-a") {
				t.Error("the node must be open")
			}
			if len(e.resizes()) != 0 {
				t.Errorf("sent resizes %v", e.resizes())
			}
			if len(tc.node.Spec.Taints) == 0 && len(e.writes()) != 0 {
				t.Errorf("an open node whose balloon holds its size must not be written, writes %v", e.writes())
			}
		})
	}
}

// The recreated balloon's upsize waits, because workloads took the capacity
// in the meantime: the node stays closed, and nothing is resized twice.
func TestReconcileDeferredUpsizeKeepsTheNodeClosed(t *testing.T) {
	pod := newBalloon("balloon-new", "node-a", "2", "4Gi")
	pod.Generation = 2
	admitted := resources("1m", "1Mi")
	pod.Status.ContainerStatuses[0].AllocatedResources = admitted
	pod.Status.ContainerStatuses[0].Resources = &v1.ResourceRequirements{Requests: admitted}
	refuse(v1.PodReasonDeferred, deferredMessage)(pod)
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), pod, recordedSizesConfigMap(recorded))

	e.reconcile()
	if !e.hasPendingTaint("node-a") {
		t.Error("the node must close while the balloon's upsize waits")
	}
	if len(e.resizes()) != 0 {
		t.Errorf("the balloon already asks for its size, sent %v", e.resizes())
	}
	if !strings.Contains(e.out.String(), "does not hold its recorded size cpu=2,memory=4Gi yet (Deferred: "+deferredMessage+")") {
		t.Errorf("output %q does not give the kubelet's verdict", e.out.String())
	}
}

func TestReconcileLeavesUnrecordedNodes(t *testing.T) {
	e := newTestEnv(t, taintedNode("node-b"), newNode("node-c", "4", "16Gi"), newBalloon("balloon-c", "node-c", "1m", "1Mi"),
		recordedSizesConfigMap(nil))
	e.reconcile()
	if len(e.writes()) != 0 {
		t.Errorf("nodes without a recorded size must be left alone, writes %v", e.writes())
	}
	if !e.hasPendingTaint("node-b") {
		t.Error("a node that registered closed stays closed until set-size sizes it")
	}
}

func TestReconcileErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		wantErr string
	}{{
		name:    "no ConfigMap",
		objects: nil,
		wantErr: "the ConfigMap kube-system/node-balloon-sizes that records the balloon sizes does not exist",
	}, {
		name:    "a size that does not parse",
		objects: []runtime.Object{recordedSizesConfigMap(map[string]string{"node-a": "cpu=2"})},
		wantErr: `node "node-a": the recorded balloon size "cpu=2" is not cpu=Q,memory=Q,uid=UID`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, append(tc.objects, newNode("node-a", "4", "16Gi"))...)
			if tc.objects == nil {
				if err := e.client.Tracker().Delete(v1.SchemeGroupVersion.WithResource("configmaps"), metav1.NamespaceSystem, balloonSizesConfigMap); err != nil {
					t.Fatal(err)
				}
			}
			if code := e.run("reconcile"); code == 0 || !strings.Contains(e.errOut.String(), tc.wantErr) {
				t.Errorf("exit code %d, stderr %q, want an error with %q", code, e.errOut.String(), tc.wantErr)
			}
			if len(e.writes()) != 0 {
				t.Errorf("writes %v", e.writes())
			}
		})
	}
}

// Without the right to list nodes, reconcile fails with the API server's
// error rather than wait for its cache for ever.
func TestReconcileFailsWhenItCannotListNodes(t *testing.T) {
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), newBalloon("balloon-a", "node-a", "2", "4Gi"), recordedSizesConfigMap(recorded))
	e.client.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(v1.Resource("nodes"), "", errors.New("no rights"))
	})
	if code := e.run("reconcile"); code == 0 || !strings.Contains(e.errOut.String(), "error: listing nodes: ") || !strings.Contains(e.errOut.String(), "no rights") {
		t.Errorf("exit code %d, stderr %q, want the error of listing nodes", code, e.errOut.String())
	}
}

// set-size records the size it set, and opens a node that was closed.
func TestSetSizeRecordsTheSizeAndOpensTheNode(t *testing.T) {
	e := newTestEnv(t, taintedNode("node-a"), newBalloon("balloon-a", "node-a", "1m", "1Mi"))
	e.kubelet = actuate
	if code := e.run("set-size", "node-a", "--cpu", "2", "--memory", "12Gi"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	cm, err := e.client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(context.Background(), balloonSizesConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["node-a"]; got != "cpu=2,memory=4Gi,uid=node-a-uid" {
		t.Errorf("recorded %q, want cpu=2,memory=4Gi,uid=node-a-uid", got)
	}
	if e.hasPendingTaint("node-a") {
		t.Error("set-size must open the node once its balloon holds the size")
	}

	// A refused resize rolled back restores the record.
	e.kubelet = refuse(v1.PodReasonDeferred, deferredMessage)
	if code := e.run("set-size", "node-a", "--cpu", "1", "--rollback-on-failure"); code == 0 {
		t.Fatal("want the refused resize to fail")
	}
	if got := e.recordedSize("node-a"); got != "cpu=2,memory=4Gi,uid=node-a-uid" {
		t.Errorf("recorded %q after a rolled back resize, want cpu=2,memory=4Gi,uid=node-a-uid", got)
	}
}

func TestBalloonRecordRoundTrip(t *testing.T) {
	for _, value := range []string{"cpu=2500m,memory=1Gi,uid=u-1", "cpu=1m,memory=1Mi,uid=u-2"} {
		size, uid := parseBalloonRecord(value)
		if size == nil || formatBalloonRecord(size, uid) != value {
			t.Errorf("%q: parsed %v %q, printed %q", value, size, uid, formatBalloonRecord(size, uid))
		}
	}
	// Recorded before entries carried the node's UID.
	if size, uid := parseBalloonRecord("cpu=2,memory=1Gi"); size == nil || uid != "" {
		t.Errorf("an entry without a uid: parsed %v %q", size, uid)
	}
	for _, value := range []string{"", "cpu=2", "cpu=2,memory=1Gi,pods=3", "cpu=0,memory=1Gi", "cpu=x,memory=1Gi", "cpu=1,cpu=2", "cpu=1,memory=1Gi,uid=", "uid=u-1,cpu=1,memory=1Gi"} {
		if size, _ := parseBalloonRecord(value); size != nil {
			t.Errorf("%q: parsed %v, want nil", value, size)
		}
	}
}

// A record outlives its Node only until reconcile sees the node gone: a node
// registered under the name later must not start at that size.
func TestReconcilePrunesTheRecordsOfNodesThatAreGone(t *testing.T) {
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), newBalloon("balloon-a", "node-a", "2", "4Gi"),
		recordedSizesConfigMap(map[string]string{"node-a": recorded["node-a"], "node-gone": "cpu=1,memory=1Gi,uid=node-gone-uid"}))
	e.reconcile()
	if got := e.recordedSize("node-gone"); got != "" {
		t.Errorf("node-gone: recorded %q, want its entry removed", got)
	}
	if got := e.recordedSize("node-a"); got != recorded["node-a"] {
		t.Errorf("node-a: recorded %q, want %q kept", got, recorded["node-a"])
	}
	if !strings.Contains(e.out.String(), "node node-gone: the node is gone; removed its recorded balloon size cpu=1,memory=1Gi,uid=node-gone-uid") {
		t.Errorf("output %q does not say why the entry went", e.out.String())
	}
}

// A node deleted and registered again under its name before a pass saw it
// gone has a new UID: the entry of the earlier Node is not its size. A
// balloon bound since before the new Node outlived the re-registration and
// holds its capacity here, so its size is kept; a balloon created for the new
// Node (which the size policy, knowing only the name, created at the old
// size) goes to the smallest balloon.
func TestReconcileReplacesTheRecordOfAnEarlierNodeOfTheName(t *testing.T) {
	registered := metav1.NewTime(time.Unix(1000, 0))
	for _, tc := range []struct {
		name       string
		created    time.Time
		wantRecord string
		wantResize []v1.ResourceList
	}{{
		name:       "balloon created for the new node",
		created:    time.Unix(1001, 0),
		wantRecord: "cpu=1m,memory=1Mi,uid=node-a-uid",
		wantResize: []v1.ResourceList{resources("1m", "1Mi")},
	}, {
		name:       "balloon that outlived the earlier node",
		created:    time.Unix(999, 0),
		wantRecord: "cpu=3,memory=6Gi,uid=node-a-uid",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			node := newNode("node-a", "4", "16Gi")
			node.CreationTimestamp = registered
			balloon := newBalloon("balloon-a", "node-a", "3", "6Gi")
			balloon.CreationTimestamp = metav1.NewTime(tc.created)
			e := newTestEnv(t, node, balloon, recordedSizesConfigMap(map[string]string{"node-a": "cpu=3,memory=6Gi,uid=earlier-uid"}))
			e.reconcile()
			if got := e.recordedSize("node-a"); got != tc.wantRecord {
				t.Errorf("recorded %q, want %q", got, tc.wantRecord)
			}
			if diff := cmp.Diff(tc.wantResize, e.resizes()); diff != "" {
				t.Errorf("resizes (-want +got):\n%s", diff)
			}
		})
	}
}

// The agent runs for good: its passes read the nodes and the balloons from
// watches, so the API server serves one LIST of each however many passes run,
// and a pass sees what changed since the one before: here a balloon deleted
// between passes, whose node one pass closes and a later one, seeing the
// taint, lets go.
func TestReconcileLoopReadsNodesAndBalloonsFromWatches(t *testing.T) {
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), newBalloon("balloon-a", "node-a", "2", "4Gi"), recordedSizesConfigMap(recorded))
	cmd := newCmdBalloon(deps{
		streams:      genericiooptions.IOStreams{Out: &e.out, ErrOut: &e.errOut},
		newClient:    func() (kubernetes.Interface, error) { return e.client, nil },
		newRecorder:  func(kubernetes.Interface) (record.EventRecorder, func()) { return e.events, func() {} },
		clock:        e.clock,
		pollInterval: time.Second,
	})
	cmd.SetArgs([]string{"reconcile", "--interval=10s"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	// A pass has ended when the loop waits for the next interval.
	passes := 0
	awaitPass := func() {
		for !e.clock.HasWaiters() {
			select {
			case err := <-done:
				t.Fatalf("reconcile ended after %d passes: %v, stderr %q", passes, err, e.errOut.String())
			case <-time.After(time.Millisecond):
			}
		}
		passes++
	}
	nextPass := func() {
		e.clock.Step(10 * time.Second)
		awaitPass()
	}
	awaitPass()

	e.updatePod("balloon-a", func(pod *v1.Pod) {
		pod.Finalizers = []string{kubetypes.BalloonProtectionFinalizer}
		pod.DeletionTimestamp = &metav1.Time{Time: e.clock.Now()}
	})
	for !e.hasPendingTaint("node-a") {
		nextPass()
	}
	for len(e.getPod("balloon-a").Finalizers) > 0 {
		nextPass()
	}
	nextPass()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("reconcile: %v, stderr %q", err, e.errOut.String())
	}

	lists := map[string]int{}
	for _, action := range e.client.Actions() {
		if action.GetVerb() == "list" {
			lists[action.GetResource().Resource]++
		}
	}
	if want := map[string]int{"nodes": 1, "pods": 1}; !cmp.Equal(lists, want) {
		t.Errorf("%d passes listed %v, want %v: one list each, then the watches", passes, lists, want)
	}
	if out := e.out.String(); !strings.Contains(out, "released deleted balloon kube-system/balloon-a") {
		t.Errorf("the deleted balloon was not released; output %q", out)
	}
}

// The agent's cache keeps of a Node what a pass reads, and of a balloon all
// but its managed fields.
func TestReconcileCacheTrimsWhatNoPassReads(t *testing.T) {
	node := taintedNode("node-a")
	node.CreationTimestamp = metav1.Now()
	node.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	node.Status.Images = []v1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 1 << 20}}
	want := node.DeepCopy()
	want.ManagedFields, want.Status = nil, v1.NodeStatus{}
	got, err := trimForReconcile(node)
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(want, got) {
		t.Errorf("trimmed node %+v, want %+v", got, want)
	}

	pod := newBalloon("balloon-a", "node-a", "2", "4Gi")
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-balloon"}}
	wantPod := pod.DeepCopy()
	wantPod.ManagedFields = nil
	gotPod, err := trimForReconcile(pod)
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(wantPod, gotPod) {
		t.Errorf("trimmed balloon %+v, want %+v", gotPod, wantPod)
	}
}
