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
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/yaml"
)

func newCmdStatus(d deps) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [NODE...] [-o json|yaml]",
		Short: "Show each node's allocatable, balloon and effective size",
		Long: `Show, for each node (all nodes if none are given), its allocatable capacity,
what its balloon holds now, the resulting effective size that workloads may
use, and what is pending: a balloon resize that the kubelet has not carried
out yet, or a balloon that is not scheduled or not running yet.
In the table, memory is shown rounded down to a mebibyte; -o json and -o yaml
print exact quantities.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("unknown output format %q: use json or yaml, or leave -o out for a table", output)
			}
			client, err := d.newClient()
			if err != nil {
				return err
			}
			return runStatus(cmd.Context(), client, d.streams.Out, args, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml; a table if not given")
	return cmd
}

// statusList is what status -o json|yaml prints.
type statusList struct {
	Items []nodeStatus `json:"items"`
}

// nodeStatus is a node's sizes and the state of its balloons.
type nodeStatus struct {
	Node        string          `json:"node"`
	Allocatable v1.ResourceList `json:"allocatable"`
	// Balloon is what the node's bound balloons hold; absent without one.
	Balloon   v1.ResourceList `json:"balloon,omitempty"`
	Effective v1.ResourceList `json:"effective"`
	Balloons  []balloonStatus `json:"balloons,omitempty"`
}

// balloonStatus is one balloon: Running, Starting (bound, not running yet) or
// Unscheduled, and the resize it asks for but does not hold yet.
type balloonStatus struct {
	Name          string          `json:"name"`
	State         string          `json:"state"`
	Message       string          `json:"message,omitempty"`
	Held          v1.ResourceList `json:"held,omitempty"`
	PendingResize *pendingResize  `json:"pendingResize,omitempty"`
}

// pendingResize is a resize the kubelet has not carried out: Reason and
// Message are its PodResizePending condition's, empty while in progress.
type pendingResize struct {
	Requests v1.ResourceList `json:"requests"`
	Reason   string          `json:"reason,omitempty"`
	Message  string          `json:"message,omitempty"`
}

const (
	balloonRunning     = "Running"
	balloonStarting    = "Starting"
	balloonUnscheduled = "Unscheduled"
)

func runStatus(ctx context.Context, client kubernetes.Interface, out io.Writer, nodeNames []string, output string) error {
	nodes, err := getNodes(ctx, client, nodeNames)
	if err != nil {
		return err
	}
	balloons, err := listBalloons(ctx, client)
	if err != nil {
		return err
	}
	list := statusList{Items: []nodeStatus{}}
	for _, node := range nodes {
		list.Items = append(list.Items, statusOf(node, balloons[node.Name]))
	}
	switch output {
	case "json":
		data, err := json.MarshalIndent(list, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(list)
		if err != nil {
			return err
		}
		_, err = out.Write(data)
		return err
	}
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "NODE\tALLOCATABLE\tBALLOON\tEFFECTIVE\tPENDING")
	for _, status := range list.Items {
		fmt.Fprintln(w, strings.Join(status.row(), "\t"))
	}
	return w.Flush()
}

// getNodes returns the named nodes in the given order, or all nodes by name.
func getNodes(ctx context.Context, client kubernetes.Interface, names []string) ([]*v1.Node, error) {
	if len(names) == 0 {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
		nodes := make([]*v1.Node, 0, len(list.Items))
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		return nodes, nil
	}
	nodes := make([]*v1.Node, 0, len(names))
	for _, name := range names {
		node, err := getNode(ctx, client, name)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

func getNode(ctx context.Context, client kubernetes.Interface, name string) (*v1.Node, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting node %q: %w", name, err)
	}
	return node, nil
}

func statusOf(node *v1.Node, balloons *nodeBalloons) nodeStatus {
	status := nodeStatus{Node: node.Name, Allocatable: node.Status.Allocatable, Effective: node.Status.Allocatable}
	if balloons == nil {
		return status
	}
	if len(balloons.bound) > 0 {
		status.Balloon = v1.ResourceList{}
	}
	for _, pod := range balloons.bound {
		b := balloonStatus{Name: pod.Name, State: balloonRunning, Held: heldResources(pod), PendingResize: resizeOf(pod)}
		if pod.Status.Phase != v1.PodRunning {
			b.State = balloonStarting
		}
		for name, q := range b.Held {
			addTo(status.Balloon, name, q)
		}
		status.Balloons = append(status.Balloons, b)
	}
	for _, pod := range balloons.unscheduled {
		status.Balloons = append(status.Balloons, balloonStatus{Name: pod.Name, State: balloonUnscheduled, Message: unscheduledState(pod)})
	}
	if status.Balloon != nil {
		status.Effective = subtract(node.Status.Allocatable, status.Balloon)
	}
	return status
}

// row is the node's line of the status table.
func (s nodeStatus) row() []string {
	if len(s.Balloons) == 0 {
		return []string{s.Node, formatResources(s.Allocatable), "-", formatResources(s.Effective), "no balloon"}
	}
	balloon := "-"
	if s.Balloon != nil {
		balloon = formatResources(s.Balloon)
	}
	var pending []string
	for _, b := range s.Balloons {
		var p string
		switch {
		case b.State == balloonUnscheduled:
			p = "balloon " + b.Message
		case b.PendingResize != nil && b.PendingResize.Reason != "":
			p = fmt.Sprintf("%s %s: %s", formatResources(b.PendingResize.Requests), b.PendingResize.Reason, b.PendingResize.Message)
		case b.PendingResize != nil:
			p = formatResources(b.PendingResize.Requests) + " in progress"
		case b.State == balloonStarting:
			p = "balloon not running yet"
		default:
			continue
		}
		// A node should have one balloon; if it has more, say whose state it is.
		if len(s.Balloons) > 1 {
			p = b.Name + ": " + p
		}
		pending = append(pending, p)
	}
	pendingText := "-"
	if len(pending) > 0 {
		pendingText = strings.Join(pending, "; ")
	}
	return []string{s.Node, formatResources(s.Allocatable), balloon, formatResources(s.Effective), pendingText}
}

// resizeOf returns the resize the balloon asks for but does not hold yet, or
// nil if there is none.
func resizeOf(pod *v1.Pod) *pendingResize {
	desired := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if equalResources(desired, heldResources(pod)) {
		return nil
	}
	resize := &pendingResize{Requests: v1.ResourceList{}}
	for _, name := range balloonResources {
		resize.Requests[name] = desired[name]
	}
	if c := resizeCondition(pod, v1.PodResizePending); c != nil {
		resize.Reason, resize.Message = c.Reason, c.Message
	}
	return resize
}
