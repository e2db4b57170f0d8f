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
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_alpha_client "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/typed/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/client"
)

const (
	// DefaultMaxCleanupDeletes is the most deletes of one Cleanup, over all
	// VPAs.
	DefaultMaxCleanupDeletes = 10
	// VPANameIndex indexes objects by namespace/value of vpa_alpha.VPANameLabel.
	VPANameIndex = "vpaName"

	cleanupResync = time.Hour
)

// VPANameIndexFunc is the cache.IndexFunc of VPANameIndex.
func VPANameIndexFunc(obj any) ([]string, error) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	name, found := o.GetLabels()[vpa_alpha.VPANameLabel]
	if !found {
		return nil, nil
	}
	return []string{o.GetNamespace() + "/" + name}, nil
}

// CleanupStats is what one Cleanup did and left for later.
type CleanupStats struct {
	Deleted  int // API deletes
	Marked   int // checkpoint slices annotated with vpa_alpha.UnscopedSinceAnnotation
	Unmarked int // checkpoint slices of VPAs with scope node whose mark was removed
	Pending  int // deletes, marks and unmarks left for the next calls
}

// Cleaner deletes the VerticalPodAutoscalerSlices and
// VerticalPodAutoscalerCheckpointSlices of VPAs that no longer have scope
// node: they would otherwise stay until the VPA is deleted (ownerReference).
// It finds them in caches of their metadata (indexed by VPANameIndex), so
// that a VPA without slices costs no API call.
//
// The recommendation slices go at once. The checkpoint slices, the per-node
// history, are first marked with vpa_alpha.UnscopedSinceAnnotation and
// deleted UnscopedGracePeriod after the mark, so that a scope dropped by mistake (a
// client of an older release that writes the VPA back without the field)
// can be put back without losing the history. The mark is on the objects, so
// a restart of the recommender neither resets nor extends the grace period.
// While the VPA has scope node again, the Cleaner removes any mark left, so
// that a scope dropped once more starts a grace period of its own.
type Cleaner struct {
	Client vpa_alpha_client.AutoscalingV1alpha1Interface
	// Slices and CheckpointSlices hold the metadata of the objects of each
	// kind, with the VPANameIndex.
	Slices           cache.Indexer
	CheckpointSlices cache.Indexer
	// Synced tells whether both caches are filled; nil: they are.
	Synced cache.InformerSynced
	// MaxDeletes bounds the API requests of a Cleanup: deletes, marks and
	// unmarks.
	MaxDeletes int
	// UnscopedGracePeriod is how long the checkpoint slices of a VPA without
	// scope node stay after they were marked (not the CheckpointStore's
	// GracePeriod, which is about nodes).
	UnscopedGracePeriod time.Duration
	// Clock tells the time of the marks; nil: the real clock.
	Clock clock.PassiveClock
}

// NewCleaner returns a Cleaner over two metadata informers (in namespace, or
// all namespaces when empty) of the objects that carry vpa_alpha.VPANameLabel,
// and starts them. It does not wait for them: Cleanup does nothing until they
// are synced.
func NewCleaner(alphaClient vpa_alpha_client.AutoscalingV1alpha1Interface, metadataClient metadata.Interface, namespace string, stopCh <-chan struct{}) *Cleaner {
	informer := func(resource string) cache.SharedIndexInformer {
		informer := metadatainformer.NewFilteredMetadataInformer(metadataClient, vpa_alpha.SchemeGroupVersion.WithResource(resource), namespace,
			cleanupResync, cache.Indexers{VPANameIndex: VPANameIndexFunc},
			func(options *metav1.ListOptions) { options.LabelSelector = vpa_alpha.VPANameLabel }).Informer()
		if err := informer.SetTransform(client.StripManagedFields); err != nil {
			klog.ErrorS(err, "Cannot trim the cached metadata", "resource", resource)
		}
		go informer.Run(stopCh)
		return informer
	}
	slices := informer("verticalpodautoscalerslices")
	checkpointSlices := informer("verticalpodautoscalercheckpointslices")
	return &Cleaner{
		Client:           alphaClient,
		Slices:           slices.GetIndexer(),
		CheckpointSlices: checkpointSlices.GetIndexer(),
		Synced: func() bool {
			return slices.HasSynced() && checkpointSlices.HasSynced()
		},
		MaxDeletes: DefaultMaxCleanupDeletes,
		// The per-node aggregations of a VPA without scope node get no sample
		// and leave the model (upstream's aggregation GC) after this long:
		// after it, the history is gone from a running recommender too.
		UnscopedGracePeriod: model.GetAggregationsConfig().GetMemoryAggregationWindowLength(),
	}
}

type cleanupTarget struct {
	checkpoint      bool
	mark            bool // annotate, not delete
	unmark          bool // remove the annotation, not delete
	namespace, name string
	uid             types.UID
	resourceVersion string
}

// markPatch is the merge patch that sets the checkpoint slices' mark to
// since, or removes it when since is nil.
func markPatch(since *string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{vpa_alpha.UnscopedSinceAnnotation: since}}})
}

// Keeps tells whether the cache holds checkpoint slices owned by the VPA: for
// a VPA without scope node, that they are in their grace period.
func (c *Cleaner) Keeps(vpa *vpa_types.VerticalPodAutoscaler) bool {
	objs, err := ownedObjects(c.CheckpointSlices, vpa)
	return err == nil && len(objs) > 0
}

