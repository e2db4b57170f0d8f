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
	"os"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
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

// VPAIndex indexes slices by the UID of their owner VPA.
const VPAIndex = "vpa"

// VPAIndexFunc is the cache.IndexFunc of VPAIndex.
func VPAIndexFunc(obj any) ([]string, error) {
	s, ok := obj.(*vpa_alpha.VerticalPodAutoscalerSlice)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, owner := range s.OwnerReferences {
		if owner.Kind == "VerticalPodAutoscaler" {
			keys = append(keys, string(owner.UID))
		}
	}
	return keys, nil
}

// Indexers are the indexes a Lookup needs.
func Indexers() cache.Indexers {
	return cache.Indexers{NodeIndex: NodeIndexFunc, VPAIndex: VPAIndexFunc}
}

// Lookup finds the per-node recommendations in an indexer of slices (with
// Indexers).
type Lookup struct {
	Indexer cache.Indexer
	// Nodes are the nodes of the cluster: an entry is a node's only when it
	// carries the UID of the Node of its name, so that a machine that takes
	// the name of a deleted one gets nothing of the earlier machine's.
	Nodes listersv1.NodeLister
	// GetNode, if set, reads a node that Nodes does not hold from the API
	// server: a node registered a moment ago, whose first pod the DaemonSet
	// controller created before the cache saw the node (the admission
	// controller).
	GetNode func(name string) (*corev1.Node, error)
	// Clock tells the age of the slices; nil: the real clock.
	Clock clock.PassiveClock
	// StaleAfter is the age from which a slice is stale; 0:
	// vpa_alpha.SliceStaleAfter.
	StaleAfter time.Duration
}

// NodeEntry returns the recommendation the slices owned by the VPA hold for
// the node, or nil, and whether it is fresh: its slice's updateTime and its
// own computedTime, if it has one, younger than StaleAfter. Only an entry with the UID of the Node of that name
// counts; a node not in Nodes has none. A node found in two slices (a move
// between them that a recommender restart cut short) takes the entry of the
// newer slice. A node without an entry whose Node has the VPA's group label
// (spec.nodeScope.groupLabel) gets its group's recommendation, from the newest
// slice that holds it: a new node's first pod gets the value its node will
// have until its own history counts.
func (l *Lookup) NodeEntry(vpa *vpa_types.VerticalPodAutoscaler, node string) (*vpa_types.RecommendedPodResources, bool) {
	return l.nodeEntry(vpa, node, nil)
}

// nodeEntry is NodeEntry for the pod, if given: for a pod a DaemonSet
// controls, a node not in Nodes is read with GetNode. Pods of anyone else
// (who may pin a pod to any node name) never make the component read.
func (l *Lookup) nodeEntry(vpa *vpa_types.VerticalPodAutoscaler, node string, pod *corev1.Pod) (*vpa_types.RecommendedPodResources, bool) {
	n, err := l.Nodes.Get(node)
	if err != nil && l.GetNode != nil && pod != nil && controlledByDaemonSet(pod) {
		n, err = l.GetNode(node)
	}
	if err != nil {
		return nil, false
	}
	objs, err := l.Indexer.ByIndex(NodeIndex, nodeKey(vpa.UID, node))
	if err != nil {
		return nil, false
	}
	rec, fresh := l.newest(objs, func(s *vpa_alpha.VerticalPodAutoscalerSlice) (*vpa_types.RecommendedPodResources, *metav1.Time) {
		for i := range s.Nodes {
			if s.Nodes[i].NodeName == node && s.Nodes[i].NodeUID == n.UID {
				return &s.Nodes[i].Recommendation, s.Nodes[i].ComputedTime
			}
		}
		return nil, nil
	})
	if rec == nil {
		return l.groupEntry(vpa, n)
	}
	return rec, fresh
}

func controlledByDaemonSet(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOf(pod)
	return owner != nil && owner.Kind == "DaemonSet" && strings.HasPrefix(owner.APIVersion, "apps/")
}

