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

package nodescope

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/limitrange"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

func syncOrFail(t *testing.T, h *Handshake) {
	t.Helper()
	if err := h.Sync(context.Background()); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func leaseOf(t *testing.T, client *fake.Clientset, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// renewStatus renews the admission controller's status lease, as upstream's
// status updater does every 10 seconds whatever the gate.
func renewStatus(t *testing.T, client *fake.Clientset, now time.Time) {
	t.Helper()
	leases := client.CoordinationV1().Leases("kube-system")
	renew := metav1.NewMicroTime(now)
	l, err := leases.Get(context.Background(), "vpa-admission-controller", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(context.Background(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "vpa-admission-controller", Namespace: "kube-system"},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &renew},
		}, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.RenewTime = &renew
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestHandshake: the updater renews its lease whatever it sees; the admission
// controller renews its own only while it sees the updater's valid. Each sees
// the other on while the other's lease is younger than its duration, off
// when it is missing, and unknown when it could not read it for three sync
// intervals. An expired lease of the updater is off for the admission
// controller; an expired lease of the admission controller is off for the
// updater only once the admission controller's status lease was renewed
// after it expired. Each is settled once its lease has been published long
// enough for the other to have reacted.
func TestHandshake(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	updater := NewHandshake(client.CoordinationV1(), "kube-system", Updater, "updater-1", "vpa-admission-controller", clk)
	admission := NewHandshake(client.CoordinationV1(), "kube-system", AdmissionController, "admission-1", "", clk)
	type state struct {
		sees               PeerState
		published, settled bool
	}
	check := func(step string, u, a state) {
		t.Helper()
		if got := (state{updater.Peer(), updater.Published(), updater.Settled()}); got != u {
			t.Errorf("%s: updater sees %s, published %t, settled %t; want %s, %t, %t", step, got.sees, got.published, got.settled, u.sees, u.published, u.settled)
		}
		if got := (state{admission.Peer(), admission.Published(), admission.Settled()}); got != a {
			t.Errorf("%s: admission controller sees %s, published %t, settled %t; want %s, %t, %t", step, got.sees, got.published, got.settled, a.sees, a.published, a.settled)
		}
	}
	// round steps the clock by a sync interval and syncs both, the updater
	// first, with the admission controller's status lease renewed.
	round := func() {
		t.Helper()
		clk.Step(LeaseSyncInterval)
		renewStatus(t, client, clk.Now())
		syncOrFail(t, updater)
		syncOrFail(t, admission)
	}
	check("before any sync", state{PeerUnknown, false, false}, state{PeerUnknown, false, false})

	renewStatus(t, client, clk.Now())
	syncOrFail(t, admission)
	check("the admission controller alone", state{PeerUnknown, false, false}, state{PeerOff, false, false})
	if l := leaseOf(t, client, AdmissionControllerLeaseName); l != nil {
		t.Errorf("the admission controller wrote its lease without seeing the updater: %v", l)
	}

	syncOrFail(t, updater)
	check("the updater synced", state{PeerOff, true, false}, state{PeerOff, false, false})
	l := leaseOf(t, client, UpdaterLeaseName)
	if l == nil || *l.Spec.HolderIdentity != "updater-1" || *l.Spec.LeaseDurationSeconds != 30 || !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Fatalf("updater lease %+v, want holder updater-1, 30 s, renewed now", l)
	}
	syncOrFail(t, admission)
	check("the admission controller saw the updater", state{PeerOff, true, false}, state{PeerOn, true, false})

	// The updater does not take the admission controller's lease as on
	// until it was published for two intervals: the admission controller
	// gives pods their node's recommendation only from then on.
	round()
	check("one interval later", state{PeerUnknown, true, false}, state{PeerOn, true, false})
	round()
	check("two intervals later: both settled", state{PeerUnknown, true, true}, state{PeerOn, true, true})
	round()
	check("three intervals later", state{PeerOn, true, true}, state{PeerOn, true, true})
	if l := leaseOf(t, client, AdmissionControllerLeaseName); !l.Spec.AcquireTime.Time.Equal(clk.Now().Add(-3 * LeaseSyncInterval)) {
		t.Errorf("admission controller lease acquired at %v, want when it began to publish, %v", l.Spec.AcquireTime, clk.Now().Add(-3*LeaseSyncInterval))
	}
	if l := leaseOf(t, client, UpdaterLeaseName); !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("updater lease renewed at %v, want %v", l.Spec.RenewTime, clk.Now())
	}

	// The updater stops (crash, or restarted with the gate off): its lease
	// expires, the admission controller sees it off and stops renewing its
	// own.
	clk.Step(LeaseDuration)
	renewStatus(t, client, clk.Now())
	syncOrFail(t, admission)
	if got, published := admission.Peer(), admission.Published(); got != PeerOff || published {
		t.Errorf("the updater stopped: the admission controller sees it %s and has published %t, want off and false", got, published)
	}
	renewed := leaseOf(t, client, AdmissionControllerLeaseName).Spec.RenewTime.Time
	clk.Step(LeaseSyncInterval)
	renewStatus(t, client, clk.Now())
	syncOrFail(t, admission)
	if l := leaseOf(t, client, AdmissionControllerLeaseName); !l.Spec.RenewTime.Time.Equal(renewed) {
		t.Errorf("the admission controller renewed its lease without seeing the updater: %v, was %v", l.Spec.RenewTime, renewed)
	}

	// The updater is back: the admission controller's lease is expired, and
	// its status lease renewed since, so it is off, but the updater is not
	// settled: the admission controller has not seen it yet.
	syncOrFail(t, updater)
	check("the updater is back", state{PeerOff, true, false}, state{PeerOff, false, false})
	round()
	check("the updater is back, one interval later", state{PeerOff, true, false}, state{PeerOn, true, false})
	round()
	check("the updater is back, two intervals later", state{PeerUnknown, true, true}, state{PeerOn, true, false})
	round()
	check("the updater is back, three intervals later", state{PeerUnknown, true, true}, state{PeerOn, true, true})
	round()
	check("the updater is back, four intervals later", state{PeerOn, true, true}, state{PeerOn, true, true})

	// The admission controller stops (restart): its node scope lease expires
	// and its status lease is not renewed: the updater does not know.
	for i := 0; i < 4; i++ {
		clk.Step(LeaseSyncInterval)
		syncOrFail(t, updater)
	}
	if got := updater.Peer(); got != PeerUnknown {
		t.Errorf("the admission controller stopped 40 s ago: the updater sees it %s, want unknown", got)
	}
	// It is back with the gate off: its status lease is renewed, its node
	// scope lease not: off.
	clk.Step(LeaseSyncInterval)
	renewStatus(t, client, clk.Now())
	syncOrFail(t, updater)
	if got, settled := updater.Peer(), updater.Settled(); got != PeerOff || !settled {
		t.Errorf("the admission controller back without the gate: the updater sees it %s, settled %t; want off, true", got, settled)
	}

	// The updater cannot read the admission controller's lease: after three
	// intervals it no longer knows; it keeps renewing its own.
	client.PrependReactor("get", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.GetAction).GetName() == AdmissionControllerLeaseName {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	for i := 0; i < 3; i++ {
		if got := updater.Peer(); got != PeerOff {
			t.Errorf("the admission controller's lease unreadable for %d intervals: the updater sees it %s, want off", i, got)
		}
		clk.Step(LeaseSyncInterval)
		if err := updater.Sync(context.Background()); err == nil {
			t.Fatal("sync without the admission controller's lease: no error")
		}
	}
	if got, published := updater.Peer(), updater.Published(); got != PeerUnknown || !published {
		t.Errorf("the admission controller's lease unreadable for three intervals: the updater sees it %s and has published %t, want unknown and true", got, published)
	}
}

// TestHandshakeForbidden: without RBAC for the leases, the component does not
// start, and the error names the leases.
func TestHandshakeForbidden(t *testing.T) {
	for _, verb := range []string{"get", "update", "create"} {
		t.Run(verb, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, UpdaterLeaseName, nil)
			})
			if verb == "update" {
				if err := client.Tracker().Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: UpdaterLeaseName, Namespace: "kube-system"}}); err != nil {
					t.Fatal(err)
				}
			}
			h := NewHandshake(client.CoordinationV1(), "kube-system", Updater, "updater-1", "vpa-admission-controller", nil)
			stop := make(chan struct{})
			defer close(stop)
			err := h.start(stop)
			if err == nil || !strings.Contains(err.Error(), "may not read lease kube-system/vpa-admission-controller-node-scope or write lease kube-system/vpa-updater-node-scope") {
				t.Errorf("start: %v, want the leases named", err)
			}
		})
	}
}