// ownedObjects returns the objects of the indexer that are the VPA's by name
// and owned by it (by UID): an earlier VPA's of the same name goes with its
// owner (garbage collector).
func ownedObjects(indexer cache.Indexer, vpa *vpa_types.VerticalPodAutoscaler) ([]metav1.Object, error) {
	objs, err := indexer.ByIndex(VPANameIndex, vpa.Namespace+"/"+vpa_alpha.VPANameLabelValue(vpa.Name))
	if err != nil {
		return nil, err
	}
	var owned []metav1.Object
	for _, obj := range objs {
		if o, err := meta.Accessor(obj); err == nil && ownedBy(o, vpa.UID) {
			owned = append(owned, o)
		}
	}
	return owned, nil
}

// Cleanup deletes the slices owned by the unscoped VPAs (by UID), which do
// not have scope node, and marks their checkpoint slices, deleting those
// marked UnscopedGracePeriod ago; and it removes the marks left on the checkpoint
// slices of the scoped VPAs, which have scope node again. Within MaxDeletes
// API requests and the context's deadline: the unmarks first (they protect
// history), then the recommendation slices, then the checkpoint slices, each
// in the order of namespace and name. The rest waits for the next call.
func (c *Cleaner) Cleanup(ctx context.Context, unscoped, scoped []*vpa_types.VerticalPodAutoscaler) (CleanupStats, error) {
	var stats CleanupStats
	if len(unscoped) == 0 && len(scoped) == 0 || (c.Synced != nil && !c.Synced()) {
		return stats, nil
	}
	now := time.Now()
	if c.Clock != nil {
		now = c.Clock.Now()
	}
	// The checkpoint store drops the mark only when it rewrites a slice,
	// within a budget of its own: a mark it has not reached yet would
	// shorten the grace period of the scope's next drop.
	var targets []cleanupTarget
	for _, vpa := range scoped {
		objs, err := ownedObjects(c.CheckpointSlices, vpa)
		if err != nil {
			return stats, err
		}
		for _, o := range objs {
			if _, marked := o.GetAnnotations()[vpa_alpha.UnscopedSinceAnnotation]; marked {
				targets = append(targets, cleanupTarget{checkpoint: true, unmark: true, namespace: o.GetNamespace(), name: o.GetName()})
			}
		}
	}
	sortTargets(targets)
	for _, checkpoint := range []bool{false, true} {
		indexer := c.Slices
		if checkpoint {
			indexer = c.CheckpointSlices
		}
		var found []cleanupTarget
		for _, vpa := range unscoped {
			objs, err := ownedObjects(indexer, vpa)
			if err != nil {
				return stats, err
			}
			for _, o := range objs {
				t := cleanupTarget{checkpoint: checkpoint, namespace: o.GetNamespace(), name: o.GetName(), uid: o.GetUID(), resourceVersion: o.GetResourceVersion()}
				if checkpoint {
					since, err := time.Parse(time.RFC3339, o.GetAnnotations()[vpa_alpha.UnscopedSinceAnnotation])
					if err == nil && !since.After(now) && now.Before(since.Add(c.UnscopedGracePeriod)) {
						continue
					}
					// Not marked (or not readably): the grace period starts
					// now. A mark in the future (a clock ahead) is set back
					// to now, or it would extend the grace period.
					t.mark = err != nil || since.After(now)
				}
				found = append(found, t)
			}
		}
		sortTargets(found)
		targets = append(targets, found...)
	}

	var errs []error
	patchForbidden := false
	requests := 0
	for _, t := range targets {
		if requests >= c.MaxDeletes || ctx.Err() != nil || (patchForbidden && (t.mark || t.unmark)) {
			stats.Pending++
			continue
		}
		requests++
		if t.mark || t.unmark {
			var since *string
			if t.mark {
				since = ptr.To(now.UTC().Format(time.RFC3339))
			}
			patch, err := markPatch(since)
			if err == nil {
				_, err = c.Client.VerticalPodAutoscalerCheckpointSlices(t.namespace).Patch(ctx, t.name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
			// Counted when done: a failed mark is tried again next time.
			switch {
			case err == nil && t.mark:
				stats.Marked++
			case err == nil:
				stats.Unmarked++
			}
			if apierrors.IsForbidden(err) {
				// A ClusterRole of an earlier release: one error a call, not
				// one a slice; the others would fail alike.
				patchForbidden = true
				errs = append(errs, fmt.Errorf("the recommender may not patch verticalpodautoscalercheckpointslices (the grace period's marks): grant it the rules of deploy/vpa-rbac.yaml: %w", err))
			} else if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		stats.Deleted++
		// Deleted only as the cache saw it: a slice written since (the scope
		// put back, its mark removed) is not this loop's to delete.
		options := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &t.uid}}
		if t.resourceVersion != "" {
			options.Preconditions.ResourceVersion = &t.resourceVersion
		}
		var err error
		if t.checkpoint {
			err = c.Client.VerticalPodAutoscalerCheckpointSlices(t.namespace).Delete(ctx, t.name, options)
		} else {
			err = c.Client.VerticalPodAutoscalerSlices(t.namespace).Delete(ctx, t.name, options)
		}
		// Not found: deleted already, the cache has not seen it yet.
		// Conflict: changed since the cache saw it; the next call decides.
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return stats, errors.Join(errs...)
}

func sortTargets(targets []cleanupTarget) {
	sort.Slice(targets, func(i, j int) bool {
		if targets[i].namespace != targets[j].namespace {
			return targets[i].namespace < targets[j].namespace
		}
		return targets[i].name < targets[j].name
	})
}
