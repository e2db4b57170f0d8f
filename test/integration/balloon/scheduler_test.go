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
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/kubernetes/test/integration/framework"
	testutils "k8s.io/kubernetes/test/integration/util"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/utils/ptr"
)

const (
	highPriorityClass = "balloon-test-high"
	lowPriorityClass  = "balloon-test-low"
	// holdFor is how long a pending pod must leave its would-be victims alone
	// after the scheduler recorded it as unschedulable.
	holdFor = 3 * time.Second
)

// TestBalloonScheduling runs kube-scheduler against kube-apiserver with the
// gate on and checks that balloons are neither preempted nor preempt.
func TestBalloonScheduling(t *testing.T) {
	testCtx, cs := startScheduler(t)
	tCtx := testCtx.Ctx

	ns := framework.CreateNamespaceOrDie(cs, "balloon-scheduling", t).Name
	for _, pc := range []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: highPriorityClass}, Value: scheduling.HighestUserDefinablePriority, PreemptionPolicy: ptr.To(v1.PreemptLowerPriority)},
		{ObjectMeta: metav1.ObjectMeta{Name: lowPriorityClass}, Value: 100},
	} {
		if _, err := cs.SchedulingV1().PriorityClasses().Create(tCtx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PriorityClass %s: %v", pc.Name, err)
		}
	}

	t.Run("a high priority pod does not preempt a balloon", func(t *testing.T) {
		node := createNode(t, testCtx, "balloon-preempted", string(features.BalloonPod))
		balloon := runPod(t, cs, podConfig{name: "balloon-1", namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon, cpu: "800m", memory: "800Mi", nodeName: node})
		if got := ptr.Deref(balloon.Spec.Priority, -1); got != balloonPriority {
			t.Fatalf("balloon priority = %d, want %d", got, balloonPriority)
		}
		high := createPod(t, cs, podConfig{name: "high-1", namespace: ns, priorityClassName: highPriorityClass, cpu: "500m", memory: "500Mi", nodeName: node})
		if got := ptr.Deref(high.Spec.PreemptionPolicy, ""); got != v1.PreemptLowerPriority {
			t.Fatalf("preemptionPolicy of the high priority pod = %q, want %s", got, v1.PreemptLowerPriority)
		}

		waitUnschedulable(t, cs, high)
		expectUntouched(t, cs, high, balloon)
	})

	t.Run("a balloon does not preempt a low priority pod", func(t *testing.T) {
		node := createNode(t, testCtx, "balloon-preempting", string(features.BalloonPod))
		low := runPod(t, cs, podConfig{name: "low-2", namespace: ns, priorityClassName: lowPriorityClass, cpu: "800m", memory: "800Mi", nodeName: node})
		balloon := createPod(t, cs, podConfig{name: "balloon-2", namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon, cpu: "500m", memory: "500Mi", nodeName: node})
		if got := ptr.Deref(balloon.Spec.PreemptionPolicy, ""); got != v1.PreemptNever {
			t.Fatalf("preemptionPolicy of the balloon = %q, want %s", got, v1.PreemptNever)
		}

		cond := waitUnschedulable(t, cs, balloon)
		if !strings.Contains(cond.Message, "preemptionPolicy=Never") {
			t.Errorf("PodScheduled condition of the balloon does not name its preemption policy: %q", cond.Message)
		}
		expectUntouched(t, cs, balloon, low)

		// Control: without the balloon, a pod that may preempt does preempt the
		// low priority pod, so the checks above could see a preemption.
		deletePods(t, cs, balloon)
		high := createPod(t, cs, podConfig{name: "high-2", namespace: ns, priorityClassName: highPriorityClass, cpu: "500m", memory: "500Mi", nodeName: node})
		err := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, wait.ForeverTestTimeout, false, func(ctx context.Context) (bool, error) {
			pod, err := cs.CoreV1().Pods(low.Namespace).Get(ctx, low.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && pod.DeletionTimestamp != nil, nil
		})
		if err != nil {
			t.Fatalf("the high priority pod did not preempt the low priority pod: %v", err)
		}
		if err := testutils.WaitForNominatedNodeName(tCtx, cs, high); err != nil {
			t.Errorf("the high priority pod was not nominated: %v", err)
		}
	})
}

// startScheduler starts kube-apiserver with the gate on, and kube-scheduler.
func startScheduler(t *testing.T) (*testutils.TestContext, clientset.Interface) {
	server, cs := startAPIServer(t, true)
	testCtx := &testutils.TestContext{
		Ctx:        ktesting.Init(t),
		ClientSet:  cs,
		KubeConfig: server.ClientConfig,
		CloseFn:    func() {},
	}
	testutils.InitTestSchedulerWithOptions(t, testCtx, 0)
	t.Cleanup(func() {
		testCtx.SchedulerCloseFn()
		testCtx.CloseFn()
	})
	testutils.SyncSchedulerInformerFactory(testCtx)
	go testCtx.Scheduler.Run(testCtx.SchedulerCtx)
	return testCtx, cs
}

