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
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// checkpointFixture is a CheckpointStore on a fake API server that names
// created objects and counts the writes to each slice.
type checkpointFixture struct {
	store  *CheckpointStore
	client *vpa_fake.Clientset
	writes map[string]int
	now    time.Time
}

func newCheckpointFixture(objects ...runtime.Object) *checkpointFixture {
	client := vpa_fake.NewSimpleClientset(objects...) //nolint:staticcheck // as the other tests of VPA
	f := &checkpointFixture{store: NewCheckpointStore(client.AutoscalingV1alpha1()), client: client, writes: map[string]int{}, now: time.Now()}
	generated := 0
	client.PrependReactor("*", "verticalpodautoscalercheckpointslices", func(action core.Action) (bool, runtime.Object, error) {
		switch action.GetVerb() {
		case "create":
			obj := action.(core.CreateAction).GetObject().(metav1.Object)
			generated++
			obj.SetName(fmt.Sprintf("%s%03d", obj.GetGenerateName(), generated))
			f.writes[obj.GetName()]++
		case "update":
			f.writes[action.(core.UpdateAction).GetObject().(metav1.Object).GetName()]++
		case "delete":
			f.writes[action.(core.DeleteAction).GetName()]++
		}
		return false, nil, nil
	})
	return f
}

// existingNodes tells that every node exists, as machine uid-<name>.
func existingNodes(name string) (types.UID, bool) {
	return ref(name).UID, true
}

// history is a VPA whose live nodes (machines uid-<name>) have entries of
// about entryBytes each.
func history(live []string, entryBytes int, at time.Time) NodeHistory {
	h := NodeHistory{VPA: testVPA, Live: map[model.NodeRef]bool{}, NodeUIDs: existingNodes}
	for _, n := range live {
		h.Live[ref(n)] = true
	}
	h.Checkpoints = func(nodes []model.NodeRef) map[model.NodeRef][]vpa_alpha.ContainerCheckpoint {
		out := map[model.NodeRef][]vpa_alpha.ContainerCheckpoint{}
		for _, n := range nodes {
			weights := map[int]uint32{}
			// "123":10000, is 12 bytes.
			for b := range entryBytes / 12 {
				weights[100+b] = 10000
			}
			out[n] = []vpa_alpha.ContainerCheckpoint{{ContainerName: "agent", Checkpoint: vpa_types.VerticalPodAutoscalerCheckpointStatus{
				LastUpdateTime: metav1.NewTime(at),
				CPUHistogram:   vpa_types.HistogramCheckpoint{BucketWeights: weights, TotalWeight: 1},
			}}}
		}
		return out
	}
	return h
}

func nodeNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("node-%04d", i))
	}
	return names
}

// load loads the checkpoints of testVPA, which Store needs before it writes.
func (f *checkpointFixture) load(t *testing.T) {
	t.Helper()
	if _, err := f.store.Load(context.TODO(), testVPA, existingNodes); err != nil {
		t.Fatal(err)
	}
}

func (f *checkpointFixture) store1(t *testing.T, h NodeHistory) StoreStats {
	t.Helper()
	stats, err := f.store.Store(context.TODO(), f.now, []NodeHistory{h})
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

// stored returns the slice of each node and checks that no node is stored twice.
func (f *checkpointFixture) stored(t *testing.T) (map[string]string, []vpa_alpha.VerticalPodAutoscalerCheckpointSlice) {
	t.Helper()
	list, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]string{}
	for _, s := range list.Items {
		for _, n := range s.Nodes {
			if other, found := nodes[n.NodeName]; found {
				t.Errorf("node %s is in slices %s and %s", n.NodeName, other, s.Name)
			}
			nodes[n.NodeName] = s.Name
		}
	}
	return nodes, list.Items
}

