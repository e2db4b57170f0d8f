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
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/kubernetes/pkg/apis/scheduling"
)

type setSizeOptions struct {
	deps
	cpu, memory string
	timeout     time.Duration
	rollback    bool
}

// resizePlan is a validated balloon resize.
type resizePlan struct {
	node *v1.Node
	pod  *v1.Pod
	// from and to are the balloon container's requests before and after.
	from, to v1.ResourceList
	// notes explain where the balloon minimum overrides the desired size.
	notes []string
	// recorded is the node's recorded size when the plan was made, as text;
	// "" if it had none.
	recorded string
}

func newCmdSetSize(d deps) *cobra.Command {
	o := &setSizeOptions{deps: d}
	cmd := &cobra.Command{
		Use:   "set-size NODE [--cpu QUANTITY] [--memory QUANTITY]",
		Short: "Resize a node's balloon so that workloads may use the given capacity",
		Long: `Resize a node's balloon so that workloads may use the given capacity.

--cpu and --memory are the desired effective size of the node: its allocatable
capacity minus the balloon. A resource that is not given keeps its current
balloon request. The balloon never goes below cpu 1m and memory 1Mi.

The new size is recorded (the ConfigMap kube-system/node-balloon-sizes) before
the balloon is resized, so that kubectl balloon reconcile carries the resize on
rather than undoing it; the record changes only if nobody changed it since the
command read it. The command waits for the kubelet's verdict. A balloon grows
only into free capacity and never preempts running pods, so growing it
(shrinking the node) waits while workloads use that capacity: the new size
stays recorded, and the node is closed to new workloads (taint
node.kubernetes.io/balloon-pending) until the balloon holds it.
--rollback-on-failure restores the record and the balloon instead.`,
		Example: `  # Let workloads use 3 cores and 12Gi of memory on node-1
  kubectl balloon set-size node-1 --cpu 3 --memory 12Gi

  # Shrink the node's memory, undoing the change if the kubelet refuses it
  kubectl balloon set-size node-1 --memory 8Gi --rollback-on-failure`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			desired, err := o.parseFlags(cmd.Flags())
			if err != nil {
				return err
			}
			client, err := d.newClient()
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), client, args[0], desired)
		},
	}
	cmd.Flags().StringVar(&o.cpu, "cpu", "", "Desired effective cpu of the node, e.g. 3 or 3500m")
	cmd.Flags().StringVar(&o.memory, "memory", "", "Desired effective memory of the node, e.g. 12Gi")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "How long to wait for the kubelet to carry out the resize")
	cmd.Flags().BoolVar(&o.rollback, "rollback-on-failure", false, "If the kubelet does not carry out the resize, resize the balloon back to its previous requests")
	return cmd
}

// parseFlags returns the desired effective size per resource given.
func (o *setSizeOptions) parseFlags(flags *pflag.FlagSet) (v1.ResourceList, error) {
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout must be positive, got %v", o.timeout)
	}
	desired := v1.ResourceList{}
	for _, f := range []struct {
		name  v1.ResourceName
		value string
	}{{v1.ResourceCPU, o.cpu}, {v1.ResourceMemory, o.memory}} {
		if !flags.Changed(string(f.name)) {
			continue
		}
		q, err := resource.ParseQuantity(f.value)
		if err != nil {
			return nil, fmt.Errorf("invalid --%s %q: %w", f.name, f.value, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("invalid --%s %q: must not be negative", f.name, f.value)
		}
		desired[f.name] = q
	}
	if len(desired) == 0 {
		return nil, errors.New("at least one of --cpu and --memory is required")
	}
	return desired, nil
}

