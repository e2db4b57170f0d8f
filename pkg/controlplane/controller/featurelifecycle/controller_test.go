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
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	foo featuregate.Feature = "Foo" // alpha since 1.36, the emulated release
	bar featuregate.Feature = "Bar" // beta since 1.35
)

// fakeTask records its runs and returns the results it is given, one a run.
type fakeTask struct {
	name    string
	applies Transition
	results []Result
	errs    []error
	runs    int
}

func (t *fakeTask) Name() string                 { return t.name }
func (t *fakeTask) AppliesTo(tr Transition) bool { return tr == t.applies }
func (t *fakeTask) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	i := t.runs
	t.runs++
	var err error
	if i < len(t.errs) {
		err = t.errs[i]
	}
	if i < len(t.results) {
		return t.results[i], err
	}
	return Done, err
}

type testEnv struct {
	t        *testing.T
	c        *Controller
	client   *fake.Clientset
	gate     featuregate.MutableVersionedFeatureGate
	clock    *testingclock.FakeClock
	recorder *events.FakeRecorder
}

func newTestEnv(t *testing.T, registry *Registry, objs ...runtime.Object) *testEnv {
	t.Helper()
	gate := featuregate.NewVersionedFeatureGate(version.MustParse("1.36"))
	if err := gate.AddVersioned(map[featuregate.Feature]featuregate.VersionedSpecs{
		foo: {{Version: version.MustParse("1.36"), Default: false, PreRelease: featuregate.Alpha}},
		bar: {{Version: version.MustParse("1.34"), Default: false, PreRelease: featuregate.Alpha}, {Version: version.MustParse("1.35"), Default: true, PreRelease: featuregate.Beta}},
	}); err != nil {
		t.Fatal(err)
	}
	if registry == nil {
		registry = NewRegistry(NewWaitForUses(time.Minute, time.Minute))
	}
	client := fake.NewClientset(objs...)
	c := New(Config{
		Namespace:        "kube-system",
		Identity:         "apiserver-a",
		Gate:             featurereporting.NewGate(gate),
		BinaryVersion:    version.MustParse("1.36.3"),
		EmulationVersion: version.MustParse("1.36"),
		Tasks:            registry,
		Liveness:         30 * time.Second,
		Recheck:          10 * time.Second,
		UnknownRetention: 3,
		PruneInterval:    time.Minute,
		UseExpiry:        30 * time.Minute,
	}, client)
	clock := testingclock.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	c.clock = clock
	recorder := events.NewFakeRecorder(100)
	c.recorder = recorder
	env := &testEnv{t: t, c: c, client: client, gate: gate, clock: clock, recorder: recorder}
	env.refresh()
	env.renewOwnLease()
	return env
}

