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

package upgradelane

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kube-carry/kube-carry/hack/internal/kind"
)

// vpaName is step b's VPA: node-scoped, on the lane's DaemonSet.
const vpaName = "agent"

// vpaRecommenderArgs shorten the recommender's periods so that every node
// has a recommendation of its own within minutes (the defaults: an hour of
// history, a loop a minute), as the VPA's end-to-end test does.
var vpaRecommenderArgs = []string{"--recommender-interval=15s", "--node-scope-min-history=1m"}

// nodeScopedVPA is step b's VPA on the lane's DaemonSet. Its update mode is
// Initial: the admission controller sets each new pod's requests from its
// node's recommendation and the updater moves no running pod, so the
// workloads' check (no pod replaced but by a drain) holds with the VPA on.
func nodeScopedVPA() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.k8s.io/v1",
		"kind":       "VerticalPodAutoscaler",
		"metadata":   map[string]any{"name": vpaName, "namespace": Namespace},
		"spec": map[string]any{
			"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"},
			"scope":        "Node",
			"updatePolicy": map[string]any{"updateMode": "Initial"},
		},
	}}
}

// VPANodes are the nodes a node-scoped VPA has history of: those with a
// recommendation of their own, and those with a checkpoint. The values move
// with every sample; the nodes are what a round trip must keep.
type VPANodes struct{ Recommended, Checkpointed []string }

func (n VPANodes) String() string {
	return fmt.Sprintf("recommended on %v, checkpointed on %v", n.Recommended, n.Checkpointed)
}

// readVPANodes reads the nodes of step b's VPA's history.
func readVPANodes(ctx context.Context, client dynamic.Interface) (VPANodes, error) {
	h, err := kind.ReadVPAHistory(ctx, client, Namespace, vpaName)
	if err != nil {
		return VPANodes{}, err
	}
	return VPANodes{Recommended: slices.Sorted(maps.Keys(h.Targets)), Checkpointed: h.Checkpointed}, nil
}

// useVPA creates step b's VPA and waits until each of nodes has a
// recommendation and a checkpoint of its own.
func useVPA(ctx context.Context, client dynamic.Interface, nodes []string) (VPANodes, error) {
	if _, err := client.Resource(kind.VPAResource).Namespace(Namespace).Create(ctx, nodeScopedVPA(), metav1.CreateOptions{}); err != nil {
		return VPANodes{}, fmt.Errorf("the node-scoped VPA: %w", err)
	}
	want := VPANodes{Recommended: slices.Sorted(slices.Values(nodes)), Checkpointed: slices.Sorted(slices.Values(nodes))}
	var got VPANodes
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = readVPANodes(ctx, client)
		return err == nil && len(CheckVPA(got, want)) == 0, nil
	}); err != nil {
		return got, fmt.Errorf("the node-scoped VPA's history not on every node within 10 minutes: %s, want %s", got, want)
	}
	return got, nil
}

// CheckVPA says where a node-scoped VPA's history differs from want by node.
func CheckVPA(got, want VPANodes) []string {
	var problems []string
	if !slices.Equal(got.Recommended, want.Recommended) {
		problems = append(problems, fmt.Sprintf("the VPA's per-node recommendations are on %s, want %s", nodeList(got.Recommended), nodeList(want.Recommended)))
	}
	if !slices.Equal(got.Checkpointed, want.Checkpointed) {
		problems = append(problems, fmt.Sprintf("the VPA's per-node checkpoints are on %s, want %s", nodeList(got.Checkpointed), nodeList(want.Checkpointed)))
	}
	return problems
}

func nodeList(nodes []string) string {
	if len(nodes) == 0 {
		return "no node"
	}
	return strings.Join(nodes, ", ")
}
