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

// Package nodescope gives the admission controller and the updater the
// recommendation of a pod's node for VerticalPodAutoscalers with scope node.
package nodescope

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
	vpa_alpha_client "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/typed/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/client"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// accessCheckTimeout bounds the check of the access to the slices at start,
// and then the informer's first sync: a component that cannot read the slices
// by then exits with the reason (a variable for tests).
var accessCheckTimeout = 30 * time.Second

// NodeIndex indexes slices by the UID of their owner VPA and the node name,
// one key per node. A VPA created again with the same name has another UID:
// the slices of the earlier one, until the garbage collector removes them,
// are not found under it.
const NodeIndex = "vpaNode"

func nodeKey(vpaUID types.UID, node string) string {
	return string(vpaUID) + "/" + node
}

// NodeIndexFunc is the cache.IndexFunc of NodeIndex.
func NodeIndexFunc(obj any) ([]string, error) {
	s, ok := obj.(*vpa_alpha.VerticalPodAutoscalerSlice)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, owner := range s.OwnerReferences {
		if owner.Kind != "VerticalPodAutoscaler" {
			continue
		}
		for _, n := range s.Nodes {
			keys = append(keys, nodeKey(owner.UID, n.NodeName))
		}
	}
	return keys, nil
}

// PodNode is the node of a pod: spec.nodeName, or before binding the single
// node a DaemonSet pod is pinned to by its required node affinity
// (matchFields metadata.name In [node], which the DaemonSet controller sets).
func PodNode(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	node := ""
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 {
				continue
			}
			if node != "" && node != f.Values[0] {
				return "" // terms name different nodes: not pinned to one
			}
			node = f.Values[0]
		}
	}
	return node
}

// Lookup finds the per-node recommendations in an indexer of slices.
type Lookup struct {
	Indexer cache.Indexer
	// Clock tells the age of the slices; nil: the real clock.
	Clock clock.PassiveClock
}

// NodeRecommendation returns the recommendation the slices owned by the VPA
// hold for the node, or nil. A slice whose updateTime is missing or
// vpa_alpha.SliceStaleAfter old is not used: its recommender stopped writing
// (or predates the stamp), and the VPA's own recommendation is fresher.
func (l *Lookup) NodeRecommendation(vpa *vpa_types.VerticalPodAutoscaler, node string) *vpa_types.RecommendedPodResources {
	objs, err := l.Indexer.ByIndex(NodeIndex, nodeKey(vpa.UID, node))
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		s := obj.(*vpa_alpha.VerticalPodAutoscalerSlice)
		if l.stale(s) {
			continue
		}
		for i := range s.Nodes {
			if s.Nodes[i].NodeName == node {
				return &s.Nodes[i].Recommendation
			}
		}
	}
	return nil
}

func (l *Lookup) stale(s *vpa_alpha.VerticalPodAutoscalerSlice) bool {
	now := time.Now()
	if l.Clock != nil {
		now = l.Clock.Now()
	}
	return s.UpdateTime.IsZero() || !now.Before(s.UpdateTime.Add(vpa_alpha.SliceStaleAfter))
}

// NodeScoped tells whether a VPA of the given scope and target gets one
// recommendation per node: scope node, a DaemonSet target and the
// DaemonSetNodeScope gate on. The CRD and the admission webhook allow scope
// node only for a DaemonSet target; the components check it again for
// clusters that run neither the current CRD nor the webhook.
func NodeScoped(scope vpa_types.VerticalPodAutoscalerScope, target *autoscalingv1.CrossVersionObjectReference) bool {
	return scope == vpa_types.ScopeNode && target != nil && target.Kind == "DaemonSet" && features.Enabled(features.DaemonSetNodeScope)
}

// ForPod returns the VPA as the pod sees it: for a VPA with scope node and a
// DaemonSet target (and the gate on) whose slices hold a fresh entry for the
// pod's node, a copy whose status.recommendation is that node's; otherwise the VPA
// itself, whose recommendation is the DaemonSet-wide one.
func (l *Lookup) ForPod(vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) *vpa_types.VerticalPodAutoscaler {
	if vpa == nil || pod == nil || !NodeScoped(vpa.Spec.Scope, vpa.Spec.TargetRef) {
		return vpa
	}
	node := PodNode(pod)
	if node == "" {
		return vpa
	}
	rec := l.NodeRecommendation(vpa, node)
	if rec == nil {
		return vpa
	}
	scoped := vpa.DeepCopy()
	scoped.Status.Recommendation = rec.DeepCopy()
	return scoped
}

// RecommendationProcessor applies the recommendation of the pod's node (see
// Lookup.ForPod) with another processor, so that resource policy, limit
// ranges and update mode apply to it as to any recommendation.
type RecommendationProcessor struct {
	Inner  vpa_api_util.RecommendationProcessor
	Lookup *Lookup
}

// Apply implements vpa_api_util.RecommendationProcessor.
func (p *RecommendationProcessor) Apply(vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) (*vpa_types.RecommendedPodResources, vpa_api_util.ContainerToAnnotationsMap, error) {
	return p.Inner.Apply(p.Lookup.ForPod(vpa, pod), pod)
}