func (o *setSizeOptions) run(ctx context.Context, client kubernetes.Interface, nodeName string, desired v1.ResourceList) error {
	plan, err := planResize(ctx, client, nodeName, desired)
	if err != nil {
		return err
	}
	out := o.streams.Out
	for _, note := range plan.notes {
		fmt.Fprintf(out, "note: %s\n", note)
	}
	balloon := plan.pod.Namespace + "/" + plan.pod.Name
	fmt.Fprintf(out, "resizing balloon %s on node %s: requests %s -> %s\n", balloon, nodeName, formatResources(plan.from), formatResources(plan.to))

	// The record says first what the balloon is to hold: kubectl balloon
	// reconcile converges to the record, so it carries this resize on rather
	// than undoing it, and a balloon recreated meanwhile gets the new size.
	intended := formatBalloonRecord(plan.to, plan.node.UID)
	if err := swapBalloonSize(ctx, client, nodeName, plan.recorded, intended); err != nil {
		return err
	}
	resized, err := resizeBalloon(ctx, client, plan.pod, plan.from, plan.to)
	if err != nil {
		err = fmt.Errorf("resizing balloon %s: %w", balloon, err)
		if rbErr := swapBalloonSize(ctx, client, nodeName, intended, plan.recorded); rbErr != nil {
			return fmt.Errorf("%w; restoring the recorded size %q also failed: %w", err, plan.recorded, rbErr)
		}
		return err
	}
	last, err := o.waitForResize(ctx, client, resized, plan.to)
	if err != nil {
		if !o.rollback {
			return o.keepIntent(ctx, client, nodeName, plan, last, err)
		}
		// The balloon first: a reconcile pass between the two would otherwise
		// find a sized balloon without its record and record it again.
		if _, rbErr := resizeBalloon(ctx, client, last, plan.to, plan.from); rbErr != nil {
			return fmt.Errorf("%w; rolling back balloon %s to %s also failed: %w", err, balloon, formatResources(plan.from), rbErr)
		}
		if rbErr := swapBalloonSize(ctx, client, nodeName, intended, plan.recorded); rbErr != nil {
			return fmt.Errorf("%w; restoring the recorded size %q also failed: %w", err, plan.recorded, rbErr)
		}
		fmt.Fprintf(out, "rolled back: resized balloon %s back to its previous requests %s\n", balloon, formatResources(plan.from))
		return err
	}
	fmt.Fprintf(out, "node %s: effective size is now %s (balloon %s holds %s)\n",
		nodeName, formatResources(subtract(plan.node.Status.Allocatable, plan.to)), balloon, formatResources(plan.to))
	// Open the node only while the record still says what the balloon holds:
	// another set-size may have recorded a larger size meanwhile.
	sizes, err := readBalloonSizes(ctx, client)
	if err != nil {
		return err
	}
	if current := sizes.records[nodeName].raw; current != intended {
		fmt.Fprintf(out, "node %s: its recorded size changed meanwhile to %s; kubectl balloon reconcile opens it once its balloon holds that\n", nodeName, current)
		return nil
	}
	return setBalloonPendingTaint(ctx, client, out, nodeName, false)
}

// keepIntent handles a resize the kubelet has not carried out, without
// --rollback-on-failure: the record keeps the new size, and a node whose
// balloon holds less is closed to workloads until it holds it, as kubectl
// balloon reconcile keeps it; err says what the kubelet answered.
func (o *setSizeOptions) keepIntent(ctx context.Context, client kubernetes.Interface, nodeName string, plan *resizePlan, last *v1.Pod, err error) error {
	if holdsAtLeast(last, plan.to) {
		return fmt.Errorf("%w\nThe new size stays recorded, and kubectl balloon reconcile keeps it", err)
	}
	if err := setBalloonPendingTaint(ctx, client, o.streams.Out, nodeName, true); err != nil {
		return err
	}
	undo := fmt.Sprintf("To undo it, run kubectl balloon set-size %s --cpu %s --memory %s (the previous effective size).", nodeName,
		formatQuantity(v1.ResourceCPU, subtract(plan.node.Status.Allocatable, plan.from)[v1.ResourceCPU]),
		formatQuantity(v1.ResourceMemory, subtract(plan.node.Status.Allocatable, plan.from)[v1.ResourceMemory]))
	if refused := (*refusedError)(nil); errors.As(err, &refused) && refused.reason == v1.PodReasonDeferred {
		return fmt.Errorf("%w\nThe resize stays queued: the kubelet applies it once it fits. Until then node %s is closed to new workloads (taint %s) and its recorded size is the new one, which kubectl balloon reconcile keeps. %s",
			err, nodeName, v1.TaintNodeBalloonPending, undo)
	}
	return fmt.Errorf("%w\nNode %s is closed to new workloads (taint %s) until its balloon holds the new size, which stays recorded and which kubectl balloon reconcile keeps. %s",
		err, nodeName, v1.TaintNodeBalloonPending, undo)
}

