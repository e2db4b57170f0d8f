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
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_alpha_client "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/typed/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

const (
	// DefaultMaxCheckpointWrites is the most checkpoint slice writes of one
	// recommender loop, over all VPAs with scope node.
	DefaultMaxCheckpointWrites = 10
	// DefaultCheckpointGracePeriod is how long a node that still exists keeps
	// its checkpoint after its pod is gone or the DaemonSet stopped fitting it,
	// so that the gap between two pods of a rolling update loses nothing.
	DefaultCheckpointGracePeriod = 10 * time.Minute
)

// NodeHistory is what CheckpointStore.Store needs of one VPA with scope node.
type NodeHistory struct {
	VPA *vpa_types.VerticalPodAutoscaler
	// Live are the nodes that run a live pod of the VPA and that the DaemonSet
	// can run on, at most one of a name.
	Live map[model.NodeRef]bool
	// NodeUIDs tells the UID of the node of a name, if it exists; nil counts
	// every node as existing, as the machine the store holds.
	NodeUIDs model.NodeUIDs
	// Checkpoints returns the checkpoint of each container of the VPA's pod on
	// each of the given nodes.
	Checkpoints func(nodes []model.NodeRef) map[model.NodeRef][]vpa_alpha.ContainerCheckpoint
	// Dormant: the VPA dropped scope node and its checkpoint slices are in
	// their grace period (Cleaner). The store writes none of them but keeps
	// what it knows, so that the scope put back continues the history
	// without loading it a second time.
	Dormant bool
}

// StoreStats is what one Store did and left for later.
type StoreStats struct {
	Slices  int // checkpoint slices of all VPAs after the writes
	Writes  int // API writes
	Pending int // writes left for the next loops
}

// CheckpointStore keeps the per-node history of VPAs with scope node in
// VerticalPodAutoscalerCheckpointSlices. Nodes are packed into slices of up to
// MaxBytes and stay in their slice (sticky, as EndpointSlices). Each Store
// makes at most MaxWrites API writes: first the slices whose nodes changed
// (created, updated, deleted), then the refresh of the slices last written
// RefreshInterval ago or longer, the longest unwritten first, so that every
// slice is rewritten in turn and none more often than that.
//
// The store writes the slices of a VPA only after Load read them (the model
// then holds their history), and remembers what it wrote: it reads them again
// only after a failed write.
type CheckpointStore struct {
	Client          vpa_alpha_client.VerticalPodAutoscalerCheckpointSlicesGetter
	MaxWrites       int
	MaxBytes        int
	GracePeriod     time.Duration
	RefreshInterval time.Duration

	mu   sync.Mutex
	vpas map[types.UID]*vpaCheckpoints
}

// NewCheckpointStore returns a CheckpointStore with the default limits.
func NewCheckpointStore(client vpa_alpha_client.VerticalPodAutoscalerCheckpointSlicesGetter) *CheckpointStore {
	return &CheckpointStore{
		Client:          client,
		MaxWrites:       DefaultMaxCheckpointWrites,
		MaxBytes:        vpa_alpha.MaxCheckpointSliceBytes,
		GracePeriod:     DefaultCheckpointGracePeriod,
		RefreshInterval: model.DefaultNodeCheckpointRefresh,
	}
}

type vpaCheckpoints struct {
	stale    bool // a write failed: read the slices again
	dormant  bool // last given Dormant: its slices may have changed since
	slices   []*checkpointSlice
	uid      map[string]types.UID // the machine whose history each node's entry holds
	size     map[string]int       // JSON size of each node's entry, as last serialized
	lastLive map[string]time.Time // when each node held by the store was last live
}

type checkpointSlice struct {
	name, resourceVersion string
	uid                   types.UID
	nodes                 []string
	bytes                 int
	written               time.Time
	dirty                 bool // nodes changed since the last write
}