func TestCheckpointStorePacksBySize(t *testing.T) {
	f := newCheckpointFixture()
	f.load(t)
	f.store.MaxBytes = 10 * 1024
	f.store.MaxWrites = 100
	stats := f.store1(t, history(nodeNames(40), 2000, f.now))
	nodes, slices := f.stored(t)
	if len(nodes) != 40 {
		t.Fatalf("%d nodes stored, want 40", len(nodes))
	}
	// An entry is about 2,100 bytes: four fit in 10 KiB.
	if len(slices) != 10 || stats.Slices != 10 || stats.Writes != 10 {
		t.Errorf("%d slices (stats %+v), want 10 of 4 nodes", len(slices), stats)
	}
	for _, s := range slices {
		data, _ := json.Marshal(s)
		if len(data) > f.store.MaxBytes+1024 {
			t.Errorf("slice %s is %d bytes, more than MaxBytes %d and 1 KiB of metadata", s.Name, len(data), f.store.MaxBytes)
		}
		if s.VPAName != "agent" || s.Labels[vpa_alpha.VPANameLabel] != "agent" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid" {
			t.Errorf("slice %s: vpaName %q, labels %v, owners %v", s.Name, s.VPAName, s.Labels, s.OwnerReferences)
		}
	}
}

func TestCheckpointStoreBoundsWrites(t *testing.T) {
	f := newCheckpointFixture()
	f.load(t)
	f.store.MaxBytes = 10 * 1024
	f.store.MaxWrites = 3
	h := history(nodeNames(40), 2000, f.now)
	for loop := range 4 {
		stats := f.store1(t, h)
		if stats.Writes > 3 {
			t.Fatalf("loop %d: %d writes, want at most 3", loop, stats.Writes)
		}
	}
	// Ten slices to create at three a loop: all stored after four loops.
	if nodes, slices := f.stored(t); len(nodes) != 40 || len(slices) != 10 {
		t.Fatalf("after four loops: %d nodes in %d slices, want 40 in 10", len(nodes), len(slices))
	}
	// Then the slices are refreshed in turn, the longest unwritten first: in
	// the next four loops (12 writes) every slice is rewritten at least once.
	for name := range f.writes {
		f.writes[name] = 0
	}
	for range 4 {
		f.now = f.now.Add(f.store.RefreshInterval)
		if stats := f.store1(t, h); stats.Writes != 3 || stats.Pending != 7 {
			t.Fatalf("refresh loop: %+v, want 3 writes and 7 pending", stats)
		}
	}
	for name, n := range f.writes {
		if n < 1 || n > 2 {
			t.Errorf("slice %s written %d times in four refresh loops, want 1 or 2", name, n)
		}
	}
}

// A slice whose nodes did not change is rewritten once per RefreshInterval,
// not in every loop; a slice whose nodes changed is written at once.
func TestCheckpointStoreRefreshesOncePerInterval(t *testing.T) {
	f := newCheckpointFixture()
	f.load(t)
	f.store.MaxBytes = 10 * 1024
	f.store.MaxWrites = 100
	// Four entries of about 2,100 bytes fit in a slice: 7 nodes take two.
	if stats := f.store1(t, history(nodeNames(7), 2000, f.now)); stats.Writes != 2 {
		t.Fatalf("first store: %+v, want 2 slices created", stats)
	}
	f.now = f.now.Add(time.Minute)
	if stats := f.store1(t, history(nodeNames(7), 2000, f.now)); stats.Writes != 0 || stats.Pending != 0 {
		t.Errorf("a minute later, nothing changed: %+v, want no write", stats)
	}
	f.now = f.now.Add(time.Minute)
	if stats := f.store1(t, history(nodeNames(8), 2000, f.now)); stats.Writes != 1 || stats.Slices != 2 {
		t.Errorf("a new node: %+v, want the slice with room written", stats)
	}
	f.now = f.now.Add(f.store.RefreshInterval - 2*time.Minute)
	if stats := f.store1(t, history(nodeNames(8), 2000, f.now)); stats.Writes != 1 {
		t.Errorf("%v after the first write: %+v, want the slice not written since refreshed", f.store.RefreshInterval, stats)
	}
	f.now = f.now.Add(2 * time.Minute)
	if stats := f.store1(t, history(nodeNames(8), 2000, f.now)); stats.Writes != 1 {
		t.Errorf("%v after the new node: %+v, want its slice refreshed", f.store.RefreshInterval, stats)
	}
}

