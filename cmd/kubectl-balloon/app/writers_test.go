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
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// hookedClient runs a hook once at a chosen point of a command's calls, so
// that a test can run another writer in exactly that window.
type hookedClient struct {
	kubernetes.Interface
	// afterActuated runs after the first get of a pod that shows the kubelet
	// has actuated its resize: set-size has its verdict.
	afterActuated func()
	// beforePodList runs before the first list of pods.
	beforePodList func()
}

// IsWatchListSemanticsUnSupported tells the reflectors of reconcile's cache
// what the fake clientset underneath tells them: its watches stream no initial
// list.
func (c *hookedClient) IsWatchListSemanticsUnSupported() bool {
	return true
}

func (c *hookedClient) CoreV1() corev1client.CoreV1Interface {
	return &hookedCoreV1{CoreV1Interface: c.Interface.CoreV1(), hooks: c}
}

type hookedCoreV1 struct {
	corev1client.CoreV1Interface
	hooks *hookedClient
}

func (c *hookedCoreV1) Pods(namespace string) corev1client.PodInterface {
	return &hookedPods{PodInterface: c.CoreV1Interface.Pods(namespace), hooks: c.hooks}
}

type hookedPods struct {
	corev1client.PodInterface
	hooks *hookedClient
}

func (p *hookedPods) Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.Pod, error) {
	pod, err := p.PodInterface.Get(ctx, name, opts)
	if hook := p.hooks.afterActuated; err == nil && hook != nil && pod.Generation > 1 && holdsSize(pod, pod.Spec.Containers[0].Resources.Requests) {
		p.hooks.afterActuated = nil
		hook()
	}
	return pod, err
}

func (p *hookedPods) List(ctx context.Context, opts metav1.ListOptions) (*v1.PodList, error) {
	if hook := p.hooks.beforePodList; hook != nil {
		p.hooks.beforePodList = nil
		hook()
	}
	return p.PodInterface.List(ctx, opts)
}

// set-size and reconcile both write a node's balloon size: whichever order
// their calls interleave in, the resize set-size asked for is the one that
// stays, recorded and held, and nothing resizes the balloon back.
func TestSetSizeAndReconcileAgree(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook func(e *testEnv, c *hookedClient)
	}{{
		name: "reconcile runs once the kubelet has resized, before set-size ends",
		hook: func(e *testEnv, c *hookedClient) {
			c.afterActuated = func() { e.reconcileQuietly() }
		},
	}, {
		name: "set-size runs while a reconcile pass is under way",
		hook: func(e *testEnv, c *hookedClient) {
			c.beforePodList = func() {
				if code := e.run("set-size", "node-a", "--cpu", "1"); code != 0 {
					t.Errorf("set-size: exit code %d, stderr %q", code, e.errOut.String())
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, newNode("node-a", "4", "16Gi"), newBalloon("balloon-a", "node-a", "2", "4Gi"), recordedSizesConfigMap(recorded))
			e.kubelet = actuate
			c := &hookedClient{Interface: e.client}
			tc.hook(e, c)
			if c.afterActuated != nil {
				if code := e.runWith(c, "set-size", "node-a", "--cpu", "1"); code != 0 {
					t.Fatalf("set-size: exit code %d, stderr %q", code, e.errOut.String())
				}
			} else if code := e.runWith(c, "reconcile"); code != 0 {
				t.Fatalf("reconcile: exit code %d, stderr %q", code, e.errOut.String())
			}
			if c.afterActuated != nil || c.beforePodList != nil {
				t.Fatal("the other writer never ran")
			}
			for _, sent := range e.resizes() {
				if !equalResources(sent, resources("3", "4Gi")) {
					t.Errorf("a resize to %s went out; only cpu=3,memory=4Gi was asked for", formatResources(sent))
				}
			}
			if got := e.recordedSize("node-a"); got != "cpu=3,memory=4Gi,uid=node-a-uid" {
				t.Errorf("recorded %q, want cpu=3,memory=4Gi,uid=node-a-uid", got)
			}
			assertResources(t, e.getPod("balloon-a").Spec.Containers[0].Resources.Requests, resources("3", "4Gi"))

			// A later pass finds the balloon at its size and the node open.
			e.reconcile()
			if len(e.resizes()) != 0 || e.hasPendingTaint("node-a") {
				t.Errorf("resizes %v, tainted %v; output %q", e.resizes(), e.hasPendingTaint("node-a"), e.out.String())
			}
		})
	}
}

// A resize that shrinks the balloon grows the node: the node is not closed on
// the way, as its balloon holds at least the recorded size all along.
func TestReconcileShrinksABalloonWithoutClosingTheNode(t *testing.T) {
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), newBalloon("balloon-a", "node-a", "3", "4Gi"), recordedSizesConfigMap(recorded))
	e.reconcile()
	if sent := e.resizes(); len(sent) != 1 || !equalResources(sent[0], resources("2", "4Gi")) {
		t.Errorf("sent %v, want one resize to cpu=2,memory=4Gi", sent)
	}
	if len(e.writes()) != 1 || e.hasPendingTaint("node-a") {
		t.Errorf("only the resize is written, writes %v", e.writes())
	}
}

// reconcileQuietly runs a reconcile pass without resetting the recorded actions.
func (e *testEnv) reconcileQuietly() {
	e.t.Helper()
	if code := e.run("reconcile"); code != 0 {
		e.t.Errorf("reconcile: exit code %d, stderr %q", code, e.errOut.String())
	}
}
