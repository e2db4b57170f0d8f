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
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The node-balloon addon's objects the lane handles by name
// (cluster/addons/node-balloon).
const (
	balloonNamespace = metav1.NamespaceSystem
	balloonSelector  = "node.kubernetes.io/balloon=true"
	balloonSizes     = "node-balloon-sizes"
	balloonDaemonSet = "balloon-daemonset.yaml"
	balloonAgent     = "balloon-resizer-deployment.yaml"
	balloonAgentName = "node-balloon-resizer"
	balloonTaint     = "node.kubernetes.io/balloon-pending"
	balloonFinalizer = "kubernetes.io/balloon-protection"
	balloonRBAC      = "balloon-resizer-rbac.yaml"
	// policyRefresh is how long kube-apiserver takes to act on an admission
	// policy or its parameters once written (it reloads them every second).
	policyRefresh     = 3 * time.Second
	balloonContainer  = "balloon"
	balloonAddonFiles = "*.yaml"
)

// Balloons is the node-balloon addon (KEP-5620) on the lane's cluster: applied
// and its balloons sized on the workers in step b; turned off as the KEP's
// downgrade section says before the features (step c) and the binaries (step
// e1) are rolled back, its records kept as a user keeps them (a copy of the
// ConfigMap, in Saved); applied again with those records after them (steps d
// and e2), where the addon's size policy creates every balloon at its node's
// recorded size.
type Balloons struct {
	Client kubernetes.Interface
	// Resizer writes the records as the addon's policy lets only a resizer
	// (group node-balloon-resizers) or system:masters do; the lane's own
	// identity, kubeadm's admin, is neither.
	Resizer kubernetes.Interface
	// Kubectl runs the fork's kubectl, and Plugin its kubectl-balloon, on the
	// lane's cluster.
	Kubectl, Plugin func(ctx context.Context, args ...string) error
	// Addon is cluster/addons/node-balloon of the fork's tree.
	Addon string
	// Saved is the file Off keeps the records in.
	Saved string
}

// On applies the addon with the records Off saved (none before the first Off)
// and waits until every node has one running balloon at its recorded size,
// the agent runs and no node is left tainted.
func (b *Balloons) On(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(b.Addon, balloonAddonFiles))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("the node-balloon addon in %s: %d files, %v", b.Addon, len(files), err)
	}
	// The RBAC goes first, so that the agent's pods find their service
	// account; the records go in before the DaemonSet creates the balloons,
	// so that each is created at its size (balloon-size-policy.yaml).
	slices.SortStableFunc(files, func(a, b string) int {
		return boolOrder(filepath.Base(b) == balloonRBAC, filepath.Base(a) == balloonRBAC)
	})
	for _, f := range files {
		if filepath.Base(f) != balloonDaemonSet {
			if err := b.Kubectl(ctx, "apply", "-f", f); err != nil {
				return err
			}
		}
	}
	records, err := b.saved()
	if err != nil {
		return err
	}
	if len(records) > 0 {
		patch, err := json.Marshal(map[string]any{"data": records})
		if err != nil {
			return err
		}
		if _, err := b.Resizer.CoreV1().ConfigMaps(balloonNamespace).Patch(ctx, balloonSizes, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("restore the balloons' records: %w", err)
		}
	}
	// The size policy and its records must be in force before the first
	// balloon is created; wait tells a balloon created without them by its
	// missing finalizer.
	select {
	case <-time.After(policyRefresh):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := b.Kubectl(ctx, "apply", "-f", filepath.Join(b.Addon, balloonDaemonSet)); err != nil {
		return err
	}
	return b.wait(ctx, records)
}

// Size sets each node's effective size to its allocatable less hold, with
// kubectl balloon set-size as a user does, and waits for the kubelets'
// verdict (set-size does).
func (b *Balloons) Size(ctx context.Context, nodes []string, hold corev1.ResourceList) error {
	for _, name := range nodes {
		node, err := b.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cpu, memory := node.Status.Allocatable.Cpu().DeepCopy(), node.Status.Allocatable.Memory().DeepCopy()
		cpu.Sub(hold[corev1.ResourceCPU])
		memory.Sub(hold[corev1.ResourceMemory])
		if err := b.Plugin(ctx, "set-size", name, "--cpu", cpu.String(), "--memory", memory.String(), "--timeout", "3m"); err != nil {
			return err
		}
	}
	records, err := b.Records(ctx)
	if err != nil {
		return err
	}
	return b.wait(ctx, records)
}

