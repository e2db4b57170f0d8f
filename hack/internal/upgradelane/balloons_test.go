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
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// addonCluster fakes the node-balloon addon on a cluster of a worker and a
// control plane: applying the DaemonSet creates a balloon on each node at its
// recorded size (as the size policy does), deleting it deletes them (as the
// agent releases them), and every kubectl and kubectl-balloon call is logged
// with what the records held at that moment.
type addonCluster struct {
	t      *testing.T
	client *fake.Clientset
	calls  []string
}

func newAddonCluster(t *testing.T, records map[string]string) *addonCluster {
	node := func(name string, control bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}}}
		if control {
			n.Labels[controlPlaneLabel] = ""
		}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}
		return n
	}
	c := &addonCluster{t: t, client: fake.NewClientset(node("worker", false), node("control-plane", true))}
	if records != nil {
		c.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: balloonSizes, Namespace: balloonNamespace}, Data: records})
		c.balloonsUp()
		c.agentUp()
	}
	return c
}

func (c *addonCluster) create(obj any) {
	c.t.Helper()
	var err error
	ctx := context.Background()
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		_, err = c.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Pod:
		_, err = c.client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.Deployment:
		_, err = c.client.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *addonCluster) records() map[string]string {
	cm, err := c.client.CoreV1().ConfigMaps(balloonNamespace).Get(context.Background(), balloonSizes, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return cm.Data
}

// balloonsUp is the DaemonSet's balloons, each created at its node's record.
func (c *addonCluster) balloonsUp() {
	nodes, _ := c.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	for _, n := range nodes.Items {
		requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi")}
		if r, ok := c.records()[n.Name]; ok {
			parts := strings.Split(r, ",")
			requests = corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(strings.TrimPrefix(parts[0], "cpu=")),
				corev1.ResourceMemory: resource.MustParse(strings.TrimPrefix(parts[1], "memory=")),
			}
		}
		c.create(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "node-balloon-" + n.Name, Namespace: balloonNamespace, Labels: map[string]string{"node.kubernetes.io/balloon": "true"}, Finalizers: []string{balloonFinalizer}},
			Spec:       corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: balloonContainer, Resources: corev1.ResourceRequirements{Requests: requests}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name: balloonContainer, Resources: &corev1.ResourceRequirements{Requests: requests},
			}}},
		})
	}
}

func (c *addonCluster) agentUp() {
	c.create(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: balloonAgentName, Namespace: balloonNamespace}, Status: appsv1.DeploymentStatus{AvailableReplicas: 1}})
}

func (c *addonCluster) kubectl(ctx context.Context, args ...string) error {
	c.calls = append(c.calls, fmt.Sprintf("kubectl %s %s (records %v)", args[0], filepath.Base(args[len(args)-1]), c.records()))
	switch {
	case args[0] == "apply" && filepath.Base(args[2]) == balloonSizesFile:
		if c.records() == nil {
			c.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: balloonSizes, Namespace: balloonNamespace}})
		}
	case args[0] == "apply" && filepath.Base(args[2]) == balloonAgent:
		c.agentUp()
	case args[0] == "apply" && filepath.Base(args[2]) == balloonDaemonSet:
		c.balloonsUp()
	case args[0] == "delete" && filepath.Base(args[len(args)-1]) == balloonDaemonSet:
		pods, _ := c.client.CoreV1().Pods(balloonNamespace).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			if err := c.client.CoreV1().Pods(balloonNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
	case args[0] == "delete" && filepath.Base(args[len(args)-1]) == balloonAgent:
		return c.client.AppsV1().Deployments(balloonNamespace).Delete(ctx, balloonAgentName, metav1.DeleteOptions{})
	case args[0] == "delete":
		return c.client.CoreV1().ConfigMaps(balloonNamespace).Delete(ctx, balloonSizes, metav1.DeleteOptions{})
	}
	return nil
}

func (c *addonCluster) plugin(ctx context.Context, args ...string) error {
	c.calls = append(c.calls, "kubectl-balloon "+strings.Join(args, " "))
	return nil
}

const balloonSizesFile = "balloon-sizes.yaml"

func (c *addonCluster) balloons(t *testing.T) *Balloons {
	addon := t.TempDir()
	for _, f := range []string{balloonAgent, balloonDaemonSet, balloonSizesFile, balloonRBAC} {
		if err := writeFile(filepath.Join(addon, f)); err != nil {
			t.Fatal(err)
		}
	}
	return &Balloons{Client: c.client, Resizer: c.client, Kubectl: c.kubectl, Plugin: c.plugin, Addon: addon, Saved: filepath.Join(t.TempDir(), "saved.json")}
}