// planResize validates everything about the request and computes the new
// balloon requests, before anything is written.
func planResize(ctx context.Context, client kubernetes.Interface, nodeName string, desired v1.ResourceList) (*resizePlan, error) {
	node, err := getNode(ctx, client, nodeName)
	if err != nil {
		return nil, err
	}
	sizes, err := readBalloonSizes(ctx, client)
	if err != nil {
		return nil, err
	}
	pod, err := nodeBalloon(ctx, client, nodeName)
	if err != nil {
		return nil, err
	}
	c, err := balloonContainer(pod)
	if err != nil {
		return nil, err
	}
	plan := &resizePlan{node: node, pod: pod, from: c.Resources.Requests.DeepCopy(), recorded: sizes.records[nodeName].raw}
	// A resource not asked for keeps its request, and so its effective size.
	plan.to = plan.from.DeepCopy()
	for _, name := range balloonResources {
		want, ok := desired[name]
		if !ok {
			continue
		}
		allocatable, ok := node.Status.Allocatable[name]
		if !ok {
			return nil, fmt.Errorf("node %q reports no allocatable %s", nodeName, name)
		}
		if want.Cmp(allocatable) > 0 {
			return nil, fmt.Errorf("desired %s %s is larger than node %q allocatable %s: the balloon would have to be negative",
				name, want.String(), nodeName, formatQuantity(name, allocatable))
		}
		size := allocatable.DeepCopy()
		size.Sub(want)
		if minimum := minBalloon[name]; size.Cmp(minimum) < 0 {
			size = minimum.DeepCopy()
			effective := allocatable.DeepCopy()
			effective.Sub(minimum)
			plan.notes = append(plan.notes, fmt.Sprintf(
				"the balloon does not go below its minimum size, %s %s; the effective %s will be %s, not %s",
				name, minimum.String(), name, formatQuantity(name, effective), want.String()))
		}
		if rounded := kubeletQuantity(name, size); rounded.Cmp(size) != 0 {
			effective := allocatable.DeepCopy()
			effective.Sub(rounded)
			plan.notes = append(plan.notes, fmt.Sprintf(
				"the kubelet accounts %s in whole %s: the balloon is rounded up to %s %s, and the effective %s will be %s, not %s",
				name, kubeletUnit[name], name, rounded.String(), name, effective.String(), want.AsDec().String()))
			size = rounded
		}
		plan.to[name] = size
	}
	return plan, nil
}

// kubeletUnit is the unit in which the kubelet accounts each resource.
var kubeletUnit = map[v1.ResourceName]string{v1.ResourceCPU: "millicores", v1.ResourceMemory: "bytes"}

// kubeletQuantity rounds q up to the kubelet's unit: it admits and actuates
// cpu in millicores and memory in bytes, so a finer balloon would hold more
// than set-size says. Rounding up keeps the effective size at most the one
// asked for.
func kubeletQuantity(name v1.ResourceName, q resource.Quantity) resource.Quantity {
	if name == v1.ResourceCPU {
		return *resource.NewMilliQuantity(q.MilliValue(), q.Format)
	}
	return *resource.NewQuantity(q.Value(), q.Format)
}

// nodeBalloon returns the one balloon on the node.
func nodeBalloon(ctx context.Context, client kubernetes.Interface, nodeName string) (*v1.Pod, error) {
	byNode, err := listBalloons(ctx, client)
	if err != nil {
		return nil, err
	}
	balloons := byNode[nodeName]
	if balloons == nil {
		balloons = &nodeBalloons{}
	}
	switch len(balloons.bound) {
	case 0:
		if len(balloons.unscheduled) > 0 {
			pod := balloons.unscheduled[0]
			return nil, fmt.Errorf("node %q has no balloon running: balloon %s/%s is %s", nodeName, pod.Namespace, pod.Name, unscheduledState(pod))
		}
		return nil, fmt.Errorf("node %q has no balloon (a pod in %s with label %s=true and priority class %s)",
			nodeName, metav1.NamespaceSystem, v1.LabelBalloonPod, scheduling.SystemNodeBalloon)
	case 1:
		return balloons.bound[0], nil
	default:
		names := make([]string, 0, len(balloons.bound))
		for _, pod := range balloons.bound {
			names = append(names, pod.Namespace+"/"+pod.Name)
		}
		return nil, fmt.Errorf("node %q has %d balloons (%s); expected exactly one", nodeName, len(balloons.bound), strings.Join(names, ", "))
	}
}

