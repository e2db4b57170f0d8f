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

package reporting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes/fake"
	featureslisters "k8s.io/client-go/listers/features/v1alpha1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/featuregate"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeServer stores Features with optimistic concurrency, as kube-apiserver
// does, and feeds a cache the way a watch would, a little later.
type fakeServer struct {
	mu       sync.Mutex
	features map[string]*featuresv1alpha1.Feature
	rv       int
	writes   atomic.Int32
	stored   atomic.Int32
	down     atomic.Bool
	indexer  cache.Indexer
	lag      time.Duration
	// virtual: the cache gets a write once advance reaches its time plus
	// lag, not lag later in real time.
	virtual bool
	now     time.Duration
	queued  []queuedUpdate
	// managers are the field managers of the applies, in order, and
	// appliedTo the Features they applied to.
	managers  []string
	appliedTo []string
	// applied are the uses of each apply.
	applied [][]featuresv1alpha1.FeatureUse
}

func newFakeServer(lag time.Duration, names ...string) (*fakeServer, *fake.Clientset, featureslisters.FeatureLister) {
	s := &fakeServer{features: map[string]*featuresv1alpha1.Feature{}, indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), lag: lag}
	for _, name := range names {
		s.rv++
		f := &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", ResourceVersion: strconv.Itoa(s.rv)}}
		s.features[name] = f
		_ = s.indexer.Add(f.DeepCopy())
	}
	client := fake.NewClientset()
	client.PrependReactor("get", "features", func(action clienttesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		f, ok := s.features[action.(clienttesting.GetAction).GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(featuresv1alpha1.Resource("features"), action.(clienttesting.GetAction).GetName())
		}
		return true, f.DeepCopy(), nil
	})
	client.PrependReactor("update", "features", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if s.down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("kube-apiserver is down")
		}
		s.writes.Add(1)
		update := action.(clienttesting.UpdateAction).GetObject().(*featuresv1alpha1.Feature)
		s.mu.Lock()
		defer s.mu.Unlock()
		stored := s.features[update.Name]
		if update.ResourceVersion != stored.ResourceVersion {
			return true, nil, apierrors.NewConflict(featuresv1alpha1.Resource("features"), update.Name, errors.New("the object has been modified"))
		}
		s.rv++
		s.stored.Add(1)
		stored = stored.DeepCopy()
		stored.Status.Uses = update.Status.Uses
		stored.ResourceVersion = strconv.Itoa(s.rv)
		s.features[update.Name] = stored
		cached := stored.DeepCopy()
		s.feedCache(cached)
		return true, stored.DeepCopy(), nil
	})
	// Server-side apply of the uses subresource, as kube-apiserver merges it:
	// uses is a list-map keyed by component, value and versions, instances a
	// set; an applied resourceVersion is a precondition; the report times are
	// the server's.
	client.PrependReactor("patch", "features", func(action clienttesting.Action) (bool, runtime.Object, error) {
		patch := action.(clienttesting.PatchAction)
		if patch.GetPatchType() != types.ApplyPatchType {
			return true, nil, fmt.Errorf("unexpected patch type %s", patch.GetPatchType())
		}
		if s.down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("kube-apiserver is down")
		}
		s.writes.Add(1)
		var applied featuresv1alpha1.Feature
		if err := json.Unmarshal(patch.GetPatch(), &applied); err != nil {
			return true, nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.managers = append(s.managers, action.(clienttesting.PatchActionImpl).PatchOptions.FieldManager)
		s.appliedTo = append(s.appliedTo, patch.GetName())
		s.applied = append(s.applied, applied.Status.Uses)
		stored := s.features[patch.GetName()]
		if applied.ResourceVersion != "" && applied.ResourceVersion != stored.ResourceVersion {
			return true, nil, apierrors.NewConflict(featuresv1alpha1.Resource("features"), patch.GetName(), errors.New("the object has been modified"))
		}
		s.rv++
		s.stored.Add(1)
		stored = stored.DeepCopy()
		for _, use := range applied.Status.Uses {
			i := slices.IndexFunc(stored.Status.Uses, func(u featuresv1alpha1.FeatureUse) bool {
				return u.Component == use.Component && u.Value == use.Value && u.BinaryVersion == use.BinaryVersion && u.EmulationVersion == use.EmulationVersion
			})
			if i < 0 {
				use.FirstReportTime, use.LastReportTime = ptr.To(metav1.Now()), ptr.To(metav1.Now())
				stored.Status.Uses = append(stored.Status.Uses, use)
				continue
			}
			if !use.LastReportTime.IsZero() {
				stored.Status.Uses[i].LastReportTime = ptr.To(metav1.Now())
			}
			for _, instance := range use.Instances {
				if !slices.Contains(stored.Status.Uses[i].Instances, instance) {
					stored.Status.Uses[i].Instances = append(stored.Status.Uses[i].Instances, instance)
				}
			}
		}
		stored.ResourceVersion = strconv.Itoa(s.rv)
		s.features[patch.GetName()] = stored
		cached := stored.DeepCopy()
		s.feedCache(cached)
		return true, stored.DeepCopy(), nil
	})
	return s, client, featureslisters.NewFeatureLister(s.indexer)
}

