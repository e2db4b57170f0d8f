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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle/tasks"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/test/integration/framework"
	"k8s.io/utils/ptr"
)

// TestThreeAPIServers runs three kube-apiservers on one etcd: leadership of
// the Features is spread and agreed; killing the leader of a Feature in the
// middle of its transition lets another one finish it within the liveness
// bound; and two leaders of the same Feature at once, with identity leases of
// their own (a partition of the leases), run the same transition's task
// without harm: it completes once, and neither strips what it cleared once
// the feature is on again.
func TestThreeAPIServers(t *testing.T) {
	ctx := context.Background()
	fastLifecycle(t)
	for _, feature := range []featuregate.Feature{features.FeatureLifecycle, features.BalloonPod, features.PersistentVolumeClaimUnusedSinceTime} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, feature, true)
	}
	etcd := framework.SharedEtcd()
	start := time.Now()
	servers := map[string]*kubeapiservertesting.TestServer{}
	stops := map[string]func(){}
	var identities []string
	for i := 1; i <= 3; i++ {
		server := startAPIServer(t, fmt.Sprintf("host-%d", i), etcd)
		stop := sync.OnceFunc(server.TearDownFn)
		t.Cleanup(stop)
		identity := waitForNewIdentity(t, server, identities)
		identities = append(identities, identity)
		servers[identity], stops[identity] = server, stop
	}
	slices.Sort(identities)
	client := clientset.NewForConfigOrDie(servers[identities[0]].ClientConfig)
	featureClient := client.FeaturesV1alpha1().Features(metav1.NamespaceSystem)

	// Every feature the servers know is announced by its rendezvous leader.
	known := sets.New[string]()
	// The servers' gate, read only: its features and their versioned specs.
	gate := utilfeature.DefaultFeatureGate.(featuregate.MutableVersionedFeatureGate)
	for key := range gate.GetAll() {
		if key != "AllAlpha" && key != "AllBeta" {
			known.Insert(strings.ToLower(string(key)))
		}
	}
	var led map[string]int
	settled := func(ctx context.Context) (bool, error) {
		list, err := featureClient.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		led = map[string]int{}
		announced := sets.New[string]()
		for _, f := range list.Items {
			if f.Status.Announcer != featurelifecycle.LeaderOf(f.Name, identities) {
				return false, nil
			}
			led[f.Status.Announcer]++
			announced.Insert(f.Name)
		}
		return announced.IsSuperset(known), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, stepWait, true, settled); err != nil {
		t.Fatalf("the %d features were not all announced by their leaders: %v (led: %v)", known.Len(), err, led)
	}
	t.Logf("%d Features announced by their rendezvous leaders %v after the first server started; features led: %v", known.Len(), time.Since(start).Round(100*time.Millisecond), led)
	for _, identity := range identities {
		if led[identity] < known.Len()/6 {
			t.Errorf("%s leads %d of %d features, want about a third", identity, led[identity], known.Len())
		}
	}
	// Agreed: nobody takes a Feature over once the servers see each other,
	// in a window of a liveness period in which every identity lease was seen
	// renewed in time. On a loaded machine a renewal comes late now and then,
	// and the servers then rightly move Features: such a window proves
	// nothing, and the check takes the next one.
	windows := time.Now().Add(stepWait)
	for attempt := 1; ; attempt++ {
		late := leasesRenewedLate(ctx, t, client, identities, 3*renewPeriod)
		ok, _ := settled(ctx)
		if len(late) == 0 {
			if !ok {
				t.Errorf("leadership changed while all servers were up and renewed their leases in time: %v", led)
			}
			break
		}
		t.Logf("identity leases renewed late in window %d: %v", attempt, late)
		if time.Now().After(windows) {
			t.Errorf("no window of %v in which every identity lease was renewed within it, in %d tries over %v: the machine is too loaded to check that leadership stays put", 3*renewPeriod, attempt, stepWait)
			break
		}
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, stepWait, true, settled); err != nil {
			t.Fatalf("the Features were not announced by their leaders again after late renewals: %v (led: %v)", err, led)
		}
	}

	// Kill the leader of BalloonPod while a balloon holds it TurningOff.
	balloons := tasks.WaitForNoBalloonPods{}
	if err := balloons.Use(ctx, client); err != nil {
		t.Fatal(err)
	}
	leader := featurelifecycle.LeaderOf("balloonpod", identities)
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, false)
	waitFor(t, featureClient, "balloonpod", stepWait, "held by WaitForNoBalloonPods", func(f *featuresv1alpha1.Feature) bool {
		return f.Status.State == featuresv1alpha1.FeatureStateTurningOff && len(f.Status.Tasks) > 0 &&
			f.Status.Tasks[0].Name == balloons.Name() && f.Status.Tasks[0].StartTime != nil
	})
	var survivors []string
	for _, identity := range identities {
		if identity != leader {
			survivors = append(survivors, identity)
		}
	}
	client = clientset.NewForConfigOrDie(servers[survivors[0]].ClientConfig)
	featureClient = client.FeaturesV1alpha1().Features(metav1.NamespaceSystem)
	leases := client.CoordinationV1().Leases(metav1.NamespaceSystem)
	lease, err := leases.Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A crash: the server stops and its lease stays, no longer renewed. (A
	// graceful shutdown deletes the lease, and the others take over at once.)
	stops[leader]()
	killed := time.Now()
	lease.ResourceVersion = ""
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// What the survivors write from the crash on, for the log: the failover's
	// time is measured (docs/feature-api.md), not bounded, since it is made of
	// the server flow's periods and of how busy the machine is.
	timeline := watchFeature(ctx, t, featureClient, "balloonpod", killed)
	logOnFailure(t, "balloonpod", timeline)
	if err := balloons.Release(ctx, client); err != nil {
		t.Fatal(err)
	}
	f := waitFor(t, featureClient, "balloonpod", stepWait, "Off", func(f *featuresv1alpha1.Feature) bool {
		return f.Status.State == featuresv1alpha1.FeatureStateOff
	})
	failover := time.Since(killed)
	t.Logf("BalloonPod: leader %s crashed mid-transition %v after its last renewal; %s finished the transition %v after the crash; what the Feature went through:\n%s",
		leader, killed.Sub(lease.Spec.RenewTime.Time).Round(100*time.Millisecond), f.Status.Announcer, failover.Round(100*time.Millisecond), timeline)
	// Ordering, not timing: no survivor wrote the Feature after the crash and
	// before the dead leader's lease had expired (three renew periods after its
	// last renewal). Under load the renewals lag, and a survivor may have taken
	// the Feature over before the crash (docs/feature-api.md).
	expired := lease.Spec.RenewTime.Add(3 * renewPeriod)
	if first := timeline.firstWriteBy(survivors); !first.IsZero() && first.Before(expired) {
		t.Errorf("a survivor wrote the Feature at %v, before the dead leader's lease expired at %v", first.Format(time.StampMilli), expired.Format(time.StampMilli))
	}
	if want := featurelifecycle.LeaderOf("balloonpod", survivors); f.Status.Announcer != want {
		t.Errorf("finished by %s, want the new leader %s", f.Status.Announcer, want)
	}

	// Two leaders of every Feature at once: two more server flows, each with
	// an identity lease of its own that the test renews, select their leases
	// by another label, so they see only each other and the three servers
	// see only themselves. Each side leads every Feature by its own view, as
	// servers whose views of the leases differ do for a while. Both run the
	// PVC task of the same transition, and both keep running once it is over.
	var binary *version.Version
	binary, err = version.ParseGeneric(f.Status.BinaryVersion)
	if err != nil {
		t.Fatal(err)
	}
	partitionCtx, stopPartition := context.WithCancel(ctx)
	t.Cleanup(stopPartition)
	partition := []string{"partitioned-1", "partitioned-2"}
	for _, identity := range partition {
		go renewIdentityLease(partitionCtx, t, client, identity, "partitioned", binary)
		registry := featurelifecycle.NewRegistry(featurelifecycle.NewWaitForUses(usesWait, usesWait))
		tasks.Register(registry)
		go featurelifecycle.New(featurelifecycle.Config{
			Namespace:             metav1.NamespaceSystem,
			Identity:              identity,
			IdentityLeaseSelector: "apiserver.kubernetes.io/identity=partitioned",
			Gate:                  featurereporting.NewGate(gate),
			BinaryVersion:         binary,
			EmulationVersion:      version.MajorMinor(binary.Major(), binary.Minor()),
			Tasks:                 registry,
			Liveness:              3 * renewPeriod,
			Recheck:               renewPeriod,
			UnknownRetention:      3,
			PruneInterval:         usesWait,
			UseExpiry:             featurereporting.UseExpiry,
		}, client).Run(partitionCtx)
	}
	const pvcFeature = "persistentvolumeclaimunusedsincetime"
	pvcTimeline := watchFeature(ctx, t, featureClient, pvcFeature, time.Now())
	logOnFailure(t, pvcFeature, pvcTimeline)
	// Both sides lead the Feature: each has announced it.
	mainLeader := featurelifecycle.LeaderOf(pvcFeature, survivors)
	bothLead := func(since time.Time) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			return pvcTimeline.lastWriteBy(partition).After(since) && pvcTimeline.lastWriteBy([]string{mainLeader}).After(since), nil
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, stepWait, true, bothLead(time.Time{})); err != nil {
		t.Fatalf("want %s and a partitioned flow both writing %s, saw:\n%s", mainLeader, pvcFeature, pvcTimeline)
	}
	claims := tasks.ClearPVCUnusedCondition{}
	if err := claims.Use(ctx, client); err != nil {
		t.Fatal(err)
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PersistentVolumeClaimUnusedSinceTime, false)
	f = waitFor(t, featureClient, pvcFeature, stepWait, "Off", func(f *featuresv1alpha1.Feature) bool {
		return f.Status.State == featuresv1alpha1.FeatureStateOff
	})
	if err := claims.Pristine(ctx, client); err != nil {
		t.Error(err)
	}
	if len(f.Status.Tasks) != 0 || meta.FindStatusCondition(f.Status.Conditions, featuresv1alpha1.FeatureConditionTaskFailed) != nil {
		t.Errorf("the transition under two leaders left tasks or a failure behind: %s", dump(f))
	}

	// The feature is turned on again, and kube-controller-manager would keep
	// the condition on the claims again: a leader still acting for the
	// transition that is over would strip it. Both sides go on leading for
	// several passes; the condition stays.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PersistentVolumeClaimUnusedSinceTime, true)
	waitFor(t, featureClient, pvcFeature, stepWait, "On", func(f *featuresv1alpha1.Feature) bool {
		return f.Status.State == featuresv1alpha1.FeatureStateOn
	})
	claimList, err := client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil || len(claimList.Items) != 1 {
		t.Fatalf("want the harness's one claim, got %v, %v", claimList, err)
	}
	claim := &claimList.Items[0]
	claim.Status.Conditions = append(claim.Status.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimUnused, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(),
	})
	if _, err := client.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	on := time.Now()
	for range 3 {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, stepWait, true, bothLead(on)); err != nil {
			t.Fatalf("want both sides writing %s after it was turned on, saw:\n%s", pvcFeature, pvcTimeline)
		}
		on = time.Now()
	}
	if err := claims.Pristine(ctx, client); err == nil {
		t.Errorf("a leader stripped the Unused condition after the feature was turned on again; what %s went through:\n%s", pvcFeature, pvcTimeline)
	}
	stopPartition()
	t.Logf("%s under two leaders, %s and one of %v:\n%s", pvcFeature, mainLeader, partition, pvcTimeline)
}

