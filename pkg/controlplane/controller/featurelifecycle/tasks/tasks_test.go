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

package tasks

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
)

func claim(name string, conditions ...v1.PersistentVolumeClaimConditionType) *v1.PersistentVolumeClaim {
	c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	for _, t := range conditions {
		c.Status.Conditions = append(c.Status.Conditions, v1.PersistentVolumeClaimCondition{Type: t, Status: v1.ConditionTrue})
	}
	return c
}

func TestClearPVCUnusedConditionIsIdempotentAndSafeToRunTwiceAtOnce(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		claim("unused", v1.PersistentVolumeClaimUnused),
		claim("resizing-and-unused", v1.PersistentVolumeClaimResizing, v1.PersistentVolumeClaimUnused),
		claim("in-use"),
	)
	task := ClearPVCUnusedCondition{}
	// Two kube-apiservers that both think they lead run the task at once.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := task.Run(ctx, &featurelifecycle.TaskContext{Client: client}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// A run that found no condition left is done; it says so every time.
	for range 2 {
		result, err := task.Run(ctx, &featurelifecycle.TaskContext{Client: client})
		if err != nil || !result.Done {
			t.Fatalf("result %+v, %v; want done", result, err)
		}
	}
	if err := task.Pristine(ctx, client); err != nil {
		t.Error(err)
	}
	resizing, err := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "resizing-and-unused", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resizing.Status.Conditions) != 1 || resizing.Status.Conditions[0].Type != v1.PersistentVolumeClaimResizing {
		t.Errorf("other conditions must stay: %+v", resizing.Status.Conditions)
	}
}

func TestClearPVCUnusedConditionIsNotDoneWhileItClears(t *testing.T) {
	client := fake.NewClientset(claim("unused", v1.PersistentVolumeClaimUnused))
	result, err := ClearPVCUnusedCondition{}.Run(context.Background(), &featurelifecycle.TaskContext{Client: client})
	if err != nil || result.Done || !strings.Contains(result.Message, "1 of 1") {
		t.Errorf("result %+v, %v; want not done, 1 of 1 cleared", result, err)
	}
}

func balloon(name, namespace, class string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{v1.LabelBalloonPod: "true"}},
		Spec:       v1.PodSpec{PriorityClassName: class},
	}
}

func TestWaitForNoBalloonPodsWaitsWithoutDeleting(t *testing.T) {
	ctx := context.Background()
	objs := []runtime.Object{
		balloon("balloon-node-1", metav1.NamespaceSystem, scheduling.SystemNodeBalloon),
		// Neither is a balloon: the label alone grants nothing.
		balloon("label-only", metav1.NamespaceSystem, ""),
		balloon("elsewhere", "default", scheduling.SystemNodeBalloon),
	}
	client := fake.NewClientset(objs...)
	task := WaitForNoBalloonPods{}
	result, err := task.Run(ctx, &featurelifecycle.TaskContext{Client: client})
	if err != nil || result.Done || !strings.Contains(result.Message, "balloon pods remain in kube-system: 1 (balloon-node-1)") {
		t.Fatalf("result %+v, %v; want waiting for balloon-node-1", result, err)
	}
	if err := task.Pristine(ctx, client); err == nil {
		t.Error("Pristine with a balloon left")
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 3 {
		t.Fatalf("the task deleted pods: %d left, %v", len(pods.Items), err)
	}
	if err := client.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, "balloon-node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if result, err := task.Run(ctx, &featurelifecycle.TaskContext{Client: client}); err != nil || !result.Done {
		t.Errorf("result %+v, %v; want done once the balloon is gone", result, err)
	}
}

func TestWaitForNoBalloonPodsIgnoresPodsThatEnded(t *testing.T) {
	rejected := balloon("rejected", metav1.NamespaceSystem, scheduling.SystemNodeBalloon)
	rejected.Status = v1.PodStatus{Phase: v1.PodFailed, Reason: "PodFeatureUnsupported"}
	succeeded := balloon("succeeded", metav1.NamespaceSystem, scheduling.SystemNodeBalloon)
	succeeded.Status.Phase = v1.PodSucceeded
	running := balloon("running", metav1.NamespaceSystem, scheduling.SystemNodeBalloon)
	running.Status.Phase = v1.PodRunning
	pending := balloon("pending", metav1.NamespaceSystem, scheduling.SystemNodeBalloon)
	pending.Status.Phase = v1.PodPending
	client := fake.NewClientset(rejected, succeeded, running, pending)
	result, err := WaitForNoBalloonPods{}.Run(context.Background(), &featurelifecycle.TaskContext{Client: client})
	if err != nil || result.Done || !strings.Contains(result.Message, "balloon pods remain in kube-system: 2 (pending, running)") {
		t.Errorf("result %+v, %v; want waiting for the pending and running balloons only", result, err)
	}

	client = fake.NewClientset(rejected, succeeded)
	if result, err := (WaitForNoBalloonPods{}).Run(context.Background(), &featurelifecycle.TaskContext{Client: client}); err != nil || !result.Done {
		t.Errorf("result %+v, %v; want done when every balloon has ended", result, err)
	}
}

func TestEveryRegisteredTaskCanBeExercised(t *testing.T) {
	registry := featurelifecycle.NewRegistry(featurelifecycle.NewWaitForUses(0, 0))
	Register(registry)
	for _, feature := range registry.Features() {
		var all []featurelifecycle.Task
		for _, t := range []featurelifecycle.Transition{featurelifecycle.TurnOn, featurelifecycle.TurnOff, featurelifecycle.Upgrade, featurelifecycle.Downgrade} {
			all = append(all, registry.TasksFor(feature, t)...)
		}
		for _, task := range all {
			if task.Name() == featurelifecycle.WaitForUsesName {
				continue
			}
			if _, ok := task.(featurelifecycle.Exercise); !ok {
				t.Errorf("%s: task %s does not implement featurelifecycle.Exercise, so the lifecycle harness cannot run it", feature, task.Name())
			}
		}
	}
}

// A run for a transition that is over (fenced) stops before it touches a claim.
func TestClearPVCUnusedConditionStopsWhenFenced(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(claim("a", v1.PersistentVolumeClaimUnused), claim("b", v1.PersistentVolumeClaimUnused))
	fenced := &featurelifecycle.TaskContext{Client: client, FenceFunc: func(context.Context) error { return featurelifecycle.ErrFenced }}
	if _, err := (ClearPVCUnusedCondition{}).Run(ctx, fenced); !errors.Is(err, featurelifecycle.ErrFenced) {
		t.Errorf("want ErrFenced, got %v", err)
	}
	for _, action := range client.Actions() {
		if action.GetVerb() == "update" {
			t.Errorf("a fenced run wrote: %v", action)
		}
	}
}
