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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/test/integration/framework"
	testutils "k8s.io/kubernetes/test/integration/util"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/utils/ptr"
)

const (
	// balloonPriority is the value of the system-node-balloon PriorityClass.
	balloonPriority = scheduling.SystemCriticalPriority + 1000
	// forbiddenNamespaceMessage is why admission rejects a balloon outside kube-system.
	forbiddenNamespaceMessage = "the system-node-balloon PriorityClass may only be used in the kube-system namespace"
)

// startAPIServer starts kube-apiserver with the BalloonPod feature gate set to
// enabled, stops it when the test ends and waits until the namespaces that
// the tests use exist.
func startAPIServer(t *testing.T, enabled bool, extraFlags ...string) (*kubeapiservertesting.TestServer, clientset.Interface) {
	t.Helper()
	flags := []string{
		"--endpoint-reconciler-type=none",
		// No service account controller runs, and nodes must not get the
		// not-ready taint: no kubelet runs either.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		fmt.Sprintf("--feature-gates=BalloonPod=%t", enabled),
	}
	flags = append(flags, extraFlags...)
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, flags, framework.SharedEtcd())
	t.Cleanup(server.TearDownFn)
	cs := clientset.NewForConfigOrDie(server.ClientConfig)
	for _, ns := range []string{metav1.NamespaceSystem, metav1.NamespaceDefault} {
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("namespace %s was not created: %v", ns, err)
		}
	}
	return server, cs
}

// podConfig describes a test pod.
type podConfig struct {
	name, namespace   string
	balloonLabel      bool
	priorityClassName string
	// cpu and memory are the pod's requests; none when empty.
	cpu, memory string
	// nodeName, when set, restricts the pod to that node (via its hostname label).
	nodeName string
}

func (c podConfig) pod() *v1.Pod {
	conf := &testutils.PausePodConfig{
		Name:              c.name,
		Namespace:         c.namespace,
		PriorityClassName: c.priorityClassName,
	}
	if c.balloonLabel {
		conf.Labels = map[string]string{v1.LabelBalloonPod: "true"}
	}
	if c.cpu != "" {
		conf.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse(c.cpu),
			v1.ResourceMemory: resource.MustParse(c.memory),
		}}
	}
	if c.nodeName != "" {
		conf.NodeSelector = map[string]string{v1.LabelHostname: c.nodeName}
	}
	return testutils.InitPausePod(conf)
}

func balloonPriorityClass() *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: scheduling.SystemNodeBalloon},
		Value:            balloonPriority,
		PreemptionPolicy: ptr.To(v1.PreemptNever),
	}
}

func expectError(t *testing.T, err error, reason metav1.StatusReason, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error with reason %s containing %q, got none", reason, message)
	}
	if got := apierrors.ReasonForError(err); got != reason {
		t.Errorf("expected reason %s, got %s: %v", reason, got, err)
	}
	if !strings.Contains(err.Error(), message) {
		t.Errorf("error %q does not contain %q", err, message)
	}
}