type queuedUpdate struct {
	at time.Duration
	f  *featuresv1alpha1.Feature
}

// feedCache gives the cache a stored Feature lag later. Called with s.mu held.
func (s *fakeServer) feedCache(f *featuresv1alpha1.Feature) {
	if s.virtual {
		s.queued = append(s.queued, queuedUpdate{at: s.now + s.lag, f: f})
		return
	}
	time.AfterFunc(s.lag, func() { _ = s.indexer.Update(f) })
}

// advance moves a virtual server's time to now, and gives the cache the
// writes that reach it by then.
func (s *fakeServer) advance(now time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
	var later []queuedUpdate
	for _, u := range s.queued {
		if u.at <= now {
			_ = s.indexer.Update(u.f)
		} else {
			later = append(later, u)
		}
	}
	s.queued = later
}

func (s *fakeServer) uses(name string) []featuresv1alpha1.FeatureUse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.features[name].Status.Uses
}

func checkedGate(t testing.TB, alpha bool) *Gate {
	g := NewGate(newTestGate(t))
	if err := g.Set(fmt.Sprintf("AlphaFeature=%t", alpha)); err != nil {
		t.Fatal(err)
	}
	g.Enabled(alphaFeature)
	g.Enabled(betaFeature)
	return g
}

func testOptions(instance string) Options {
	opts := DefaultOptions("kube-system", "kubelet", instance)
	opts.MaxDelay = 0
	opts.BinaryVersion, opts.EmulationVersion = "1.36", "1.36"
	return opts
}

func TestReportWritesMissingUsesOnly(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature", "betafeature")
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))

	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := server.uses("alphafeature"); len(got) != 1 || got[0].Component != "kubelet" || !got[0].Value || got[0].Instances[0] != "node-1" {
		t.Errorf("alphafeature uses = %+v", got)
	}
	if got := server.uses("betafeature"); len(got) != 1 || !got[0].Value {
		t.Errorf("betafeature uses = %+v", got)
	}
	writes := server.writes.Load()
	time.Sleep(10 * time.Millisecond)
	if err := r.reportOnce(ctx); err != nil || server.writes.Load() != writes {
		t.Errorf("a second pass wrote again (%d writes, %v)", server.writes.Load()-writes, err)
	}
}