// groupEntry returns the recommendation of the node's group, or nil, and
// whether the slice it is in is fresh.
func (l *Lookup) groupEntry(vpa *vpa_types.VerticalPodAutoscaler, n *corev1.Node) (*vpa_types.RecommendedPodResources, bool) {
	if vpa.Spec.NodeScope == nil || vpa.Spec.NodeScope.GroupLabel == "" {
		return nil, false
	}
	value, found := n.Labels[vpa.Spec.NodeScope.GroupLabel]
	if !found {
		return nil, false
	}
	objs, err := l.Indexer.ByIndex(VPAIndex, string(vpa.UID))
	if err != nil {
		return nil, false
	}
	return l.newest(objs, func(s *vpa_alpha.VerticalPodAutoscalerSlice) (*vpa_types.RecommendedPodResources, *metav1.Time) {
		for i := range s.Groups {
			if s.Groups[i].LabelValue == value {
				return &s.Groups[i].Recommendation, nil
			}
		}
		return nil, nil
	})
}

// newest returns what find finds in the newest of the slices (by updateTime)
// where it finds something, or nil, and whether it is fresh: that slice is,
// and so is the time find gives with it (an entry's computedTime), if any.
func (l *Lookup) newest(objs []any, find func(*vpa_alpha.VerticalPodAutoscalerSlice) (*vpa_types.RecommendedPodResources, *metav1.Time)) (*vpa_types.RecommendedPodResources, bool) {
	var rec *vpa_types.RecommendedPodResources
	var computed *metav1.Time
	var newest *vpa_alpha.VerticalPodAutoscalerSlice
	for _, obj := range objs {
		s := obj.(*vpa_alpha.VerticalPodAutoscalerSlice)
		if newest != nil && !newest.UpdateTime.Before(&s.UpdateTime) {
			continue
		}
		if found, at := find(s); found != nil {
			rec, computed, newest = found, at, s
		}
	}
	if rec == nil {
		return nil, false
	}
	return rec, !l.stale(newest.UpdateTime) && (computed == nil || !l.stale(*computed))
}

// NodeRecommendation returns the recommendation the slices owned by the VPA
// hold for the node (its own or its group's, see NodeEntry), fresh or not, or
// nil.
func (l *Lookup) NodeRecommendation(vpa *vpa_types.VerticalPodAutoscaler, node string) *vpa_types.RecommendedPodResources {
	rec, _ := l.NodeEntry(vpa, node)
	return rec
}

// AllStale tells whether the VPA owns slices and every one of them is stale:
// no slice of the VPA was written for StaleAfter, while the recommender
// rewrites each at least every SliceRefreshInterval, so it has stopped
// writing them. A slice's updateTime tells that its writer is alive, not
// that each entry is fresh.
func (l *Lookup) AllStale(vpa *vpa_types.VerticalPodAutoscaler) bool {
	objs, err := l.Indexer.ByIndex(VPAIndex, string(vpa.UID))
	if err != nil || len(objs) == 0 {
		return false
	}
	for _, obj := range objs {
		if !l.stale(obj.(*vpa_alpha.VerticalPodAutoscalerSlice).UpdateTime) {
			return false
		}
	}
	return true
}

// stale tells whether a slice written, or an entry computed, at the given time
// is stale: StaleAfter ago or earlier, or never.
func (l *Lookup) stale(at metav1.Time) bool {
	now := time.Now()
	if l.Clock != nil {
		now = l.Clock.Now()
	}
	after := l.StaleAfter
	if after <= 0 {
		after = vpa_alpha.SliceStaleAfter
	}
	return at.IsZero() || !now.Before(at.Add(after))
}

// NodeScoped tells whether a VPA of the given scope and target gets one
// recommendation per node: scope node, a DaemonSet target and the
// DaemonSetNodeScope gate on. The CRD and the admission webhook allow scope
// node only for a DaemonSet target; the components check it again for
// clusters that run neither the current CRD nor the webhook.
func NodeScoped(scope vpa_types.VerticalPodAutoscalerScope, target *autoscalingv1.CrossVersionObjectReference) bool {
	return scope == vpa_types.ScopeNode && target != nil && target.Kind == "DaemonSet" && features.Enabled(features.DaemonSetNodeScope)
}

