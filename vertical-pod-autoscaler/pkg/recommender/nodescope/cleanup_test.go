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
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
)

// cleanupMeta is the metadata of a slice of the VPA namespace/vpaName, owned
// by the VPA's UID (vpaUID).
func cleanupMeta(namespace, name, vpaName string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "/" + name),
		Labels:          map[string]string{vpa_alpha.VPANameLabel: vpaName},
		OwnerReferences: []metav1.OwnerReference{{Kind: "VerticalPodAutoscaler", Name: vpaName, UID: vpaUID(namespace, vpaName)}}}
}

func vpaUID(namespace, name string) types.UID {
	return types.UID("vpa-" + namespace + "/" + name)
}

// cleanupFixture is a fake API server with the slices and checkpoint slices of
// the VPAs "gone" (3 slices, 2 checkpoint slices) and "kept" (1 each) in
// namespace ns, and a Cleaner whose caches hold their metadata, as the
// metadata informers have it.
type cleanupFixture struct {
	client  *vpa_fake.Clientset
	cleaner *Cleaner
	deletes []string // kind/name of each API delete, in order
}

func newCleanupFixture(t *testing.T) *cleanupFixture {
	var objs []runtime.Object
	slicesCache := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{VPANameIndex: VPANameIndexFunc})
	checkpointsCache := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{VPANameIndex: VPANameIndexFunc})
	add := func(vpaName string, slices, checkpoints int) {
		for i := range slices {
			meta := cleanupMeta("ns", fmt.Sprintf("%s-%d", vpaName, i), vpaName)
			objs = append(objs, &vpa_alpha.VerticalPodAutoscalerSlice{ObjectMeta: meta, VPAName: vpaName})
			if err := slicesCache.Add(&metav1.PartialObjectMetadata{ObjectMeta: meta}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range checkpoints {
			meta := cleanupMeta("ns", fmt.Sprintf("%s-checkpoint-%d", vpaName, i), vpaName)
			// Marked a grace period ago: due for deletion.
			meta.Annotations = map[string]string{vpa_alpha.UnscopedSinceAnnotation: cleanupNow.Add(-cleanupGrace).Format(time.RFC3339)}
			objs = append(objs, &vpa_alpha.VerticalPodAutoscalerCheckpointSlice{ObjectMeta: meta, VPAName: vpaName})
			if err := checkpointsCache.Add(&metav1.PartialObjectMetadata{ObjectMeta: meta}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add("gone", 3, 2)
	add("kept", 1, 1)
	f := &cleanupFixture{client: vpa_fake.NewSimpleClientset(objs...)} //nolint:staticcheck // as the other tests of this package
	f.client.PrependReactor("delete", "*", func(action core.Action) (bool, runtime.Object, error) {
		f.deletes = append(f.deletes, action.GetResource().Resource+"/"+action.(core.DeleteAction).GetName())
		return false, nil, nil
	})
	f.cleaner = &Cleaner{Client: f.client.AutoscalingV1alpha1(), Slices: slicesCache, CheckpointSlices: checkpointsCache, MaxDeletes: DefaultMaxCleanupDeletes,
		UnscopedGracePeriod: cleanupGrace, Clock: testingclock.NewFakePassiveClock(cleanupNow)}
	return f
}

// cleanupNow is the time of the fixture's Cleaner, cleanupGrace its grace
// period (the default memory aggregation window).
var (
	cleanupNow   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cleanupGrace = 8 * 24 * time.Hour
)

// remaining returns the names of the slices and checkpoint slices in the API.
func (f *cleanupFixture) remaining(t *testing.T) []string {
	t.Helper()
	var names []string
	list, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("ns").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	checkpoints, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("ns").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range checkpoints.Items {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// syncCaches drops from the caches what is gone from the API, as the informers
// do before the next loop.
func (f *cleanupFixture) syncCaches(t *testing.T) {
	t.Helper()
	remaining := f.remaining(t)
	for _, indexer := range []cache.Indexer{f.cleaner.Slices, f.cleaner.CheckpointSlices} {
		for _, obj := range indexer.List() {
			if !slices.Contains(remaining, obj.(*metav1.PartialObjectMetadata).Name) {
				if err := indexer.Delete(obj); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// refresh fills the caches from the API, as the informers do between loops.
func (f *cleanupFixture) refresh(t *testing.T) {
	t.Helper()
	f.syncCaches(t)
	list, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("ns").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for _, s := range list.Items {
		objs = append(objs, &metav1.PartialObjectMetadata{ObjectMeta: s.ObjectMeta})
	}
	if err := f.cleaner.CheckpointSlices.Replace(objs, ""); err != nil {
		t.Fatal(err)
	}
}

// unmark removes the marks of the checkpoint slices, from the API and the
// cache, as when the scope was dropped just now.
func (f *cleanupFixture) unmark(t *testing.T) {
	t.Helper()
	for _, obj := range f.cleaner.CheckpointSlices.List() {
		name := obj.(*metav1.PartialObjectMetadata).Name
		if _, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("ns").Patch(context.TODO(), name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.refresh(t)
}

func vpaNamed(namespace, name string) *vpa_types.VerticalPodAutoscaler {
	return &vpa_types.VerticalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: vpaUID(namespace, name)}}
}

func TestCleanupDeletesSlicesOfGivenVPAs(t *testing.T) {
	f := newCleanupFixture(t)
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone"), vpaNamed("ns", "no-slices"), vpaNamed("other", "kept")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats != (CleanupStats{Deleted: 5}) {
		t.Errorf("stats %+v, want 5 deleted, none pending", stats)
	}
	// Recommendation slices first.
	want := []string{
		"verticalpodautoscalerslices/gone-0", "verticalpodautoscalerslices/gone-1", "verticalpodautoscalerslices/gone-2",
		"verticalpodautoscalercheckpointslices/gone-checkpoint-0", "verticalpodautoscalercheckpointslices/gone-checkpoint-1",
	}
	if !slices.Equal(f.deletes, want) {
		t.Errorf("deletes %v, want %v", f.deletes, want)
	}
	if got := f.remaining(t); !slices.Equal(got, []string{"kept-0", "kept-checkpoint-0"}) {
		t.Errorf("left %v, want the slices of kept only", got)
	}
}

func TestCleanupIsBounded(t *testing.T) {
	f := newCleanupFixture(t)
	f.cleaner.MaxDeletes = 2
	vpas := []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}
	for i, want := range []CleanupStats{{Deleted: 2, Pending: 3}, {Deleted: 2, Pending: 1}, {Deleted: 1}} {
		stats, err := f.cleaner.Cleanup(context.TODO(), vpas, nil)
		if err != nil {
			t.Fatal(err)
		}
		if stats != want {
			t.Errorf("call %d: stats %+v, want %+v", i, stats, want)
		}
		f.syncCaches(t)
	}
	if got := f.remaining(t); !slices.Equal(got, []string{"kept-0", "kept-checkpoint-0"}) {
		t.Errorf("left %v, want the slices of kept only", got)
	}
}

// TestCleanupUnmarksAreBounded: the removal of marks shares the bound of
// requests with the deletes.
func TestCleanupUnmarksAreBounded(t *testing.T) {
	f := newCleanupFixture(t)
	f.cleaner.MaxDeletes = 1
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "kept")}, []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")})
	if err != nil {
		t.Fatal(err)
	}
	if stats != (CleanupStats{Unmarked: 1, Pending: 3}) {
		t.Errorf("stats %+v, want 1 unmarked (first) and 3 pending", stats)
	}
}

func TestCleanupWaitsForSync(t *testing.T) {
	f := newCleanupFixture(t)
	f.cleaner.Synced = func() bool { return false }
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}, nil)
	if err != nil || stats != (CleanupStats{}) || len(f.deletes) != 0 {
		t.Errorf("before the caches synced: stats %+v, error %v, deletes %v, want nothing", stats, err, f.deletes)
	}
}

func TestCleanupIgnoresObjectsGoneAlready(t *testing.T) {
	f := newCleanupFixture(t)
	// In the cache, no longer in the API (the watch event is on its way).
	if err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("ns").Delete(context.TODO(), "gone-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}, nil)
	if err != nil {
		t.Errorf("error %v, want none for an object deleted already", err)
	}
	if stats.Deleted != 5 {
		t.Errorf("stats %+v, want 5 deletes", stats)
	}
	if got := f.remaining(t); !slices.Equal(got, []string{"kept-0", "kept-checkpoint-0"}) {
		t.Errorf("left %v, want the slices of kept only", got)
	}
}

func TestCleanupStopsAtDeadline(t *testing.T) {
	f := newCleanupFixture(t)
	ctx, cancel := context.WithCancel(context.TODO())
	cancel()
	stats, _ := f.cleaner.Cleanup(ctx, []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}, nil)
	if stats != (CleanupStats{Pending: 5}) || len(f.deletes) != 0 {
		t.Errorf("after the deadline: stats %+v, deletes %v, want 5 pending and no delete", stats, f.deletes)
	}
}

// TestNewCleanerCachesMetadata runs the Cleaner's metadata informers against a
// fake metadata client: they cache the labelled objects of both kinds in the
// namespace, by VPA.
func TestNewCleanerCachesMetadata(t *testing.T) {
	partial := func(kind string, meta metav1.ObjectMeta) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: vpa_alpha.SchemeGroupVersion.String(), Kind: kind}, ObjectMeta: meta}
	}
	unlabelled := cleanupMeta("ns", "unlabelled", "gone")
	unlabelled.Labels = nil
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metadataClient := metadatafake.NewSimpleMetadataClient(scheme,
		partial("VerticalPodAutoscalerSlice", cleanupMeta("ns", "gone-0", "gone")),
		partial("VerticalPodAutoscalerSlice", cleanupMeta("other", "gone-0", "gone")),
		partial("VerticalPodAutoscalerSlice", unlabelled),
		partial("VerticalPodAutoscalerCheckpointSlice", cleanupMeta("ns", "gone-checkpoint-0", "gone")),
	)
	stopCh := make(chan struct{})
	defer close(stopCh)
	cleaner := NewCleaner(vpa_fake.NewSimpleClientset().AutoscalingV1alpha1(), metadataClient, "ns", stopCh) //nolint:staticcheck // as the other tests of this package
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), cleaner.Synced) {
		t.Fatal("the metadata caches did not sync")
	}
	for _, tc := range []struct {
		name    string
		indexer cache.Indexer
		want    []string
	}{
		{name: "slices", indexer: cleaner.Slices, want: []string{"gone-0"}},
		{name: "checkpoint slices", indexer: cleaner.CheckpointSlices, want: []string{"gone-checkpoint-0"}},
	} {
		objs, err := tc.indexer.ByIndex(VPANameIndex, "ns/gone")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, obj := range objs {
			names = append(names, obj.(*metav1.PartialObjectMetadata).Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("%s of ns/gone: %v, want %v", tc.name, names, tc.want)
		}
		if n := len(tc.indexer.List()); n != len(tc.want) {
			t.Errorf("%s: %d cached, want %d (the namespace's labelled ones)", tc.name, n, len(tc.want))
		}
	}
}