// A sampled instance renews its entry once RenewInterval has passed since the
// entry's last report, so that kube-apiserver does not expire it; an instance
// the sample does not name, or an entry renewed recently, writes nothing.
func TestReportRenewsItsEntry(t *testing.T) {
	old := metav1.NewTime(time.Now().Add(-RenewInterval - time.Minute))
	recent := metav1.NewTime(time.Now().Add(-time.Minute))
	for _, tc := range []struct {
		name, instance string
		last           metav1.Time
		renewed        bool
	}{
		{name: "sampled, due", instance: "node-1", last: old, renewed: true},
		{name: "sampled, renewed a minute ago", instance: "node-1", last: recent},
		{name: "not sampled", instance: "node-9", last: old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client, lister := newFakeServer(0, "alphafeature")
			f := server.features["alphafeature"]
			f.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-1", "node-2", "node-3"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &old, LastReportTime: &tc.last}}
			_ = server.indexer.Update(f.DeepCopy())
			g := NewGate(newTestGate(t))
			if err := g.Set("AlphaFeature=true"); err != nil {
				t.Fatal(err)
			}
			g.Enabled(alphaFeature)
			r := newReporter(g, client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions(tc.instance))
			if err := r.reportOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := server.uses("alphafeature")
			if renewed := got[0].LastReportTime.After(tc.last.Time.Add(time.Second)); renewed != tc.renewed || len(got) != 1 || len(got[0].Instances) != 3 {
				t.Errorf("uses = %+v, want renewed %t and the sample unchanged", got, tc.renewed)
			}
			if want := map[bool]int32{true: 1, false: 0}[tc.renewed]; server.writes.Load() != want {
				t.Errorf("writes = %d, want %d", server.writes.Load(), want)
			}
		})
	}
}

func TestReportSamplesAFewInstances(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature")
	for i := range 5 {
		g := NewGate(newTestGate(t))
		g.Enabled(alphaFeature)
		opts := testOptions(fmt.Sprintf("node-%d", i))
		r := newReporter(g, client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
		if err := r.reportOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := server.uses("alphafeature")
	if len(got) != 1 || len(got[0].Instances) != 3 {
		t.Errorf("want one entry naming the first 3 instances, got %+v", got)
	}
	if server.writes.Load() != 3 {
		t.Errorf("writes = %d, want 3", server.writes.Load())
	}
}

// An instance reports a missing entry at once, but adds itself to a sample
// with room only once its own delay since it saw the room has passed.
func TestReportJoinsASampleAfterItsDelay(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature")
	server.virtual = true
	first := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))
	if err := first.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	server.advance(0)

	opts := testOptions("node-2")
	opts.MaxInstances = 10_000
	second := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
	clock := testingclock.NewFakeClock(time.Now())
	second.clock = clock
	second.uniform = func() float64 { return 0.5 }
	delay := second.suppressionDelay(opts.FillInterval)
	if delay <= 0 || delay >= opts.FillInterval {
		t.Fatalf("delay = %v, want within (0, %v)", delay, opts.FillInterval)
	}
	for _, step := range []time.Duration{0, delay - time.Second} {
		clock.SetTime(clock.Now().Add(step))
		if err := second.reportOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got := server.uses("alphafeature"); len(got) != 1 || !slices.Equal(got[0].Instances, []string{"node-1"}) {
			t.Fatalf("%v after it saw the room: uses = %+v; want the sample not joined before %v", step, got, delay)
		}
	}
	clock.Step(time.Second)
	if err := second.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := server.uses("alphafeature"); len(got) != 1 || !slices.Equal(got[0].Instances, []string{"node-1", "node-2"}) {
		t.Errorf("uses = %+v; want node-2 in the sample once its delay passed", got)
	}
	server.advance(0)
	if err := second.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(second.joinAt) != 0 {
		t.Errorf("join times kept after the join: %v", second.joinAt)
	}
}