func TestCheckpointStoreStickyAndGC(t *testing.T) {
	f := newCheckpointFixture()
	f.load(t)
	f.store.MaxBytes = 10 * 1024
	f.store.MaxWrites = 1
	f.store.GracePeriod = 10 * time.Minute
	live := nodeNames(12)
	h := history(live, 2000, f.now)
	f.store.MaxWrites = 100
	f.store1(t, h)
	before, _ := f.stored(t)
	f.store.MaxWrites = 1

	// node-0005's pod is gone: it keeps its checkpoint for the grace period.
	delete(h.Live, ref("node-0005"))
	f.now = f.now.Add(5 * time.Minute)
	f.store1(t, h)
	if nodes, _ := f.stored(t); nodes["node-0005"] == "" || !f.store.Holds("uid", ref("node-0005")) {
		t.Errorf("node-0005 lost its checkpoint within the grace period")
	}
	// After it, the slice that held it is the one write of the loop.
	f.now = f.now.Add(6 * time.Minute)
	for name := range f.writes {
		f.writes[name] = 0
	}
	if stats := f.store1(t, h); stats.Writes != 1 {
		t.Fatalf("%+v, want one write", stats)
	}
	nodes, _ := f.stored(t)
	if _, found := nodes["node-0005"]; found || f.store.Holds("uid", ref("node-0005")) {
		t.Errorf("node-0005 kept its checkpoint after the grace period")
	}
	if f.writes[before["node-0005"]] != 1 {
		t.Errorf("writes %v, want the one to %s", f.writes, before["node-0005"])
	}

	// A node that no longer exists goes at once.
	delete(h.Live, ref("node-0006"))
	h.NodeUIDs = func(node string) (types.UID, bool) {
		if node == "node-0006" {
			return "", false
		}
		return existingNodes(node)
	}
	f.store1(t, h)
	if f.store.Holds("uid", ref("node-0006")) {
		t.Errorf("node-0006 is gone but keeps its checkpoint")
	}

	// A new node takes the room left; nodes that stayed do not move.
	h.Live[ref("node-0100")] = true
	f.store.MaxWrites = 100
	f.store1(t, h)
	after, _ := f.stored(t)
	for node, slice := range before {
		if node != "node-0005" && node != "node-0006" && after[node] != slice {
			t.Errorf("node %s moved from %s to %s", node, slice, after[node])
		}
	}
	if after["node-0100"] != before["node-0005"] {
		t.Errorf("node-0100 went to %q, want %s, the first slice with room", after["node-0100"], before["node-0005"])
	}
}

