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

package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// balloonSizesConfigMap records the balloon size of every node that was sized,
// by node name with the Node's UID. It lives in kube-system, apart from the
// pods and the nodes, so that a size outlives both: a balloon that is
// recreated gets its size back, and so does a node that registers again while
// its balloon runs on (see replaceStaleRecord).
const balloonSizesConfigMap = "node-balloon-sizes"

type reconcileOptions struct {
	deps
	interval time.Duration
}

func newCmdReconcile(d deps) *cobra.Command {
	o := &reconcileOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "reconcile [--interval DURATION]",
		Short: "Give every recreated balloon its recorded size, and keep its node closed to workloads until it holds that size",
		Long: `Give every recreated balloon its recorded size, and keep its node closed to
workloads until it holds that size.

set-size records each node's balloon size in the ConfigMap
` + "kube-system/" + balloonSizesConfigMap + ` before it resizes, and reconcile converges
every balloon to its record, so the two never undo each other. For every node
with a recorded size whose balloon holds less than it, reconcile taints the node
` + v1.TaintNodeBalloonPending + `:NoSchedule and resizes the balloon to the recorded size;
once the balloon holds at least that size, reconcile removes the taint.

A deleted balloon keeps running (the kubelet holds it while its finalizer
` + kubetypes.BalloonProtectionFinalizer + ` is there) until reconcile has tainted its
node and removed the finalizer; without the ConfigMap no deleted balloon is let
go. A node without a record whose balloon holds more than cpu 1m and memory 1Mi
gets the size its balloon holds recorded again (the record was lost); one whose
balloon holds no more was never sized and is left as it is: one that registered
with the taint stays closed until set-size sizes it.

With --interval, reconcile runs until it is stopped, once per interval.`,
		Example: `  # Run as the resize agent, every 10 seconds
  kubectl balloon reconcile --interval 10s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.interval < 0 {
				return fmt.Errorf("--interval must not be negative, got %v", o.interval)
			}
			client, err := d.newClient()
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), client)
		},
	}
	cmd.Flags().DurationVar(&o.interval, "interval", 0, "Run again after this long, until stopped; 0 runs once")
	return cmd
}

func (o *reconcileOptions) run(ctx context.Context, client kubernetes.Interface) error {
	recorder, stop := o.newRecorder(client)
	defer stop()
	cache, stopCache, err := startReconcileCache(ctx, client)
	if err != nil {
		return err
	}
	defer stopCache()
	for {
		err := reconcileAll(ctx, client, cache, o.streams.Out, recorder)
		if o.interval == 0 {
			return err
		}
		if err != nil {
			fmt.Fprintf(o.streams.ErrOut, "error: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.clock.After(o.interval):
		}
	}
}

// reconcileCache holds the nodes and the balloons that the passes read, from
// watches: the agent runs for good, and listing every node and balloon once an
// interval would cost the API server a full LIST each time at any scale.
// Writes go to the API server with preconditions, so a pass that read an
// older object than the server holds fails that write and the next pass sees
// the newer one. The record of sizes is not cached: it is one object, and a
// pass reads it after the balloons (see reconcileAll).
type reconcileCache struct {
	nodes    corelisters.NodeLister
	balloons corelisters.PodLister
}

// startReconcileCache starts the watches and waits until they have listed
// once; the returned function stops them. A list or watch that fails before
// then fails the start with its error (no rights to list nodes, say), where a
// reflector would retry for ever; later failures are retried.
func startReconcileCache(ctx context.Context, client kubernetes.Interface) (*reconcileCache, func(), error) {
	nodes := informers.NewSharedInformerFactory(client, 0)
	balloons := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(options *metav1.ListOptions) { options.LabelSelector = balloonSelector }))
	ctx, cancel := context.WithCancelCause(ctx)
	var started atomic.Bool
	failStart := func(what string) toolscache.WatchErrorHandlerWithContext {
		return func(ctx context.Context, r *toolscache.Reflector, err error) {
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
			if !started.Load() {
				cancel(fmt.Errorf("listing %s: %w", what, err))
			}
		}
	}
	nodeInformer, podInformer := nodes.Core().V1().Nodes(), balloons.Core().V1().Pods()
	if err := nodeInformer.Informer().SetTransform(trimForReconcile); err != nil {
		return nil, nil, err
	}
	if err := podInformer.Informer().SetTransform(trimForReconcile); err != nil {
		return nil, nil, err
	}
	if err := nodeInformer.Informer().SetWatchErrorHandlerWithContext(failStart("nodes")); err != nil {
		return nil, nil, err
	}
	if err := podInformer.Informer().SetWatchErrorHandlerWithContext(failStart("balloon pods")); err != nil {
		return nil, nil, err
	}
	stop := func() {
		cancel(nil)
		nodes.Shutdown()
		balloons.Shutdown()
	}
	nodes.Start(ctx.Done())
	balloons.Start(ctx.Done())
	for _, factory := range []informers.SharedInformerFactory{nodes, balloons} {
		for _, synced := range factory.WaitForCacheSync(ctx.Done()) {
			if !synced {
				stop()
				return nil, nil, context.Cause(ctx)
			}
		}
	}
	started.Store(true)
	return &reconcileCache{nodes: nodeInformer.Lister(), balloons: podInformer.Lister()}, stop, nil
}

// trimForReconcile drops from a cached object what no pass reads: the managed
// fields of both, and a Node's status, whose image list and conditions make up
// most of it; a pass reads a Node's name, UID, creation time and taints.
func trimForReconcile(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Node:
		o.ManagedFields = nil
		o.Status = v1.NodeStatus{}
	case *v1.Pod:
		o.ManagedFields = nil
	}
	return obj, nil
}

// reconcileAll reconciles every node and reports the errors of all of them.
func reconcileAll(ctx context.Context, client kubernetes.Interface, cache *reconcileCache, out io.Writer, recorder record.EventRecorder) error {
	nodes, err := cache.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := cache.balloons.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing balloon pods: %w", err)
	}
	byNode := balloonsByNode(pods)
	// The record is read from the API server after the balloons from the
	// cache: set-size records a size before it resizes, so the record read
	// here is at least as new as any resize the pass saw, and the pass never
	// undoes a resize of set-size's.
	sizes, err := readBalloonSizes(ctx, client)
	if err != nil {
		// Without the record no deleted balloon is let go: the kubelet keeps
		// each running, and its capacity closed, until the record is back.
		for _, name := range slices.Sorted(maps.Keys(byNode)) {
			for _, pod := range byNode[name].held {
				recorder.Eventf(pod, v1.EventTypeWarning, reasonBalloonHeld, "Deleted balloon kept running, its capacity closed: %v", err)
			}
		}
		return err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var errs []error
	for _, node := range nodes {
		balloons := byNode[node.Name]
		delete(byNode, node.Name)
		if balloons == nil {
			balloons = &nodeBalloons{}
		}
		entry, recorded := sizes.of(node)
		want := entry.size
		if stale, found := sizes.records[node.Name]; found && !recorded {
			replaced, err := replaceStaleRecord(ctx, client, out, node, stale, balloons)
			if err != nil {
				errs = append(errs, fmt.Errorf("node %q: %w", node.Name, err))
				continue
			}
			want, recorded = replaced, true
		}
		if !recorded {
			restored, err := restoreBalloonSize(ctx, client, out, recorder, node, balloons)
			if err != nil {
				errs = append(errs, fmt.Errorf("node %q: %w", node.Name, err))
				continue
			}
			want, recorded = restored, restored != nil
		}
		// A node with a recorded size closes before its deleted balloon frees
		// the capacity; one that was never sized has nothing to keep.
		if err := release(ctx, client, out, node, recorded, balloons.held); err != nil {
			errs = append(errs, fmt.Errorf("node %q: %w", node.Name, err))
			continue
		}
		if !recorded {
			continue
		}
		if want == nil {
			errs = append(errs, fmt.Errorf("node %q: the recorded balloon size %q is not cpu=Q,memory=Q,uid=UID", node.Name, entry.raw))
			continue
		}
		if err := reconcileNode(ctx, client, out, node, want, balloons); err != nil {
			errs = append(errs, fmt.Errorf("node %q: %w", node.Name, err))
		}
	}
	// The balloons of nodes that are gone hold nothing anyone could use.
	for _, name := range slices.Sorted(maps.Keys(byNode)) {
		if err := release(ctx, client, out, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, false, byNode[name].held); err != nil {
			errs = append(errs, fmt.Errorf("node %q: %w", name, err))
		}
	}
	listed := map[string]bool{}
	for _, node := range nodes {
		listed[node.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(sizes.records)) {
		if listed[name] {
			continue
		}
		if err := pruneRecord(ctx, client, out, name, sizes.records[name]); err != nil {
			errs = append(errs, fmt.Errorf("node %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// pruneRecord removes the entry of a node that is gone, so that a node that
// registers under its name later does not start at its size. The node is
// looked up again: it may have registered, and been sized, since the list.
func pruneRecord(ctx context.Context, client kubernetes.Interface, out io.Writer, nodeName string, entry balloonRecord) error {
	_, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting the node of a recorded balloon size: %w", err)
	}
	if err := swapBalloonSize(ctx, client, nodeName, entry.raw, ""); err != nil {
		return err
	}
	fmt.Fprintf(out, "node %s: the node is gone; removed its recorded balloon size %s\n", nodeName, entry.raw)
	return nil
}

// replaceStaleRecord replaces an entry recorded for an earlier Node of the
// node's name: the Node was deleted and this one registered before a pass
// saw it gone. A balloon bound to the name since before this Node existed
// outlived the old one and holds its capacity on this node, so the entry
// takes what it holds; otherwise the node was never sized, and the entry
// takes the smallest balloon, to which reconcile shrinks a balloon that the
// size policy created at the old size meanwhile.
func replaceStaleRecord(ctx context.Context, client kubernetes.Interface, out io.Writer, node *v1.Node, stale balloonRecord, balloons *nodeBalloons) (v1.ResourceList, error) {
	size := minBalloon
	for _, pod := range balloons.bound {
		if pod.CreationTimestamp.Before(&node.CreationTimestamp) {
			size = heldResources(pod)
			break
		}
	}
	if err := swapBalloonSize(ctx, client, node.Name, stale.raw, formatBalloonRecord(size, node.UID)); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "node %s: the recorded balloon size %s was an earlier node's of that name; recorded %s for this one\n", node.Name, stale.raw, formatResources(size))
	return size, nil
}

const (
	// reasonBalloonHeld: a deleted balloon is kept running, because its
	// node's size cannot be read.
	reasonBalloonHeld = "BalloonHeld"
	// reasonBalloonSizeRestored: a node's record was missing while its
	// balloon held more than the smallest balloon.
	reasonBalloonSizeRestored = "BalloonSizeRestored"
)

// restoreBalloonSize records the size a node's balloon holds when the node has
// no record but its balloon holds more than the smallest balloon: the record
// was lost (the ConfigMap emptied or recreated), and a node sized once must
// not open when its balloon is replaced. It returns the size recorded, or nil
// if the node was never sized.
func restoreBalloonSize(ctx context.Context, client kubernetes.Interface, out io.Writer, recorder record.EventRecorder, node *v1.Node, balloons *nodeBalloons) (v1.ResourceList, error) {
	nodeName := node.Name
	for _, pod := range slices.Concat(balloons.bound, balloons.held) {
		held := heldResources(pod)
		if !exceedsMinimum(held) {
			continue
		}
		if err := swapBalloonSize(ctx, client, nodeName, "", formatBalloonRecord(held, node.UID)); err != nil {
			return nil, err
		}
		recorder.Eventf(pod, v1.EventTypeWarning, reasonBalloonSizeRestored,
			"Node %s had no recorded balloon size; recorded the size its balloon holds, %s", nodeName, formatResources(held))
		fmt.Fprintf(out, "node %s: no recorded balloon size; recorded the size balloon %s/%s holds, %s\n", nodeName, pod.Namespace, pod.Name, formatResources(held))
		return held, nil
	}
	return nil, nil
}

// exceedsMinimum tells whether size holds more than the smallest balloon.
func exceedsMinimum(size v1.ResourceList) bool {
	for _, name := range balloonResources {
		if q := size[name]; q.Cmp(minBalloon[name]) > 0 {
			return true
		}
	}
	return false
}

// release lets deleted balloons go by removing their protection finalizer,
// when their node is to stay closed until a balloon holds its recorded size
// again only once it was tainted when this pass listed it: a taint written now
// may not have reached the scheduler before the capacity it guards is free.
func release(ctx context.Context, client kubernetes.Interface, out io.Writer, node *v1.Node, closeNode bool, balloons []*v1.Pod) error {
	nodeName := node.Name
	if len(balloons) == 0 {
		return nil
	}
	if closeNode && !hasPendingTaint(node) {
		if err := setBalloonPendingTaint(ctx, client, out, nodeName, true); err != nil {
			return err
		}
		fmt.Fprintf(out, "node %s: its deleted balloons are released on the next pass, once the taint is seen\n", nodeName)
		return nil
	}
	for _, pod := range balloons {
		finalizers := slices.DeleteFunc(slices.Clone(pod.Finalizers), func(f string) bool { return f == kubetypes.BalloonProtectionFinalizer })
		// The test makes the patch fail, rather than drop a finalizer added meanwhile.
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/finalizers", "value": pod.Finalizers},
			{"op": "replace", "path": "/metadata/finalizers", "value": finalizers},
		})
		if err != nil {
			return err
		}
		_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("releasing deleted balloon %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		fmt.Fprintf(out, "node %s: released deleted balloon %s/%s\n", nodeName, pod.Namespace, pod.Name)
	}
	return nil
}

// reconcileNode keeps the node tainted while its balloon holds less than want
// or a deleted balloon is still held, and resizes the balloon to want. The
// taint stays through the pass that lets a deleted balloon go: release closed
// the node for it, and opening it here would close it again on the next pass,
// before the balloon is let go, on every pass.
func reconcileNode(ctx context.Context, client kubernetes.Interface, out io.Writer, node *v1.Node, want v1.ResourceList, nodeBalloons *nodeBalloons) error {
	balloons := nodeBalloons.bound
	open := len(nodeBalloons.held) == 0 && len(balloons) == 1 && holdsAtLeast(balloons[0], want)
	if err := setBalloonPendingTaint(ctx, client, out, node.Name, !open); err != nil {
		return err
	}
	if len(balloons) == 1 && holdsSize(balloons[0], want) {
		return nil
	}
	switch len(balloons) {
	case 0:
		state := "no balloon yet"
		if len(nodeBalloons.unscheduled) > 0 {
			pod := nodeBalloons.unscheduled[0]
			state = fmt.Sprintf("balloon %s/%s is %s", pod.Namespace, pod.Name, unscheduledState(pod))
		}
		fmt.Fprintf(out, "node %s: %s; closed to workloads until its balloon holds %s\n", node.Name, state, formatResources(want))
		return nil
	case 1:
	default:
		return fmt.Errorf("%d balloons on the node; expected exactly one", len(balloons))
	}
	pod := balloons[0]
	c, err := balloonContainer(pod)
	if err != nil {
		return err
	}
	if equalResources(c.Resources.Requests, want) {
		state := "waiting for the kubelet"
		if pending := resizeCondition(pod, v1.PodResizePending); pending != nil {
			state = fmt.Sprintf("%s: %s", pending.Reason, pending.Message)
		}
		fmt.Fprintf(out, "node %s: balloon %s/%s does not hold its recorded size %s yet (%s)\n", node.Name, pod.Namespace, pod.Name, formatResources(want), state)
		return nil
	}
	if _, err := resizeBalloon(ctx, client, pod, c.Resources.Requests, want); err != nil {
		return fmt.Errorf("resizing balloon %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	fmt.Fprintf(out, "node %s: resizing balloon %s/%s from %s to its recorded size %s\n", node.Name, pod.Namespace, pod.Name, formatResources(c.Resources.Requests), formatResources(want))
	return nil
}

// holdsAtLeast tells whether the kubelet runs the balloon at no less than want
// in every resource: the node then has no capacity open that it should not.
func holdsAtLeast(pod *v1.Pod, want v1.ResourceList) bool {
	status := containerStatus(pod, balloonContainerName)
	if pod.Status.Phase != v1.PodRunning || status == nil || status.Resources == nil {
		return false
	}
	for _, name := range balloonResources {
		if q := status.Resources.Requests[name]; q.Cmp(want[name]) < 0 {
			return false
		}
	}
	return true
}

// holdsSize tells whether the kubelet runs the balloon at want. The spec alone
// says nothing: a new balloon is not admitted yet, and an upsize may wait.
func holdsSize(pod *v1.Pod, want v1.ResourceList) bool {
	status := containerStatus(pod, balloonContainerName)
	return pod.Status.Phase == v1.PodRunning && status != nil && status.Resources != nil &&
		equalResources(status.Resources.Requests, want) && resizeCondition(pod, v1.PodResizePending) == nil
}

// hasPendingTaint tells whether the node carries the balloon-pending taint.
func hasPendingTaint(node *v1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == v1.TaintNodeBalloonPending })
}

// setBalloonPendingTaint adds or removes the node's balloon-pending taint.
func setBalloonPendingTaint(ctx context.Context, client kubernetes.Interface, out io.Writer, nodeName string, tainted bool) error {
	nodes := client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []v1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != v1.TaintNodeBalloonPending {
				taints = append(taints, t)
			}
		}
		if has := len(taints) != len(node.Spec.Taints); has == tainted {
			return nil
		}
		if tainted {
			taints = append(taints, v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule})
		}
		node.Spec.Taints = taints
		if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if tainted {
			fmt.Fprintf(out, "node %s: tainted %s:NoSchedule until its balloon holds its recorded size\n", nodeName, v1.TaintNodeBalloonPending)
		} else {
			fmt.Fprintf(out, "node %s: its balloon holds its recorded size; removed the taint %s\n", nodeName, v1.TaintNodeBalloonPending)
		}
		return nil
	})
}

// recordedSizes are the recorded balloon sizes by node name.
type recordedSizes struct {
	records map[string]balloonRecord
}

// balloonRecord is one node's entry, "cpu=Q,memory=Q,uid=UID": the
// balloon's requests and the UID of the Node they were recorded for. Like a
// node's Lease, named after the node with the Node's UID in its owner
// reference, the entry is keyed by the name (which the size policy, from a
// balloon's pinning, knows) and the UID tells a Node registered later under
// the same name from the one that was sized.
type balloonRecord struct {
	// size is nil if the entry does not parse.
	size v1.ResourceList
	// uid is empty in an entry recorded before entries carried one.
	uid types.UID
	raw string
}

// of returns the entry recorded for node, if it is the node's: recorded for
// its UID, or without one (recorded before entries carried one).
func (s recordedSizes) of(node *v1.Node) (balloonRecord, bool) {
	record, ok := s.records[node.Name]
	if !ok || (record.uid != "" && record.uid != node.UID) {
		return balloonRecord{}, false
	}
	return record, true
}

func readBalloonSizes(ctx context.Context, client kubernetes.Interface) (recordedSizes, error) {
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, balloonSizesConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return recordedSizes{}, fmt.Errorf("the ConfigMap %s/%s that records the balloon sizes does not exist: apply cluster/addons/node-balloon", metav1.NamespaceSystem, balloonSizesConfigMap)
	}
	if err != nil {
		return recordedSizes{}, fmt.Errorf("reading the recorded balloon sizes: %w", err)
	}
	sizes := recordedSizes{records: map[string]balloonRecord{}}
	for node, value := range cm.Data {
		size, uid := parseBalloonRecord(value)
		sizes.records[node] = balloonRecord{size: size, uid: uid, raw: value}
	}
	return sizes, nil
}

// swapBalloonSize changes the node's record from "from" to "to", as recorded
// text ("" for no record), and fails if the record says anything but "from"
// meanwhile: a writer never overwrites a size it did not see.
func swapBalloonSize(ctx context.Context, client kubernetes.Interface, nodeName, from, to string) error {
	configMaps := client.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := configMaps.Get(ctx, balloonSizesConfigMap, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the recorded balloon sizes: %w", err)
		}
		if current := cm.Data[nodeName]; current != from {
			return fmt.Errorf("the recorded balloon size of node %q changed meanwhile to %q; not overwriting it", nodeName, current)
		}
		var value any = to
		if to == "" {
			value = nil
		}
		// The resourceVersion makes the patch fail on any write since the read.
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": cm.ResourceVersion},
			"data":     map[string]any{nodeName: value},
		})
		if err != nil {
			return err
		}
		_, err = configMaps.Patch(ctx, balloonSizesConfigMap, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// formatBalloonRecord prints a node's entry: the exact requests and the UID
// of the Node, "cpu=2500m,memory=1Gi,uid=UID".
func formatBalloonRecord(size v1.ResourceList, uid types.UID) string {
	parts := make([]string, 0, len(balloonResources)+1)
	for _, name := range balloonResources {
		q := size[name]
		parts = append(parts, fmt.Sprintf("%s=%s", name, q.String()))
	}
	return strings.Join(append(parts, "uid="+string(uid)), ",")
}

// parseBalloonRecord parses what formatBalloonRecord prints, and an entry
// without the uid; the size is nil for anything else.
func parseBalloonRecord(value string) (v1.ResourceList, types.UID) {
	parts := strings.Split(value, ",")
	var uid types.UID
	if last := parts[len(parts)-1]; strings.HasPrefix(last, "uid=") {
		uid = types.UID(strings.TrimPrefix(last, "uid="))
		parts = parts[:len(parts)-1]
		if uid == "" {
			return nil, ""
		}
	}
	size := v1.ResourceList{}
	for _, part := range parts {
		name, q, ok := strings.Cut(part, "=")
		quantity, err := resource.ParseQuantity(q)
		if !ok || err != nil || quantity.Sign() <= 0 {
			return nil, uid
		}
		size[v1.ResourceName(name)] = quantity
	}
	for _, name := range balloonResources {
		if _, ok := size[name]; !ok {
			return nil, uid
		}
	}
	if len(size) != len(balloonResources) {
		return nil, uid
	}
	return size, uid
}