// ForPod returns the VPA as a pod admitted now sees it: for a VPA with scope
// node and a DaemonSet target (and the gate on) whose slices hold an entry for
// the pod's node or its group, a copy whose status.recommendation is that, fresh
// or not (as upstream keeps applying a status.recommendation that its
// recommender no longer updates); otherwise the VPA itself, whose
// recommendation is the DaemonSet-wide one.
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
	return withRecommendation(vpa, rec)
}

func withRecommendation(vpa *vpa_types.VerticalPodAutoscaler, rec *vpa_types.RecommendedPodResources) *vpa_types.VerticalPodAutoscaler {
	scoped := vpa.DeepCopy()
	scoped.Status.Recommendation = rec.DeepCopy()
	return scoped
}

// RecommendationProcessor applies the recommendation of the pod's node with
// another processor, so that resource policy, limit ranges and update mode
// apply to it as to any recommendation. What the pod's node's recommendation
// is depends on Role and Handshake (see VPAForPod).
type RecommendationProcessor struct {
	Inner  vpa_api_util.RecommendationProcessor
	Lookup *Lookup
	// Role is the component the processor decides for.
	Role Role
	// Handshake tells what the other component does; nil: the other
	// component is taken to apply per-node recommendations and to see this
	// one (tests).
	Handshake *Handshake
}

// Decision is how a RecommendationProcessor treats a pod.
type Decision int

const (
	// DaemonSetWide: the VPA's own (DaemonSet-wide) recommendation.
	DaemonSetWide Decision = iota
	// PerNode: the recommendation of the pod's node.
	PerNode
	// LeaveAlone (updater only): the pod's own requests, so that the updater
	// neither evicts nor resizes it.
	LeaveAlone
)

func (d Decision) String() string {
	switch d {
	case PerNode:
		return "per-node"
	case LeaveAlone:
		return "leave alone"
	}
	return "DaemonSet-wide"
}

// Decide tells how the pod of the VPA is treated, with the node's entry for
// PerNode, and why.
//
// The admission controller gives a pod its node's entry, fresh or stale
// (the recommender's outage must not move pods to the DaemonSet-wide value),
// and the DaemonSet-wide recommendation to a node without one; for a VPA
// whose update mode lets the updater act (not Off or Initial) only while it
// sees the updater's lease and its own has been renewed for two sync
// intervals (the updater has seen it), and otherwise the DaemonSet-wide
// recommendation, which an updater without the gate applies.
//
// The updater acts on a node's entry only while it sees the admission
// controller's lease (so a new pod would get the same value), and only when
// the entry is fresh (its slice's updateTime and its own computedTime, which
// an entry kept without a recommendation keeps). It leaves a pod alone when it
// cannot tell what the admission
// controller does (its own lease not renewed, the admission controller's
// leases unreadable, or its node scope lease expired and its status lease
// not renewed since: it may be down or restarting), when the node's entry is
// in a stale slice, or when the node has none and every slice of the VPA is
// stale (the recommender is not writing). When the admission controller runs without a
// valid node scope lease, it uses the DaemonSet-wide recommendation, as the
// admission controller then does, once its own lease has been published long
// enough for the admission controller to have seen it.
func (p *RecommendationProcessor) Decide(vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) (Decision, *vpa_types.RecommendedPodResources, string) {
	if vpa == nil || pod == nil || !NodeScoped(vpa.Spec.Scope, vpa.Spec.TargetRef) {
		return DaemonSetWide, nil, "not node-scoped"
	}
	node := PodNode(pod)
	if node == "" {
		return DaemonSetWide, nil, "no node"
	}
	peer, published, settled := PeerOn, true, true
	if p.Handshake != nil {
		peer, published, settled = p.Handshake.Peer(), p.Handshake.Published(), p.Handshake.Settled()
	}
	if p.Role == AdmissionController {
		mode := vpa_api_util.GetUpdateMode(vpa)
		if mode != vpa_types.UpdateModeOff && mode != vpa_types.UpdateModeInitial && (peer != PeerOn || !settled) {
			return DaemonSetWide, nil, fmt.Sprintf("updater %s, own lease renewed for long enough %t", peer, settled)
		}
		rec, _ := p.Lookup.nodeEntry(vpa, node, pod)
		if rec == nil {
			return DaemonSetWide, nil, "no entry for node " + node
		}
		return PerNode, rec, ""
	}
	switch {
	case !published:
		return LeaveAlone, nil, "own lease not renewed: the admission controller may not apply per-node recommendations"
	case peer == PeerUnknown:
		return LeaveAlone, nil, "the admission controller's leases cannot be read, or it has not renewed them since its node scope lease expired"
	case peer == PeerOff && !settled:
		return LeaveAlone, nil, "the admission controller may not have seen this updater's lease yet"
	case peer == PeerOff:
		return DaemonSetWide, nil, "the admission controller does not apply per-node recommendations"
	}
	rec, fresh := p.Lookup.NodeEntry(vpa, node)
	switch {
	case rec != nil && fresh:
		return PerNode, rec, ""
	case rec != nil:
		return LeaveAlone, nil, "the recommendation of node " + node + " is stale"
	case p.Lookup.AllStale(vpa):
		return LeaveAlone, nil, "no recommendation for node " + node + " and every slice of the VPA is stale"
	}
	return DaemonSetWide, nil, "no entry for node " + node
}