// balloonContainer returns the balloon's only container, checking that it is
// the shape the balloon DaemonSet creates: one container, requests only.
func balloonContainer(pod *v1.Pod) (*v1.Container, error) {
	if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != balloonContainerName {
		names := make([]string, 0, len(pod.Spec.Containers))
		for _, c := range pod.Spec.Containers {
			names = append(names, c.Name)
		}
		return nil, fmt.Errorf("balloon %s/%s must have exactly one container named %q, has [%s]",
			pod.Namespace, pod.Name, balloonContainerName, strings.Join(names, ", "))
	}
	if pod.Spec.Resources != nil {
		return nil, fmt.Errorf("balloon %s/%s sets pod-level resources; a balloon must set its container's requests only, which are what it holds",
			pod.Namespace, pod.Name)
	}
	c := &pod.Spec.Containers[0]
	if len(c.Resources.Limits) > 0 {
		return nil, fmt.Errorf("balloon %s/%s container %q sets limits; a balloon must set requests only",
			pod.Namespace, pod.Name, balloonContainerName)
	}
	return c, nil
}

// resizeBalloon changes the balloon container's requests from "from" to "to"
// through the resize subresource. It retries conflicts with unrelated writes
// (such as kubelet status updates) but does not overwrite someone else's resize;
// a balloon that already asks for "to" is left as it is.
func resizeBalloon(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, from, to v1.ResourceList) (*v1.Pod, error) {
	pods := client.CoreV1().Pods(pod.Namespace)
	var resized *v1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := balloonContainer(pod)
		if err != nil {
			return err
		}
		if equalResources(c.Resources.Requests, to) && len(c.Resources.Requests) == len(to) {
			// Another writer of the same record, reconcile, got there first.
			resized = pod
			return nil
		}
		if !apiequality.Semantic.DeepEqual(c.Resources.Requests, from) {
			return fmt.Errorf("balloon %s/%s was resized by someone else meanwhile (requests %s, expected %s); not overwriting",
				pod.Namespace, pod.Name, formatResources(c.Resources.Requests), formatResources(from))
		}
		update := pod.DeepCopy()
		update.Spec.Containers[0].Resources.Requests = to.DeepCopy()
		resized, err = pods.UpdateResize(ctx, pod.Name, update, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			latest, getErr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			pod = latest
		}
		return err
	})
	return resized, err
}

// waitForResize polls the balloon until the kubelet has answered the resize
// that produced resized, or the timeout passes. It returns the last pod seen.
func (o *setSizeOptions) waitForResize(ctx context.Context, client kubernetes.Interface, resized *v1.Pod, want v1.ResourceList) (*v1.Pod, error) {
	pods := client.CoreV1().Pods(resized.Namespace)
	deadline := o.clock.Now().Add(o.timeout)
	pod := resized
	for {
		done, state, err := resizeVerdict(pod, resized.Generation, want)
		if done || err != nil {
			return pod, err
		}
		if !o.clock.Now().Before(deadline) {
			return pod, fmt.Errorf("timed out after %v waiting for the kubelet to resize balloon %s/%s: %s",
				o.timeout, pod.Namespace, pod.Name, state)
		}
		o.clock.Sleep(o.pollInterval)
		latest, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return pod, fmt.Errorf("waiting for the kubelet to resize balloon %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		pod = latest
	}
}

// refusedError is the kubelet's answer to a resize it did not carry out.
type refusedError struct {
	pod, reason, message string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the kubelet did not resize balloon %s: %s: %s", e.pod, e.reason, e.message)
}

// resizeVerdict tells whether the kubelet has carried out the resize of
// generation gen (done), refused it (err), or what it is still waiting for.
// Conditions from an earlier generation answer an earlier resize, not this one.
func resizeVerdict(pod *v1.Pod, gen int64, want v1.ResourceList) (bool, string, error) {
	pending := resizeCondition(pod, v1.PodResizePending)
	if pending != nil && pending.ObservedGeneration >= gen {
		return false, "", &refusedError{pod: pod.Namespace + "/" + pod.Name, reason: pending.Reason, message: pending.Message}
	}
	if pending != nil {
		return false, fmt.Sprintf("the kubelet has not answered yet (its last verdict, on an earlier resize: %s: %s)",
			pending.Reason, pending.Message), nil
	}
	if inProgress := resizeCondition(pod, v1.PodResizeInProgress); inProgress != nil {
		state := "the kubelet is still carrying out the resize"
		if inProgress.Reason != "" {
			state += fmt.Sprintf(" (%s: %s)", inProgress.Reason, inProgress.Message)
		}
		return false, state, nil
	}
	status := containerStatus(pod, balloonContainerName)
	if status == nil || status.Resources == nil {
		return false, "the kubelet reports no container resources yet", nil
	}
	if !equalResources(status.Resources.Requests, want) {
		return false, fmt.Sprintf("the kubelet has not answered yet (the balloon runs with %s)", formatResources(status.Resources.Requests)), nil
	}
	return true, "", nil
}
