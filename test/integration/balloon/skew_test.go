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

package balloon

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	testutils "k8s.io/kubernetes/test/integration/util"
)

// TestBalloonsStayOffNodesWithoutTheBalloonPodFeature runs kube-scheduler
// against kube-apiserver with a node that declares the BalloonPod feature (a
// kubelet with the gate on) and one that does not (an older kubelet, or one
// with the gate off, which would preempt for a balloon).
func TestBalloonsStayOffNodesWithoutTheBalloonPodFeature(t *testing.T) {
	testCtx, cs := startScheduler(t)
	oldNode := createNode(t, testCtx, "old-kubelet")
	newNode := createNode(t, testCtx, "new-kubelet", string(features.BalloonPod))
	balloon := func(name, node string) podConfig {
		return podConfig{name: name, namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon, cpu: "100m", memory: "100Mi", nodeName: node}
	}

	pinned := createPod(t, cs, balloon("pinned", oldNode))
	t.Run("the scheduler places balloons only on nodes that declare BalloonPod", func(t *testing.T) {
		cond := waitUnschedulable(t, cs, pinned)
		if !strings.Contains(cond.Message, "didn't match Pod's required features") {
			t.Errorf("PodScheduled condition of the balloon does not name the missing feature: %q", cond.Message)
		}
		if got := runPod(t, cs, balloon("free", "")).Spec.NodeName; got != newNode {
			t.Errorf("balloon scheduled to %q, want %q", got, newNode)
		}
		critical := podConfig{name: "critical", namespace: metav1.NamespaceSystem, priorityClassName: scheduling.SystemNodeCritical, cpu: "100m", memory: "100Mi", nodeName: oldNode}
		if got := runPod(t, cs, critical).Spec.NodeName; got != oldNode {
			t.Errorf("critical pod scheduled to %q, want %q", got, oldNode)
		}
	})

	t.Run("kube-apiserver refuses a balloon resize on a node that does not declare BalloonPod", func(t *testing.T) {
		for _, node := range []string{oldNode, newNode} {
			// Bound directly, as an older scheduler could have placed it.
			conf := balloon("bound-to-"+node, "")
			pod := conf.pod()
			pod.Spec.NodeName = node
			pod, err := cs.CoreV1().Pods(conf.namespace).Create(testCtx.Ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create balloon on %s: %v", node, err)
			}
			t.Cleanup(func() { deletePods(t, cs, pod) })
			err = resizeCPU(cs, pod, "200m")
			if node == newNode {
				if err != nil {
					t.Errorf("resize of the balloon on %s: %v", node, err)
				}
				continue
			}
			expectError(t, err, metav1.StatusReasonForbidden, `pod update requires features BalloonPod which are not available on node "old-kubelet"`)
		}
	})

	t.Run("a node that comes to declare BalloonPod takes its pending balloon", func(t *testing.T) {
		node, err := cs.CoreV1().Nodes().Get(testCtx.Ctx, oldNode, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get node: %v", err)
		}
		node.Status.DeclaredFeatures = []string{string(features.BalloonPod)}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(testCtx.Ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update node status: %v", err)
		}
		if err := testutils.WaitForPodToSchedule(testCtx.Ctx, cs, pinned); err != nil {
			t.Fatalf("the pending balloon was not scheduled: %v", err)
		}
	})
}

// resizeCPU sets the cpu request of the pod's container through pods/resize.
func resizeCPU(cs clientset.Interface, pod *v1.Pod, cpu string) error {
	pod = pod.DeepCopy()
	pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
	_, err := cs.CoreV1().Pods(pod.Namespace).UpdateResize(context.Background(), pod.Name, pod, metav1.UpdateOptions{})
	return err
}