// renewOwnLease renews this server's identity lease at the clock's time, in the
// fake server and the cache, as its lease controller does every 10 seconds.
func (e *testEnv) renewOwnLease() {
	e.t.Helper()
	renewed := metav1.NewMicroTime(e.clock.Now())
	emulation := e.c.cfg.EmulationVersion
	annotations := versionAnnotations(e.c.cfg.BinaryVersion.String(), fmt.Sprintf("%d.%d", emulation.Major(), emulation.Minor()))
	own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-a", Namespace: "kube-system", Annotations: annotations}, Spec: coordinationv1.LeaseSpec{RenewTime: &renewed}}
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	err := e.client.Tracker().Update(leases, own, "kube-system")
	if apierrors.IsNotFound(err) {
		err = e.client.Tracker().Create(leases, own, "kube-system")
	}
	if err == nil {
		err = e.c.leaseInformer.GetIndexer().Update(own)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// refresh loads the listers' caches from the fake server, as the watches would.
func (e *testEnv) refresh() {
	e.t.Helper()
	ctx := context.Background()
	features, err := e.client.FeaturesV1alpha1().Features("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var objs []any
	for i := range features.Items {
		objs = append(objs, &features.Items[i])
	}
	if err := e.c.featureInformer.GetIndexer().Replace(objs, ""); err != nil {
		e.t.Fatal(err)
	}
	leases, err := e.client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	objs = nil
	for i := range leases.Items {
		objs = append(objs, &leases.Items[i])
	}
	if err := e.c.leaseInformer.GetIndexer().Replace(objs, ""); err != nil {
		e.t.Fatal(err)
	}
}

// sync runs one pass for the Feature and refreshes the caches.
func (e *testEnv) sync(name string) time.Duration {
	e.t.Helper()
	e.renewOwnLease()
	after, err := e.c.sync(context.Background(), name)
	if err != nil {
		e.t.Fatalf("sync %s: %v", name, err)
	}
	e.refresh()
	return after
}

func (e *testEnv) get(name string) *featuresv1alpha1.Feature {
	e.t.Helper()
	f, err := e.client.FeaturesV1alpha1().Features("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

func (e *testEnv) set(feature featuregate.Feature, on bool) {
	e.t.Helper()
	if err := e.gate.SetFromMap(map[string]bool{string(feature): on}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) event(reason string) bool {
	for {
		select {
		case ev := <-e.recorder.Events:
			if strings.Contains(ev, reason) {
				return true
			}
		default:
			return false
		}
	}
}

// use is an entry of status.uses as a reporter of 1.36 writes it, reported now.
func (e *testEnv) use(component string, value bool, instances ...string) featuresv1alpha1.FeatureUse {
	now := metav1.NewTime(e.clock.Now())
	return featuresv1alpha1.FeatureUse{Component: component, Value: value, Instances: instances, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &now, LastReportTime: &now}
}

// setUses stores the uses of a Feature, as the reporters' writes would.
func (e *testEnv) setUses(name string, uses ...featuresv1alpha1.FeatureUse) {
	e.t.Helper()
	f := e.get(name)
	f.Status.Uses = uses
	if _, err := e.client.FeaturesV1alpha1().Features("kube-system").UpdateUses(context.Background(), name, f, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.refresh()
}

// liveNodes gives nodes leases that stay live for the length of a test.
func (e *testEnv) liveNodes(names ...string) {
	e.t.Helper()
	for _, name := range names {
		lease := heldLease(corev1.NamespaceNodeLease, name, name, e.clock.Now())
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		if _, err := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// events returns how many recorded events contain reason, consuming them all.
func (e *testEnv) events(reason string) int {
	n := 0
	for {
		select {
		case ev := <-e.recorder.Events:
			if strings.Contains(ev, reason) {
				n++
			}
		default:
			return n
		}
	}
}

func condition(f *featuresv1alpha1.Feature, conditionType string) metav1.Condition {
	if c := meta.FindStatusCondition(f.Status.Conditions, conditionType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func taskNames(f *featuresv1alpha1.Feature) string {
	var names []string
	for _, task := range f.Status.Tasks {
		names = append(names, task.Name)
	}
	return strings.Join(names, ",")
}

func TestAnnounceCreatesAndFillsTheFeature(t *testing.T) {
	e := newTestEnv(t, nil)
	e.sync("foo")
	e.sync("foo")
	f := e.get("foo")
	s := f.Status
	if f.Spec.FeatureName != "Foo" || *s.Default || s.Stage != featuresv1alpha1.FeatureStageAlpha || *s.ConfiguredValue ||
		s.Announcer != "apiserver-a" || s.BinaryVersion != "1.36" || s.EmulationVersion != "1.36" {
		t.Errorf("announced %+v", f)
	}
	// Nothing was on before: the first state is the configured one, no transition.
	if s.State != featuresv1alpha1.FeatureStateOff || len(s.Tasks) != 0 || condition(f, featuresv1alpha1.FeatureConditionTransitioning).Reason != "Stable" {
		t.Errorf("state %s, tasks %v, Transitioning %+v; want Off, none, Stable", s.State, s.Tasks, condition(f, featuresv1alpha1.FeatureConditionTransitioning))
	}
	if condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe).Status != metav1.ConditionTrue || condition(f, featuresv1alpha1.FeatureConditionDowngradeSafe).Status != metav1.ConditionTrue {
		t.Errorf("an Off feature without uses must be safe to upgrade and downgrade: %+v", s.Conditions)
	}
	rv := f.ResourceVersion
	e.sync("foo")
	if e.get("foo").ResourceVersion != rv {
		t.Error("a pass with nothing to change wrote the Feature")
	}
}

func TestTurnOnRunsTheTasksInOrderThenIsOn(t *testing.T) {
	task := &fakeTask{name: "PrepareFoo", applies: TurnOn, results: []Result{NotYet("preparing"), Done}}
	registry := NewRegistry(NewWaitForUses(time.Minute, time.Minute))
	registry.Register(foo, task, &fakeTask{name: "OffOnly", applies: TurnOff})
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo")

	// A kubelet runs the old value when the transition starts.
	e.liveNodes("node-1")
	e.setUses("foo", e.use("kubelet", false, "node-1"))

	// One pass starts the transition and runs its first task, which waits
	// while the old value is reported: the uses are never cleared.
	e.set(foo, true)
	e.sync("foo")
	f := e.get("foo")
	if f.Status.State != featuresv1alpha1.FeatureStateTurningOn || taskNames(f) != "WaitForUses,PrepareFoo" {
		t.Fatalf("state %s, tasks %s; want TurningOn with WaitForUses,PrepareFoo", f.Status.State, taskNames(f))
	}
	if !e.event("TransitionStarted") {
		t.Error("no TransitionStarted event")
	}
	if msg := condition(f, featuresv1alpha1.FeatureConditionTransitioning).Message; len(f.Status.Uses) != 1 || f.Status.Tasks[0].StartTime == nil || !strings.Contains(msg, "reporting false: kubelet (node-1)") {
		t.Fatalf("WaitForUses must keep the uses, record its start and name node-1: %s", dump(f))
	}
	if after := e.sync("foo"); after != 10*time.Second {
		t.Errorf("a waiting task is looked at again after %v, want the recheck period", after)
	}
	// node-1 restarts with the feature on and moves itself: the wait counts
	// from the last run that found the old value.
	e.setUses("foo", e.use("kubelet", true, "node-1"))
	e.clock.Step(10 * time.Second)
	e.sync("foo")
	if f = e.get("foo"); taskNames(f) != "WaitForUses,PrepareFoo" || !strings.Contains(condition(f, featuresv1alpha1.FeatureConditionTransitioning).Message, "no component reports false; waiting until 2026-11-22T10:01:00Z") {
		t.Fatalf("ten seconds after the last report of the old value, want WaitForUses waiting: %s", dump(f))
	}
	e.clock.Step(50 * time.Second)
	e.sync("foo")
	if f = e.get("foo"); taskNames(f) != "PrepareFoo" {
		t.Fatalf("after the wait with no old value reported, tasks = %s, want PrepareFoo", taskNames(f))
	}
	e.sync("foo")
	if f = e.get("foo"); !strings.Contains(condition(f, featuresv1alpha1.FeatureConditionTransitioning).Message, "PrepareFoo: preparing") {
		t.Errorf("Transitioning must say what the task waits for: %+v", condition(f, featuresv1alpha1.FeatureConditionTransitioning))
	}
	e.clock.Step(30 * time.Second)
	e.sync("foo")
	f = e.get("foo")
	if f.Status.State != featuresv1alpha1.FeatureStateOn || len(f.Status.Tasks) != 0 || condition(f, featuresv1alpha1.FeatureConditionTransitioning).Status != metav1.ConditionFalse {
		t.Errorf("state %s, tasks %s, Transitioning %+v; want On, none, False", f.Status.State, taskNames(f), condition(f, featuresv1alpha1.FeatureConditionTransitioning))
	}
	if task.runs != 2 || !e.event("TransitionComplete") {
		t.Errorf("task runs %d, want 2; want a TransitionComplete event", task.runs)
	}
}

// WaitForUses names the components still on the old value and starts its
// wait over on each run that finds them, recording why once, not on every run.
func TestWaitForUsesNamesTheComponentsStillOnTheOldValue(t *testing.T) {
	e := newTestEnv(t, NewRegistry(NewWaitForUses(0, 0)))
	e.sync("bar")
	e.sync("bar") // On, the default
	e.liveNodes("node-1", "node-2", "node-3")
	e.set(bar, false)
	e.sync("bar") // TurningOff, WaitForUses starts
	e.setUses("bar", e.use("kubelet", true, "node-1", "node-2"), e.use("kubelet", false, "node-3"))
	for range 3 {
		e.clock.Step(10 * time.Second) // a waiting task runs again after the recheck period
		e.sync("bar")
	}
	f := e.get("bar")
	if msg := condition(f, featuresv1alpha1.FeatureConditionTransitioning).Message; f.Status.State != featuresv1alpha1.FeatureStateTurningOff || !strings.Contains(msg, "reporting true: kubelet (node-1, node-2)") {
		t.Errorf("state %s, message %q; want TurningOff naming the kubelets still on", f.Status.State, msg)
	}
	if len(f.Status.Uses) != 2 || taskNames(f) != "WaitForUses" || !f.Status.Tasks[0].StartTime.Time.Equal(e.clock.Now()) {
		t.Errorf("uses %+v, tasks %+v; want the uses kept and WaitForUses started over", f.Status.Uses, f.Status.Tasks)
	}
	if n := e.events("TaskRestarted"); n != 1 {
		t.Errorf("%d TaskRestarted events for one reason, want 1", n)
	}
}

func TestWaitForUsesNamesWhoReportsTheOldValueWhileItWaits(t *testing.T) {
	e := newTestEnv(t, nil) // WaitForUses waits a minute
	e.sync("bar")
	e.sync("bar")
	e.set(bar, false)
	e.sync("bar") // TurningOff, the wait started
	e.liveNodes("node-1")
	e.setUses("bar", e.use("kube-scheduler", false, "host-1"), e.use("kubelet", true, "node-1"))
	e.clock.Step(10 * time.Second)
	e.sync("bar")
	want := "WaitForUses: waiting until no component reports true for 1m0s; reporting true: kubelet (node-1) (reported: kube-apiserver 0 of 1, kubelet 1 of 1)"
	if msg := condition(e.get("bar"), featuresv1alpha1.FeatureConditionTransitioning).Message; msg != want {
		t.Errorf("Transitioning says %q, want %q", msg, want)
	}
}

// turnFooOnUpTo turns Foo on with task registered after WaitForUses (which
// does not wait), and runs the passes until task is next.
func turnFooOnUpTo(t *testing.T, task Task) *testEnv {
	registry := NewRegistry(NewWaitForUses(0, 0))
	registry.Register(foo, task)
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo")
	e.set(foo, true)
	e.sync("foo") // TurningOn, WaitForUses starts
	e.clock.Step(10 * time.Second)
	e.sync("foo") // WaitForUses done
	return e
}

func TestAWaitingTaskRunsOnceARecheck(t *testing.T) {
	task := &fakeTask{name: "PrepareFoo", applies: TurnOn, results: []Result{NotYet("a"), NotYet("b"), Done}}
	e := turnFooOnUpTo(t, task)
	e.sync("foo") // PrepareFoo: not yet
	// The periodic recheck, reports and writes queue the Feature meanwhile.
	for range 3 {
		e.clock.Step(3 * time.Second)
		if after := e.sync("foo"); after <= 0 || after > 10*time.Second {
			t.Errorf("a waiting task is looked at again after %v, want within the recheck period", after)
		}
	}
	if task.runs != 1 {
		t.Fatalf("PrepareFoo ran %d times within one recheck period, want once", task.runs)
	}
	e.clock.Step(time.Second)
	e.sync("foo")
	if task.runs != 2 || !strings.Contains(condition(e.get("foo"), featuresv1alpha1.FeatureConditionTransitioning).Message, "PrepareFoo: b") {
		t.Errorf("PrepareFoo ran %d times after a recheck period, want twice", task.runs)
	}
}

func TestATaskErrorIsRecordedAndBackedOff(t *testing.T) {
	task := &fakeTask{name: "PrepareFoo", applies: TurnOn, errs: []error{errors.New("storage unavailable")}}
	e := turnFooOnUpTo(t, task)
	after := e.sync("foo")
	f := e.get("foo")
	if f.Status.Tasks[0].LastError != "storage unavailable" || condition(f, featuresv1alpha1.FeatureConditionTaskFailed).Status != metav1.ConditionTrue || !e.event("TaskFailed") {
		t.Fatalf("a failed task must be recorded on the task, as a condition and an event: %+v", f.Status)
	}
	if after <= 0 {
		t.Fatalf("a failed task must be retried after a back-off, got %v", after)
	}
	e.sync("foo")
	if task.runs != 1 {
		t.Fatalf("the task ran again during its back-off (%d runs)", task.runs)
	}
	e.clock.Step(after)
	e.sync("foo")
	f = e.get("foo")
	if task.runs != 2 || f.Status.State != featuresv1alpha1.FeatureStateOn || meta.FindStatusCondition(f.Status.Conditions, featuresv1alpha1.FeatureConditionTaskFailed) != nil {
		t.Errorf("after the back-off: runs %d, state %s, conditions %+v; want 2, On, no TaskFailed", task.runs, f.Status.State, f.Status.Conditions)
	}
}

func TestOnlyTheLeaderWrites(t *testing.T) {
	now := metav1.NewMicroTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	var others []runtime.Object
	for _, name := range []string{"apiserver-b", "apiserver-c", "apiserver-d"} {
		others = append(others, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Annotations: versionAnnotations("1.36.3", "1.36")}, Spec: coordinationv1.LeaseSpec{RenewTime: &now}})
	}
	e := newTestEnv(t, nil, others...)
	members := []string{"apiserver-a", "apiserver-b", "apiserver-c", "apiserver-d"}
	for _, name := range []string{"foo", "bar"} {
		before := len(e.client.Actions())
		e.sync(name)
		wrote := len(e.client.Actions()) > before+2 // the two lists of refresh
		if leads := LeaderOf(name, members) == "apiserver-a"; wrote != leads {
			t.Errorf("%s: wrote %t, leads %t", name, wrote, leads)
		}
	}
}

// An upgraded server leads nothing while a server of the old version is live,
// so it neither announces its version nor queues Upgrade tasks; once the old
// server is gone, it leads.
func TestANewerServerLeadsNothingWhileAnOlderOneIsLive(t *testing.T) {
	now := metav1.NewMicroTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	// An old server that, by hashing alone, would leave foo to this one.
	name := ""
	for _, n := range []string{"apiserver-b", "apiserver-c", "apiserver-d", "apiserver-e"} {
		if LeaderOf("foo", []string{"apiserver-a", n}) == "apiserver-a" {
			name = n
			break
		}
	}
	old := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Annotations: versionAnnotations("1.35.2", "1.35")}, Spec: coordinationv1.LeaseSpec{RenewTime: &now}}
	e := newTestEnv(t, nil, old)
	for _, name := range []string{"foo", "bar"} {
		before := len(e.client.Actions())
		e.sync(name)
		if wrote := len(e.client.Actions()) > before+2; wrote { // the two lists of refresh
			t.Errorf("%s: the 1.36 server wrote while a 1.35 server is live: %v", name, e.client.Actions()[before:])
		}
	}

	e.clock.Step(time.Minute) // the old server stopped renewing
	e.sync("foo")             // creates the Feature
	e.sync("foo")             // announces
	if f := e.get("foo"); f.Status.BinaryVersion != "1.36" {
		t.Errorf("after the old server left: binaryVersion %q, want 1.36 written by the new leader", f.Status.BinaryVersion)
	}
}

func TestDisagreeingAPIServersKeepTheFeatureTransitional(t *testing.T) {
	e := newTestEnv(t, NewRegistry(NewWaitForUses(0, 0)))
	// Another live kube-apiserver, which does not lead bar.
	other := ""
	for _, name := range []string{"apiserver-b", "apiserver-c", "apiserver-d", "apiserver-e"} {
		if LeaderOf("bar", []string{"apiserver-a", name}) == "apiserver-a" {
			other = name
			break
		}
	}
	e.sync("bar")
	e.sync("bar")
	f := e.get("bar")
	f.Status.Uses = []featuresv1alpha1.FeatureUse{e.use("kube-apiserver", false, other, "apiserver-gone")}
	if _, err := e.client.FeaturesV1alpha1().Features("kube-system").UpdateUses(context.Background(), "bar", f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.refresh()

	// Only servers with a live identity lease count: neither is live yet.
	e.sync("bar")
	f = e.get("bar")
	if agreed := condition(f, featuresv1alpha1.FeatureConditionConfigurationAgreed); f.Status.State != featuresv1alpha1.FeatureStateOn || agreed.Status != metav1.ConditionTrue {
		t.Errorf("with no live server reporting false: state %s, ConfigurationAgreed %+v; want On and True", f.Status.State, agreed)
	}

	renewed := metav1.NewMicroTime(e.clock.Now())
	if _, err := e.client.CoordinationV1().Leases("kube-system").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: other, Namespace: "kube-system", Annotations: versionAnnotations("1.36.3", "1.36")}, Spec: coordinationv1.LeaseSpec{RenewTime: &renewed},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.refresh()
	e.sync("bar")
	f = e.get("bar")
	agreed := condition(f, featuresv1alpha1.FeatureConditionConfigurationAgreed)
	if f.Status.State != featuresv1alpha1.FeatureStateTurningOn || agreed.Status != metav1.ConditionFalse || !strings.Contains(agreed.Message, other) || strings.Contains(agreed.Message, "apiserver-gone") {
		t.Errorf("state %s, ConfigurationAgreed %+v; want TurningOn and False naming %s only", f.Status.State, agreed, other)
	}
}

func TestTurningBackMidTransitionRestartsTowardsTheConfiguredValue(t *testing.T) {
	registry := NewRegistry(NewWaitForUses(time.Hour, time.Hour))
	registry.Register(foo, &fakeTask{name: "CleanFoo", applies: TurnOff}, &fakeTask{name: "PrepareFoo", applies: TurnOn})
	e := newTestEnv(t, registry)
	e.set(foo, true)
	e.sync("foo")
	e.sync("foo") // On at first announcement
	e.set(foo, false)
	e.sync("foo") // WaitForUses waits an hour
	if f := e.get("foo"); f.Status.State != featuresv1alpha1.FeatureStateTurningOff || taskNames(f) != "WaitForUses,CleanFoo" {
		t.Fatalf("state %s tasks %s", f.Status.State, taskNames(f))
	}
	e.set(foo, true)
	e.clock.Step(5 * time.Minute)
	e.sync("foo")
	if f := e.get("foo"); f.Status.State != featuresv1alpha1.FeatureStateTurningOn || taskNames(f) != "WaitForUses,PrepareFoo" || !f.Status.Tasks[0].StartTime.Time.Equal(e.clock.Now()) {
		t.Errorf("state %s tasks %+v; want TurningOn with fresh WaitForUses,PrepareFoo", f.Status.State, f.Status.Tasks)
	}
}

func TestAnUnknownFeatureIsKeptForSomeVersionsThenDeleted(t *testing.T) {
	gone := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Gone"}}
	old := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Old"},
		Status: featuresv1alpha1.FeatureStatus{UnknownSinceVersion: "1.33"}}
	recent := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "recent", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Recent"},
		Status: featuresv1alpha1.FeatureStatus{UnknownSinceVersion: "1.34"}}
	e := newTestEnv(t, nil, gone, old, recent)
	for _, name := range []string{"gone", "old", "recent"} {
		e.sync(name)
	}
	if v := e.get("gone").Status.UnknownSinceVersion; v != "1.36" {
		t.Errorf("unknownSinceVersion = %q, want 1.36", v)
	}
	e.get("recent")
	if _, err := e.client.FeaturesV1alpha1().Features("kube-system").Get(context.Background(), "old", metav1.GetOptions{}); err == nil {
		t.Error("a Feature unknown since three minor versions must be deleted")
	}
}

func TestVersionChangesRunTheirTasks(t *testing.T) {
	upgrade := &fakeTask{name: "MigrateBar", applies: Upgrade, results: []Result{NotYet("migrating"), Done}}
	registry := NewRegistry(NewWaitForUses(0, 0))
	registry.Register(bar, upgrade)
	stored := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "bar", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Bar"},
		Status: featuresv1alpha1.FeatureStatus{State: featuresv1alpha1.FeatureStateOn, BinaryVersion: "1.35.2"}}
	e := newTestEnv(t, registry, stored)
	e.sync("bar")
	f := e.get("bar")
	if taskNames(f) != "MigrateBar" || condition(f, featuresv1alpha1.FeatureConditionTransitioning).Reason != string(Upgrade) || f.Status.State != featuresv1alpha1.FeatureStateOn ||
		condition(f, featuresv1alpha1.FeatureConditionTransitioning).Message != "MigrateBar: migrating" {
		t.Fatalf("tasks %s, Transitioning %+v, state %s; want MigrateBar, Upgrade, On", taskNames(f), condition(f, featuresv1alpha1.FeatureConditionTransitioning), f.Status.State)
	}
	e.clock.Step(10 * time.Second)
	e.sync("bar")
	f = e.get("bar")
	if upgrade.runs != 2 || len(f.Status.Tasks) != 0 || condition(f, featuresv1alpha1.FeatureConditionTransitioning).Status != metav1.ConditionFalse || f.Status.BinaryVersion != "1.36" {
		t.Errorf("runs %d, tasks %s, Transitioning %+v, binary %s", upgrade.runs, taskNames(f), condition(f, featuresv1alpha1.FeatureConditionTransitioning), f.Status.BinaryVersion)
	}
}

func TestSafetyConditions(t *testing.T) {
	e := newTestEnv(t, nil)
	e.set(foo, true)
	for _, name := range []string{"foo", "bar"} {
		e.sync(name)
		e.sync(name)
	}
	// Foo is new in 1.36 and on: 1.35 does not know it.
	f := e.get("foo")
	if c := condition(f, featuresv1alpha1.FeatureConditionDowngradeSafe); c.Status != metav1.ConditionFalse || c.Reason != "UnknownToPreviousVersion" {
		t.Errorf("foo DowngradeSafe %+v", c)
	}
	if c := condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe); c.Status != metav1.ConditionTrue {
		t.Errorf("foo UpgradeSafe %+v", c)
	}
	b := e.get("bar")
	if c := condition(b, featuresv1alpha1.FeatureConditionDowngradeSafe); c.Status != metav1.ConditionTrue {
		t.Errorf("bar, on and known to 1.35: DowngradeSafe %+v", c)
	}
	// Bar is beta and on by default since 1.35, off by default in 1.34;
	// kube-apiserver checks it, so it has the cluster's value.
	e.gate.Enabled(bar)
	e.liveNodes("node-1", "node-9")
	for _, tc := range []struct {
		name, reason, message string
		uses                  []featuresv1alpha1.FeatureUse
	}{{
		name:    "a kubelet configured off",
		uses:    []featuresv1alpha1.FeatureUse{e.use("kubelet", false, "node-9")},
		reason:  "DanglingUses",
		message: "components run the feature off while it is On: kubelet off at 1.36 (node-9)",
	}, {
		name: "a kubelet of 1.34 on its version's default",
		uses: func() []featuresv1alpha1.FeatureUse {
			old := e.use("kubelet", false, "node-9")
			old.BinaryVersion, old.EmulationVersion = "1.34", "1.34"
			return []featuresv1alpha1.FeatureUse{old}
		}(),
		reason:  "VersionSkew",
		message: "components of other versions run the feature off, their version's default, while it is On: kubelet off at 1.34 (node-9)",
	}, {
		name: "a kube-apiserver emulating 1.34 on that version's default",
		uses: func() []featuresv1alpha1.FeatureUse {
			old := e.use("kube-apiserver", false, "apiserver-b")
			old.EmulationVersion = "1.34"
			return []featuresv1alpha1.FeatureUse{e.use("kube-apiserver", true, "apiserver-a"), old}
		}(),
		reason:  "VersionSkew",
		message: "kube-apiserver off at 1.34 (apiserver-b)",
	}} {
		e.setUses("bar", tc.uses...)
		e.sync("bar")
		b = e.get("bar")
		for _, ct := range []string{featuresv1alpha1.FeatureConditionUpgradeSafe, featuresv1alpha1.FeatureConditionDowngradeSafe} {
			if c := condition(b, ct); c.Status != metav1.ConditionFalse || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("bar with %s: %s %+v", tc.name, ct, c)
			}
		}
	}
}

// A default that needs a newer minimum compatibility version
// (MinCompatibilityVersion, as 1.37's DRAFractionalCapacityRange) is not the
// default of a component at that emulation version: upstream's components
// run with a minimum compatibility version one minor below their emulation
// version unless told otherwise, and uses do not carry it.
func TestDefaultAtFollowsTheMinimumCompatibilityVersion(t *testing.T) {
	const baz featuregate.Feature = "Baz"
	gate := featuregate.NewVersionedFeatureGate(version.MustParse("1.37"))
	if err := gate.AddVersioned(map[featuregate.Feature]featuregate.VersionedSpecs{
		baz: {
			{Version: version.MustParse("1.35"), Default: false, PreRelease: featuregate.Alpha},
			{Version: version.MustParse("1.36"), Default: false, PreRelease: featuregate.Beta},
			{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta, MinCompatibilityVersion: version.MustParse("1.36")},
		},
	}); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Namespace: "kube-system", Gate: featurereporting.NewGate(gate), BinaryVersion: version.MustParse("1.37.2"), EmulationVersion: version.MustParse("1.37")}, fake.NewClientset())
	for emulation, want := range map[string]bool{"1.34": false, "1.35": false, "1.36": false, "1.37": true, "bogus": false} {
		if got := c.defaultAt(baz, emulation); got != want {
			t.Errorf("default at %s: %v, want %v", emulation, got, want)
		}
	}
}