// TestCleanupKeepsCheckpointsForTheGracePeriod: the checkpoint slices of a VPA
// that dropped the scope are marked, not deleted, and deleted once the grace
// period has passed since the mark, also by a Cleaner of a restarted
// recommender; the recommendation slices go at once.
func TestCleanupKeepsCheckpointsForTheGracePeriod(t *testing.T) {
	f := newCleanupFixture(t)
	var patches []string
	f.client.PrependReactor("patch", "*", func(action core.Action) (bool, runtime.Object, error) {
		patches = append(patches, action.GetResource().Resource+"/"+action.(core.PatchAction).GetName())
		return false, nil, nil
	})
	f.unmark(t)
	patches = nil
	vpas := []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}
	gone := vpaNamed("ns", "gone")
	for i, step := range []struct {
		at       time.Time
		restart  bool
		want     CleanupStats
		left     []string
		keepsVPA bool
	}{
		{at: cleanupNow, want: CleanupStats{Deleted: 3, Marked: 2},
			left: []string{"gone-checkpoint-0", "gone-checkpoint-1", "kept-0", "kept-checkpoint-0"}, keepsVPA: true},
		{at: cleanupNow.Add(cleanupGrace - time.Second), restart: true,
			left: []string{"gone-checkpoint-0", "gone-checkpoint-1", "kept-0", "kept-checkpoint-0"}, keepsVPA: true},
		{at: cleanupNow.Add(cleanupGrace), want: CleanupStats{Deleted: 2}, left: []string{"kept-0", "kept-checkpoint-0"}},
	} {
		if step.restart {
			f.cleaner = &Cleaner{Client: f.client.AutoscalingV1alpha1(), Slices: f.cleaner.Slices, CheckpointSlices: f.cleaner.CheckpointSlices,
				MaxDeletes: DefaultMaxCleanupDeletes, UnscopedGracePeriod: cleanupGrace}
		}
		f.cleaner.Clock = testingclock.NewFakePassiveClock(step.at)
		stats, err := f.cleaner.Cleanup(context.TODO(), vpas, nil)
		if err != nil {
			t.Fatal(err)
		}
		if stats != step.want {
			t.Errorf("step %d: stats %+v, want %+v", i, stats, step.want)
		}
		f.refresh(t)
		if got := f.remaining(t); !slices.Equal(got, step.left) {
			t.Errorf("step %d: left %v, want %v", i, got, step.left)
		}
		if keeps := f.cleaner.Keeps(gone); keeps != step.keepsVPA {
			t.Errorf("step %d: Keeps = %t, want %t", i, keeps, step.keepsVPA)
		}
		if i == 0 {
			marked, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("ns").Get(context.TODO(), "gone-checkpoint-0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := marked.Annotations[vpa_alpha.UnscopedSinceAnnotation], cleanupNow.Format(time.RFC3339); got != want {
				t.Errorf("mark %q, want %q", got, want)
			}
		}
	}
	if want := []string{"verticalpodautoscalercheckpointslices/gone-checkpoint-0", "verticalpodautoscalercheckpointslices/gone-checkpoint-1"}; !slices.Equal(patches, want) {
		t.Errorf("patches %v, want the marks of %v", patches, want)
	}
}

