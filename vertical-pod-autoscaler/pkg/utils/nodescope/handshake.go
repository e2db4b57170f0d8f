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
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/status"
)

// Role is the component a RecommendationProcessor decides for.
type Role int

const (
	// AdmissionController gives new pods their requests.
	AdmissionController Role = iota
	// Updater evicts or resizes running pods.
	Updater
)

func (r Role) String() string {
	if r == Updater {
		return "updater"
	}
	return "admission controller"
}

const (
	// AdmissionControllerLeaseName is the Lease an admission controller with
	// the DaemonSetNodeScope gate renews while it gives pods their node's
	// recommendation (it sees the updater's lease).
	AdmissionControllerLeaseName = "vpa-admission-controller-node-scope"
	// UpdaterLeaseName is the Lease an updater with the DaemonSetNodeScope
	// gate renews while it runs.
	UpdaterLeaseName = "vpa-updater-node-scope"
	// LeaseDuration is how long a renewal of either lease counts.
	LeaseDuration = 30 * time.Second
	// LeaseSyncInterval is how often each component reads its peer's lease
	// and renews its own.
	LeaseSyncInterval = 10 * time.Second
	// peerReadValidity is how long a successful read of the peer's lease is
	// an answer; after it, the peer's state is unknown.
	peerReadValidity = 3 * LeaseSyncInterval
)

// PeerState is what a component knows of the other one.
type PeerState int

const (
	// PeerUnknown: the peer's lease could not be read lately.
	PeerUnknown PeerState = iota
	// PeerOff: the peer's lease is missing or expired.
	PeerOff
	// PeerOn: the peer's lease is valid.
	PeerOn
)

func (s PeerState) String() string {
	switch s {
	case PeerOff:
		return "off"
	case PeerOn:
		return "on"
	}
	return "unknown"
}

// LeaseNamespace is the namespace of both leases: the admission controller's
// status lease namespace, as its main.go and the updater's derive it
// (kube-system, else the NAMESPACE environment variable, else the flag).
func LeaseNamespace(envNamespace, flagNamespace string) string {
	ns := status.AdmissionControllerStatusNamespace
	if envNamespace != "" {
		ns = envNamespace
	}
	if flagNamespace != "" {
		ns = flagNamespace
	}
	return ns
}

// Handshake tells a component with the DaemonSetNodeScope gate on whether
// the other component (the admission controller for the updater, and the
// other way round) applies per-node recommendations, so that they never act
// on different recommendations for the same pod (an eviction loop), and
// publishes its own side. Each component renews a Lease of its own: the
// updater always, the admission controller only while it sees the updater's
// lease valid (only then does it give pods of updated VPAs their node's
// value). An updater or admission controller without the gate, or of a
// release without the feature, renews none.
type Handshake struct {
	leases    typedcoordinationv1.LeaseInterface
	namespace string
	own, peer string
	identity  string
	clock     clock.PassiveClock
	// publishIf tells whether to renew the own lease, given the peer's state.
	publishIf func(PeerState) bool

	// status is the admission controller's status lease (upstream's, renewed
	// whatever the gate), which the updater reads too; empty for the
	// admission controller.
	status string
	role   Role

	mu          sync.Mutex
	peerLease   *coordinationv1.Lease // the last one read; nil: not found
	statusLease *coordinationv1.Lease // the last one read; nil: not found
	peerReadAt  time.Time             // last successful read; zero: never
	renewedAt   time.Time             // last successful renewal of the own lease; zero: never
	// publishedSince is the first renewal of the own lease since which it
	// never expired.
	publishedSince time.Time
}

// NewHandshake returns the handshake of role, over the leases in namespace
// of client, with identity as holder of the own lease. The updater reads the
// admission controller's status lease, statusLease, too (ignored for the
// admission controller). clk nil: the real clock.
func NewHandshake(client typedcoordinationv1.LeasesGetter, namespace string, role Role, identity, statusLease string, clk clock.PassiveClock) *Handshake {
	if clk == nil {
		clk = clock.RealClock{}
	}
	h := &Handshake{leases: client.Leases(namespace), namespace: namespace, identity: identity, clock: clk, role: role}
	if role == Updater {
		h.own, h.peer, h.status = UpdaterLeaseName, AdmissionControllerLeaseName, statusLease
		h.publishIf = func(PeerState) bool { return true }
	} else {
		h.own, h.peer = AdmissionControllerLeaseName, UpdaterLeaseName
		h.publishIf = func(s PeerState) bool { return s == PeerOn }
	}
	return h
}

// Sync reads the peer's lease (and for the updater the admission
// controller's status lease), then renews the own lease if the role
// publishes in the peer's state. It returns the first error.
func (h *Handshake) Sync(ctx context.Context) error {
	peer, err := h.read(ctx, h.peer)
	var status *coordinationv1.Lease
	if err == nil && h.status != "" {
		status, err = h.read(ctx, h.status)
	}
	if err == nil {
		h.mu.Lock()
		h.peerLease, h.statusLease, h.peerReadAt = peer, status, h.clock.Now()
		h.mu.Unlock()
	}
	if !h.publishIf(h.Peer()) {
		return err
	}
	h.mu.Lock()
	now := h.clock.Now()
	since := h.publishedSince
	if h.renewedAt.IsZero() || !now.Before(h.renewedAt.Add(LeaseDuration)) {
		since = now
	}
	h.mu.Unlock()
	if rerr := h.renew(ctx, now, since); rerr != nil {
		rerr = fmt.Errorf("cannot renew lease %s/%s: %w", h.namespace, h.own, rerr)
		if err == nil {
			err = rerr
		}
		return err
	}
	h.mu.Lock()
	h.publishedSince, h.renewedAt = since, now
	h.mu.Unlock()
	return err
}