// Each recheck lists the Features of the namespace: without the namespace
// index the lister logged "can not retrieve list of objects using index" at
// every recheck of every kube-apiserver.
func TestInformersIndexTheNamespace(t *testing.T) {
	c := New(Config{Namespace: "kube-system", Gate: featurereporting.NewGate(featuregate.NewVersionedFeatureGate(version.MustParse("1.37"))), BinaryVersion: version.MustParse("1.37.2"), EmulationVersion: version.MustParse("1.37")}, fake.NewClientset())
	for name, informer := range map[string]cache.SharedIndexInformer{"features": c.featureInformer, "leases": c.leaseInformer} {
		if _, ok := informer.GetIndexer().GetIndexers()[cache.NamespaceIndex]; !ok {
			t.Errorf("the %s informer has no namespace index", name)
		}
	}
}

// A feature kube-apiserver does not check (a kubelet-only gate) has no
// cluster value: kubelets that all run it on, while kube-apiserver is
// configured off, leave it safe; kubelets that run both values do not. Before
// owners were modelled, the kubelets' uses were dangling for ever.
func TestOwnersDecideWhoseUsesCount(t *testing.T) {
	e := newTestEnv(t, nil)
	e.sync("foo")
	e.sync("foo") // Off, kube-apiserver never checked Foo
	e.liveNodes("node-1", "node-2")
	e.setUses("foo", e.use("kube-apiserver", false, "apiserver-a"), e.use("kubelet", true, "node-1", "node-2"))
	e.sync("foo")
	f := e.get("foo")
	if !slices.Equal(f.Status.Owners, []string{"kubelet"}) {
		t.Errorf("owners %v, want [kubelet]", f.Status.Owners)
	}
	if c := condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe); c.Status != metav1.ConditionTrue {
		t.Errorf("kubelets agreeing on a feature kube-apiserver does not check: UpgradeSafe %+v", c)
	}
	e.setUses("foo", e.use("kube-apiserver", false, "apiserver-a"), e.use("kubelet", true, "node-1"), e.use("kubelet", false, "node-2"))
	e.sync("foo")
	if c := condition(e.get("foo"), featuresv1alpha1.FeatureConditionUpgradeSafe); c.Reason != "DanglingUses" || !strings.Contains(c.Message, "run it both on and off") {
		t.Errorf("kubelets running both values: UpgradeSafe %+v", c)
	}

	// Once kube-apiserver checks Foo, it owns it: the kubelet on is dangling.
	e.gate.Enabled(foo)
	e.sync("foo")
	f = e.get("foo")
	if c := condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe); !slices.Equal(f.Status.Owners, []string{"kube-apiserver", "kubelet"}) || c.Reason != "DanglingUses" || !strings.Contains(c.Message, "kubelet on at 1.36 (node-1)") {
		t.Errorf("owners %v, UpgradeSafe %+v; want kube-apiserver an owner and node-1 dangling", f.Status.Owners, c)
	}
}