// TestCleanupScopeDroppedAgainKeepsTheFullGracePeriod: a scope dropped, put
// back and dropped again keeps the history for a grace period from the second
// drop. While the scope is back, the Cleaner removes the marks (the checkpoint
// store, which also drops them, may not rewrite every slice in time).
func TestCleanupScopeDroppedAgainKeepsTheFullGracePeriod(t *testing.T) {
	f := newCleanupFixture(t)
	f.unmark(t)
	gone := []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}
	checkpoints := []string{"gone-checkpoint-0", "gone-checkpoint-1", "kept-0", "kept-checkpoint-0"}
	dropAgain := cleanupNow.Add(48 * time.Hour)
	for i, step := range []struct {
		at               time.Time
		unscoped, scoped []*vpa_types.VerticalPodAutoscaler
		want             CleanupStats
		left             []string
	}{
		{at: cleanupNow, unscoped: gone, want: CleanupStats{Deleted: 3, Marked: 2}, left: checkpoints},
		{at: cleanupNow.Add(24 * time.Hour), scoped: gone, want: CleanupStats{Unmarked: 2}, left: checkpoints},
		{at: dropAgain, unscoped: gone, want: CleanupStats{Marked: 2}, left: checkpoints},
		{at: cleanupNow.Add(cleanupGrace), unscoped: gone, left: checkpoints},
		{at: dropAgain.Add(cleanupGrace), unscoped: gone, want: CleanupStats{Deleted: 2}, left: []string{"kept-0", "kept-checkpoint-0"}},
	} {
		f.cleaner.Clock = testingclock.NewFakePassiveClock(step.at)
		stats, err := f.cleaner.Cleanup(context.TODO(), step.unscoped, step.scoped)
		if err != nil {
			t.Fatal(err)
		}
		if stats != step.want {
			t.Errorf("step %d: stats %+v, want %+v", i, stats, step.want)
		}
		f.refresh(t)
		if got := f.remaining(t); !slices.Equal(got, step.left) {
			t.Errorf("step %d: left %v, want %v", i, got, step.left)
		}
	}
}