// renewIdentityLease keeps an identity lease of the given identity label
// renewed every renewPeriod, carrying the versions as a server's does, until
// ctx ends.
func renewIdentityLease(ctx context.Context, t *testing.T, client clientset.Interface, identity, label string, binary *version.Version) {
	leases := client.CoordinationV1().Leases(metav1.NamespaceSystem)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:   identity,
			Labels: map[string]string{"apiserver.kubernetes.io/identity": label},
			Annotations: map[string]string{
				featurelifecycle.BinaryVersionAnnotation:    binary.String(),
				featurelifecycle.EmulationVersionAnnotation: version.MajorMinor(binary.Major(), binary.Minor()).String(),
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseDurationSeconds: ptr.To[int32](3600)},
	}
	for {
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		var err error
		if lease.ResourceVersion == "" {
			lease, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		} else {
			lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("renewing the identity lease %s: %v", identity, err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(renewPeriod):
		}
	}
}

// waitForNewIdentity returns the identity of a server just started: the
// name of the identity lease that is not among known.
// leasesRenewedLate watches the identity leases for the liveness period
// (polling their renewTime) and returns those seen unrenewed for longer than
// two renew periods at some point, with the longest gap seen: a server whose
// lease is that late, seen from a peer whose cache lags, may be gone to it.
func leasesRenewedLate(ctx context.Context, t *testing.T, client clientset.Interface, identities []string, liveness time.Duration) map[string]time.Duration {
	t.Helper()
	changed := map[string]time.Time{}
	renewed := map[string]time.Time{}
	gaps := map[string]time.Duration{}
	start := time.Now()
	for now := start; now.Sub(start) < liveness; now = time.Now() {
		for _, identity := range identities {
			lease, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, identity, metav1.GetOptions{})
			if err != nil || lease.Spec.RenewTime == nil {
				gaps[identity] = max(gaps[identity], now.Sub(start))
				continue
			}
			if at := lease.Spec.RenewTime.Time; !at.Equal(renewed[identity]) {
				renewed[identity], changed[identity] = at, now
			}
			gaps[identity] = max(gaps[identity], now.Sub(changed[identity]))
		}
		time.Sleep(100 * time.Millisecond)
	}
	late := map[string]time.Duration{}
	for identity, gap := range gaps {
		if gap > 2*renewPeriod {
			late[identity] = gap.Round(10 * time.Millisecond)
		}
	}
	return late
}

