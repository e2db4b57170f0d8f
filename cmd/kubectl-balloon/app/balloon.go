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

// Package app implements kubectl-balloon, a kubectl plugin that shows and sets
// how much of each node's capacity its balloon pod holds (KEP-5620).
package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	daemonutil "k8s.io/kubernetes/pkg/controller/daemon/util"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/utils/clock"
)

const (
	// balloonContainerName is the name of the only container of a balloon pod.
	balloonContainerName = "balloon"
	defaultPollInterval  = 500 * time.Millisecond
	mebibyte             = 1 << 20
)

// minBalloon is the smallest balloon: without a non-zero request the pod
// would be BestEffort, and a resize may not change a pod's QoS class.
var minBalloon = v1.ResourceList{
	v1.ResourceCPU:    resource.MustParse("1m"),
	v1.ResourceMemory: kubetypes.UnsizedBalloonMemory,
}

// balloonResources are the resources a balloon holds and this plugin manages.
var balloonResources = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}

// deps is what the commands take from the outside world, so tests can
// replace the cluster and the clock.
type deps struct {
	streams   genericiooptions.IOStreams
	newClient func() (kubernetes.Interface, error)
	// newRecorder returns the recorder of the agent's events and what stops it.
	newRecorder  func(kubernetes.Interface) (record.EventRecorder, func())
	clock        clock.Clock
	pollInterval time.Duration
}

// Run executes kubectl-balloon with args and returns the process exit code.
func Run(streams genericiooptions.IOStreams, args []string) int {
	configFlags := genericclioptions.NewConfigFlags(true)
	// Balloons always live in kube-system; a --namespace flag would mislead.
	configFlags.Namespace = nil
	cmd := newCmdBalloon(deps{
		streams: streams,
		newClient: func() (kubernetes.Interface, error) {
			config, err := configFlags.ToRESTConfig()
			if err != nil {
				return nil, err
			}
			return kubernetes.NewForConfig(config)
		},
		newRecorder: func(client kubernetes.Interface) (record.EventRecorder, func()) {
			broadcaster := record.NewBroadcaster()
			broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
			return broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubectl-balloon"}), broadcaster.Shutdown
		},
		clock:        clock.RealClock{},
		pollInterval: defaultPollInterval,
	})
	configFlags.AddFlags(cmd.PersistentFlags())
	return execute(cmd, args, streams.ErrOut)
}

// execute runs cmd and reports a failure the way kubectl does.
func execute(cmd *cobra.Command, args []string, errOut io.Writer) int {
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(errOut, "error: %v\n", err)
		return 1
	}
	return 0
}