// The few instances of a control-plane component fill a sample within
// MaxDelay, as they report, not FillInterval: the server flow waits for every
// live kube-apiserver to be named, and one that restarted after the leader had
// pruned its name held a transition for minutes (TestFeatureAPIProcesses,
// "reported: kube-apiserver 2 of 3").
func TestReportFewInstancesJoinASampleWithinMaxDelay(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature")
	server.virtual = true
	f := server.features["alphafeature"]
	f.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-a", "apiserver-b"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}}
	_ = server.indexer.Update(f.DeepCopy())

	opts := DefaultOptions("kube-system", "kube-apiserver", "apiserver-c")
	opts.BinaryVersion, opts.EmulationVersion = "1.36", "1.36"
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
	clock := testingclock.NewFakeClock(time.Now())
	r.clock = clock
	r.uniform = func() float64 { return 0.99 }
	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if server.writes.Load() != 0 {
		t.Fatalf("joined before its delay (%d writes)", server.writes.Load())
	}
	clock.Step(opts.MaxDelay)
	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := server.uses("alphafeature"); len(got) != 1 || !slices.Equal(got[0].Instances, []string{"apiserver-a", "apiserver-b", "apiserver-c"}) {
		t.Errorf("uses %v after it saw the room = %+v; want apiserver-c in the sample", opts.MaxDelay, got)
	}
}

// A sample that filled and left room again while an instance did not look is
// a new sample: the instance draws a new delay for it rather than join at once
// on the old one, as every instance whose old delay had passed would.
func TestReportDrawsAgainForASampleThatChanged(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature")
	server.virtual = true
	f := server.features["alphafeature"]
	sampled := func(instances ...string) {
		f.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: instances, BinaryVersion: "1.36", EmulationVersion: "1.36"}}
		_ = server.indexer.Update(f.DeepCopy())
	}
	sampled("node-1")
	opts := testOptions("node-9")
	opts.MaxInstances = 10_000
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
	clock := testingclock.NewFakeClock(time.Now())
	r.clock = clock
	r.uniform = func() float64 { return 0.5 }
	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	delay := r.suppressionDelay(r.opts.FillInterval)
	// Unseen by r, the sample filled, and one of the new instances left.
	sampled("node-1", "node-2")
	clock.Step(delay)
	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if server.writes.Load() != 0 {
		t.Fatalf("joined a sample it saw for the first time at once (%d writes)", server.writes.Load())
	}
	clock.Step(delay)
	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if server.writes.Load() != 1 {
		t.Errorf("writes = %d, want the join once its new delay passed", server.writes.Load())
	}
}