// VPAForPod returns the VPA as the pod sees it (see Decide): the VPA itself
// for the DaemonSet-wide recommendation, or a copy whose
// status.recommendation is the node's entry or, to leave the pod alone, the
// pod's own requests as target and bounds.
func (p *RecommendationProcessor) VPAForPod(vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) *vpa_types.VerticalPodAutoscaler {
	_, scoped := p.vpaForPod(vpa, pod)
	return scoped
}

func (p *RecommendationProcessor) vpaForPod(vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) (Decision, *vpa_types.VerticalPodAutoscaler) {
	decision, rec, why := p.Decide(vpa, pod)
	switch decision {
	case PerNode:
		return decision, withRecommendation(vpa, rec)
	case LeaveAlone:
		klog.V(4).InfoS("Per-node recommendations: leaving the pod alone", "pod", klog.KObj(pod), "vpa", klog.KObj(vpa), "reason", why)
		return decision, withRecommendation(vpa, podRequests(pod))
	}
	if why != "not node-scoped" {
		klog.V(5).InfoS("Per-node recommendations: the DaemonSet-wide recommendation", "role", p.Role, "pod", klog.KObj(pod), "vpa", klog.KObj(vpa), "reason", why)
	}
	return decision, vpa
}

// podRequests is a recommendation of the pod's own requests (CPU and memory)
// as target, bounds and uncapped target: within its bounds and no change.
func podRequests(pod *corev1.Pod) *vpa_types.RecommendedPodResources {
	rec := &vpa_types.RecommendedPodResources{}
	for _, c := range pod.Spec.Containers {
		r := corev1.ResourceList{}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[name]; ok {
				r[name] = q.DeepCopy()
			}
		}
		if len(r) == 0 {
			continue
		}
		rec.ContainerRecommendations = append(rec.ContainerRecommendations, vpa_types.RecommendedContainerResources{
			ContainerName: c.Name, Target: r, LowerBound: r.DeepCopy(), UpperBound: r.DeepCopy(), UncappedTarget: r.DeepCopy(),
		})
	}
	return rec
}

// Apply implements vpa_api_util.RecommendationProcessor. A pod to leave
// alone gets its own requests, without the inner processor (whose policy
// could move them).
func (p *RecommendationProcessor) Apply(vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) (*vpa_types.RecommendedPodResources, vpa_api_util.ContainerToAnnotationsMap, error) {
	decision, scoped := p.vpaForPod(vpa, pod)
	if decision == LeaveAlone {
		return scoped.Status.Recommendation, nil, nil
	}
	return p.Inner.Apply(scoped, pod)
}