// read returns the lease of that name, nil when there is none.
func (h *Handshake) read(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	lease, err := h.leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read lease %s/%s: %w", h.namespace, name, err)
	}
	return lease, nil
}

// renew writes the own lease renewed at now, acquired (published without a
// break) since since.
func (h *Handshake) renew(ctx context.Context, renewed, since time.Time) error {
	now, acquired := metav1.NewMicroTime(renewed), metav1.NewMicroTime(since)
	lease, err := h.leases.Get(ctx, h.own, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = h.leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: h.own, Namespace: h.namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(h.identity),
				LeaseDurationSeconds: ptr.To(int32(LeaseDuration / time.Second)),
				AcquireTime:          &acquired,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica created it just now
		}
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity = ptr.To(h.identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(LeaseDuration / time.Second))
	lease.Spec.AcquireTime = &acquired
	lease.Spec.RenewTime = &now
	_, err = h.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // another replica renewed it just now
	}
	return err
}

// Peer is the state of the peer now: unknown when its leases were not read
// successfully within the last three sync intervals; on while its lease is
// younger than its duration; off when it has none. An expired lease is off
// for the admission controller. For the updater it is off only when the
// admission controller renewed its status lease after its node scope lease
// expired (it runs, and does not apply per-node recommendations), and
// unknown otherwise (it may be down or restarting, and apply them again).
// For the updater, a valid lease of the admission controller that was
// acquired (published without a break) less than two sync intervals before
// its last renewal is unknown too: the admission controller begins to give
// pods their node's recommendation only two sync intervals after it begins
// to publish (see Settled).
func (h *Handshake) Peer() PeerState {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	if h.peerReadAt.IsZero() || !now.Before(h.peerReadAt.Add(peerReadValidity)) {
		return PeerUnknown
	}
	l := h.peerLease
	if l == nil || l.Spec.RenewTime == nil {
		return PeerOff
	}
	expiry := l.Spec.RenewTime.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
	switch {
	case now.Before(expiry) && h.role == Updater && (l.Spec.AcquireTime == nil || l.Spec.RenewTime.Sub(l.Spec.AcquireTime.Time) < 2*LeaseSyncInterval):
		return PeerUnknown
	case now.Before(expiry):
		return PeerOn
	case h.status == "":
		return PeerOff
	case h.statusLease != nil && statusRenewed(h.statusLease).After(expiry):
		return PeerOff
	}
	return PeerUnknown
}

// statusRenewed is when upstream's status lease was last written: its
// renewTime, or its creation (upstream creates it without renewTime).
func statusRenewed(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(l.CreationTimestamp.Time) {
		return l.Spec.RenewTime.Time
	}
	return l.CreationTimestamp.Time
}

// Published tells whether the own lease was renewed within LeaseDuration,
// so that the peer, reading it, sees it valid.
func (h *Handshake) Published() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.renewedAt.IsZero() && h.clock.Now().Before(h.renewedAt.Add(LeaseDuration))
}

// Settled tells whether the own lease has been published long enough that
// the peer has reacted to it: the peer reads it every LeaseSyncInterval
// and, the admission controller, renews its own in the same sync. For the
// admission controller: published without a break for two sync intervals
// (the updater has read it since). For the updater: its last read of the
// admission controller's leases came two sync intervals or more after it
// began to publish (the admission controller had read its lease and renewed
// its own by then), so that a missing or expired lease of the admission
// controller is an answer and not the lag of a start.
func (h *Handshake) Settled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	if h.renewedAt.IsZero() || !now.Before(h.renewedAt.Add(LeaseDuration)) {
		return false
	}
	settledAt := h.publishedSince.Add(2 * LeaseSyncInterval)
	if h.role == Updater {
		return !h.peerReadAt.Before(settledAt)
	}
	return !now.Before(settledAt)
}

// Run syncs every LeaseSyncInterval until ctx is done, logging errors.
func (h *Handshake) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := h.Sync(ctx); err != nil {
			klog.ErrorS(err, "Per-node recommendations: cannot sync the leases of the admission controller and updater", "peer", h.Peer(), "published", h.Published())
		}
	}, LeaseSyncInterval)
}

// start syncs once, failing when the leases are forbidden (RBAC is missing),
// then syncs in the background until stopCh is closed.
func (h *Handshake) start(stopCh <-chan struct{}) error {
	ctx := wait.ContextForChannel(stopCh)
	syncCtx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	if err := h.Sync(syncCtx); err != nil {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but this component may not read lease %s/%s or write lease %s/%s: grant it (deploy/vpa-rbac.yaml) or turn the gate off: %w", h.namespace, h.peer, h.namespace, h.own, err)
		}
		klog.ErrorS(err, "Per-node recommendations: cannot sync the leases of the admission controller and updater yet", "peer", h.Peer(), "published", h.Published())
	}
	go h.Run(ctx)
	return nil
}