// A reporter writes what is missing in an order of its own: reporters whose
// delays end together, each taking seconds at its client's rate to write a
// few hundred entries, start on different Features and find some of the
// others' writes in their caches rather than conflict in step.
func TestReportWritesInAnOrderOfItsOwn(t *testing.T) {
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("feature-%02d", i))
	}
	var orders [][]string
	for seed := range 2 {
		server, client, lister := newFakeServer(0, names...)
		opts := testOptions("node-1")
		opts.AllFeatures = true
		r := newReporter(manyFeaturesGate(t, len(names), true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
		r.shuffle = rand.New(rand.NewPCG(uint64(seed), 1)).Shuffle
		if err := r.reportOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		orders = append(orders, server.appliedTo)
	}
	if slices.Equal(orders[0], names) || slices.Equal(orders[0], orders[1]) {
		t.Errorf("reporters wrote in the orders %v and %v; want orders of their own", orders[0], orders[1])
	}
}

// A report that changes what a Feature says is written before the joins of
// samples that already report the instance's value: a kube-apiserver joins the
// samples of all its Features in one pass, and a changed value waited behind
// those writes (TestLifecycleHarness, under make test).
func TestReportWritesValuesBeforeJoins(t *testing.T) {
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("feature-%02d", i))
	}
	for seed := range 5 {
		server, client, lister := newFakeServer(0, names...)
		for _, name := range names {
			if name == "feature-07" {
				continue // no entry: the instance's value is not reported yet
			}
			f := server.features[name]
			f.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-0"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}}
			_ = server.indexer.Update(f.DeepCopy())
		}
		opts := testOptions("node-1")
		opts.AllFeatures = true
		r := newReporter(manyFeaturesGate(t, len(names), true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
		r.shuffle = rand.New(rand.NewPCG(uint64(seed), 2)).Shuffle
		if err := r.reportOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(server.appliedTo) != len(names) || server.appliedTo[0] != "feature-07" {
			t.Errorf("seed %d: wrote %v; want feature-07, whose entry is missing, first, then the 19 joins", seed, server.appliedTo)
		}
	}
}

// Among n instances that draw suppressionDelays, those whose delay ends
// within the first write's way to the caches of the others (here a thirtieth
// of the delay's bound: 1 s of MaxDelay) are the ones that race it and lose a
// conflict. They stay a handful from 30 to 10,000 instances; with uniform
// delays, those of a component of few instances, they would be n/30, 333 of
// 10,000.
func TestSuppressionDelayKeepsTheRaceSmall(t *testing.T) {
	const bound, window, trials = 30 * time.Second, time.Second, 200
	opts := testOptions("node-1")
	opts.MaxInstances = 10_000
	r := newReporter(nil, nil, nil, opts)
	rng := rand.New(rand.NewPCG(1, 2))
	r.uniform = rng.Float64
	for _, n := range []int{30, 300, 3000, 10000} {
		racers := 0
		for range trials {
			delays := make([]time.Duration, n)
			for i := range delays {
				delays[i] = r.suppressionDelay(bound)
				if delays[i] < 0 || delays[i] >= bound {
					t.Fatalf("delay %v out of [0, %v)", delays[i], bound)
				}
			}
			first := slices.Min(delays)
			for _, d := range delays {
				if d > first && d-first < window {
					racers++
				}
			}
		}
		mean := float64(racers) / trials
		t.Logf("%5d instances: %.2f race the first write on average (uniform delays: %.0f)", n, mean, float64(n)*float64(window)/float64(bound))
		if mean > 2 {
			t.Errorf("%d instances: %.2f race the first write on average, want at most 2", n, mean)
		}
	}
}

func TestReportSkipsUnannouncedFeatures(t *testing.T) {
	server, client, lister := newFakeServer(0, "betafeature")
	r := newReporter(checkedGate(t, false), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))
	if err := r.reportOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if server.writes.Load() != 1 {
		t.Errorf("writes = %d, want 1 (betafeature only)", server.writes.Load())
	}
}

func TestReportSurvivesTheAPIServerBeingDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	server, client, lister := newFakeServer(0, "alphafeature", "betafeature")
	server.down.Store(true)
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))
	var sleeps atomic.Int32
	r.sleep = func(ctx context.Context, d time.Duration) {
		if sleeps.Add(1) == 3 {
			server.down.Store(false)
		}
	}
	done := make(chan struct{})
	go func() {
		r.run(ctx)
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(server.uses("alphafeature")) == 0 || len(server.uses("betafeature")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the uses were never written after the API server came back")
		}
		time.Sleep(time.Millisecond)
	}
	if sleeps.Load() < 3 {
		t.Errorf("want back-off while the API server is down, slept %d times", sleeps.Load())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the reporter did not stop with its context")
	}
}

// TestReportWriteAmplification starts 5,000 kubelets at once against 20
// Features without their entries, as a cluster does when the API comes up:
// 4,500 run the features on, 500 off. It runs in virtual time: each reporter
// wakes at its drawn delay and its cache holds the writes made a second or
// more before, the way of a write to 5,000 watchers.
func TestReportWriteAmplification(t *testing.T) {
	const n, features = 5000, 20
	shaped, uniform := amplification(t, n, features, 10_000), amplification(t, n, features, 0)
	t.Logf("%d reporters, %d Features, 2 values each: %d stored writes in %d calls; with uniform delays %d in %d calls",
		n, features, shaped.stored.Load(), shaped.writes.Load(), uniform.stored.Load(), uniform.writes.Load())
	// Each value's entry is written once, by the reporter whose delay ended
	// first; the few whose delay ended within the cache's lag of it lose a
	// conflict on every Feature (80 calls measured, against 3,260 with
	// uniform delays); the samples fill later (FillInterval).
	if limit := int32(features * 2 * 3); shaped.writes.Load() > limit {
		t.Errorf("calls = %d, want at most %d", shaped.writes.Load(), limit)
	}
}

