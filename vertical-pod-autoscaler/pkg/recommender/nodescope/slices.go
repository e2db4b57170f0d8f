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

// Package nodescope stores the per-node recommendations of VerticalPodAutoscalers
// with scope node in VerticalPodAutoscalerSlice objects.
package nodescope

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_alpha_client "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/typed/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// Plan is what a Write changes: the slices to create, to update and to delete.
type Plan struct {
	Create []*vpa_alpha.VerticalPodAutoscalerSlice
	Update []*vpa_alpha.VerticalPodAutoscalerSlice
	Delete []*vpa_alpha.VerticalPodAutoscalerSlice
}

// Writes is the number of API writes of the plan.
func (p Plan) Writes() int { return len(p.Create) + len(p.Update) + len(p.Delete) }

// Groups are the node groups of a VPA with a group label.
type Groups struct {
	// Of is the group (the group label's value) of each live node that has
	// the label.
	Of map[model.NodeRef]string
	// Recs is the recommendation of each group whose nodes have enough
	// history together.
	Recs map[string]*vpa_types.RecommendedPodResources
}

// forSlice returns the recommendations of the groups of the slice's nodes,
// by label value (no more than the slice's nodes, so within the API's limit of
// 100), keeping an entry of old that the hysteresis keeps.
func (g Groups) forSlice(nodes []vpa_alpha.NodeRecommendation, live map[string]model.NodeRef, old []vpa_alpha.GroupRecommendation, hysteresis *Hysteresis) []vpa_alpha.GroupRecommendation {
	values := map[string]bool{}
	for _, entry := range nodes {
		if group, found := g.Of[live[entry.NodeName]]; found && g.Recs[group] != nil {
			values[group] = true
		}
	}
	var result []vpa_alpha.GroupRecommendation
	for _, value := range slices.Sorted(maps.Keys(values)) {
		entry := vpa_alpha.GroupRecommendation{LabelValue: value, Recommendation: *g.Recs[value]}
		for _, o := range old {
			// A group's value has no pod of its own on the node: only
			// how far its targets moved counts.
			if o.LabelValue == value && hysteresis.Keeps(model.NodeRef{}, &o.Recommendation, g.Recs[value]) {
				entry = o
			}
		}
		result = append(result, entry)
	}
	return result
}

// PlanSlices computes the slices of a VPA from its current slices and the
// recommendations of its live nodes. recs maps each live node (at most one of
// a name) to its recommendation, or to nil when the node's own history is not
// sufficient yet: such a node keeps the entry it has (for instance from before
// a restart of the recommender) and gets none otherwise. An entry of another
// UID (an earlier machine of the node's name) is not the node's.
// Nodes missing from recs lose their entry. An entry that the hysteresis keeps
// (Hysteresis.Keeps) stays as it is, also when its slice is written for
// another node, so that the readers see only the changes that matter.
//
// Every slice written is stamped with the VPA's generation and now; an
// unchanged slice is rewritten when its stamp is of another generation or
// vpa_alpha.SliceRefreshInterval old, so that the admission controller and
// the updater can tell a recommender that stopped writing (SliceStaleAfter).
// The stamp tells that the writer is alive; each entry's computedTime tells
// that its node's recommendation was computed: the entries of the nodes with
// one in recs are stamped with their slice, an entry kept without a
// recommendation (nil in recs) keeps its computedTime.
//
// Nodes stay in their slice (sticky, as EndpointSlices): a node without an
// entry goes to the first slice with room, in the order of the slices' names,
// and new slices are made only when all are full. A slice is rewritten only when
// its content changes, and deleted when it holds no node.
//
// Each slice also holds the recommendations of the groups of its nodes that
// have one (groups.Recs), with the same hysteresis on their targets, so that a
// node of a group without an entry of its own finds its group's in any slice.
func PlanSlices(vpa *vpa_types.VerticalPodAutoscaler, existing []*vpa_alpha.VerticalPodAutoscalerSlice, recs map[model.NodeRef]*vpa_types.RecommendedPodResources, groups Groups, hysteresis *Hysteresis, now time.Time) Plan {
	existing = slices.Clone(existing)
	sort.Slice(existing, func(i, j int) bool { return existing[i].Name < existing[j].Name })
	live := make(map[string]model.NodeRef, len(recs))
	for node := range recs {
		live[node.Name] = node
	}

	var plan Plan
	placed := map[string]bool{}
	var open []*vpa_alpha.VerticalPodAutoscalerSlice // slices of the result, in order
	var changed []bool
	for _, old := range existing {
		s := old.DeepCopy()
		// The API server keeps them on an update without them; sent back
		// they only add to every write's bytes.
		s.ManagedFields = nil
		s.Nodes = s.Nodes[:0]
		for _, entry := range old.Nodes {
			node, isLive := live[entry.NodeName]
			if !isLive || placed[entry.NodeName] {
				continue
			}
			switch rec := recs[node]; {
			case rec != nil && entry.NodeUID == node.UID && hysteresis.Keeps(node, &entry.Recommendation, rec):
			case rec != nil && entry.NodeUID == node.UID:
				// The stamp is renewed when the slice is written (below).
				entry.Recommendation = *rec
			case rec != nil:
				entry = vpa_alpha.NodeRecommendation{NodeName: node.Name, NodeUID: node.UID, Recommendation: *rec}
			case entry.NodeUID != node.UID:
				continue
			}
			if recs[node] == nil && entry.ComputedTime == nil {
				// Kept without a recommendation and written before
				// computedTime: as old as its slice, so that it goes stale.
				entry.ComputedTime = old.UpdateTime.DeepCopy()
			}
			placed[entry.NodeName] = true
			s.Nodes = append(s.Nodes, entry)
		}
		open = append(open, s)
		// A stamp of another generation, or due for its refresh, is renewed:
		// readers take a slice whose stamp got old for one whose writer stopped.
		stampDue := old.ObservedGeneration != vpa.Generation || !now.Before(old.UpdateTime.Add(vpa_alpha.SliceRefreshInterval))
		changed = append(changed, stampDue)
	}

	var newNodes []model.NodeRef
	for node, rec := range recs {
		if rec != nil && !placed[node.Name] {
			newNodes = append(newNodes, node)
		}
	}
	sort.Slice(newNodes, func(i, j int) bool { return newNodes[i].Name < newNodes[j].Name })
	i := 0
	for _, node := range newNodes {
		for i < len(open) && len(open[i].Nodes) >= vpa_alpha.MaxNodesPerSlice {
			i++
		}
		if i == len(open) {
			open = append(open, newSlice(vpa))
			changed = append(changed, true)
		}
		open[i].Nodes = append(open[i].Nodes, vpa_alpha.NodeRecommendation{NodeName: node.Name, NodeUID: node.UID, Recommendation: *recs[node]})
		changed[i] = true
	}

	for i, s := range open {
		var old *vpa_alpha.VerticalPodAutoscalerSlice
		if i < len(existing) {
			old = existing[i]
		}
		s.Groups = groups.forSlice(s.Nodes, live, s.Groups, hysteresis)
		if old != nil && !changed[i] {
			changed[i] = !equalOrEmpty(old.Nodes, s.Nodes) || !equalOrEmpty(old.Groups, s.Groups)
		}
		if changed[i] {
			s.ObservedGeneration, s.UpdateTime = vpa.Generation, metav1.NewTime(now)
			// Entries computed in this loop are stamped when their slice is
			// written anyway; an entry kept without a recommendation keeps
			// its stamp, and goes stale on its own.
			for j := range s.Nodes {
				if recs[live[s.Nodes[j].NodeName]] != nil {
					s.Nodes[j].ComputedTime = s.UpdateTime.DeepCopy()
				}
			}
		}
		switch {
		case len(s.Nodes) == 0 && s.Name != "":
			plan.Delete = append(plan.Delete, s)
		case len(s.Nodes) == 0:
		case s.Name == "":
			plan.Create = append(plan.Create, s)
		case changed[i]:
			plan.Update = append(plan.Update, s)
		}
	}
	return plan
}