func TestCheckpointStoreLoad(t *testing.T) {
	at := time.Now().Add(-time.Hour)
	entry := func(node string, at time.Time) vpa_alpha.NodeCheckpoint {
		return vpa_alpha.NodeCheckpoint{NodeName: node, NodeUID: ref(node).UID, Containers: []vpa_alpha.ContainerCheckpoint{{ContainerName: "agent",
			Checkpoint: vpa_types.VerticalPodAutoscalerCheckpointStatus{LastUpdateTime: metav1.NewTime(at), TotalSamplesCount: int(at.Unix() % 1000)}}}}
	}
	slice := func(name string, uid string, nodes ...vpa_alpha.NodeCheckpoint) *vpa_alpha.VerticalPodAutoscalerCheckpointSlice {
		s := newCheckpointSlice(testVPA)
		s.Name, s.UID, s.OwnerReferences[0].UID = name, types.UID("slice-"+name), "uid"
		if uid != "uid" {
			s.OwnerReferences[0].UID = "old-uid"
		}
		s.Nodes = nodes
		return s
	}
	f := newCheckpointFixture(
		// A move from a to b that a restart interrupted: b's entry of node-2 is newer.
		slice("agent-checkpoint-a", "uid", entry("node-1", at), entry("node-2", at)),
		slice("agent-checkpoint-b", "uid", entry("node-2", at.Add(time.Minute)), entry("node-3", at)),
		// The slice of an earlier VPA of the same name.
		slice("agent-checkpoint-old", "old", entry("node-9", at)),
	)
	loaded, err := f.store.Load(context.TODO(), testVPA, existingNodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 3 || loaded[ref("node-9")] != nil {
		t.Fatalf("loaded nodes %v, want node-1, node-2, node-3", loaded)
	}
	if got := loaded[ref("node-2")][0].Checkpoint.LastUpdateTime.Time; !got.Equal(at.Add(time.Minute).Truncate(time.Second)) && !got.Equal(at.Add(time.Minute)) {
		t.Errorf("node-2 loaded from %v, want the newer entry of %v", got, at.Add(time.Minute))
	}
	// The next store writes slice a without node-2 and leaves the old VPA's slice alone.
	f.store.MaxWrites = 1
	h := history([]string{"node-1", "node-2", "node-3"}, 100, f.now)
	if stats := f.store1(t, h); stats.Writes != 1 || f.writes["agent-checkpoint-a"] != 1 {
		t.Fatalf("%+v, writes %v: want one write, of agent-checkpoint-a", stats, f.writes)
	}
	nodes, _ := f.stored(t)
	if nodes["node-2"] != "agent-checkpoint-b" || nodes["node-9"] != "agent-checkpoint-old" {
		t.Errorf("nodes in slices: %v", nodes)
	}
}

// The nodes of a checkpoint slice are an atomic list, which the API server
// does not keep unique.
func TestCheckpointStoreLoadsTheLatestOfANodeListedTwice(t *testing.T) {
	at := time.Now().Add(-time.Hour)
	entry := func(node string, at time.Time) vpa_alpha.NodeCheckpoint {
		return vpa_alpha.NodeCheckpoint{NodeName: node, NodeUID: ref(node).UID, Containers: []vpa_alpha.ContainerCheckpoint{{ContainerName: "agent",
			Checkpoint: vpa_types.VerticalPodAutoscalerCheckpointStatus{LastUpdateTime: metav1.NewTime(at)}}}}
	}
	s := newCheckpointSlice(testVPA)
	s.Name, s.UID, s.OwnerReferences[0].UID = "agent-checkpoint-a", "slice-a", "uid"
	s.Nodes = []vpa_alpha.NodeCheckpoint{entry("node-1", at), entry("node-2", at), entry("node-1", at.Add(time.Minute))}
	f := newCheckpointFixture(s)
	loaded, err := f.store.Load(context.TODO(), testVPA, existingNodes)
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded[ref("node-1")][0].Checkpoint.LastUpdateTime.Time; !got.Equal(at.Add(time.Minute)) {
		t.Errorf("node-1 loaded from %v, want the later entry of %v", got, at.Add(time.Minute))
	}
	// The slice is rewritten at once, each node once.
	if stats := f.store1(t, history([]string{"node-1", "node-2"}, 100, f.now)); stats.Writes != 1 {
		t.Fatalf("%+v: want the slice rewritten", stats)
	}
	_, slices := f.stored(t)
	if len(slices) != 1 || len(slices[0].Nodes) != 2 {
		t.Errorf("stored %v, want one slice of node-1 and node-2", slices)
	}
}

func TestCheckpointStoreWritesOnlyLoadedVPAs(t *testing.T) {
	persisted := newCheckpointSlice(testVPA)
	persisted.Name = "agent-checkpoint-a"
	persisted.Nodes = []vpa_alpha.NodeCheckpoint{{NodeName: "node-0000", Containers: []vpa_alpha.ContainerCheckpoint{{ContainerName: "agent",
		Checkpoint: vpa_types.VerticalPodAutoscalerCheckpointStatus{TotalSamplesCount: 1000}}}}}
	f := newCheckpointFixture(persisted)
	h := history([]string{"node-0000", "node-0001"}, 100, f.now)

	// Not loaded (a failed load): the persisted history stays as it is.
	if stats := f.store1(t, h); stats.Writes != 0 || len(f.writes) != 0 {
		t.Fatalf("before the load: %+v, writes %v; want none", stats, f.writes)
	}
	if f.store.Holds("uid", ref("node-0000")) {
		t.Errorf("the store holds node-0000 before the load")
	}

	f.load(t)
	if stats := f.store1(t, h); stats.Writes != 1 || f.writes["agent-checkpoint-a"] != 1 {
		t.Errorf("after the load: %+v, writes %v; want one, of agent-checkpoint-a", stats, f.writes)
	}
}

// TestCheckpointStoreNodeIdentity: the history of a node belongs to its
// machine (UID): the entry of an earlier machine of the name, or of a node that
// is gone, is not loaded, nor an entry without UID (no released version wrote
// one); a node whose name another machine takes loses its entry at once.
func TestCheckpointStoreNodeIdentity(t *testing.T) {
	entry := func(node string, uid types.UID) vpa_alpha.NodeCheckpoint {
		return vpa_alpha.NodeCheckpoint{NodeName: node, NodeUID: uid, Containers: []vpa_alpha.ContainerCheckpoint{{ContainerName: "agent",
			Checkpoint: vpa_types.VerticalPodAutoscalerCheckpointStatus{TotalSamplesCount: 1000}}}}
	}
	persisted := newCheckpointSlice(testVPA)
	persisted.Name = "agent-checkpoint-a"
	persisted.Nodes = []vpa_alpha.NodeCheckpoint{
		entry("same", ref("same").UID),
		entry("replaced", "uid-earlier-machine"),
		entry("unversioned", ""),
		entry("gone", ref("gone").UID),
		entry("gone-unversioned", ""),
	}
	f := newCheckpointFixture(persisted)
	nodeUIDs := func(name string) (types.UID, bool) {
		if strings.HasPrefix(name, "gone") {
			return "", false
		}
		return existingNodes(name)
	}
	loaded, err := f.store.Load(context.TODO(), testVPA, nodeUIDs)
	if err != nil {
		t.Fatal(err)
	}
	var got []model.NodeRef
	for node := range loaded {
		got = append(got, node)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
	if want := []model.NodeRef{ref("same")}; !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %v, want %v", got, want)
	}

	// The slice is written with the UIDs, without the entries that are not
	// loaded: the live node unversioned with its new history.
	h := history([]string{"same", "unversioned"}, 100, f.now)
	h.NodeUIDs = nodeUIDs
	if stats := f.store1(t, h); stats.Writes != 1 {
		t.Fatalf("%+v, want one write", stats)
	}
	_, slices := f.stored(t)
	if len(slices) != 1 || !reflect.DeepEqual(slices[0].Nodes, []vpa_alpha.NodeCheckpoint{
		{NodeName: "same", NodeUID: ref("same").UID, Containers: h.Checkpoints([]model.NodeRef{ref("same")})[ref("same")]},
		{NodeName: "unversioned", NodeUID: ref("unversioned").UID, Containers: h.Checkpoints([]model.NodeRef{ref("unversioned")})[ref("unversioned")]},
	}) {
		t.Errorf("stored %+v", slices)
	}

	// Another machine takes the name "same": its entry is the new machine's at once.
	h.Live = map[model.NodeRef]bool{{Name: "same", UID: "uid-new-machine"}: true, ref("unversioned"): true}
	h.NodeUIDs = func(name string) (types.UID, bool) {
		if name == "same" {
			return "uid-new-machine", true
		}
		return nodeUIDs(name)
	}
	f.store1(t, h)
	if f.store.Holds("uid", ref("same")) || !f.store.Holds("uid", model.NodeRef{Name: "same", UID: "uid-new-machine"}) {
		t.Errorf("the store holds the earlier machine of node same")
	}
	_, slices = f.stored(t)
	for _, n := range slices[0].Nodes {
		if n.NodeName == "same" && n.NodeUID != "uid-new-machine" {
			t.Errorf("node same is stored with UID %q, want uid-new-machine", n.NodeUID)
		}
	}
}

// enforceResourceVersions makes the fake API server set a resourceVersion on
// each create and update and refuse an update of another resourceVersion
// (409), as a real one does; client-go's fake tracker does not.
func (f *checkpointFixture) enforceResourceVersions() {
	version := 0
	f.client.PrependReactor("*", "verticalpodautoscalercheckpointslices", func(action core.Action) (bool, runtime.Object, error) {
		var obj metav1.Object
		switch action.GetVerb() {
		case "create":
			obj = action.(core.CreateAction).GetObject().(metav1.Object)
		case "update":
			obj = action.(core.UpdateAction).GetObject().(metav1.Object)
			current, err := f.client.Tracker().Get(action.GetResource(), action.GetNamespace(), obj.GetName())
			if err != nil {
				return true, nil, err
			}
			if current.(metav1.Object).GetResourceVersion() != obj.GetResourceVersion() {
				return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), obj.GetName(), errors.New("the object has been modified"))
			}
		default:
			return false, nil, nil
		}
		version++
		obj.SetResourceVersion(fmt.Sprint(version))
		return false, nil, nil
	})
}