func TestMetrics(t *testing.T) {
	task := &fakeTask{name: "MeteredTask", applies: TurnOn, results: []Result{NotYet("waiting"), Done}, errs: []error{nil, nil}}
	registry := NewRegistry(NewWaitForUses(0, 0))
	registry.Register(foo, task)
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo")
	durations, _ := testutil.GetHistogramMetricCount(transitionDuration.WithLabelValues(string(TurnOn)))
	e.set(foo, true)
	for range 4 {
		e.clock.Step(10 * time.Second)
		e.sync("foo")
	}
	if f := e.get("foo"); f.Status.State != featuresv1alpha1.FeatureStateOn {
		t.Fatalf("state %s, want On", f.Status.State)
	}
	for result, want := range map[string]float64{"not_yet": 1, "done": 1} {
		if got, _ := testutil.GetCounterMetricValue(taskRuns.WithLabelValues("MeteredTask", result)); got != want {
			t.Errorf("task_runs_total{task=MeteredTask,result=%s} = %v, want %v", result, got, want)
		}
	}
	if got, _ := testutil.GetHistogramMetricCount(transitionDuration.WithLabelValues(string(TurnOn))); got != durations+1 {
		t.Errorf("transition_duration_seconds{transition=TurnOn} count = %d, want %d", got, durations+1)
	}

	// A second live apiserver takes some Features over.
	changes, _ := testutil.GetCounterMetricValue(leaderChanges)
	e.c.recheck()
	renewed := metav1.NewMicroTime(e.clock.Now())
	if _, err := e.client.CoordinationV1().Leases("kube-system").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "apiserver-b", Namespace: "kube-system", Annotations: versionAnnotations("1.36.3", "1.36")}, Spec: coordinationv1.LeaseSpec{RenewTime: &renewed},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.refresh()
	e.c.recheck()
	moved := 0
	for _, name := range []string{"foo", "bar"} {
		if LeaderOf(name, []string{"apiserver-a", "apiserver-b"}) == "apiserver-b" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no Feature moves to apiserver-b: the test needs one that does")
	}
	if got, _ := testutil.GetCounterMetricValue(leaderChanges); got != changes+float64(moved) {
		t.Errorf("leader_changes_total grew by %v, want %d", got-changes, moved)
	}
	if got, _ := testutil.GetGaugeMetricValue(featuresByState.WithLabelValues("On")); got != 1 {
		t.Errorf("features{state=On} = %v, want 1", got)
	}
}