// sliceResource is the resource of the slices, as the API server names it.
const sliceResource = "verticalpodautoscalerslices.autoscaling.k8s.io"

// ListWatcher is the typed client of a resource, as CheckAccess reads it.
type ListWatcher[L metav1.ListInterface] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// CheckAccess lists and watches the objects of resource (as the API server
// names it) once, in namespace or all namespaces when empty, within
// accessCheckTimeout. Without the resource's CRD or the permission, an
// informer would retry forever and its cache never sync: that is an error
// naming what is missing. Other errors (the API server not reachable yet, a
// timeout) are retried until the time is up, then returned.
func CheckAccess[L metav1.ListInterface](stopCh <-chan struct{}, resource string, client ListWatcher[L], namespace string) error {
	ctx, cancel := context.WithTimeout(wait.ContextForChannel(stopCh), accessCheckTimeout)
	defer cancel()
	var transient error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		verb, err := listAndWatchOnce(ctx, client)
		if err == nil {
			return true, nil
		}
		if missing := accessError(resource, verb, namespace, err); missing != nil {
			return false, missing
		}
		transient = fmt.Errorf("cannot %s %s: %w", verb, resource, err)
		klog.ErrorS(err, "Cannot check access to a resource of per-node recommendations, trying again", "resource", resource, "verb", verb)
		return false, nil
	})
	if err != nil && ctx.Err() != nil && transient != nil {
		return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but %s could not be read within %v: %w", resource, accessCheckTimeout, transient)
	}
	return err
}

// listAndWatchOnce lists the objects and watches them for a moment, returning
// the verb that failed.
func listAndWatchOnce[L metav1.ListInterface](ctx context.Context, client ListWatcher[L]) (string, error) {
	list, err := client.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "list", err
	}
	w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), TimeoutSeconds: ptr.To[int64](1)})
	if err != nil {
		return "watch", err
	}
	w.Stop()
	return "", nil
}

// accessError is the error for a missing CRD or permission, nil for others.
func accessError(resource, verb, namespace string, err error) error {
	where := "in all namespaces"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but the API server does not serve %s: install its CustomResourceDefinition (deploy/vpa-v1-crd-gen.yaml) or turn the gate off: %w", resource, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the DaemonSetNodeScope feature gate is on, but this component may not %s %s %s: grant it the rules of deploy/vpa-rbac.yaml for them or turn the gate off: %w", verb, resource, where, err)
	}
	return nil
}

// NewLookup checks that the slices (in namespace, or all when empty) can be
// listed and watched, then starts an informer over them and waits for it to
// sync, each within accessCheckTimeout. Without the slices' CRD or the
// permission, or when the slices cannot be read in time, it returns an error
// that names what is missing.
func NewLookup(vpaClient *vpa_clientset.Clientset, namespace string, stopCh <-chan struct{}) (*Lookup, error) {
	if err := CheckAccess(stopCh, sliceResource, vpaClient.AutoscalingV1alpha1().VerticalPodAutoscalerSlices(namespace), namespace); err != nil {
		return nil, err
	}
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ObjectType:    &vpa_alpha.VerticalPodAutoscalerSlice{},
		ListerWatcher: cache.NewListWatchFromClient(vpaClient.AutoscalingV1alpha1().RESTClient(), "verticalpodautoscalerslices", namespace, fields.Everything()),
		Handler:       &cache.ResourceEventHandlerFuncs{},
		ResyncPeriod:  time.Hour,
		Indexers:      Indexers(),
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

// getNodeTimeout bounds the admission controller's read of a node its cache
// does not hold yet, well within the webhook's timeout.
const getNodeTimeout = 2 * time.Second

// NewNodeLister starts an informer over the nodes that keeps their name, UID
// and labels only (a few hundred bytes a node), and waits for it to sync
// within accessCheckTimeout.
func NewNodeLister(kubeClient kubernetes.Interface, stopCh <-chan struct{}) (listersv1.NodeLister, error) {
	ctx := wait.ContextForChannel(stopCh)
	nodes := kubeClient.CoreV1().Nodes()
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ObjectType: &corev1.Node{},
		ListerWatcher: &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
				return nodes.List(ctx, options)
			},
			WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
				return nodes.Watch(ctx, options)
			},
		},
		Handler:      &cache.ResourceEventHandlerFuncs{},
		ResyncPeriod: time.Hour,
		Indexers:     cache.Indexers{},
		Transform:    trimNode,
	})
	go controller.RunWithContext(ctx)
	syncCtx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), controller.HasSynced) {
		return nil, fmt.Errorf("the DaemonSetNodeScope feature gate is on, but the nodes cache did not sync within %v: grant this component list and watch of nodes (deploy/vpa-rbac.yaml) or turn the gate off", accessCheckTimeout)
	}
	return listersv1.NewNodeLister(store.(cache.Indexer)), nil
}

