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
	"k8s.io/client-go/kubernetes/fake"
	featureslisters "k8s.io/client-go/listers/features/v1alpha1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
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
	// managers are the field managers of the applies, in order.
	managers []string
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
		time.AfterFunc(s.lag, func() { _ = s.indexer.Update(cached) })
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
		time.AfterFunc(s.lag, func() { _ = s.indexer.Update(cached) })
		return true, stored.DeepCopy(), nil
	})
	return s, client, featureslisters.NewFeatureLister(s.indexer)
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
		r := newReporter(g, client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions(fmt.Sprintf("node-%d", i)))
		r.join = func() bool { return true }
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
// with room only in the passes it joins samples: about one in
// FillInterval/CheckInterval, so that the instances that race for a place
// left in a sample are few, not all of them.
func TestReportSpreadsTheRefillOfASample(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(0, "alphafeature")
	first := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-1"))
	first.join = func() bool { return false }
	if err := first.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	second := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, testOptions("node-2"))
	second.join = func() bool { return false }
	if err := second.reportOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := server.uses("alphafeature"); len(got) != 1 || !slices.Equal(got[0].Instances, []string{"node-1"}) {
		t.Errorf("uses = %+v; want the missing entry reported, and no join of its sample", got)
	}

	opts := testOptions("node-3")
	r := newReporter(checkedGate(t, true), client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
	const draws = 60000
	joined := 0
	for range draws {
		if r.join() {
			joined++
		}
	}
	// Binomial, p = 10s/10min: 1,000 expected, a standard deviation of 31.
	if want := draws * int(opts.CheckInterval) / int(opts.FillInterval); joined < want-200 || joined > want+200 {
		t.Errorf("joined %d passes of %d, want about %d", joined, draws, want)
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

// TestReportWriteAmplification runs 1,000 kubelets against one Feature whose
// uses were just cleared: 900 run with the feature on, 100 with it off.
func TestReportWriteAmplification(t *testing.T) {
	ctx := context.Background()
	server, client, lister := newFakeServer(5*time.Millisecond, "alphafeature")
	var wg sync.WaitGroup
	for i := range 1000 {
		g := NewGate(newTestGate(t))
		if err := g.Set(fmt.Sprintf("AlphaFeature=%t", i%10 != 0)); err != nil {
			t.Fatal(err)
		}
		g.Enabled(alphaFeature)
		opts := testOptions(fmt.Sprintf("node-%d", i))
		opts.MaxDelay = 500 * time.Millisecond
		r := newReporter(g, client.FeaturesV1alpha1().Features("kube-system"), lister, opts)
		wg.Go(func() {
			if err := r.reportOnce(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	uses := server.uses("alphafeature")
	if len(uses) != 2 {
		t.Fatalf("want one entry per value, got %+v", uses)
	}
	writes, stored := server.writes.Load(), server.stored.Load()
	t.Logf("1000 reporters, 2 distinct values: %d writes stored, %d update calls with the conflicts", stored, writes)
	// Each value's missing entry is written once at once; its sample fills
	// with the reporters that join samples in this pass (about one in 60), up
	// to SampleSize each. Reporters whose cache has not seen the last write
	// yet lose a conflict and write nothing more; how many depends on the
	// cache's lag and on how densely the reports fall (28 to 55 calls measured
	// with a 5 ms lag when every reporter joined, 7 to 21 since), not on the
	// number of reporters.
	if stored < 2 || stored > 2*3 {
		t.Errorf("stored writes = %d, want 2 to %d", stored, 2*3)
	}
	if limit := int32(2 * 3 * 25); writes > limit {
		t.Errorf("update calls = %d, want at most %d", writes, limit)
	}
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