// An entry nobody reported or renewed within UseExpiry speaks for no running
// instance and goes; one renewed stays, however old, and so does a kubelet's,
// which its node lease keeps. Entries stored without versions (by an older
// reporter) go.
func TestExpiredUsesGo(t *testing.T) {
	e := newTestEnv(t, nil)
	e.sync("bar")
	e.sync("bar") // On
	renewed := e.use("kube-controller-manager", true, "host-2")
	left := e.use("kube-scheduler", false, "host-1") // a scheduler since restarted with the feature on, or gone
	versionless := e.use("kube-controller-manager", false, "host-3")
	versionless.BinaryVersion, versionless.EmulationVersion = "", ""
	e.setUses("bar", renewed, left)
	e.sync("bar")
	if f := e.get("bar"); len(f.Status.Uses) != 2 || condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe).Reason != "DanglingUses" {
		t.Fatalf("a fresh dangling use must stay and make upgrades unsafe: %s", dump(f))
	}
	e.clock.Step(29 * time.Minute)
	renewed.LastReportTime = ptr.To(metav1.NewTime(e.clock.Now()))
	// A kubelet's entry is never renewed: its node lease is.
	e.liveNodes("node-1")
	kubelet := e.use("kubelet", true, "node-1")
	kubelet.FirstReportTime, kubelet.LastReportTime = ptr.To(metav1.NewTime(e.clock.Now().Add(-29*time.Minute))), ptr.To(metav1.NewTime(e.clock.Now().Add(-29*time.Minute)))
	e.setUses("bar", renewed, left, versionless, kubelet)
	e.clock.Step(time.Minute)
	e.sync("bar")
	e.sync("bar")
	f := e.get("bar")
	if len(f.Status.Uses) != 2 || f.Status.Uses[0].Component != "kube-controller-manager" || f.Status.Uses[1].Component != "kubelet" || condition(f, featuresv1alpha1.FeatureConditionUpgradeSafe).Status != metav1.ConditionTrue {
		t.Errorf("the expired and the versionless use must go, the renewed one and the live kubelet's stay, and the feature be safe again: %s", dump(f))
	}
}

func dump(f *featuresv1alpha1.Feature) string {
	return fmt.Sprintf("state %s, tasks %+v, conditions %+v, uses %+v", f.Status.State, f.Status.Tasks, f.Status.Conditions, f.Status.Uses)
}