// Off turns the balloons off as the KEP's downgrade section says, the records
// saved first: every sized balloon resized to its minimum, the records
// cleared, the DaemonSet deleted with the agent running (it releases the
// deleted balloons), then the agent, the balloon-pending taints and the rest
// of the addon.
func (b *Balloons) Off(ctx context.Context) error {
	records, err := b.Records(ctx)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(records, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.Saved, data, 0o644); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(records)) {
		node, err := b.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := node.Status.Allocatable
		if err := b.Plugin(ctx, "set-size", name, "--cpu", a.Cpu().String(), "--memory", a.Memory().String(), "--timeout", "3m"); err != nil {
			return err
		}
	}
	if len(records) > 0 {
		clear := []byte(`[{"op":"remove","path":"/data"}]`)
		if _, err := b.Resizer.CoreV1().ConfigMaps(balloonNamespace).Patch(ctx, balloonSizes, types.JSONPatchType, clear, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("clear the balloons' records: %w", err)
		}
	}
	if err := b.Kubectl(ctx, "delete", "--ignore-not-found", "-f", filepath.Join(b.Addon, balloonDaemonSet)); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.balloons(ctx)
		return err == nil && len(pods) == 0, nil
	}); err != nil {
		pods, _ := b.balloons(ctx)
		return fmt.Errorf("balloons left 3 minutes after the DaemonSet was deleted with the agent running: %s", describeBalloons(pods))
	}
	if err := b.Kubectl(ctx, "delete", "--ignore-not-found", "-f", filepath.Join(b.Addon, balloonAgent)); err != nil {
		return err
	}
	if err := b.untaint(ctx); err != nil {
		return err
	}
	// As system:masters: the records' policy refuses everyone else the
	// ConfigMap's deletion, and is itself deleted by the same command, too
	// late for it.
	return b.Kubectl(ctx, "delete", "--ignore-not-found", "--as="+laneUser, "--as-group=system:masters", "-f", b.Addon)
}

// laneUser is the name the lane impersonates where the addon's policies ask
// for a resizer or system:masters.
const laneUser = "kube-carry-upgrade-lane"

// ResizerFlags make kubectl-balloon act as a resizer, which the addon's RBAC
// and policies let resize balloons and write their records.
var ResizerFlags = []string{"--as=" + laneUser, "--as-group=node-balloon-resizers"}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Records are the addon's records of the nodes' sizes (none without the addon).
func (b *Balloons) Records(ctx context.Context) (map[string]string, error) {
	cm, err := b.Client.CoreV1().ConfigMaps(balloonNamespace).Get(ctx, balloonSizes, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	return maps.Clone(cm.Data), nil
}

// Sizes are the balloons' requests by node, "cpu=Q,memory=Q" (a node with
// several balloons has them joined by " "): what the checks compare across
// round trips.
func (b *Balloons) Sizes(ctx context.Context) (map[string]string, error) {
	pods, err := b.balloons(ctx)
	if err != nil {
		return nil, err
	}
	sizes := map[string]string{}
	for _, p := range pods {
		s := balloonSize(p)
		if prev, ok := sizes[p.Spec.NodeName]; ok {
			s = prev + " " + s
		}
		sizes[p.Spec.NodeName] = s
	}
	return sizes, nil
}

// CheckBalloons says where the balloons' sizes differ from want, by node:
// after a round trip, each node's balloon at the size it had before.
func CheckBalloons(got, want map[string]string) []string {
	var problems []string
	for _, node := range slices.Sorted(maps.Keys(want)) {
		switch g, ok := got[node]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("no balloon on %s, want one of %s", node, want[node]))
		case g != want[node]:
			problems = append(problems, fmt.Sprintf("the balloon on %s holds %s, want %s", node, g, want[node]))
		}
	}
	for _, node := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[node]; !ok {
			problems = append(problems, fmt.Sprintf("a balloon on %s (%s), want none", node, got[node]))
		}
	}
	return problems
}

// saved are the records Off kept, none before the first Off.
func (b *Balloons) saved() (map[string]string, error) {
	data, err := os.ReadFile(b.Saved)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var records map[string]string
	if err := json.Unmarshal(data, &records); err != nil {
		return nil, fmt.Errorf("%s: %w", b.Saved, err)
	}
	return records, nil
}

// wait waits until every node has one running balloon whose resize is done,
// each recorded node's at its record, the agent is available and no node
// carries the balloon-pending taint.
func (b *Balloons) wait(ctx context.Context, records map[string]string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		last, err = b.notReady(ctx, records)
		return err == nil && last == "", nil
	})
	if err != nil {
		return fmt.Errorf("the balloons not ready within 5 minutes: %s", last)
	}
	return nil
}