// TestCleanupSetsAMarkInTheFutureBackToNow: a mark ahead of the clock (set by
// a recommender whose clock was ahead) would extend the grace period; it is
// set to now.
func TestCleanupSetsAMarkInTheFutureBackToNow(t *testing.T) {
	f := newCleanupFixture(t)
	future := cleanupNow.Add(cleanupGrace).Format(time.RFC3339)
	for _, obj := range f.cleaner.CheckpointSlices.List() {
		obj.(*metav1.PartialObjectMetadata).Annotations = map[string]string{vpa_alpha.UnscopedSinceAnnotation: future}
	}
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats != (CleanupStats{Deleted: 3, Marked: 2}) {
		t.Errorf("stats %+v, want the 3 slices deleted and the 2 marks set back", stats)
	}
	marked, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("ns").Get(context.TODO(), "gone-checkpoint-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marked.Annotations[vpa_alpha.UnscopedSinceAnnotation], cleanupNow.Format(time.RFC3339); got != want {
		t.Errorf("mark %q, want %q", got, want)
	}
}

// TestCleanupDeletesOnlyWhatTheCacheSaw: a checkpoint slice is deleted with
// the UID and resourceVersion its cache holds, so that one written since is
// left to the next call.
func TestCleanupDeletesOnlyWhatTheCacheSaw(t *testing.T) {
	f := newCleanupFixture(t)
	for _, obj := range f.cleaner.CheckpointSlices.List() {
		obj.(*metav1.PartialObjectMetadata).ResourceVersion = "7"
	}
	var preconditions []string
	f.client.PrependReactor("delete", "verticalpodautoscalercheckpointslices", func(action core.Action) (bool, runtime.Object, error) {
		p := action.(core.DeleteActionImpl).DeleteOptions.Preconditions
		if p == nil || p.UID == nil || p.ResourceVersion == nil {
			preconditions = append(preconditions, "none")
			return false, nil, nil
		}
		preconditions = append(preconditions, string(*p.UID)+"@"+*p.ResourceVersion)
		return false, nil, nil
	})
	if _, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}, nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"ns/gone-checkpoint-0@7", "ns/gone-checkpoint-1@7"}; !slices.Equal(preconditions, want) {
		t.Errorf("delete preconditions %v, want %v", preconditions, want)
	}
}

// TestCleanupNamesTheMissingPatchVerb: with the ClusterRole of an earlier
// release (no patch of checkpoint slices), the first mark's Forbidden is one
// error that names the verb, and the other marks are not tried in that call.
func TestCleanupNamesTheMissingPatchVerb(t *testing.T) {
	f := newCleanupFixture(t)
	f.unmark(t)
	patches := 0
	f.client.PrependReactor("patch", "verticalpodautoscalercheckpointslices", func(action core.Action) (bool, runtime.Object, error) {
		patches++
		return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), action.(core.PatchAction).GetName(), errors.New("RBAC"))
	})
	stats, err := f.cleaner.Cleanup(context.TODO(), []*vpa_types.VerticalPodAutoscaler{vpaNamed("ns", "gone")}, nil)
	if err == nil || !strings.Contains(err.Error(), "may not patch verticalpodautoscalercheckpointslices") || strings.Count(err.Error(), "forbidden") != 1 {
		t.Errorf("error %v, want one that names the patch verb", err)
	}
	if patches != 1 || stats.Pending != 1 || stats.Marked != 0 {
		t.Errorf("%d patches, stats %+v; want 1 patch, not counted as a mark, and the other mark pending", patches, stats)
	}
}