func newCmdBalloon(d deps) *cobra.Command {
	cmd := &cobra.Command{
		Use: "kubectl-balloon",
		// kubectl runs the plugin for "kubectl balloon"; show that in help.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl balloon"},
		Short:       "Show and set how much node capacity the balloon pods hold",
		Long: `Show and set how much node capacity the balloon pods hold.

A balloon pod (namespace kube-system, label ` + v1.LabelBalloonPod + `=true, priority
class ` + scheduling.SystemNodeBalloon + `) holds node capacity that does not exist:
upsizing it shrinks the node, downsizing it grows the node. The effective size
of a node is its allocatable capacity minus what its balloon holds.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	cmd.SetOut(d.streams.Out)
	cmd.SetErr(d.streams.ErrOut)
	cmd.AddCommand(newCmdStatus(d), newCmdSetSize(d), newCmdReconcile(d))
	return cmd
}

// isBalloon mirrors the kubelet's definition: the label alone, or the
// priority class alone, does not make a balloon.
func isBalloon(pod *v1.Pod) bool {
	return pod.Namespace == metav1.NamespaceSystem &&
		pod.Labels[v1.LabelBalloonPod] == "true" &&
		pod.Spec.PriorityClassName == scheduling.SystemNodeBalloon
}

// nodeBalloons are the balloons of one node, each list sorted by pod name.
// Pods that ended hold no capacity and are in none of them.
type nodeBalloons struct {
	// bound are bound to the node and not being deleted.
	bound []*v1.Pod
	// unscheduled are the DaemonSet's balloons for the node, not bound yet.
	unscheduled []*v1.Pod
	// held are deleted balloons that the protection finalizer holds: the
	// kubelet keeps them running until the resize agent lets them go (see
	// reconcile).
	held []*v1.Pod
}

// listBalloons returns the balloons by node name: bound ones by their node,
// unscheduled ones by the node the DaemonSet created them for. A balloon that
// is being deleted is in neither list, but in held while the protection
// finalizer holds it.
func listBalloons(ctx context.Context, client kubernetes.Interface) (map[string]*nodeBalloons, error) {
	list, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: balloonSelector})
	if err != nil {
		return nil, fmt.Errorf("listing balloon pods: %w", err)
	}
	pods := make([]*v1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return balloonsByNode(pods), nil
}

// balloonSelector selects the balloons among the pods of kube-system.
const balloonSelector = v1.LabelBalloonPod + "=true"

// balloonsByNode sorts pods, which may be anything labelled as a balloon, into
// the balloons of each node, as listBalloons returns them.
func balloonsByNode(pods []*v1.Pod) map[string]*nodeBalloons {
	pods = slices.Clone(pods)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	byNode := map[string]*nodeBalloons{}
	of := func(node string) *nodeBalloons {
		if byNode[node] == nil {
			byNode[node] = &nodeBalloons{}
		}
		return byNode[node]
	}
	for _, pod := range pods {
		if !isBalloon(pod) {
			continue
		}
		node := pod.Spec.NodeName
		if node == "" {
			node, _ = daemonutil.GetTargetNodeName(pod)
		}
		if pod.DeletionTimestamp != nil {
			if node != "" && slices.Contains(pod.Finalizers, kubetypes.BalloonProtectionFinalizer) {
				of(node).held = append(of(node).held, pod)
			}
			continue
		}
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		if pod.Spec.NodeName != "" {
			of(pod.Spec.NodeName).bound = append(of(pod.Spec.NodeName).bound, pod)
		} else if node != "" {
			of(node).unscheduled = append(of(node).unscheduled, pod)
		}
	}
	return byNode
}

// unscheduledState says why a balloon is not bound yet, from its
// PodScheduled condition when the scheduler has given one.
func unscheduledState(pod *v1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Message != "" {
			return fmt.Sprintf("not scheduled yet (%s: %s)", c.Reason, c.Message)
		}
	}
	return "not scheduled yet"
}

// heldResources is what the kubelet has granted the pod: the allocated (or
// else actuated) resources when it reports them, the spec requests otherwise.
func heldResources(pod *v1.Pod) v1.ResourceList {
	held := v1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		status := containerStatus(pod, c.Name)
		for _, name := range balloonResources {
			q, ok := c.Resources.Requests[name]
			if status != nil {
				if allocated, found := status.AllocatedResources[name]; found {
					q, ok = allocated, true
				} else if status.Resources != nil {
					if actual, found := status.Resources.Requests[name]; found {
						q, ok = actual, true
					}
				}
			}
			if ok {
				addTo(held, name, q)
			}
		}
	}
	return held
}

func containerStatus(pod *v1.Pod, name string) *v1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// resizeCondition returns the pod's true condition of the given type, if any.
func resizeCondition(pod *v1.Pod, conditionType v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == conditionType && c.Status == v1.ConditionTrue {
			return c
		}
	}
	return nil
}

func addTo(list v1.ResourceList, name v1.ResourceName, q resource.Quantity) {
	sum := list[name].DeepCopy()
	sum.Add(q)
	list[name] = sum
}

// subtract returns a − b for the balloon resources, and zero where b is
// larger: balloons can hold more than a node whose allocatable shrank, which
// leaves workloads nothing, not a negative size.
func subtract(a, b v1.ResourceList) v1.ResourceList {
	diff := v1.ResourceList{}
	for _, name := range balloonResources {
		q := a[name].DeepCopy()
		q.Sub(b[name])
		if q.Sign() < 0 {
			q = *resource.NewQuantity(0, q.Format)
		}
		diff[name] = q
	}
	return diff
}

// equalResources compares the balloon resources by value, so "1Gi" equals "1024Mi".
func equalResources(a, b v1.ResourceList) bool {
	for _, name := range balloonResources {
		q := a[name]
		if q.Cmp(b[name]) != 0 {
			return false
		}
	}
	return true
}

// formatResources prints the balloon resources as "cpu=Q,memory=Q".
func formatResources(list v1.ResourceList) string {
	parts := make([]string, 0, len(balloonResources))
	for _, name := range balloonResources {
		parts = append(parts, fmt.Sprintf("%s=%s", name, formatQuantity(name, list[name])))
	}
	return strings.Join(parts, ",")
}

// formatQuantity prints cpu in cores or millicores ("4", "3500m") and memory
// in whole Mi or Gi ("4Gi", "15884Mi"), rounded down to a mebibyte.
func formatQuantity(name v1.ResourceName, q resource.Quantity) string {
	if name == v1.ResourceMemory {
		return resource.NewQuantity(q.Value()/mebibyte*mebibyte, resource.BinarySI).String()
	}
	return resource.NewMilliQuantity(q.MilliValue(), resource.DecimalSI).String()
}