// Load reads the checkpoint slices of the VPA and returns the checkpoints of
// each node's containers. Only the entries of the nodes that exist, with the
// UID of the entry, count: the history of an earlier machine of a node's name
// is not the node's. A node found twice (in one slice, whose list is atomic,
// or in two: a move that a restart interrupted) gets the more recent entry.
func (s *CheckpointStore) Load(ctx context.Context, vpa *vpa_types.VerticalPodAutoscaler, nodeUIDs model.NodeUIDs) (map[model.NodeRef][]vpa_alpha.ContainerCheckpoint, error) {
	state, entries, err := s.list(ctx, vpa, nodeUIDs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vpas == nil {
		s.vpas = map[types.UID]*vpaCheckpoints{}
	}
	s.vpas[vpa.UID] = state
	return entries, nil
}

func (s *CheckpointStore) list(ctx context.Context, vpa *vpa_types.VerticalPodAutoscaler, nodeUIDs model.NodeUIDs) (*vpaCheckpoints, map[model.NodeRef][]vpa_alpha.ContainerCheckpoint, error) {
	list, err := s.Client.VerticalPodAutoscalerCheckpointSlices(vpa.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: labels.Set{vpa_alpha.VPANameLabel: vpa_alpha.VPANameLabelValue(vpa.Name)}.String()})
	if err != nil {
		return nil, nil, err
	}
	var items []*vpa_alpha.VerticalPodAutoscalerCheckpointSlice
	for i := range list.Items {
		// Slices of an earlier VPA of the same name wait for the garbage collector.
		if item := &list.Items[i]; item.VPAName == vpa.Name && ownedBy(item, vpa.UID) {
			items = append(items, item)
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })

	// machine returns the UID of the node whose history the entry is, if any.
	machine := func(entry vpa_alpha.NodeCheckpoint) (types.UID, bool) {
		if nodeUIDs == nil {
			return entry.NodeUID, true
		}
		uid, exists := nodeUIDs(entry.NodeName)
		return uid, exists && entry.NodeUID == uid
	}
	// The most recent entry of each node: the list is atomic, so a node may
	// also be listed twice in one slice.
	type position struct{ slice, entry int }
	latest := map[string]time.Time{}
	winner := map[string]position{}
	for i, item := range items {
		for j, entry := range item.Nodes {
			if _, current := machine(entry); !current {
				continue
			}
			if at, seen := latest[entry.NodeName]; !seen || lastUpdate(entry).After(at) {
				latest[entry.NodeName], winner[entry.NodeName] = lastUpdate(entry), position{i, j}
			}
		}
	}
	now := time.Now()
	state := &vpaCheckpoints{uid: map[string]types.UID{}, size: map[string]int{}, lastLive: map[string]time.Time{}}
	entries := map[model.NodeRef][]vpa_alpha.ContainerCheckpoint{}
	for i, item := range items {
		slice := &checkpointSlice{name: item.Name, uid: item.UID, resourceVersion: item.ResourceVersion, written: now}
		// A slice marked while its VPA had no scope node is rewritten at once,
		// without the mark, rather than at its next refresh.
		_, slice.dirty = item.Annotations[vpa_alpha.UnscopedSinceAnnotation]
		for j, entry := range item.Nodes {
			uid, current := machine(entry)
			if !current || winner[entry.NodeName] != (position{i, j}) {
				slice.dirty = true
				continue
			}
			slice.nodes = append(slice.nodes, entry.NodeName)
			state.uid[entry.NodeName] = uid
			entries[model.NodeRef{Name: entry.NodeName, UID: uid}] = entry.Containers
			state.size[entry.NodeName] = entrySize(entry)
			slice.bytes += state.size[entry.NodeName]
			// A node counts as live when loaded: the grace period runs from here.
			state.lastLive[entry.NodeName] = now
		}
		if len(item.Nodes) > 0 {
			slice.written = lastUpdate(item.Nodes[0])
		}
		state.slices = append(state.slices, slice)
	}
	return state, entries, nil
}

// Loaded tells whether Load of the VPA succeeded (and Store has not forgotten
// the VPA since).
func (s *CheckpointStore) Loaded(vpa types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vpas[vpa] != nil
}

// Holds tells whether the store keeps a checkpoint of the node (of that
// machine) for the VPA.
func (s *CheckpointStore) Holds(vpa types.UID, node model.NodeRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := s.vpas[vpa]
	if state == nil {
		return false
	}
	_, held := state.lastLive[node.Name]
	return held && state.uid[node.Name] == node.UID
}

type checkpointWrite struct {
	state   *vpaCheckpoints
	history *NodeHistory
	slice   *checkpointSlice
	order   int // 0 create, 1 update of changed nodes, 2 delete, 3 refresh
}