func (b *Balloons) notReady(ctx context.Context, records map[string]string) (string, error) {
	nodes, err := b.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	pods, err := b.balloons(ctx)
	if err != nil {
		return "", err
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	for _, n := range nodes.Items {
		for _, t := range n.Spec.Taints {
			if t.Key == balloonTaint {
				return "node " + n.Name + " is tainted " + balloonTaint, nil
			}
		}
		on := byNode[n.Name]
		if len(on) != 1 || on[0].Status.Phase != corev1.PodRunning || on[0].DeletionTimestamp != nil {
			return fmt.Sprintf("node %s: balloons %s", n.Name, describeBalloons(on)), nil
		}
		if !slices.Contains(on[0].Finalizers, balloonFinalizer) {
			return fmt.Sprintf("node %s: balloon %s has no %s: created before the size policy was in force", n.Name, on[0].Name, balloonFinalizer), nil
		}
		if msg := resizePending(on[0]); msg != "" {
			return fmt.Sprintf("node %s: %s", n.Name, msg), nil
		}
		if r, ok := records[n.Name]; ok && !holdsRecord(on[0], r) {
			return fmt.Sprintf("node %s: balloon %s, recorded %s", n.Name, balloonSize(on[0]), r), nil
		}
	}
	agent, err := b.Client.AppsV1().Deployments(balloonNamespace).Get(ctx, balloonAgentName, metav1.GetOptions{})
	if err != nil {
		return "the agent: " + err.Error(), nil
	}
	if agent.Status.AvailableReplicas < 1 {
		return "the agent is not available", nil
	}
	return "", nil
}

func (b *Balloons) balloons(ctx context.Context) ([]corev1.Pod, error) {
	list, err := b.Client.CoreV1().Pods(balloonNamespace).List(ctx, metav1.ListOptions{LabelSelector: balloonSelector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// untaint removes the balloon-pending taint from every node, as the KEP's
// downgrade asks once the agent is gone (nothing would remove it). A node
// changed meanwhile (its controllers write labels and taints too) is read
// again.
func (b *Balloons) untaint(ctx context.Context) error {
	nodes, err := b.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	isBalloonTaint := func(t corev1.Taint) bool { return t.Key == balloonTaint }
	for _, n := range nodes.Items {
		if !slices.ContainsFunc(n.Spec.Taints, isBalloonTaint) {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := b.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isBalloonTaint)
			if len(kept) == len(node.Spec.Taints) {
				return nil
			}
			node.Spec.Taints = kept
			_, err = b.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("remove %s from %s: %w", balloonTaint, n.Name, err)
		}
	}
	return nil
}

// balloonSize is the balloon container's requests, as the records write them.
func balloonSize(p corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == balloonContainer {
			return sizeString(c.Resources.Requests)
		}
	}
	return "no balloon container"
}

// holdsRecord says whether the balloon's requests are the record's
// "cpu=Q,memory=Q,uid=UID" (the quantities compared, not their spelling).
func holdsRecord(p corev1.Pod, record string) bool {
	want := corev1.ResourceList{}
	for _, part := range strings.Split(record, ",") {
		k, v, _ := strings.Cut(part, "=")
		if k == "cpu" || k == "memory" {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return false
			}
			want[corev1.ResourceName(k)] = q
		}
	}
	for _, c := range p.Spec.Containers {
		if c.Name == balloonContainer {
			return len(want) == 2 && equalRequests(c.Resources.Requests, want)
		}
	}
	return false
}

func sizeString(r corev1.ResourceList) string {
	cpu, memory := r[corev1.ResourceCPU], r[corev1.ResourceMemory]
	return "cpu=" + cpu.String() + ",memory=" + memory.String()
}

// resizePending says why a balloon's requests are not what it holds yet: the
// kubelet's verdict is still to come, or it deferred the resize.
func resizePending(p corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
			return fmt.Sprintf("balloon %s: %s %s %s", p.Name, c.Type, c.Reason, c.Message)
		}
	}
	for _, c := range p.Spec.Containers {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == c.Name && s.Resources != nil && !equalRequests(s.Resources.Requests, c.Resources.Requests) {
				return fmt.Sprintf("balloon %s holds %s, asked %s", p.Name, sizeString(s.Resources.Requests), sizeString(c.Resources.Requests))
			}
		}
	}
	return ""
}

func equalRequests(a, b corev1.ResourceList) bool {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		x, y := a[r], b[r]
		if x.Cmp(y) != 0 {
			return false
		}
	}
	return true
}

func describeBalloons(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "none"
	}
	var out []string
	for _, p := range pods {
		s := p.Name + " " + string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			s += " (deleted)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}