func waitForNewIdentity(t *testing.T, server *kubeapiservertesting.TestServer, known []string) string {
	t.Helper()
	client := clientset.NewForConfigOrDie(server.ClientConfig)
	var identity string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, stepWait, true, func(ctx context.Context) (bool, error) {
		leases, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity=kube-apiserver"})
		if err != nil {
			return false, nil
		}
		for _, lease := range leases.Items {
			if !slices.Contains(known, lease.Name) {
				identity = lease.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no identity lease for the new kube-apiserver: %v", err)
	}
	return identity
}

// featureTimeline is what a watch of one Feature saw, each change with the time
// it was seen.
type featureTimeline struct {
	mu      sync.Mutex
	start   time.Time
	changes []featureChange
}

type featureChange struct {
	seen      time.Time
	write     bool // a write seen by the watch, not the state it started with
	announcer string
	summary   string
}

// watchFeature records every change of the named Feature from now until the
// test ends, with times relative to start.
func watchFeature(ctx context.Context, t *testing.T, client interface {
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}, name string, start time.Time) *featureTimeline {
	t.Helper()
	w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	tl := &featureTimeline{start: start}
	go func() {
		for ev := range w.ResultChan() {
			f, ok := ev.Object.(*featuresv1alpha1.Feature)
			if !ok {
				continue
			}
			summary := fmt.Sprintf("%s %s by %s", ev.Type, f.Status.State, f.Status.Announcer)
			if len(f.Status.Tasks) > 0 {
				summary += ", task " + f.Status.Tasks[0].Name
			}
			if c := meta.FindStatusCondition(f.Status.Conditions, featuresv1alpha1.FeatureConditionTransitioning); c != nil && c.Message != "" {
				summary += ": " + c.Message
			}
			tl.mu.Lock()
			tl.changes = append(tl.changes, featureChange{seen: time.Now(), write: ev.Type != watch.Added, announcer: f.Status.Announcer, summary: summary})
			tl.mu.Unlock()
		}
	}()
	return tl
}

// logOnFailure logs what the Feature went through when the test fails: a step
// that does not come shows where the transition stood.
func logOnFailure(t *testing.T, name string, tl *featureTimeline) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what %s went through:\n%s", name, tl)
		}
	})
}

func (tl *featureTimeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var b strings.Builder
	for _, c := range tl.changes {
		fmt.Fprintf(&b, "  +%v %s\n", c.seen.Sub(tl.start).Round(100*time.Millisecond), c.summary)
	}
	return b.String()
}

// firstWriteBy returns when a write announced by one of servers was first seen.
func (tl *featureTimeline) firstWriteBy(servers []string) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, c := range tl.changes {
		if c.write && slices.Contains(servers, c.announcer) {
			return c.seen
		}
	}
	return time.Time{}
}

// lastWriteBy returns when a write announced by one of servers was last seen.
func (tl *featureTimeline) lastWriteBy(servers []string) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i := len(tl.changes) - 1; i >= 0; i-- {
		if c := tl.changes[i]; c.write && slices.Contains(servers, c.announcer) {
			return c.seen
		}
	}
	return time.Time{}
}