// TestDecide: what the admission controller gives a pod of a node-scoped VPA
// and what the updater acts on, by what each knows of the other.
func TestDecide(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	const (
		perNode = "2"    // the node's entry
		wide    = "300m" // the DaemonSet-wide recommendation
		own     = "100m" // the pod's request: left alone
	)
	for _, tc := range []struct {
		name string
		role Role
		mode vpa_types.UpdateMode
		// the peer's lease: nil none; otherwise renewed that long before the decision
		peerAge *time.Duration
		// how long the peer had published its lease when it last renewed it
		// (its renewTime less its acquireTime); nil: an hour
		peerPublishedFor *time.Duration
		// the admission controller's status lease (updater only): renewed
		// that long before the decision; nil: at the decision
		statusAge *time.Duration
		// the peer's lease cannot be read
		peerUnreadable bool
		// the own lease cannot be written
		ownUnwritable bool
		// syncs before the decision, one a sync interval; 0: 3
		syncs int
		want  string
	}{
		{name: "admission, updater on", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), want: perNode},
		{name: "admission, updater on, in-place", role: AdmissionController, mode: vpa_types.UpdateModeInPlaceOrRecreate, peerAge: ptrTo(time.Duration(0)), want: perNode},
		{name: "admission, updater on, own lease just published", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), syncs: 2, want: wide},
		{name: "admission, no updater lease", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, want: wide},
		{name: "admission, updater lease expired", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(LeaseDuration), want: wide},
		{name: "admission, updater lease unreadable", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerUnreadable: true, want: wide},
		{name: "admission, own lease not written", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), ownUnwritable: true, want: wide},
		{name: "admission, mode Initial, no updater", role: AdmissionController, mode: vpa_types.UpdateModeInitial, want: perNode},
		{name: "admission, mode Off, no updater", role: AdmissionController, mode: vpa_types.UpdateModeOff, want: perNode},
		{name: "updater, admission controller on", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), want: perNode},
		{name: "updater, admission controller on, updater just started", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), syncs: 1, want: perNode},
		{name: "updater, admission controller lease published for less than two intervals", role: Updater, mode: vpa_types.UpdateModeRecreate,
			peerAge: ptrTo(time.Duration(0)), peerPublishedFor: ptrTo(2*LeaseSyncInterval - time.Second), want: own},
		{name: "updater, admission controller lease published for two intervals", role: Updater, mode: vpa_types.UpdateModeRecreate,
			peerAge: ptrTo(time.Duration(0)), peerPublishedFor: ptrTo(2 * LeaseSyncInterval), want: perNode},
		{name: "updater, no admission controller lease", role: Updater, mode: vpa_types.UpdateModeRecreate, want: wide},
		{name: "updater, no admission controller lease, updater just started", role: Updater, mode: vpa_types.UpdateModeRecreate, syncs: 2, want: own},
		{name: "updater, admission controller lease expired, status renewed since", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(LeaseDuration + LeaseSyncInterval), want: wide},
		{name: "updater, admission controller lease expired, status not renewed since", role: Updater, mode: vpa_types.UpdateModeRecreate,
			peerAge: ptrTo(LeaseDuration + LeaseSyncInterval), statusAge: ptrTo(LeaseDuration + LeaseSyncInterval), want: own},
		{name: "updater, admission controller lease unreadable", role: Updater, mode: vpa_types.UpdateModeRecreate, peerUnreadable: true, want: own},
		{name: "updater, own lease not written", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), ownUnwritable: true, want: own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			syncs := tc.syncs
			if syncs == 0 {
				syncs = 3
			}
			decision := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakeClock(decision.Add(-time.Duration(syncs-1) * LeaseSyncInterval))
			client := fake.NewClientset()
			peer, status := UpdaterLeaseName, ""
			if tc.role == Updater {
				peer, status = AdmissionControllerLeaseName, "vpa-admission-controller"
				statusRenewed := metav1.NewMicroTime(decision.Add(-ptr.Deref(tc.statusAge, 0)))
				if err := client.Tracker().Add(&coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: status, Namespace: "kube-system"},
					Spec:       coordinationv1.LeaseSpec{RenewTime: &statusRenewed},
				}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.peerAge != nil {
				renewed := metav1.NewMicroTime(decision.Add(-*tc.peerAge))
				acquired := metav1.NewMicroTime(renewed.Add(-ptr.Deref(tc.peerPublishedFor, time.Hour)))
				if err := client.Tracker().Add(&coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: peer, Namespace: "kube-system"},
					Spec:       coordinationv1.LeaseSpec{AcquireTime: &acquired, RenewTime: &renewed, LeaseDurationSeconds: ptrTo(int32(30))},
				}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.peerUnreadable {
				client.PrependReactor("get", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
					if action.(k8stesting.GetAction).GetName() == peer {
						return true, nil, apierrors.NewServiceUnavailable("etcd is down")
					}
					return false, nil, nil
				})
			}
			if tc.ownUnwritable {
				client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				})
			}
			h := NewHandshake(client.CoordinationV1(), "kube-system", tc.role, "me", status, clk)
			for i := 0; i < syncs; i++ {
				if i > 0 {
					clk.Step(LeaseSyncInterval)
				}
				_ = h.Sync(context.Background())
			}
			if !clk.Now().Equal(decision) {
				t.Fatalf("clock at %v, want %v", clk.Now(), decision)
			}
			p := &RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()), Lookup: lookup(t), Role: tc.role, Handshake: h}
			vpa := daemonSetVPA(vpa_types.ScopeNode, nil)
			vpa.Spec.UpdatePolicy = &vpa_types.PodUpdatePolicy{UpdateMode: &tc.mode}
			rec, _, err := p.Apply(vpa, daemonSetPod("busy", true))
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.ContainerRecommendations[0].Target[corev1.ResourceCPU]; got.Cmp(resource.MustParse(tc.want)) != 0 {
				t.Errorf("cpu target %s, want %s", got.String(), tc.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestLeaseNamespace: the namespace of the admission controller's status
// lease, as both components' main.go derive it: kube-system, else the
// NAMESPACE environment variable, else the flag.
func TestLeaseNamespace(t *testing.T) {
	for _, tc := range []struct{ env, flag, want string }{
		{"", "", "kube-system"},
		{"vpa", "", "vpa"},
		{"vpa", "leases", "leases"},
		{"", "leases", "leases"},
	} {
		if got := LeaseNamespace(tc.env, tc.flag); got != tc.want {
			t.Errorf("LeaseNamespace(%q, %q) = %q, want %q", tc.env, tc.flag, got, tc.want)
		}
	}
}