// Store brings the checkpoint slices of the given VPAs up to date, within
// MaxWrites API writes and the context's deadline. It skips the VPAs not
// loaded yet: their slices hold history that the live aggregations do not, and
// writing them would replace it. VPAs not given are forgotten (their slices go
// with the VPA, by ownerReference, or with the Cleaner).
func (s *CheckpointStore) Store(ctx context.Context, now time.Time, histories []NodeHistory) (StoreStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vpas == nil {
		s.vpas = map[types.UID]*vpaCheckpoints{}
	}
	var errs []error
	var writes []checkpointWrite
	given := map[types.UID]bool{}
	for i := range histories {
		h := &histories[i]
		given[h.VPA.UID] = true
		state := s.vpas[h.VPA.UID]
		if state == nil {
			continue
		}
		if h.Dormant {
			state.dormant = true
			continue
		}
		if state.dormant {
			// Put back: the Cleaner marked the slices meanwhile, so the
			// resourceVersions held would make every first write conflict.
			state.dormant, state.stale = false, true
		}
		if state.stale {
			fresh, _, err := s.list(ctx, h.VPA, h.NodeUIDs)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for node, last := range state.lastLive {
				if _, found := fresh.lastLive[node]; !found {
					fresh.lastLive[node], fresh.uid[node] = last, state.uid[node]
				}
			}
			state = fresh
			s.vpas[h.VPA.UID] = state
		}
		writes = append(writes, s.plan(state, h, now)...)
	}
	for uid := range s.vpas {
		if !given[uid] {
			delete(s.vpas, uid)
		}
	}
	sort.SliceStable(writes, func(i, j int) bool {
		if writes[i].order != writes[j].order {
			return writes[i].order < writes[j].order
		}
		return writes[i].slice.written.Before(writes[j].slice.written)
	})

	var stats StoreStats
	for _, w := range writes {
		// A VPA whose write failed is read again in the next call: its other
		// writes would likely fail too, and use the budget of all VPAs.
		if w.state.stale || stats.Writes >= s.MaxWrites || ctx.Err() != nil {
			stats.Pending++
			continue
		}
		stats.Writes++
		if err := s.write(ctx, w, now); err != nil {
			errs = append(errs, err)
			// Read the slices again before the next plan.
			w.state.stale = true
		}
	}
	for _, state := range s.vpas {
		stats.Slices += len(state.slices)
	}
	return stats, errors.Join(errs...)
}

// plan updates the state's slices (nodes gone out, new nodes in) and returns
// the writes the VPA needs.
func (s *CheckpointStore) plan(state *vpaCheckpoints, h *NodeHistory, now time.Time) []checkpointWrite {
	live := make(map[string]bool, len(h.Live))
	// Nodes whose name another machine has now: the entry they have is the
	// earlier machine's, it goes, and the node comes in as a new one.
	replaced := map[string]bool{}
	for node := range h.Live {
		if uid, held := state.uid[node.Name]; held && uid != node.UID {
			replaced[node.Name] = true
			delete(state.size, node.Name)
		}
		live[node.Name] = true
		state.lastLive[node.Name] = now
		state.uid[node.Name] = node.UID
	}
	for node, last := range state.lastLive {
		if live[node] {
			continue
		}
		gone := false
		if h.NodeUIDs != nil {
			uid, exists := h.NodeUIDs(node)
			gone = !exists || uid != state.uid[node]
		}
		if gone || now.Sub(last) >= s.GracePeriod {
			delete(state.lastLive, node)
			delete(state.size, node)
			delete(state.uid, node)
		}
	}

	placed := map[string]bool{}
	for _, slice := range state.slices {
		kept := make([]string, 0, len(slice.nodes))
		slice.bytes = 0
		for _, node := range slice.nodes {
			_, held := state.lastLive[node]
			// A slice whose entries grew past MaxBytes lets its last nodes go.
			if !held || replaced[node] || placed[node] || (len(kept) > 0 && slice.bytes+state.size[node] > s.MaxBytes) {
				slice.dirty = true
				continue
			}
			kept = append(kept, node)
			placed[node] = true
			slice.bytes += state.size[node]
		}
		slice.nodes = kept
	}

	var unplaced []string
	var unsized []model.NodeRef
	for node := range state.lastLive {
		if !placed[node] {
			unplaced = append(unplaced, node)
			if _, sized := state.size[node]; !sized {
				unsized = append(unsized, model.NodeRef{Name: node, UID: state.uid[node]})
			}
		}
	}
	sort.Strings(unplaced)
	if len(unsized) > 0 {
		for node, containers := range h.Checkpoints(unsized) {
			state.size[node.Name] = entrySize(vpa_alpha.NodeCheckpoint{NodeName: node.Name, NodeUID: node.UID, Containers: containers})
		}
	}
	for _, node := range unplaced {
		var target *checkpointSlice
		for _, slice := range state.slices {
			if slice.bytes+state.size[node] <= s.MaxBytes {
				target = slice
				break
			}
		}
		if target == nil {
			target = &checkpointSlice{}
			state.slices = append(state.slices, target)
		}
		target.nodes = append(target.nodes, node)
		target.bytes += state.size[node]
		target.dirty = true
	}

	var writes []checkpointWrite
	slices := state.slices[:0]
	for _, slice := range state.slices {
		w := checkpointWrite{state: state, history: h, slice: slice, order: 3}
		switch {
		case slice.name == "" && len(slice.nodes) == 0:
			continue
		case slice.name == "":
			w.order = 0
		case len(slice.nodes) == 0:
			w.order = 2
		case slice.dirty:
			w.order = 1
		case now.Sub(slice.written) < s.RefreshInterval:
			slices = append(slices, slice)
			continue
		}
		slices = append(slices, slice)
		writes = append(writes, w)
	}
	state.slices = slices
	return writes
}

