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
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// The balloon's identity (KEP-5620). The module's k8s.io/api is upstream's,
// without the series' constants.
const (
	balloonLabel = "node.kubernetes.io/balloon"
	balloonClass = "system-node-balloon"
)

// restart stops a daemon of the cluster and starts it again, with extraArgs
// after its usual ones; before is run while it is stopped.
func (c *Cluster) restart(ctx context.Context, name string, before func() error, extraArgs ...string) error {
	for _, d := range c.daemons(c.nodes()) {
		if d.Name == name {
			if err := c.Stop(name, 30*time.Second); err != nil {
				return err
			}
			if before != nil {
				if err := before(); err != nil {
					return err
				}
			}
			d.Args = append(d.Args, extraArgs...)
			return c.Start(ctx, d)
		}
	}
	return fmt.Errorf("the cluster has no daemon %s", name)
}

// kubeletMetrics reads the first node's kubelet /metrics as kube-apiserver's
// kubelet client. kube-apiserver's nodes/proxy refuses the node's loopback
// address ("address not allowed"), so the test asks the kubelet itself.
func (c *Cluster) kubeletMetrics(ctx context.Context) ([]byte, error) {
	config := &rest.Config{
		Host: "https://" + c.firstNode().kubeletAddr(),
		TLSClientConfig: rest.TLSClientConfig{
			CertFile: c.Path("pki", "apiserver-kubelet-client.crt"),
			KeyFile:  c.Path("pki", "apiserver-kubelet-client.key"),
			CAFile:   c.Path("pki", "ca.crt"),
		},
	}
	client, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, config.Host+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("kubelet /metrics: %s: %s", resp.Status, body)
	}
	return body, err
}

func requests(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
}

// smokePod is a pause pod bound to the node, resizable in place, that
// tolerates every taint.
func smokePod(name, namespace, cpu, memory string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                      NodeName(),
			TerminationGracePeriodSeconds: new(int64),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:      "balloon",
				Image:     images.Names{Registry: RegistryAddr}.Pause(),
				Resources: corev1.ResourceRequirements{Requests: requests(cpu, memory)},
				ResizePolicy: []corev1.ContainerResizePolicy{
					{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
					{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
				},
			}},
		},
	}
}

// smokeBalloon is a balloon of the given requests on the node.
func smokeBalloon(name, cpu, memory string) *corev1.Pod {
	balloon := smokePod(name, metav1.NamespaceSystem, cpu, memory)
	balloon.Labels = map[string]string{balloonLabel: "true"}
	balloon.Spec.PriorityClassName = balloonClass
	return balloon
}

// waitRunning waits until the pod runs and returns it.
func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, namespace, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		p, err = cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("pod %s/%s is not Running: %v\n%+v", namespace, name, err, p)
	}
	return p
}

// actualRequests returns the cpu and memory the kubelet reports the pod's only
// container runs with.
func actualRequests(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].Resources == nil {
		return "none"
	}
	r := p.Status.ContainerStatuses[0].Resources.Requests
	return r.Cpu().String() + "," + r.Memory().String()
}

// deletePod deletes the pod and waits until it is gone, so that the next check
// finds the node's capacity free again.
func deletePod(t testing.TB, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	pods := cs.CoreV1().Pods(pod.Namespace)
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting pod %s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		_, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("pod %s/%s is not gone: %v", pod.Namespace, pod.Name, err)
	}
}

