//go:build smoke

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

package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The addon's record of balloon sizes and the taint that keeps a node closed
// until its balloon holds its size (KEP-5620, cluster/addons/node-balloon).
const (
	balloonSizesConfigMap = "node-balloon-sizes"
	balloonPendingTaint   = "node.kubernetes.io/balloon-pending"
)

// checkBalloonAcrossReregistration runs on the local cluster's node, the
// BalloonPod gate on: kubectl balloon set-size records the node's size; the
// Node object is deleted and the kubelet registers it again, with the
// balloon-pending taint as nodes of a cluster with balloons do. The new Node
// is closed (a workload stays Pending) until kubectl balloon reconcile finds
// the balloon at its recorded size and removes the taint; then the workload
// runs and the balloon was never resized or restarted.
func checkBalloonAcrossReregistration(ctx context.Context, t *testing.T, c *Cluster, cs kubernetes.Interface) {
	nodes := cs.CoreV1().Nodes()
	pods := cs.CoreV1().Pods(metav1.NamespaceSystem)
	configMaps := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	nodeName := NodeName()
	if _, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: balloonSizesConfigMap}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer configMaps.Delete(context.Background(), balloonSizesConfigMap, metav1.DeleteOptions{})
	balloon := smokeBalloon("smoke-balloon-reregistered", "1m", "1Mi")
	if _, err := pods.Create(ctx, balloon, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, balloon)
	waitRunning(ctx, t, cs, balloon.Namespace, balloon.Name)

	// kubectl-balloon is run as the binary make test built, with the admin's
	// kubeconfig; --cpu and --memory are the node's desired effective size.
	tryKubectlBalloon := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, c.Bin+"/kubectl-balloon", append([]string{"--kubeconfig=" + c.Kubeconfig()}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("kubectl-balloon %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	kubectlBalloon := func(args ...string) string {
		t.Helper()
		out, err := tryKubectlBalloon(args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	Node, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	desired := func(name corev1.ResourceName, balloon string) string {
		q := Node.Status.Allocatable[name]
		q.Sub(resource.MustParse(balloon))
		return q.String()
	}
	// The kubelet, restarted moments ago, defers a balloon's upsize until its
	// eviction manager has observed the node's usage, and applies it one pass
	// later; set-size reports the deferral and exits, the resize stays queued.
	if out, err := tryKubectlBalloon("set-size", nodeName, "--cpu="+desired(corev1.ResourceCPU, "150m"), "--memory="+desired(corev1.ResourceMemory, "24Mi")); err != nil {
		if !strings.Contains(out, "Deferred: ") || !strings.Contains(out, "not known yet") {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
			p, err := pods.Get(ctx, balloon.Name, metav1.GetOptions{})
			return err == nil && actualRequests(p) == "150m,24Mi", err
		}); err != nil {
			t.Fatalf("the kubelet never applied the deferred upsize of set-size: %v\n%s", err, out)
		}
	}
	cm, err := configMaps.Get(ctx, balloonSizesConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cm.Data[nodeName], "cpu=150m,memory=24Mi,uid="+string(Node.UID); got != want {
		t.Fatalf("set-size recorded %q for node %s, want %q", got, nodeName, want)
	}
	balloon = waitRunning(ctx, t, cs, balloon.Namespace, balloon.Name)
	if got := actualRequests(balloon); got != "150m,24Mi" {
		t.Fatalf("after set-size the balloon runs with %s, want 150m,24Mi", got)
	}

	// The Node object goes while the kubelet is stopped; the kubelet, started
	// again, registers a new one. The pods bound to the node stay: the pod
	// garbage collector deletes those of a missing node only after 40 s.
	if err := c.restart(ctx, "kubelet", func() error {
		return nodes.Delete(ctx, nodeName, metav1.DeleteOptions{})
	}, "--register-with-taints="+balloonPendingTaint+"=:NoSchedule"); err != nil {
		t.Fatalf("re-registering the node: %v", err)
	}
	// The cluster's state outlives the test: never leave its node closed.
	defer func() {
		if err := removeTaint(context.Background(), cs, nodeName, balloonPendingTaint); err != nil {
			t.Errorf("removing the taint %s from node %s: %v", balloonPendingTaint, nodeName, err)
		}
	}()
	reregistered, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if reregistered.UID == Node.UID {
		t.Fatalf("node %s was not registered again (same UID %s)", nodeName, Node.UID)
	}
	if !hasTaint(reregistered, balloonPendingTaint) {
		t.Fatalf("the re-registered node %s lacks the taint %s: %+v", nodeName, balloonPendingTaint, reregistered.Spec.Taints)
	}
	unchanged := func() {
		t.Helper()
		p := waitRunning(ctx, t, cs, balloon.Namespace, balloon.Name)
		if p.UID != balloon.UID || p.Status.ContainerStatuses[0].RestartCount != 0 || actualRequests(p) != "150m,24Mi" {
			t.Fatalf("the balloon did not keep its size across the node's re-registration: UID %s (was %s), %+v", p.UID, balloon.UID, p.Status.ContainerStatuses)
		}
	}
	unchanged()

	// Closed: a workload that does not tolerate the taint is not scheduled.
	workload := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-after-reregistration", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "workload", Image: balloon.Spec.Containers[0].Image}},
		},
	}
	if _, err := cs.CoreV1().Pods(workload.Namespace).Create(ctx, workload, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, workload)
	// The scheduler's message names no taint ("node(s) had untolerated
	// taint(s)"); the node has only this one.
	var reason string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(workload.Namespace).Get(ctx, workload.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod %s was scheduled to the node while it has the taint %s", p.Name, balloonPendingTaint)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				reason = cond.Reason + ": " + cond.Message
				return cond.Reason == corev1.PodReasonUnschedulable && strings.Contains(cond.Message, "untolerated taint"), nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod %s is not unschedulable for the node's taint: %v (PodScheduled: %q)", workload.Name, err, reason)
	}

	// One reconcile pass finds the entry recorded for the earlier Node, and the
	// balloon, bound since before the new Node, holding that size: it records
	// the size for the new Node and opens it.
	if out := kubectlBalloon("reconcile"); !strings.Contains(out, "removed the taint") {
		t.Errorf("kubectl balloon reconcile did not open node %s; it said:\n%s", nodeName, out)
	}
	if cm, err := configMaps.Get(ctx, balloonSizesConfigMap, metav1.GetOptions{}); err != nil || cm.Data[nodeName] != "cpu=150m,memory=24Mi,uid="+string(reregistered.UID) {
		t.Errorf("after reconcile the record of node %s is %q (%v), want the size for the new Node's UID %s", nodeName, cm.Data[nodeName], err, reregistered.UID)
	}
	if n, err := nodes.Get(ctx, nodeName, metav1.GetOptions{}); err != nil || hasTaint(n, balloonPendingTaint) {
		t.Fatalf("node %s after reconcile: %v, taints %+v", nodeName, err, n.Spec.Taints)
	}
	waitRunning(ctx, t, cs, workload.Namespace, workload.Name)
	unchanged()
}

func hasTaint(Node *corev1.Node, key string) bool {
	for _, taint := range Node.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

func removeTaint(ctx context.Context, cs kubernetes.Interface, nodeName, key string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		Node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil || !hasTaint(Node, key) {
			return err
		}
		var taints []corev1.Taint
		for _, taint := range Node.Spec.Taints {
			if taint.Key != key {
				taints = append(taints, taint)
			}
		}
		Node.Spec.Taints = taints
		_, err = cs.CoreV1().Nodes().Update(ctx, Node, metav1.UpdateOptions{})
		return err
	})
}
