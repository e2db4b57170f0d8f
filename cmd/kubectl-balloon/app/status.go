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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	resourcehelper "k8s.io/component-helpers/resource"
)

// statusAPIVersion and statusKind name what status prints for each node with
// -o json|yaml|name|jsonpath: a client-side kind, as kubectl's own
// configuration types are, never served by an API server.
const (
	statusAPIVersion = "balloon.kubectl.k8s.io/v1alpha1"
	statusKind       = "NodeBalloonStatus"
)

func newCmdStatus(d deps) *cobra.Command {
	printFlags := genericclioptions.NewPrintFlags("")
	cmd := &cobra.Command{
		Use:   "status [NODE...] [-o wide|json|yaml|name|jsonpath=...]",
		Short: "Show each node's allocatable, balloon and effective size",
		Long: `Show, for each node (all nodes if none are given), its allocatable capacity,
what its balloon holds now, the resulting effective size that workloads may
use, the size recorded for it, whether it carries the taint
` + v1.TaintNodeBalloonPending + `, and what is pending: a balloon resize that the kubelet
has not carried out yet, or a balloon that is not scheduled or not running yet.

The effective size is what the scheduler leaves to workloads: while a resize
is pending it counts the larger of what the balloon asks for and what it holds.
In the table, memory is shown rounded down to a mebibyte; -o wide adds the
balloons' names, and the other output formats print exact quantities, one
` + statusKind + ` per node.`,
		Example: `  # The nodes whose balloon-pending taint keeps workloads off
  kubectl balloon status -o jsonpath='{range .items[?(@.taint)]}{.metadata.name}{"\n"}{end}'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			printStatus, err := statusPrinter(printFlags)
			if err != nil {
				return err
			}
			client, err := d.newClient()
			if err != nil {
				return err
			}
			list, err := nodeStatuses(cmd.Context(), client, d.streams.ErrOut, args)
			if err != nil {
				return err
			}
			return printStatus(list, d.streams.Out)
		},
	}
	printFlags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (wide, %s); a table if not given.", strings.Join(printFlags.AllowedFormats(), ", "))
	return cmd
}

// statusPrinter returns what prints the statuses for the output flags: the
// table for none or wide, as kubectl get does, and kubectl's printers for the
// rest.
func statusPrinter(printFlags *genericclioptions.PrintFlags) (func([]nodeStatus, io.Writer) error, error) {
	switch *printFlags.OutputFormat {
	case "", "wide":
		wide := *printFlags.OutputFormat == "wide"
		return func(list []nodeStatus, out io.Writer) error { return printTable(list, out, wide) }, nil
	}
	printer, err := printFlags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return nil, fmt.Errorf("unknown output format %q: use one of wide, %s, or leave -o out for a table",
			*printFlags.OutputFormat, strings.Join(printFlags.AllowedFormats(), ", "))
	}
	if err != nil {
		return nil, err
	}
	return func(list []nodeStatus, out io.Writer) error {
		objects, err := toUnstructured(list)
		if err != nil {
			return err
		}
		return printer.PrintObj(objects, out)
	}, nil
}

// toUnstructured turns the statuses into a List, as kubectl get prints
// several objects.
func toUnstructured(list []nodeStatus) (*unstructured.UnstructuredList, error) {
	objects := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, status := range list {
		data, err := json.Marshal(status)
		if err != nil {
			return nil, err
		}
		var object unstructured.Unstructured
		if err := object.UnmarshalJSON(data); err != nil {
			return nil, err
		}
		objects.Items = append(objects.Items, object)
	}
	return objects, nil
}

// nodeStatus is a node's sizes and the state of its balloons.
type nodeStatus struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        statusMetadata  `json:"metadata"`
	Node            string          `json:"node"`
	Allocatable     v1.ResourceList `json:"allocatable"`
	// Balloon is what the node's bound balloons hold, as the kubelet
	// allocated it; absent without one.
	Balloon v1.ResourceList `json:"balloon,omitempty"`
	// Effective is allocatable less the balloons as the scheduler counts
	// them, never below zero.
	Effective v1.ResourceList `json:"effective"`
	// Recorded is the size recorded for the node (the balloon's requests);
	// absent without a record of this node.
	Recorded v1.ResourceList `json:"recorded,omitempty"`
	// RecordedText is the node's entry when it does not parse.
	RecordedText string `json:"recordedText,omitempty"`
	// Taint is the node's balloon-pending taint, which keeps workloads off
	// until its balloon holds its recorded size.
	Taint    *v1.Taint       `json:"taint,omitempty"`
	Balloons []balloonStatus `json:"balloons,omitempty"`
}

// statusMetadata names the node, so that -o name and jsonpath find it where
// they find any object's name.
type statusMetadata struct {
	Name string `json:"name"`
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

// nodeStatuses reads the nodes, their balloons and their records. Without the
// record, status still shows the rest and says so on errOut.
func nodeStatuses(ctx context.Context, client kubernetes.Interface, errOut io.Writer, nodeNames []string) ([]nodeStatus, error) {
	nodes, err := getNodes(ctx, client, nodeNames)
	if err != nil {
		return nil, err
	}
	balloons, err := listBalloons(ctx, client)
	if err != nil {
		return nil, err
	}
	sizes, err := readBalloonSizes(ctx, client)
	if err != nil {
		fmt.Fprintf(errOut, "warning: %v\n", err)
	}
	list := []nodeStatus{}
	for _, node := range nodes {
		status := statusOf(node, balloons[node.Name])
		if entry, ok := sizes.of(node); ok {
			status.Recorded = entry.size
			if entry.size == nil {
				status.RecordedText = entry.raw
			}
		}
		list = append(list, status)
	}
	return list, nil
}

func printTable(list []nodeStatus, out io.Writer, wide bool) error {
	w := printers.GetNewTabWriter(out)
	header := "NODE\tALLOCATABLE\tBALLOON\tEFFECTIVE\tRECORDED\tTAINT"
	if wide {
		header += "\tBALLOONS"
	}
	fmt.Fprintln(w, header+"\tPENDING")
	for _, status := range list {
		fmt.Fprintln(w, strings.Join(status.row(wide), "\t"))
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
	status := nodeStatus{
		TypeMeta:    metav1.TypeMeta{APIVersion: statusAPIVersion, Kind: statusKind},
		Metadata:    statusMetadata{Name: node.Name},
		Node:        node.Name,
		Allocatable: node.Status.Allocatable,
		Effective:   node.Status.Allocatable,
	}
	for _, t := range node.Spec.Taints {
		if t.Key == v1.TaintNodeBalloonPending {
			status.Taint = t.DeepCopy()
		}
	}
	if balloons == nil {
		return status
	}
	if len(balloons.bound) > 0 {
		status.Balloon = v1.ResourceList{}
	}
	counted := v1.ResourceList{}
	for _, pod := range balloons.bound {
		b := balloonStatus{Name: pod.Name, State: balloonRunning, Held: heldResources(pod), PendingResize: resizeOf(pod)}
		if pod.Status.Phase != v1.PodRunning {
			b.State = balloonStarting
		}
		for name, q := range b.Held {
			addTo(status.Balloon, name, q)
		}
		// The scheduler's count: during a pending resize, the larger of
		// what the balloon asks for and what it holds.
		requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
		for _, name := range balloonResources {
			addTo(counted, name, requests[name])
		}
		status.Balloons = append(status.Balloons, b)
	}
	for _, pod := range balloons.unscheduled {
		status.Balloons = append(status.Balloons, balloonStatus{Name: pod.Name, State: balloonUnscheduled, Message: unscheduledState(pod)})
	}
	if status.Balloon != nil {
		status.Effective = subtract(node.Status.Allocatable, counted)
	}
	return status
}

// row is the node's line of the status table.
func (s nodeStatus) row(wide bool) []string {
	recorded := "-"
	switch {
	case s.Recorded != nil:
		recorded = formatResources(s.Recorded)
	case s.RecordedText != "":
		recorded = "invalid"
	}
	taint := "-"
	if s.Taint != nil {
		taint = string(s.Taint.Effect)
	}
	row := []string{s.Node, formatResources(s.Allocatable), "-", formatResources(s.Effective), recorded, taint}
	if s.Balloon != nil {
		row[2] = formatResources(s.Balloon)
	}
	if wide {
		names := make([]string, 0, len(s.Balloons))
		for _, b := range s.Balloons {
			names = append(names, b.Name)
		}
		if len(names) == 0 {
			names = append(names, "-")
		}
		row = append(row, strings.Join(names, ","))
	}
	if len(s.Balloons) == 0 {
		return append(row, "no balloon")
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
	return append(row, pendingText)
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