// createNode creates a node with 1 CPU and 1Gi of memory that declares the
// given features, waits until the scheduler has it and deletes it when the
// test ends.
func createNode(t *testing.T, testCtx *testutils.TestContext, name string, declaredFeatures ...string) string {
	t.Helper()
	node := st.MakeNode().Name(name).Label(v1.LabelHostname, name).Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU:    "1",
		v1.ResourceMemory: "1Gi",
	}).DeclaredFeatures(declaredFeatures).Obj()
	if _, err := testutils.CreateNode(testCtx.ClientSet, node); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := testCtx.ClientSet.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete node %s: %v", name, err)
		}
	})
	err := wait.PollUntilContextTimeout(testCtx.Ctx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		_, ok := testCtx.Scheduler.Cache.Dump().Nodes[name]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("node %s did not reach the scheduler cache: %v", name, err)
	}
	return name
}

// createPod creates a pod and deletes it when the test ends.
func createPod(t *testing.T, cs clientset.Interface, conf podConfig) *v1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods(conf.namespace).Create(context.Background(), conf.pod(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", conf.namespace, conf.name, err)
	}
	t.Cleanup(func() { deletePods(t, cs, pod) })
	return pod
}

// runPod creates a pod, waits until it is bound and deletes it when the test ends.
func runPod(t *testing.T, cs clientset.Interface, conf podConfig) *v1.Pod {
	t.Helper()
	pod := createPod(t, cs, conf)
	if err := testutils.WaitForPodToSchedule(context.Background(), cs, pod); err != nil {
		t.Fatalf("pod %s/%s was not scheduled: %v", pod.Namespace, pod.Name, err)
	}
	pod, err := cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	return pod
}

func deletePods(t *testing.T, cs clientset.Interface, pods ...*v1.Pod) {
	t.Helper()
	for _, pod := range pods {
		err := cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
	}
}

// waitUnschedulable waits until the scheduler has recorded the pod as
// unschedulable and returns its PodScheduled condition.
func waitUnschedulable(t *testing.T, cs clientset.Interface, pod *v1.Pod) *v1.PodCondition {
	t.Helper()
	var cond *v1.PodCondition
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, wait.ForeverTestTimeout, false, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if got.Spec.NodeName != "" {
			return false, fmt.Errorf("scheduled to %s", got.Spec.NodeName)
		}
		_, cond = podutil.GetPodCondition(&got.Status, v1.PodScheduled)
		return cond != nil && cond.Status == v1.ConditionFalse && cond.Reason == v1.PodReasonUnschedulable, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was not recorded as unschedulable: %v", pod.Namespace, pod.Name, err)
	}
	t.Logf("pod %s/%s: %s", pod.Namespace, pod.Name, cond.Message)
	return cond
}

// expectUntouched checks for holdFor that the pending pod stays pending and
// nominated to no node, and that the victims stay bound and are not deleted.
func expectUntouched(t *testing.T, cs clientset.Interface, pending *v1.Pod, victims ...*v1.Pod) {
	t.Helper()
	deadline := time.Now().Add(holdFor)
	for {
		pod, err := cs.CoreV1().Pods(pending.Namespace).Get(context.Background(), pending.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s/%s: %v", pending.Namespace, pending.Name, err)
		}
		if pod.Spec.NodeName != "" || pod.Status.NominatedNodeName != "" {
			t.Fatalf("pod %s/%s: nodeName %q, nominatedNodeName %q, want none", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Status.NominatedNodeName)
		}
		for _, victim := range victims {
			pod, err := cs.CoreV1().Pods(victim.Namespace).Get(context.Background(), victim.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("pod %s/%s: %v", victim.Namespace, victim.Name, err)
			}
			if pod.DeletionTimestamp != nil {
				t.Fatalf("pod %s/%s is being deleted", pod.Namespace, pod.Name)
			}
			if pod.Spec.NodeName != victim.Spec.NodeName {
				t.Fatalf("pod %s/%s is bound to %q, want %q", pod.Namespace, pod.Name, pod.Spec.NodeName, victim.Spec.NodeName)
			}
			if _, cond := podutil.GetPodCondition(&pod.Status, v1.DisruptionTarget); cond != nil {
				t.Fatalf("pod %s/%s has condition %s: %s", pod.Namespace, pod.Name, cond.Type, cond.Message)
			}
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