// TestBalloonPriorityClass checks the system-node-balloon PriorityClass and the
// admission of the pods that use it with the gate on.
func TestBalloonPriorityClass(t *testing.T) {
	_, cs := startAPIServer(t, true)
	tCtx := ktesting.Init(t)
	pcs := cs.SchedulingV1().PriorityClasses()

	// kube-apiserver's post-start hook creates the class before the server is healthy.
	pc, err := pcs.Get(tCtx, scheduling.SystemNodeBalloon, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PriorityClass %s: %v", scheduling.SystemNodeBalloon, err)
	}
	if pc.Value != balloonPriority {
		t.Errorf("value = %d, want %d", pc.Value, balloonPriority)
	}
	if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != v1.PreemptNever {
		t.Errorf("preemptionPolicy = %v, want %s", ptr.Deref(pc.PreemptionPolicy, ""), v1.PreemptNever)
	}
	if pc.GlobalDefault {
		t.Error("globalDefault = true, want false")
	}
	for _, name := range []string{scheduling.SystemNodeCritical, scheduling.SystemClusterCritical} {
		if _, err := pcs.Get(tCtx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("get PriorityClass %s: %v", name, err)
		}
	}

	t.Run("delete is forbidden", func(t *testing.T) {
		err := pcs.Delete(tCtx, scheduling.SystemNodeBalloon, metav1.DeleteOptions{})
		expectError(t, err, metav1.StatusReasonForbidden, "this is a system priority class and cannot be deleted")
	})

	t.Run("value is immutable", func(t *testing.T) {
		update := pc.DeepCopy()
		update.Value = scheduling.SystemCriticalPriority
		_, err := pcs.Update(tCtx, update, metav1.UpdateOptions{})
		expectError(t, err, metav1.StatusReasonInvalid, "value: Forbidden: may not be changed in an update")
	})

	t.Run("preemptionPolicy is immutable", func(t *testing.T) {
		update := pc.DeepCopy()
		update.PreemptionPolicy = ptr.To(v1.PreemptLowerPriority)
		_, err := pcs.Update(tCtx, update, metav1.UpdateOptions{})
		expectError(t, err, metav1.StatusReasonInvalid, "preemptionPolicy: Invalid value")
		expectError(t, err, metav1.StatusReasonInvalid, "field is immutable")
	})

	t.Run("a second class is not created", func(t *testing.T) {
		_, err := pcs.Create(tCtx, balloonPriorityClass(), metav1.CreateOptions{})
		expectError(t, err, metav1.StatusReasonAlreadyExists, "already exists")
	})

	t.Run("the class is unchanged", func(t *testing.T) {
		got, err := pcs.Get(tCtx, scheduling.SystemNodeBalloon, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get PriorityClass: %v", err)
		}
		if got.Value != balloonPriority || ptr.Deref(got.PreemptionPolicy, "") != v1.PreemptNever || got.GlobalDefault || got.ResourceVersion != pc.ResourceVersion {
			t.Errorf("the class changed: %+v", got)
		}
	})

	t.Run("balloon in kube-system", func(t *testing.T) {
		conf := podConfig{name: "balloon", namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon, cpu: "100m", memory: "100Mi"}
		pod, err := cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create balloon pod: %v", err)
		}
		if got := ptr.Deref(pod.Spec.Priority, -1); got != balloonPriority {
			t.Errorf("priority = %d, want %d", got, balloonPriority)
		}
		if got := ptr.Deref(pod.Spec.PreemptionPolicy, ""); got != v1.PreemptNever {
			t.Errorf("preemptionPolicy = %q, want %s", got, v1.PreemptNever)
		}
	})

	t.Run("balloon in default is forbidden", func(t *testing.T) {
		conf := podConfig{name: "balloon", namespace: metav1.NamespaceDefault, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon}
		_, err := cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
		expectError(t, err, metav1.StatusReasonForbidden, forbiddenNamespaceMessage)
	})

	t.Run("class without the label in default is forbidden", func(t *testing.T) {
		conf := podConfig{name: "class-only", namespace: metav1.NamespaceDefault, priorityClassName: scheduling.SystemNodeBalloon}
		_, err := cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
		expectError(t, err, metav1.StatusReasonForbidden, forbiddenNamespaceMessage)
	})

	// The case reproduced on a cluster: such a pod, bound to a full node, made the
	// kubelet preempt a running workload. Now admission refuses it.
	t.Run("class without the label in kube-system is forbidden", func(t *testing.T) {
		conf := podConfig{name: "class-only", namespace: metav1.NamespaceSystem, priorityClassName: scheduling.SystemNodeBalloon}
		_, err := cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
		expectError(t, err, metav1.StatusReasonForbidden, "pods of the system-node-balloon PriorityClass must carry the label node.kubernetes.io/balloon=true")
	})

	for _, ns := range []string{metav1.NamespaceSystem, metav1.NamespaceDefault} {
		t.Run("label only in "+ns+" is forbidden", func(t *testing.T) {
			conf := podConfig{name: "label-only", namespace: ns, balloonLabel: true}
			_, err := cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
			expectError(t, err, metav1.StatusReasonForbidden, "the label node.kubernetes.io/balloon is reserved for pods of the system-node-balloon PriorityClass")
		})
	}

	t.Run("the label removed from a balloon by a patch is forbidden", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"` + v1.LabelBalloonPod + `":null}}}`)
		_, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Patch(tCtx, "balloon", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		expectError(t, err, metav1.StatusReasonForbidden, "must carry the label node.kubernetes.io/balloon=true")
	})

	t.Run("system-node-critical in default", func(t *testing.T) {
		conf := podConfig{name: "node-critical", namespace: metav1.NamespaceDefault, priorityClassName: scheduling.SystemNodeCritical}
		pod, err := cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if got := ptr.Deref(pod.Spec.Priority, -1); got != scheduling.SystemCriticalPriority+1000 {
			t.Errorf("priority = %d, want %d", got, scheduling.SystemCriticalPriority+1000)
		}
	})
}

// TestBalloonPriorityClassGateOff checks that without the gate the class does
// not exist and its name stays reserved.
func TestBalloonPriorityClassGateOff(t *testing.T) {
	_, cs := startAPIServer(t, false)
	tCtx := ktesting.Init(t)
	pcs := cs.SchedulingV1().PriorityClasses()

	for _, name := range []string{scheduling.SystemNodeCritical, scheduling.SystemClusterCritical} {
		if _, err := pcs.Get(tCtx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("get PriorityClass %s: %v", name, err)
		}
	}
	if _, err := pcs.Get(tCtx, scheduling.SystemNodeBalloon, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("expected PriorityClass %s not to exist, got %v", scheduling.SystemNodeBalloon, err)
	}

	_, err := pcs.Create(tCtx, balloonPriorityClass(), metav1.CreateOptions{})
	expectError(t, err, metav1.StatusReasonInvalid, "priority class names with 'system-' prefix are reserved for system use only. error: system-node-balloon is not a known system priority class")

	conf := podConfig{name: "balloon", namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon}
	_, err = cs.CoreV1().Pods(conf.namespace).Create(tCtx, conf.pod(), metav1.CreateOptions{})
	expectError(t, err, metav1.StatusReasonForbidden, "no PriorityClass with name system-node-balloon was found")
}