func (s *CheckpointStore) write(ctx context.Context, w checkpointWrite, now time.Time) error {
	client := s.Client.VerticalPodAutoscalerCheckpointSlices(w.history.VPA.Namespace)
	slice := w.slice
	if len(slice.nodes) == 0 {
		err := client.Delete(ctx, slice.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &slice.uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		w.state.slices = removeSlice(w.state.slices, slice)
		return nil
	}

	nodes := make([]model.NodeRef, len(slice.nodes))
	for i, node := range slice.nodes {
		nodes[i] = model.NodeRef{Name: node, UID: w.state.uid[node]}
	}
	checkpoints := w.history.Checkpoints(nodes)
	obj := newCheckpointSlice(w.history.VPA)
	obj.Name, obj.ResourceVersion = slice.name, slice.resourceVersion
	slice.bytes = 0
	for i, node := range nodes {
		entry := vpa_alpha.NodeCheckpoint{NodeName: node.Name, NodeUID: node.UID, Containers: checkpoints[node]}
		size := entrySize(entry)
		if i > 0 && slice.bytes+size > s.MaxBytes {
			// Grown since planned: the rest waits for a slice with room.
			slice.nodes = slice.nodes[:i]
			break
		}
		w.state.size[node.Name] = size
		slice.bytes += size
		obj.Nodes = append(obj.Nodes, entry)
	}

	var written *vpa_alpha.VerticalPodAutoscalerCheckpointSlice
	var err error
	if slice.name == "" {
		written, err = client.Create(ctx, obj, metav1.CreateOptions{})
	} else {
		written, err = client.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	slice.name, slice.uid, slice.resourceVersion = written.Name, written.UID, written.ResourceVersion
	slice.written, slice.dirty = now, false
	return nil
}

func newCheckpointSlice(vpa *vpa_types.VerticalPodAutoscaler) *vpa_alpha.VerticalPodAutoscalerCheckpointSlice {
	return &vpa_alpha.VerticalPodAutoscalerCheckpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: vpa_alpha.VPANameLabelValue(vpa.Name) + "-checkpoint-",
			Namespace:    vpa.Namespace,
			Labels:       map[string]string{vpa_alpha.VPANameLabel: vpa_alpha.VPANameLabelValue(vpa.Name)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         vpa_types.SchemeGroupVersion.String(),
				Kind:               "VerticalPodAutoscaler",
				Name:               vpa.Name,
				UID:                vpa.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(false),
			}},
		},
		VPAName: vpa.Name,
	}
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

func lastUpdate(entry vpa_alpha.NodeCheckpoint) time.Time {
	var last time.Time
	for _, c := range entry.Containers {
		if c.Checkpoint.LastUpdateTime.After(last) {
			last = c.Checkpoint.LastUpdateTime.Time
		}
	}
	return last
}

func entrySize(entry vpa_alpha.NodeCheckpoint) int {
	data, err := json.Marshal(entry)
	if err != nil {
		return 0
	}
	return len(data)
}

func removeSlice(slices []*checkpointSlice, slice *checkpointSlice) []*checkpointSlice {
	for i, s := range slices {
		if s == slice {
			return append(slices[:i], slices[i+1:]...)
		}
	}
	return slices
}