func equalOrEmpty[T any](a, b []T) bool {
	return len(a) == 0 && len(b) == 0 || apiequality.Semantic.DeepEqual(a, b)
}

func newSlice(vpa *vpa_types.VerticalPodAutoscaler) *vpa_alpha.VerticalPodAutoscalerSlice {
	return &vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: vpa_alpha.VPANameLabelValue(vpa.Name) + "-",
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

// Writer writes the slices of VPAs with scope node.
type Writer struct {
	Client vpa_alpha_client.VerticalPodAutoscalerSlicesGetter
	// RewriteThreshold is the Threshold of the hysteresis; 0: every change of
	// a recommendation is written.
	RewriteThreshold float64
	// Clock stamps the slices' updateTime; nil: the real clock.
	Clock clock.PassiveClock
}

func (w *Writer) now() time.Time {
	if w.Clock == nil {
		return time.Now()
	}
	return w.Clock.Now()
}

// Write brings the slices of the VPA in line with recs (see PlanSlices), with
// the hysteresis of RewriteThreshold over the requests of the VPA's pods on
// each node. It reads the VPA's current slices from the API server rather than
// from a cache, so that a slice it created in the previous loop is never
// created twice.
func (w *Writer) Write(ctx context.Context, vpa *vpa_types.VerticalPodAutoscaler, recs map[model.NodeRef]*vpa_types.RecommendedPodResources, groups Groups, requests map[model.NodeRef][]PodRequests) (Plan, error) {
	client := w.Client.VerticalPodAutoscalerSlices(vpa.Namespace)
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{vpa_alpha.VPANameLabel: vpa_alpha.VPANameLabelValue(vpa.Name)}.String()})
	if err != nil {
		return Plan{}, err
	}
	var existing []*vpa_alpha.VerticalPodAutoscalerSlice
	for i := range list.Items {
		// The slices of an earlier VPA of the same name are not this one's:
		// the garbage collector removes them (their owner is gone).
		if s := &list.Items[i]; s.VPAName == vpa.Name && ownedBy(s, vpa.UID) {
			existing = append(existing, s)
		}
	}
	var hysteresis *Hysteresis
	if w.RewriteThreshold > 0 {
		hysteresis = &Hysteresis{Threshold: w.RewriteThreshold, Requests: requests}
	}
	plan := PlanSlices(vpa, existing, recs, groups, hysteresis, w.now())
	var errs []error
	for _, s := range plan.Delete {
		errs = append(errs, client.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}}))
	}
	for _, s := range plan.Update {
		_, err := client.Update(ctx, s, metav1.UpdateOptions{})
		errs = append(errs, err)
	}
	for _, s := range plan.Create {
		_, err := client.Create(ctx, s, metav1.CreateOptions{})
		errs = append(errs, err)
	}
	return plan, errors.Join(errs...)
}
