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

// TestHandshake: the updater renews its lease whatever it sees; the admission
// controller renews its own only while it sees the updater's valid. Each sees
// the other on while the other's lease is younger than its duration, off
// when it is missing or expired, and unknown when it could not read it for
// three sync intervals.
func TestHandshake(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	updater := NewHandshake(client.CoordinationV1(), "kube-system", Updater, "updater-1", clk)
	admission := NewHandshake(client.CoordinationV1(), "kube-system", AdmissionController, "admission-1", clk)
	check := func(step string, updaterSees, admissionSees PeerState, updaterPublished, admissionPublished bool) {
		t.Helper()
		if got := updater.Peer(); got != updaterSees {
			t.Errorf("%s: the updater sees the admission controller %s, want %s", step, got, updaterSees)
		}
		if got := admission.Peer(); got != admissionSees {
			t.Errorf("%s: the admission controller sees the updater %s, want %s", step, got, admissionSees)
		}
		if got := updater.Published(); got != updaterPublished {
			t.Errorf("%s: updater published %t, want %t", step, got, updaterPublished)
		}
		if got := admission.Published(); got != admissionPublished {
			t.Errorf("%s: admission controller published %t, want %t", step, got, admissionPublished)
		}
	}
	check("before any sync", PeerUnknown, PeerUnknown, false, false)

	syncOrFail(t, admission)
	check("the admission controller alone", PeerUnknown, PeerOff, false, false)
	if l := leaseOf(t, client, AdmissionControllerLeaseName); l != nil {
		t.Errorf("the admission controller wrote its lease without seeing the updater: %v", l)
	}

	syncOrFail(t, updater)
	check("the updater synced", PeerOff, PeerOff, true, false)
	l := leaseOf(t, client, UpdaterLeaseName)
	if l == nil || *l.Spec.HolderIdentity != "updater-1" || *l.Spec.LeaseDurationSeconds != 30 || !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Fatalf("updater lease %+v, want holder updater-1, 30 s, renewed now", l)
	}

	syncOrFail(t, admission)
	check("the admission controller saw the updater", PeerOff, PeerOn, true, true)
	syncOrFail(t, updater)
	check("both on", PeerOn, PeerOn, true, true)

	// Renewals move the leases on.
	clk.Step(LeaseSyncInterval)
	syncOrFail(t, updater)
	syncOrFail(t, admission)
	if l := leaseOf(t, client, UpdaterLeaseName); !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Errorf("updater lease renewed at %v, want %v", l.Spec.RenewTime, clk.Now())
	}
	check("renewed", PeerOn, PeerOn, true, true)

	// The updater stops (crash, or restarted with the gate off): its lease
	// expires, the admission controller sees it off and stops renewing its
	// own, which expires in turn.
	clk.Step(LeaseDuration)
	syncOrFail(t, admission)
	if got, published := admission.Peer(), admission.Published(); got != PeerOff || published {
		t.Errorf("the updater stopped: the admission controller sees it %s and has published %t, want off and false", got, published)
	}
	renewed := leaseOf(t, client, AdmissionControllerLeaseName).Spec.RenewTime.Time
	clk.Step(LeaseSyncInterval)
	syncOrFail(t, admission)
	if l := leaseOf(t, client, AdmissionControllerLeaseName); !l.Spec.RenewTime.Time.Equal(renewed) {
		t.Errorf("the admission controller renewed its lease without seeing the updater: %v, was %v", l.Spec.RenewTime, renewed)
	}

	// The updater is back: the same order as at the start.
	syncOrFail(t, updater)
	syncOrFail(t, admission)
	syncOrFail(t, updater)
	check("the updater is back", PeerOn, PeerOn, true, true)

	// The updater cannot read the admission controller's lease: after three
	// intervals it no longer knows; it keeps renewing its own.
	client.PrependReactor("get", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.GetAction).GetName() == AdmissionControllerLeaseName {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	for i := 0; i < 3; i++ {
		if got := updater.Peer(); got != PeerOn {
			t.Errorf("the admission controller's lease unreadable for %d intervals: the updater sees it %s, want on", i, got)
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
			h := NewHandshake(client.CoordinationV1(), "kube-system", Updater, "updater-1", nil)
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
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const (
		perNode = "2"    // the node's entry
		wide    = "300m" // the DaemonSet-wide recommendation
		own     = "100m" // the pod's request: left alone
	)
	for _, tc := range []struct {
		name string
		role Role
		mode vpa_types.UpdateMode
		// the peer's lease: nil none; otherwise renewed that long ago
		peerAge *time.Duration
		// the peer's lease cannot be read
		peerUnreadable bool
		// the own lease cannot be written
		ownUnwritable bool
		want          string
	}{
		{name: "admission, updater on", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), want: perNode},
		{name: "admission, updater on, in-place", role: AdmissionController, mode: vpa_types.UpdateModeInPlaceOrRecreate, peerAge: ptrTo(time.Duration(0)), want: perNode},
		{name: "admission, no updater lease", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, want: wide},
		{name: "admission, updater lease expired", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(LeaseDuration), want: wide},
		{name: "admission, updater lease unreadable", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerUnreadable: true, want: wide},
		{name: "admission, own lease not written", role: AdmissionController, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), ownUnwritable: true, want: wide},
		{name: "admission, mode Initial, no updater", role: AdmissionController, mode: vpa_types.UpdateModeInitial, want: perNode},
		{name: "admission, mode Off, no updater", role: AdmissionController, mode: vpa_types.UpdateModeOff, want: perNode},
		{name: "updater, admission controller on", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), want: perNode},
		{name: "updater, no admission controller lease", role: Updater, mode: vpa_types.UpdateModeRecreate, want: wide},
		{name: "updater, admission controller lease expired", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(LeaseDuration), want: wide},
		{name: "updater, admission controller lease unreadable", role: Updater, mode: vpa_types.UpdateModeRecreate, peerUnreadable: true, want: own},
		{name: "updater, own lease not written", role: Updater, mode: vpa_types.UpdateModeRecreate, peerAge: ptrTo(time.Duration(0)), ownUnwritable: true, want: own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			peer := UpdaterLeaseName
			if tc.role == Updater {
				peer = AdmissionControllerLeaseName
			}
			if tc.peerAge != nil {
				renewed := metav1.NewMicroTime(clk.Now().Add(-*tc.peerAge))
				if err := client.Tracker().Add(&coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: peer, Namespace: "kube-system"},
					Spec:       coordinationv1.LeaseSpec{RenewTime: &renewed, LeaseDurationSeconds: ptrTo(int32(30))},
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
			h := NewHandshake(client.CoordinationV1(), "kube-system", tc.role, "me", clk)
			_ = h.Sync(context.Background())
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