// trimNode keeps of a node what the Lookup uses: its name, UID and labels.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion, Labels: node.Labels}}, nil
}

// Options are what WrapRecommendationProcessor needs of the component.
type Options struct {
	// Role is the component.
	Role Role
	// VPAClient reads the slices.
	VPAClient *vpa_clientset.Clientset
	// KubeClient reads and writes the leases of the handshake.
	KubeClient kubernetes.Interface
	// Namespace is the namespace the component watches
	// (--vpa-object-namespace), empty for all.
	Namespace string
	// LeaseNamespace is the namespace of the handshake's leases (see
	// LeaseNamespace).
	LeaseNamespace string
	// StatusLeaseName is the admission controller's status lease, which the
	// updater reads (--admission-controller-status-lease-name).
	StatusLeaseName string
	// StaleAfter is the age from which the updater takes a slice as stale;
	// 0: vpa_alpha.SliceStaleAfter. The admission controller uses stale
	// slices as fresh ones.
	StaleAfter time.Duration
}

// WrapRecommendationProcessor returns inner wrapped in a RecommendationProcessor
// of the role, fed by a new Lookup and a started Handshake, when the
// DaemonSetNodeScope gate is on, and inner itself otherwise (then no slice and
// no lease is ever read). It fails when the Lookup does, or when the leases
// are forbidden.
func WrapRecommendationProcessor(inner vpa_api_util.RecommendationProcessor, opts Options, stopCh <-chan struct{}) (vpa_api_util.RecommendationProcessor, error) {
	if !features.Enabled(features.DaemonSetNodeScope) {
		return inner, nil
	}
	lookup, err := NewLookup(opts.VPAClient, opts.Namespace, stopCh)
	if err != nil {
		return nil, err
	}
	lookup.StaleAfter = opts.StaleAfter
	if lookup.Nodes, err = NewNodeLister(opts.KubeClient, stopCh); err != nil {
		return nil, err
	}
	if opts.Role == AdmissionController {
		nodes := opts.KubeClient.CoreV1().Nodes()
		lookup.GetNode = func(name string) (*corev1.Node, error) {
			ctx, cancel := context.WithTimeout(context.Background(), getNodeTimeout)
			defer cancel()
			return nodes.Get(ctx, name, metav1.GetOptions{})
		}
	}
	identity, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("cannot name the holder of lease of the %s: %w", opts.Role, err)
	}
	handshake := NewHandshake(opts.KubeClient.CoordinationV1(), opts.LeaseNamespace, opts.Role, identity+"_"+string(uuid.NewUUID()), opts.StatusLeaseName, nil)
	if err := handshake.start(stopCh); err != nil {
		return nil, err
	}
	return &RecommendationProcessor{Inner: inner, Lookup: lookup, Role: opts.Role, Handshake: handshake}, nil
}

// ForPod returns the VPA as the pod sees it through the recommendation
// processor p: RecommendationProcessor.VPAForPod when p is a
// RecommendationProcessor of this package (the DaemonSetNodeScope gate on),
// the VPA itself otherwise.
func ForPod(p vpa_api_util.RecommendationProcessor, vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) *vpa_types.VerticalPodAutoscaler {
	if scoped, ok := p.(*RecommendationProcessor); ok {
		return scoped.VPAForPod(vpa, pod)
	}
	return vpa
}