// A server whose own identity lease is stale (it could not renew it) or deleted
// (on shutdown) is dead to the other servers, which lead its Features: it must
// write nothing, or two servers lead a Feature at once.
func TestAServerWithoutALiveLeaseWritesNothing(t *testing.T) {
	for name, lose := range map[string]func(e *testEnv){
		"stale": func(e *testEnv) { e.clock.Step(time.Minute) },
		"deleted": func(e *testEnv) {
			if err := e.client.CoordinationV1().Leases("kube-system").Delete(context.Background(), "apiserver-a", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			e.refresh()
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			lose(e)
			before := len(e.client.Actions())
			for _, feature := range []string{"foo", "bar"} {
				if _, err := e.c.sync(context.Background(), feature); err != nil {
					t.Fatal(err)
				}
			}
			if actions := e.client.Actions()[before:]; len(actions) > 0 {
				t.Errorf("own lease %s: the server wrote %v", name, actions)
			}
		})
	}
}

// blockingTask blocks its first run until released, whatever its context says,
// as a task does while a write of it is in flight.
type blockingTask struct {
	started, release chan struct{}
	runs             int
}

func (t *blockingTask) Name() string                 { return "Blocking" }
func (t *blockingTask) AppliesTo(tr Transition) bool { return tr == TurnOn }
func (t *blockingTask) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	t.runs++
	if t.runs == 1 {
		close(t.started)
		<-t.release
	}
	return Done, nil
}

// The loop stops before the server gives up its identity lease (Stop, called
// by the lease's pre-shutdown hook): Run must not return while a pass still
// runs, or the pass overlaps the next leader's.
func TestRunReturnsOnlyOnceNoPassRuns(t *testing.T) {
	task := &blockingTask{started: make(chan struct{}), release: make(chan struct{})}
	registry := NewRegistry(&fakeTask{name: "WaitForUses", applies: TurnOn})
	registry.Register(foo, task)
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo") // Off, the default
	e.set(foo, true)
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		e.c.Run(ctx)
	}()
	select {
	case <-task.started:
	case <-time.After(time.Minute):
		t.Fatal("the task did not start")
	}
	cancel()
	select {
	case <-returned:
		t.Fatal("Run returned while a task still ran")
	case <-time.After(200 * time.Millisecond):
	}
	close(task.release)
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after the task did")
	}
	if !e.c.queue.ShuttingDown() {
		t.Error("Run returned with its queue still open")
	}
}

func TestStopOfALoopNeverStartedReturns(t *testing.T) {
	e := newTestEnv(t, nil)
	e.c.Stop()
	e.c.Start(context.Background())
	e.c.Stop()
}

// A Feature deleted mid-transition stays until its transition is done: the
// server flow holds it with a finalizer while it has tasks, and only then.
func TestATransitionHoldsItsFeature(t *testing.T) {
	task := &fakeTask{name: "PrepareFoo", applies: TurnOn, results: []Result{{Message: "preparing"}}}
	registry := NewRegistry(&fakeTask{name: "WaitForUses", applies: TurnOn})
	registry.Register(foo, task)
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo") // Off, the default
	if f := e.get("foo"); len(f.Finalizers) != 0 {
		t.Fatalf("a stable Feature is held: %v", f.Finalizers)
	}
	e.set(foo, true)
	e.sync("foo") // TurningOn; WaitForUses done, PrepareFoo next
	e.sync("foo") // PrepareFoo is not done yet
	if f := e.get("foo"); f.Status.State != featuresv1alpha1.FeatureStateTurningOn || !slices.Contains(f.Finalizers, TransitionFinalizer) {
		t.Fatalf("state %s, finalizers %v; want TurningOn held by %s", f.Status.State, f.Finalizers, TransitionFinalizer)
	}
	e.clock.Step(10 * time.Second)
	e.sync("foo") // PrepareFoo done: On
	e.sync("foo")
	if f := e.get("foo"); f.Status.State != featuresv1alpha1.FeatureStateOn || len(f.Finalizers) != 0 {
		t.Errorf("state %s, finalizers %v; want On and no finalizer", f.Status.State, f.Finalizers)
	}
}

// fencingTask calls Fence the way a task does before a side effect.
type fencingTask struct {
	fenced []error
}

func (t *fencingTask) Name() string                 { return "Fencing" }
func (t *fencingTask) AppliesTo(tr Transition) bool { return tr == TurnOn }
func (t *fencingTask) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	err := tc.Fence(ctx)
	t.fenced = append(t.fenced, err)
	if err != nil {
		return Result{}, err
	}
	return NotYet("acting"), nil
}

// A server acting on an old object of the Feature is fenced: the quorum read
// shows the transition moved on, the task stops before its side effect, and
// nothing records a failure.
func TestATaskForATransitionThatMovedOnIsFenced(t *testing.T) {
	task := &fencingTask{}
	registry := NewRegistry(&fakeTask{name: "WaitForUses", applies: TurnOn})
	registry.Register(foo, task)
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo") // Off
	e.set(foo, true)
	e.sync("foo") // TurningOn: WaitForUses done, Fencing next
	e.sync("foo") // Fencing runs, fence passes
	if len(task.fenced) != 1 || task.fenced[0] != nil {
		t.Fatalf("fence results %v, want one pass", task.fenced)
	}

	// Another server turned the feature back off; this one's cache is behind.
	f := e.get("foo")
	f.Status.State = featuresv1alpha1.FeatureStateTurningOff
	f.Status.Tasks = []featuresv1alpha1.FeatureTask{{Name: "WaitForUses"}}
	if _, err := e.client.FeaturesV1alpha1().Features("kube-system").UpdateStatus(context.Background(), f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(10 * time.Second)
	e.renewOwnLease()
	if _, err := e.c.sync(context.Background(), "foo"); err != nil {
		t.Fatal(err)
	}
	if len(task.fenced) != 2 || !errors.Is(task.fenced[1], ErrFenced) {
		t.Fatalf("fence results %v, want the second run fenced", task.fenced)
	}
	if got := e.get("foo"); meta.FindStatusCondition(got.Status.Conditions, featuresv1alpha1.FeatureConditionTaskFailed) != nil || got.Status.State != featuresv1alpha1.FeatureStateTurningOff {
		t.Errorf("state %s, conditions %+v: a fenced run must write nothing", got.Status.State, got.Status.Conditions)
	}
	if e.event("TaskFailed") {
		t.Error("a fenced run recorded a TaskFailed event")
	}
}

// During a rolling upgrade the announcer alternates between old and new
// servers. Each version task is queued once, whatever the alternation, so no
// status write fails validation on a repeated name; and turning the feature
// on or off keeps the version tasks still pending.
func TestVersionTasksAreQueuedOnceAndSurviveATurn(t *testing.T) {
	migrate := &fakeTask{name: "MigrateBar", applies: Upgrade, results: []Result{NotYet("migrating"), NotYet("migrating"), NotYet("migrating")}}
	both := &blockingTaskFor{name: "RewriteBar", transitions: []Transition{Upgrade, Downgrade}}
	registry := NewRegistry(&fakeTask{name: "WaitForUses", applies: TurnOff})
	registry.Register(bar, migrate, both)
	stored := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "bar", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Bar"},
		Status: featuresv1alpha1.FeatureStatus{State: featuresv1alpha1.FeatureStateOn, BinaryVersion: "1.35.2"}}
	e := newTestEnv(t, registry, stored)
	e.sync("bar") // Upgrade: MigrateBar, RewriteBar
	if got := taskNames(e.get("bar")); got != "MigrateBar,RewriteBar" {
		t.Fatalf("tasks %s, want MigrateBar,RewriteBar", got)
	}
	// An old server announces in between; the new one queues nothing twice.
	f := e.get("bar")
	f.Status.BinaryVersion = "1.35.2"
	if _, err := e.client.FeaturesV1alpha1().Features("kube-system").UpdateStatus(context.Background(), f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.refresh()
	e.clock.Step(10 * time.Second)
	e.sync("bar")
	if got := taskNames(e.get("bar")); got != "MigrateBar,RewriteBar" {
		t.Fatalf("after the announcer changed back and forth: tasks %s, want MigrateBar,RewriteBar once each", got)
	}
	// Turned off mid-migration: the turn's tasks first, the migration kept.
	e.set(bar, false)
	e.clock.Step(10 * time.Second)
	e.sync("bar")
	f = e.get("bar")
	if got := taskNames(f); f.Status.State != featuresv1alpha1.FeatureStateTurningOff || got != "MigrateBar,RewriteBar" && got != "WaitForUses,MigrateBar,RewriteBar" {
		t.Errorf("turned off mid-migration: state %s, tasks %s; want TurningOff with the migration kept", f.Status.State, got)
	}
}

// blockingTaskFor is a task of several transitions that is never done.
type blockingTaskFor struct {
	name        string
	transitions []Transition
}

func (t *blockingTaskFor) Name() string { return t.name }
func (t *blockingTaskFor) AppliesTo(tr Transition) bool {
	return slices.Contains(t.transitions, tr)
}
func (t *blockingTaskFor) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	return NotYet("rewriting"), nil
}