// mark changes every checkpoint slice in the API, as the Cleaner's mark does.
func (f *checkpointFixture) mark(t *testing.T) {
	t.Helper()
	_, slices := f.stored(t)
	for i := range slices {
		slices[i].Annotations = map[string]string{vpa_alpha.UnscopedSinceAnnotation: f.now.Format(time.RFC3339)}
		if _, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").Update(context.TODO(), &slices[i], metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointStorePutBackReadsTheSlicesAgain: a VPA whose slices were
// marked while it was dormant is read again when its scope is put back, so
// that its first loop writes without conflicts; and a VPA whose write failed
// makes no more writes in that loop, leaving the budget to the others.
func TestCheckpointStorePutBackReadsTheSlicesAgain(t *testing.T) {
	f := newCheckpointFixture()
	f.enforceResourceVersions()
	f.load(t)
	f.store.MaxBytes = 10 * 1024
	h := history(nodeNames(16), 2000, f.now)
	if stats := f.store1(t, h); stats.Writes != 4 {
		t.Fatalf("first loop: %+v, want 4 slices created", stats)
	}
	dormant := h
	dormant.Dormant = true
	if stats := f.store1(t, dormant); stats.Writes != 0 {
		t.Fatalf("dormant: %+v, want no write", stats)
	}
	f.mark(t)

	f.now = f.now.Add(time.Minute)
	stats, err := f.store.Store(context.TODO(), f.now, []NodeHistory{h})
	if err != nil || stats.Writes != 4 || stats.Pending != 0 {
		t.Errorf("scope put back: %+v, error %v; want the 4 slices rewritten without conflict", stats, err)
	}
	if _, slices := f.stored(t); len(slices) != 4 || slices[0].Annotations[vpa_alpha.UnscopedSinceAnnotation] != "" {
		t.Errorf("scope put back: %d slices, first annotated %v; want 4 without the mark", len(slices), slices[0].Annotations)
	}

	f.mark(t)
	f.now = f.now.Add(time.Minute)
	if stats := f.store1(t, h); stats.Writes != 0 {
		t.Errorf("slices changed behind the store, a minute after their last write: %+v, want no write before their refresh", stats)
	}
	f.now = f.now.Add(f.store.RefreshInterval)
	stats, err = f.store.Store(context.TODO(), f.now, []NodeHistory{h})
	if err == nil || stats.Writes != 1 || stats.Pending != 3 {
		t.Errorf("slices changed behind the store, at their refresh: %+v, error %v; want one conflicting write and 3 pending", stats, err)
	}
	f.now = f.now.Add(time.Minute)
	if stats := f.store1(t, h); stats.Writes != 4 {
		t.Errorf("the loop after the conflict: %+v, want the 4 slices rewritten", stats)
	}
}