// sliceResource is the resource of the slices, as the API server names it.
const sliceResource = "verticalpodautoscalerslices.autoscaling.k8s.io"

// checkSliceAccess lists and watches the slices once. Without their CRD or
// the permission, an informer would retry forever and its cache never sync:
// that is an error naming what is missing. Other errors (the API server not
// reachable yet, a timeout) are retried until ctx is done, then returned.
func checkSliceAccess(ctx context.Context, slices vpa_alpha_client.VerticalPodAutoscalerSliceInterface, namespace string) error {
	var transient error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		verb, err := listAndWatchOnce(ctx, slices)
		if err == nil {
			return true, nil
		}
		if missing := accessError(verb, namespace, err); missing != nil {
			return false, missing
		}
		transient = fmt.Errorf("cannot %s %s: %w", verb, sliceResource, err)
		klog.ErrorS(err, "Cannot check access to the slices, trying again", "resource", sliceResource, "verb", verb)
		return false, nil
	})
	if err != nil && ctx.Err() != nil && transient != nil {
		return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but the slices could not be read within %v: %w", accessCheckTimeout, transient)
	}
	return err
}

// listAndWatchOnce lists the slices and watches them for a moment, returning
// the verb that failed.
func listAndWatchOnce(ctx context.Context, slices vpa_alpha_client.VerticalPodAutoscalerSliceInterface) (string, error) {
	list, err := slices.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "list", err
	}
	w, err := slices.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, TimeoutSeconds: ptr.To[int64](1)})
	if err != nil {
		return "watch", err
	}
	w.Stop()
	return "", nil
}

// accessError is the error for a missing CRD or permission, nil for others.
func accessError(verb, namespace string, err error) error {
	where := "in all namespaces"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but the API server does not serve %s: install its CustomResourceDefinition (deploy/vpa-v1-crd-gen.yaml) or turn the gate off: %w", sliceResource, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but this component may not %s %s %s: grant it get, list and watch of them (deploy/vpa-rbac.yaml) or turn the gate off: %w", verb, sliceResource, where, err)
	}
	return nil
}

// NewLookup checks that the slices (in namespace, or all when empty) can be
// listed and watched, then starts an informer over them and waits for it to
// sync, each within accessCheckTimeout. Without the slices' CRD or the
// permission, or when the slices cannot be read in time, it returns an error
// that names what is missing.
func NewLookup(vpaClient *vpa_clientset.Clientset, namespace string, stopCh <-chan struct{}) (*Lookup, error) {
	ctx, cancel := context.WithTimeout(wait.ContextForChannel(stopCh), accessCheckTimeout)
	defer cancel()
	if err := checkSliceAccess(ctx, vpaClient.AutoscalingV1alpha1().VerticalPodAutoscalerSlices(namespace), namespace); err != nil {
		return nil, err
	}
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ObjectType:    &vpa_alpha.VerticalPodAutoscalerSlice{},
		ListerWatcher: cache.NewListWatchFromClient(vpaClient.AutoscalingV1alpha1().RESTClient(), "verticalpodautoscalerslices", namespace, fields.Everything()),
		Handler:       &cache.ResourceEventHandlerFuncs{},
		ResyncPeriod:  time.Hour,
		Indexers:      cache.Indexers{NodeIndex: NodeIndexFunc},
		Transform:     client.StripManagedFields,
	})
	go controller.Run(stopCh)
	syncCtx, cancelSync := context.WithTimeout(wait.ContextForChannel(stopCh), accessCheckTimeout)
	defer cancelSync()
	if !cache.WaitForCacheSync(syncCtx.Done(), controller.HasSynced) {
		return nil, fmt.Errorf("the %s cache did not sync within %v", sliceResource, accessCheckTimeout)
	}
	return &Lookup{Indexer: store.(cache.Indexer)}, nil
}

// WrapRecommendationProcessor returns inner wrapped in a RecommendationProcessor
// fed by a new Lookup when the DaemonSetNodeScope gate is on, and inner itself
// otherwise (then no slice is ever read). It fails when the Lookup does.
func WrapRecommendationProcessor(inner vpa_api_util.RecommendationProcessor, vpaClient *vpa_clientset.Clientset, namespace string, stopCh <-chan struct{}) (vpa_api_util.RecommendationProcessor, error) {
	if !features.Enabled(features.DaemonSetNodeScope) {
		return inner, nil
	}
	lookup, err := NewLookup(vpaClient, namespace, stopCh)
	if err != nil {
		return nil, err
	}
	return &RecommendationProcessor{Inner: inner, Lookup: lookup}, nil
}

// ForPod returns the VPA as the pod sees it through the recommendation
// processor p: Lookup.ForPod when p is a RecommendationProcessor of this
// package (the DaemonSetNodeScope gate on), the VPA itself otherwise.
func ForPod(p vpa_api_util.RecommendationProcessor, vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) *vpa_types.VerticalPodAutoscaler {
	if scoped, ok := p.(*RecommendationProcessor); ok {
		return scoped.Lookup.ForPod(vpa, pod)
	}
	return vpa
}