// checkBalloonAcrossKubeletRestart runs on the local cluster's node, the
// BalloonPod gate on: a balloon grown to its size keeps it across a kubelet
// restart, and an upsize the kubelet deferred (a workload holds the cpu) stays
// deferred after it: the kubelet re-admits the balloon at what it allocated,
// not at its spec, and neither pod restarts or leaves.
func checkBalloonAcrossKubeletRestart(ctx context.Context, t *testing.T, c *Cluster, cs kubernetes.Interface) {
	pods := cs.CoreV1().Pods(metav1.NamespaceSystem)
	Node, err := cs.CoreV1().Nodes().Get(ctx, NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	balloon := smokeBalloon("smoke-balloon", "1m", "1Mi")
	if _, err := pods.Create(ctx, balloon, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, balloon)
	balloon = waitRunning(ctx, t, cs, balloon.Namespace, balloon.Name)

	// resize asks for the balloon's new requests and waits for the kubelet's
	// answer: "" once it runs with them, else the PodResizePending reason.
	// untilApplied waits through a Deferred answer: the kubelet defers a
	// balloon's upsize until the eviction manager has observed the node's
	// usage (at its start, a new pod) and tries it again one pass later.
	resize := func(want corev1.ResourceList, untilApplied bool) string {
		t.Helper()
		p, err := pods.Get(ctx, balloon.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Containers[0].Resources.Requests = want
		if p, err = pods.UpdateResize(ctx, p.Name, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		gen, verdict := p.Generation, ""
		wantActual := want.Cpu().String() + "," + want.Memory().String()
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
			p, err = pods.Get(ctx, balloon.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodResizePending && cond.ObservedGeneration >= gen {
					verdict = cond.Reason + ": " + cond.Message
					if !untilApplied {
						verdict = cond.Reason
						return true, nil
					}
				}
			}
			return actualRequests(p) == wantActual, nil
		}); err != nil {
			t.Fatalf("the kubelet never answered the resize to %s: %v (runs with %s; last answer %q)", wantActual, err, actualRequests(p), verdict)
		}
		if untilApplied {
			return ""
		}
		return verdict
	}
	restart := func() {
		t.Helper()
		// start waits until the new kubelet has reported the node Ready.
		if err := c.restart(ctx, "kubelet", nil); err != nil {
			t.Fatalf("restarting the kubelet: %v", err)
		}
	}
	// unchanged checks that the pod is the same, never restarted, and runs with want.
	unchanged := func(before *corev1.Pod, want string) {
		t.Helper()
		after := waitRunning(ctx, t, cs, before.Namespace, before.Name)
		if after.UID != before.UID || after.Status.ContainerStatuses[0].RestartCount != 0 || after.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID {
			t.Errorf("pod %s/%s was replaced or restarted across the kubelet restart: %+v", after.Namespace, after.Name, after.Status.ContainerStatuses)
		}
		if got := actualRequests(after); got != want {
			t.Errorf("pod %s/%s runs with %s after the kubelet restart, want %s", after.Namespace, after.Name, got, want)
		}
	}

	resize(requests("200m", "32Mi"), true)
	balloon = waitRunning(ctx, t, cs, balloon.Namespace, balloon.Name)
	restart()
	unchanged(balloon, "200m,32Mi")
	// Until the restarted kubelet has its pods again from the API server, it
	// reports no balloon.
	wantMetrics := []string{`kubelet_balloon_requests_cpu_cores 0.2`, `kubelet_balloon_requests_memory_bytes 3.3554432e+07`}
	var metrics []byte
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		if metrics, err = c.kubeletMetrics(ctx); err != nil {
			return false, err
		}
		for _, want := range wantMetrics {
			if !strings.Contains(string(metrics), want) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		var balloonLines []string
		for _, line := range strings.Split(string(metrics), "\n") {
			if strings.HasPrefix(line, "kubelet_balloon_") || strings.HasPrefix(line, "kubelet_node_effective_") {
				balloonLines = append(balloonLines, line)
			}
		}
		t.Errorf("after the kubelet restart, its metrics lack %q: %v; they say:\n%s", wantMetrics, err, strings.Join(balloonLines, "\n"))
	}

	// A workload takes the rest of the cpu but 100m; growing the balloon by
	// 200m more is deferred, and must stay so across a restart.
	all, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + NodeName()})
	if err != nil {
		t.Fatal(err)
	}
	free := Node.Status.Allocatable.Cpu().MilliValue()
	for _, p := range all.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			for _, ctr := range p.Spec.Containers {
				free -= ctr.Resources.Requests.Cpu().MilliValue()
			}
		}
	}
	workload := smokePod("smoke-workload", "default", fmt.Sprintf("%dm", free-100), "1Mi")
	workload.Spec.Containers[0].Name = "workload"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, workload, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, workload)
	workload = waitRunning(ctx, t, cs, workload.Namespace, workload.Name)
	if verdict := resize(requests("400m", "32Mi"), false); verdict != corev1.PodReasonDeferred {
		t.Fatalf("the balloon's upsize into the workload's cpu was %q, want %s", verdict, corev1.PodReasonDeferred)
	}
	balloon = waitRunning(ctx, t, cs, balloon.Namespace, balloon.Name)
	restart()
	unchanged(balloon, "200m,32Mi")
	unchanged(workload, fmt.Sprintf("%dm,1Mi", free-100))
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		p, err := pods.Get(ctx, balloon.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizePending && cond.Reason == corev1.PodReasonDeferred {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("the balloon's deferred upsize is no longer Deferred after the kubelet restart: %v", err)
	}
}
