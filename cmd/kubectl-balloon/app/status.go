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
)

func newCmdStatus(d deps) *cobra.Command {
	return &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show each node's allocatable, balloon and effective size",
		Long: `Show, for each node (all nodes if none are given), its allocatable capacity,
what its balloon holds now, the resulting effective size that workloads may
use, and any balloon resize that the kubelet has not carried out yet.
Memory is shown rounded down to a mebibyte.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := d.newClient()
			if err != nil {
				return err
			}
			return runStatus(cmd.Context(), client, d.streams.Out, args)
		},
	}
}

func runStatus(ctx context.Context, client kubernetes.Interface, out io.Writer, nodeNames []string) error {
	nodes, err := getNodes(ctx, client, nodeNames)
	if err != nil {
		return err
	}
	balloons, err := listBalloons(ctx, client, "")
	if err != nil {
		return err
	}
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "NODE\tALLOCATABLE\tBALLOON\tEFFECTIVE\tPENDING")
	for _, node := range nodes {
		fmt.Fprintln(w, strings.Join(statusRow(node, balloons[node.Name]), "\t"))
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

func statusRow(node *v1.Node, balloons []*v1.Pod) []string {
	allocatable := node.Status.Allocatable
	if len(balloons) == 0 {
		return []string{node.Name, formatResources(allocatable), "-", formatResources(allocatable), "no balloon"}
	}
	held := v1.ResourceList{}
	var pending []string
	for _, pod := range balloons {
		podHeld := heldResources(pod)
		for name, q := range podHeld {
			addTo(held, name, q)
		}
		if p := pendingResize(pod, podHeld); p != "" {
			// A node should have one balloon; if it has more, say whose resize it is.
			if len(balloons) > 1 {
				p = pod.Name + ": " + p
			}
			pending = append(pending, p)
		}
	}
	pendingText := "-"
	if len(pending) > 0 {
		pendingText = strings.Join(pending, "; ")
	}
	return []string{node.Name, formatResources(allocatable), formatResources(held), formatResources(subtract(allocatable, held)), pendingText}
}

// pendingResize describes a resize the balloon asks for but does not hold
// yet, or returns "" if there is none.
func pendingResize(pod *v1.Pod, held v1.ResourceList) string {
	desired := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if equalResources(desired, held) {
		return ""
	}
	if c := resizeCondition(pod, v1.PodResizePending); c != nil {
		return fmt.Sprintf("%s %s: %s", formatResources(desired), c.Reason, c.Message)
	}
	return formatResources(desired) + " in progress"
}