// The KEP's downgrade order, the records saved before they are cleared, and
// the records back before the DaemonSet creates the balloons again: each
// balloon is back at its size.
func TestBalloonsRoundTripKeepsTheRecordedSizes(t *testing.T) {
	ctx := context.Background()
	records := map[string]string{"worker": "cpu=500m,memory=1Gi,uid=uid-worker"}
	c := newAddonCluster(t, records)
	b := c.balloons(t)
	before, err := b.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := b.Off(ctx); err != nil {
		t.Fatal(err)
	}
	wantOff := []string{
		"kubectl-balloon set-size worker --cpu 2 --memory 8Gi --timeout 3m",
		"kubectl delete balloon-daemonset.yaml (records map[])",
		"kubectl delete balloon-resizer-deployment.yaml (records map[])",
		"kubectl delete " + filepath.Base(b.Addon) + " (records map[])",
	}
	if !reflect.DeepEqual(c.calls, wantOff) {
		t.Errorf("turning the balloons off ran\n%s\nwant\n%s", strings.Join(c.calls, "\n"), strings.Join(wantOff, "\n"))
	}
	if got, err := b.Sizes(ctx); err != nil || len(got) != 0 {
		t.Errorf("balloons after Off: %v (%v), want none", got, err)
	}

	c.calls = nil
	if err := b.On(ctx); err != nil {
		t.Fatal(err)
	}
	// The RBAC first, for the agent's service account.
	if first := "kubectl apply " + balloonRBAC + " (records map[])"; c.calls[0] != first {
		t.Errorf("the addon was applied first with %q, want %q", c.calls[0], first)
	}
	// The records are back when the DaemonSet is applied.
	wantOn := "kubectl apply balloon-daemonset.yaml (records map[worker:cpu=500m,memory=1Gi,uid=uid-worker])"
	if last := c.calls[len(c.calls)-1]; last != wantOn {
		t.Errorf("the DaemonSet was applied as %q, want %q", last, wantOn)
	}
	after, err := b.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if problems := CheckBalloons(after, before); len(problems) > 0 {
		t.Errorf("after the round trip: %v", problems)
	}
}

// A node written by someone else between the list and the update is read
// again, and its other taints kept.
func TestUntaintRetriesAConflict(t *testing.T) {
	c := newAddonCluster(t, nil)
	ctx := context.Background()
	node, err := c.client.CoreV1().Nodes().Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}
	node.Spec.Taints = []corev1.Taint{{Key: balloonTaint, Effect: corev1.TaintEffectNoSchedule}, other}
	if _, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conflicts := 1
	c.client.PrependReactor("update", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "worker", fmt.Errorf("the object has been modified"))
	})
	if err := c.balloons(t).untaint(ctx); err != nil {
		t.Fatal(err)
	}
	node, err = c.client.CoreV1().Nodes().Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(node.Spec.Taints, []corev1.Taint{other}) {
		t.Errorf("taints after untaint: %v, want only %v", node.Spec.Taints, other)
	}
}

// Size asks set-size for the allocatable less what the balloon is to hold.
func TestBalloonsSizeAsksForTheEffectiveSize(t *testing.T) {
	c := newAddonCluster(t, map[string]string{})
	b := c.balloons(t)
	if err := b.Size(context.Background(), []string{"worker"}, balloonHold); err != nil {
		t.Fatal(err)
	}
	want := "kubectl-balloon set-size worker --cpu 1500m --memory 7Gi --timeout 3m"
	if len(c.calls) != 1 || c.calls[0] != want {
		t.Errorf("calls %q, want %q", c.calls, want)
	}
}

func TestCheckBalloons(t *testing.T) {
	want := map[string]string{"w1": "cpu=500m,memory=1Gi", "cp": "cpu=1m,memory=1Mi"}
	for name, tc := range map[string]struct {
		got  map[string]string
		want []string
	}{
		"back":     {got: map[string]string{"w1": "cpu=500m,memory=1Gi", "cp": "cpu=1m,memory=1Mi"}},
		"shrunk":   {got: map[string]string{"w1": "cpu=1m,memory=1Mi", "cp": "cpu=1m,memory=1Mi"}, want: []string{"the balloon on w1 holds cpu=1m,memory=1Mi, want cpu=500m,memory=1Gi"}},
		"missing":  {got: map[string]string{"cp": "cpu=1m,memory=1Mi"}, want: []string{"no balloon on w1, want one of cpu=500m,memory=1Gi"}},
		"left":     {got: map[string]string{"w1": "cpu=500m,memory=1Gi", "cp": "cpu=1m,memory=1Mi", "w2": "cpu=1m,memory=1Mi"}, want: []string{"a balloon on w2 (cpu=1m,memory=1Mi), want none"}},
		"two left": {got: map[string]string{"w1": "cpu=500m,memory=1Gi cpu=1m,memory=1Mi", "cp": "cpu=1m,memory=1Mi"}, want: []string{"the balloon on w1 holds cpu=500m,memory=1Gi cpu=1m,memory=1Mi, want cpu=500m,memory=1Gi"}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := CheckBalloons(tc.got, want); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A record is compared by its quantities, not their spelling.
func TestHoldsRecord(t *testing.T) {
	pod := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: balloonContainer, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
	}}}}}}
	for record, want := range map[string]bool{
		"cpu=500m,memory=1Gi,uid=u":        true,
		"cpu=0.5,memory=1073741824,uid=u":  true,
		"cpu=500m,memory=2Gi,uid=u":        false,
		"cpu=500m,uid=u":                   false,
		"cpu=half,memory=1Gi,uid=u":        false,
		"memory=1Gi,cpu=500m,uid=whatever": true,
	} {
		if got := holdsRecord(pod, record); got != want {
			t.Errorf("holdsRecord(%q) = %v, want %v", record, got, want)
		}
	}
}

func writeFile(path string) error {
	return os.WriteFile(path, []byte("# a file of the addon\n"), 0o644)
}