// liveAPIServer adds another kube-apiserver's identity lease, renewed now.
func (e *testEnv) liveAPIServer(name, binary, emulation string) {
	e.t.Helper()
	renewed := metav1.NewMicroTime(e.clock.Now())
	if _, err := e.client.CoordinationV1().Leases("kube-system").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Annotations: versionAnnotations(binary, emulation)}, Spec: coordinationv1.LeaseSpec{RenewTime: &renewed},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.refresh()
}

// renewLease renews another kube-apiserver's identity lease at the clock's time.
func (e *testEnv) renewLease(name string) {
	e.t.Helper()
	lease, err := e.client.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(e.clock.Now()))
	if _, err := e.client.CoordinationV1().Leases("kube-system").Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.refresh()
}

// During an upgrade the old servers lead; a new server that runs a new
// default reports the other value. Before the hold, the old leader restarted
// a transition towards its own value, and ran its tasks, while servers of the
// new version ran the feature.
func TestNoTransitionStartsWhileVersionsAreMixed(t *testing.T) {
	clean := &fakeTask{name: "CleanFoo", applies: TurnOff}
	registry := NewRegistry(NewWaitForUses(0, 0))
	registry.Register(foo, clean)
	e := newTestEnv(t, registry)
	e.sync("foo")
	e.sync("foo") // Off at first announcement
	e.events("")
	e.liveAPIServer("apiserver-new", "1.37.2", "1.37")
	e.setUses("foo", e.use("kube-apiserver", false, "apiserver-a"), func() featuresv1alpha1.FeatureUse {
		u := e.use("kube-apiserver", true, "apiserver-new")
		u.BinaryVersion, u.EmulationVersion = "1.37", "1.37"
		return u
	}())
	e.sync("foo")
	f := e.get("foo")
	if transitioning := condition(f, featuresv1alpha1.FeatureConditionTransitioning); f.Status.State != featuresv1alpha1.FeatureStateOff || len(f.Status.Tasks) != 0 ||
		transitioning.Reason != "VersionsMixed" || !strings.Contains(transitioning.Message, "1.36, 1.37") || e.events("TransitionStarted") != 0 {
		t.Fatalf("with a 1.37 server live: state %s, tasks %s, Transitioning %+v; want Off, no task, VersionsMixed", f.Status.State, taskNames(f), transitioning)
	}
	e.clock.Step(time.Minute) // the 1.37 server left
	e.sync("foo")
	f = e.get("foo")
	if transitioning := condition(f, featuresv1alpha1.FeatureConditionTransitioning); f.Status.State != featuresv1alpha1.FeatureStateOff || len(f.Status.Tasks) != 0 || transitioning.Reason != "Stable" || clean.runs != 0 {
		t.Errorf("after the 1.37 server left: state %s, tasks %s, Transitioning %+v, CleanFoo ran %d times; want Off, Stable, not run", f.Status.State, taskNames(f), transitioning, clean.runs)
	}
}

// A rollback from 1.37, where Foo is on by default, to 1.36, where it is off:
// the older servers lead at once, but the Feature keeps 1.37's announcement
// until the last 1.37 server leaves, and then turns off without the feature's
// own tasks, which would rewrite users' objects (as ClearPVCUnusedCondition
// would on every PersistentVolumeClaim), but with the tasks of the downgrade.
func TestARollbackToAnOlderDefaultRewritesNoObjects(t *testing.T) {
	clean := &fakeTask{name: "CleanFoo", applies: TurnOff}
	rewrite := &fakeTask{name: "RewriteFoo", applies: Downgrade, results: []Result{NotYet("rewriting")}}
	registry := NewRegistry(NewWaitForUses(0, 0))
	registry.Register(foo, clean, rewrite)
	settled := func(previousDefault bool) *featuresv1alpha1.Feature {
		return &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "foo", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Foo"},
			Status: featuresv1alpha1.FeatureStatus{State: featuresv1alpha1.FeatureStateOn, Default: ptr.To(previousDefault), ConfiguredValue: ptr.To(true), Announcer: "apiserver-new", BinaryVersion: "1.37", EmulationVersion: "1.37"}}
	}
	e := newTestEnv(t, registry, settled(true))
	e.liveAPIServer("apiserver-new", "1.37.2", "1.37")
	e.sync("foo")
	f := e.get("foo")
	if f.Status.State != featuresv1alpha1.FeatureStateOn || f.Status.BinaryVersion != "1.37" || f.Status.Announcer != "apiserver-new" || len(f.Status.Tasks) != 0 {
		t.Fatalf("while a 1.37 server is live: state %s, binaryVersion %s, announcer %s, tasks %s; want 1.37's announcement, On, no task", f.Status.State, f.Status.BinaryVersion, f.Status.Announcer, taskNames(f))
	}
	e.clock.Step(time.Minute) // the last 1.37 server left
	e.sync("foo")
	f = e.get("foo")
	if f.Status.State != featuresv1alpha1.FeatureStateTurningOff || taskNames(f) != "WaitForUses,RewriteFoo" || e.events("TasksSkipped") != 1 {
		t.Fatalf("after the rollback: state %s, tasks %s; want TurningOff with WaitForUses,RewriteFoo and CleanFoo skipped", f.Status.State, taskNames(f))
	}
	for range 3 {
		e.clock.Step(10 * time.Second)
		e.sync("foo")
	}
	if f = e.get("foo"); clean.runs != 0 || rewrite.runs == 0 {
		t.Errorf("CleanFoo ran %d times, RewriteFoo %d; want only RewriteFoo", clean.runs, rewrite.runs)
	}

	// A feature on by configuration, whose default did not change, turned off
	// at the rollback by dropping the flag: the operator's transition, with
	// its tasks.
	e = newTestEnv(t, registry, settled(false))
	e.sync("foo")
	if f := e.get("foo"); f.Status.State != featuresv1alpha1.FeatureStateTurningOff || taskNames(f) != "WaitForUses,CleanFoo,RewriteFoo" {
		t.Errorf("turned off by configuration at the rollback: state %s, tasks %s; want TurningOff with WaitForUses,CleanFoo,RewriteFoo", f.Status.State, taskNames(f))
	}
}

// waitTask is a feature's task that only waits, as WaitForNoBalloonPods.
type waitTask struct{ fakeTask }

func (*waitTask) WritesNothing() {}