// amplification runs n reporters of the given MaxInstances, one in ten with
// the features off, against features Features without entries, each reporter
// once, at its delay, in virtual time with a cache lag of 1 s.
func amplification(t *testing.T, n, features, maxInstances int) *fakeServer {
	var names []string
	for i := range features {
		names = append(names, fmt.Sprintf("feature-%02d", i))
	}
	server, client, lister := newFakeServer(time.Second, names...)
	server.virtual = true
	rng := rand.New(rand.NewPCG(uint64(n), uint64(maxInstances)))
	type wake struct {
		at time.Duration
		r  *reporter
	}
	var wakes []wake
	for i := range n {
		opts := testOptions(fmt.Sprintf("node-%d", i))
		opts.MaxDelay = 30 * time.Second
		opts.MaxInstances = maxInstances
		opts.AllFeatures = true
		r := newReporter(manyFeaturesGate(t, features, i%10 != 0), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
		u := rng.Float64()
		r.uniform = func() float64 { return u }
		r.shuffle = rng.Shuffle
		r.sleep = func(context.Context, time.Duration) {}
		wakes = append(wakes, wake{at: r.suppressionDelay(opts.MaxDelay), r: r})
	}
	slices.SortFunc(wakes, func(a, b wake) int { return int(a.at - b.at) })
	for _, w := range wakes {
		server.advance(w.at)
		if err := w.r.reportOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		if uses := server.uses(name); len(uses) != 2 {
			t.Fatalf("%s: want one entry per value, got %+v", name, uses)
		}
	}
	return server
}

// manyFeaturesGate is a gate of n alpha features feature-NN, all set to value.
func manyFeaturesGate(t testing.TB, n int, value bool) *Gate {
	gate := featuregate.NewVersionedFeatureGate(version.MustParse("1.36"))
	specs := map[featuregate.Feature]featuregate.VersionedSpecs{}
	for i := range n {
		specs[featuregate.Feature(fmt.Sprintf("Feature-%02d", i))] = featuregate.VersionedSpecs{{Version: version.MustParse("1.36"), Default: value, PreRelease: featuregate.Alpha}}
	}
	if err := gate.AddVersioned(specs); err != nil {
		t.Fatal(err)
	}
	return NewGate(gate)
}

func TestWaitForAPIBacksOffUntilServed(t *testing.T) {
	_, client, lister := newFakeServer(0)
	opts := testOptions("node-1")
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
	var delays []time.Duration
	r.sleep = func(ctx context.Context, d time.Duration) {
		delays = append(delays, d)
		if len(delays) == 10 {
			client.Resources = []*metav1.APIResourceList{{GroupVersion: featuresv1alpha1.SchemeGroupVersion.String(), APIResources: []metav1.APIResource{{Name: "features", Namespaced: true, Kind: "Feature"}}}}
		}
	}
	if !r.waitForAPI(context.Background(), client.Discovery()) {
		t.Fatal("waitForAPI returned false with a live context")
	}
	if len(delays) != 10 {
		t.Fatalf("checked discovery %d times, want 11 (served at the 11th)", len(delays)+1)
	}
	for i, d := range delays {
		if d < opts.CheckInterval/2 || d > opts.Resync*3/2 {
			t.Errorf("delay %d = %v, want within [%v, %v]", i, d, opts.CheckInterval/2, opts.Resync*3/2)
		}
	}
	if last := delays[len(delays)-1]; last < opts.Resync {
		t.Errorf("after 10 checks the delay is %v, want the resync period %v (with jitter)", last, opts.Resync)
	}

	ctx, cancel := context.WithCancel(context.Background())
	client.Resources = nil
	r.sleep = func(context.Context, time.Duration) { cancel() }
	if r.waitForAPI(ctx, client.Discovery()) {
		t.Error("waitForAPI returned true for an API that is not served")
	}
}

// An instance that ran with the other value before moves itself: it never stays
// named under both values.
func TestReportMovesTheInstanceToItsNewValue(t *testing.T) {
	for _, tc := range []struct {
		name         string
		stored, want []featuresv1alpha1.FeatureUse
	}{{
		name:   "its entry at its old version goes",
		stored: []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.35", EmulationVersion: "1.35"}},
		want:   []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}},
	}, {
		name:   "its own entry goes",
		stored: []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: false, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}},
		want:   []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}},
	}, {
		// The other value's entry stays for the others; a full sample of the new
		// value is left as it is, and node-1 still moves out of the old one.
		name: "a shared entry stays, a full sample is kept",
		stored: []featuresv1alpha1.FeatureUse{
			{Component: "kubelet", Value: false, Instances: []string{"node-2", "node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
			{Component: "kubelet", Value: true, Instances: []string{"node-3", "node-4", "node-5"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
		},
		want: []featuresv1alpha1.FeatureUse{
			{Component: "kubelet", Value: false, Instances: []string{"node-2"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
			{Component: "kubelet", Value: true, Instances: []string{"node-3", "node-4", "node-5"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			server, client, lister := newFakeServer(0, "alphafeature")
			f := server.features["alphafeature"]
			f.Status.Uses = tc.stored
			_ = server.indexer.Update(f.DeepCopy())
			r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))
			if err := r.reportOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := server.uses("alphafeature")
			for i := range got {
				got[i].FirstReportTime = nil
			}
			if !slices.EqualFunc(got, tc.want, func(a, b featuresv1alpha1.FeatureUse) bool {
				return a.Component == b.Component && a.Value == b.Value && a.BinaryVersion == b.BinaryVersion && a.EmulationVersion == b.EmulationVersion && slices.Equal(a.Instances, b.Instances)
			}) {
				t.Errorf("uses = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A reporter applies its own entry only, as its own field manager, so that no
// entry of another writer is in what it sends: were its apply not conditional,
// or its cache behind, it still could not drop one.
func TestReportAppliesOnlyItsOwnEntry(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature")
	f := server.features["alphafeature"]
	f.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kube-scheduler", Value: true, Instances: []string{"scheduler-1"}}}
	_ = server.indexer.Update(f.DeepCopy())
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))
	if err := r.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"kubelet/node-1"}; !slices.Equal(server.managers, want) {
		t.Fatalf("applies by field managers %q, want %q", server.managers, want)
	}
	if a := server.applied[0]; len(a) != 1 || a[0].Component != "kubelet" || !a[0].Value || !slices.Equal(a[0].Instances, []string{"node-1"}) || !a[0].FirstReportTime.IsZero() {
		t.Errorf("applied uses %+v, want the kubelet's entry naming node-1 only", a)
	}
	got := server.uses("alphafeature")
	if len(got) != 2 || got[0].Component != "kube-scheduler" || got[1].Component != "kubelet" || !slices.Equal(got[1].Instances, []string{"node-1"}) {
		t.Errorf("uses = %+v, want the scheduler's entry and the kubelet's", got)
	}
}

func TestFieldManager(t *testing.T) {
	if got := FieldManager("kubelet", "node-1"); got != "kubelet/node-1" {
		t.Errorf("FieldManager = %q", got)
	}
	long := strings.Repeat("n", 253)
	got := FieldManager("kubelet", long)
	if len(got) > maxFieldManagerLength || !strings.HasPrefix(got, "kubelet/") {
		t.Errorf("FieldManager of a 253-byte node name = %q (%d bytes)", got, len(got))
	}
	if other := FieldManager("kubelet", strings.Repeat("n", 252)+"m"); other == got {
		t.Errorf("two long names share the field manager %q", got)
	}
}