// The rollback rule against its neighbours: an upgrade that turns a feature
// on by its new default runs the feature's tasks; a rollback of the emulation
// version alone is a rollback; a task of both the turn and the rollback runs
// once, as the rollback's, and is not called skipped; a wait runs; a value the
// flags set is the operator's, whatever the default.
func TestOnlyARollbackSkipsTheFeaturesTasks(t *testing.T) {
	stored := func(name string, state featuresv1alpha1.FeatureState, def bool, binary, emulation string) *featuresv1alpha1.Feature {
		return &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(name), Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: name},
			Status: featuresv1alpha1.FeatureStatus{State: state, Default: ptr.To(def), ConfiguredValue: ptr.To(def), BinaryVersion: binary, EmulationVersion: emulation}}
	}
	for _, tc := range []struct {
		name    string
		feature *featuresv1alpha1.Feature
		// binary is the server's binary version, when not the test's 1.36.3.
		binary string
		// flags are the gate's flags.
		flags   map[string]bool
		tasks   string
		skipped int
	}{{
		name:    "an upgrade to a release where Bar is on by default",
		feature: stored("Bar", featuresv1alpha1.FeatureStateOff, false, "1.34", "1.34"),
		tasks:   "WaitForUses,PrepareBar,MigrateBar",
	}, {
		name:    "a rollback of the emulation version alone, from 1.37 where Foo is on by default",
		feature: stored("Foo", featuresv1alpha1.FeatureStateOn, true, "1.37", "1.37"),
		binary:  "1.37.2",
		tasks:   "WaitForUses,WaitFoo,RewriteFoo",
		skipped: 1,
	}, {
		name:    "a rollback of the binary with a task of both the turn and the rollback",
		feature: stored("Foo", featuresv1alpha1.FeatureStateOn, true, "1.37", "1.37"),
		tasks:   "WaitForUses,WaitFoo,RewriteFoo",
		skipped: 1,
	}, {
		name:    "a rollback that drops the flag that turned Foo on",
		feature: stored("Foo", featuresv1alpha1.FeatureStateOn, false, "1.37", "1.37"),
		tasks:   "WaitForUses,CleanFoo,WaitFoo,RewriteFoo",
	}, {
		name:    "a rollback that sets Foo=false, its new default, to clean up",
		feature: stored("Foo", featuresv1alpha1.FeatureStateOn, true, "1.37", "1.37"),
		flags:   map[string]bool{"Foo": false},
		tasks:   "WaitForUses,CleanFoo,WaitFoo,RewriteFoo",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			registry := NewRegistry(NewWaitForUses(time.Hour, time.Hour))
			registry.Register(bar, &fakeTask{name: "PrepareBar", applies: TurnOn}, &fakeTask{name: "MigrateBar", applies: Upgrade})
			registry.Register(foo, &fakeTask{name: "CleanFoo", applies: TurnOff}, &waitTask{fakeTask{name: "WaitFoo", applies: TurnOff}},
				&blockingTaskFor{name: "RewriteFoo", transitions: []Transition{TurnOff, Downgrade}})
			e := newTestEnv(t, registry, tc.feature)
			if tc.binary != "" {
				e.c.cfg.BinaryVersion = version.MustParse(tc.binary)
				e.renewOwnLease()
			}
			if err := e.gate.SetFromMap(tc.flags); err != nil {
				t.Fatal(err)
			}
			e.sync(tc.feature.Name)
			f := e.get(tc.feature.Name)
			if taskNames(f) != tc.tasks || e.events("TasksSkipped") != tc.skipped {
				t.Errorf("state %s, tasks %s; want %s and %d TasksSkipped", f.Status.State, taskNames(f), tc.tasks, tc.skipped)
			}
		})
	}
}

// joiningTask is a fencingTask during whose run a kube-apiserver of another
// version starts.
type joiningTask struct {
	fencingTask
	join func()
}

func (t *joiningTask) Run(ctx context.Context, tc *TaskContext) (Result, error) {
	if len(t.fenced) == 1 {
		t.join()
	}
	return t.fencingTask.Run(ctx, tc)
}

// A server of another version that starts while a task runs stops the task
// at its next side effect: the hold covers a run under way, not only the runs
// to come, although the older server still leads.
func TestATaskIsFencedOnceVersionsAreMixed(t *testing.T) {
	task := &joiningTask{}
	registry := NewRegistry(&fakeTask{name: "WaitForUses", applies: TurnOn})
	registry.Register(foo, task)
	e := newTestEnv(t, registry)
	task.join = func() { e.liveAPIServer("apiserver-new", "1.37.2", "1.37") }
	e.sync("foo")
	e.sync("foo") // Off
	e.set(foo, true)
	e.sync("foo") // TurningOn: WaitForUses done, Fencing next
	e.sync("foo") // Fencing runs, fence passes
	e.clock.Step(10 * time.Second)
	e.renewOwnLease()
	if _, err := e.c.sync(context.Background(), "foo"); err != nil {
		t.Fatal(err)
	}
	if len(task.fenced) != 2 || task.fenced[0] != nil || !errors.Is(task.fenced[1], ErrFenced) {
		t.Fatalf("fence results %v, want a pass, then the run during which the 1.37 server started fenced", task.fenced)
	}
	if !e.c.leads("foo") {
		t.Error("the 1.36 server no longer leads: the fence was not the versions'")
	}
}

// While versions are mixed nothing moves: a transition under way runs no
// task (here, past its wait, a cleanup while a 1.37 server may run the
// feature), version tasks of a transition under way are queued once the
// versions agree, and a Feature only the other version knows is not marked
// unknown.
func TestATransitionWaitsWhileVersionsAreMixed(t *testing.T) {
	clean := &fakeTask{name: "CleanFoo", applies: TurnOff, results: []Result{NotYet("cleaning"), NotYet("cleaning"), NotYet("cleaning")}}
	migrate := &fakeTask{name: "MigrateFoo", applies: Upgrade}
	registry := NewRegistry(NewWaitForUses(0, 0))
	registry.Register(foo, clean, migrate)
	turning := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "foo", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Foo"},
		Status: featuresv1alpha1.FeatureStatus{State: featuresv1alpha1.FeatureStateTurningOff, Default: ptr.To(false), ConfiguredValue: ptr.To(false), BinaryVersion: "1.35", EmulationVersion: "1.35",
			Tasks: []featuresv1alpha1.FeatureTask{{Name: "CleanFoo"}}, Conditions: []metav1.Condition{{Type: featuresv1alpha1.FeatureConditionTransitioning, Status: metav1.ConditionTrue, Reason: "TurnOff"}}}}
	newer := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "newer", Namespace: "kube-system"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Newer"}}
	e := newTestEnv(t, registry, turning, newer)
	e.liveAPIServer("apiserver-new", "1.37.2", "1.37")
	for range 3 {
		e.sync("foo")
		e.sync("newer")
		e.clock.Step(10 * time.Second)
		e.renewLease("apiserver-new")
	}
	if f := e.get("foo"); clean.runs != 0 || taskNames(f) != "CleanFoo" || condition(f, featuresv1alpha1.FeatureConditionTransitioning).Message == "" {
		t.Errorf("while a 1.37 server is live: CleanFoo ran %d times, tasks %s, Transitioning %+v; want no run and the reason", clean.runs, taskNames(f), condition(f, featuresv1alpha1.FeatureConditionTransitioning))
	}
	if v := e.get("newer").Status.UnknownSinceVersion; v != "" {
		t.Errorf("a Feature the 1.37 server knows was marked unknown since %s while it ran", v)
	}
	e.clock.Step(time.Minute) // the 1.37 server left: its last renewal seen now
	e.sync("foo")
	e.clock.Step(time.Minute) // and no later one
	e.sync("foo")
	if f := e.get("foo"); clean.runs == 0 || taskNames(f) != "CleanFoo,MigrateFoo" {
		t.Errorf("after the 1.37 server left: CleanFoo ran %d times, tasks %s; want it run and MigrateFoo queued", clean.runs, taskNames(f))
	}
}
