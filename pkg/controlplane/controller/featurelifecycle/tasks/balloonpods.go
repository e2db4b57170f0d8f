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
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
)

// WaitForNoBalloonPods holds BalloonPod in TurningOff while balloon pods
// hold capacity. A kubelet with the gate off stops declaring the BalloonPod
// node feature: it rejects its balloons (PodFeatureUnsupported) when it next
// admits its pods, say after a restart, and the scheduler keeps new ones
// Pending; a kubelet that declares no features at all (NodeDeclaredFeatures
// off, or older) admits them as ordinary critical pods that may preempt.
// Either way the node's effective size silently goes back to the host's.
// Shrinking the balloons and deleting them is the admin's call, so the task
// waits and says which pods remain; it never deletes them. Pods that ended
// (a rejected balloon is Failed) hold nothing and do not count.
type WaitForNoBalloonPods struct{}

var (
	_ featurelifecycle.Exercise = WaitForNoBalloonPods{}
	_ featurelifecycle.Wait     = WaitForNoBalloonPods{}
)

func (WaitForNoBalloonPods) Name() string { return "WaitForNoBalloonPods" }

// WritesNothing: a rollback that only follows a default still waits for the
// balloons to go.
func (WaitForNoBalloonPods) WritesNothing() {}

func (WaitForNoBalloonPods) AppliesTo(t featurelifecycle.Transition) bool {
	return t == featurelifecycle.TurnOff
}

// maxNamed bounds the pods the task's message names.
const maxNamed = 5

func (WaitForNoBalloonPods) Run(ctx context.Context, tc *featurelifecycle.TaskContext) (featurelifecycle.Result, error) {
	balloons, err := listBalloons(ctx, tc.Client)
	if err != nil {
		return featurelifecycle.Result{}, err
	}
	if len(balloons) == 0 {
		return featurelifecycle.Done, nil
	}
	names := balloons
	if len(names) > maxNamed {
		names = append(names[:maxNamed:maxNamed], "...")
	}
	return featurelifecycle.NotYet(fmt.Sprintf("balloon pods remain in kube-system: %d (%s); delete them, and the node-balloon DaemonSet, to finish turning BalloonPod off",
		len(balloons), strings.Join(names, ", "))), nil
}

// listBalloons returns the names of the balloon pods that have not ended: in
// kube-system, with the balloon label and the balloon priority class.
func listBalloons(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	pods, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelBalloonPod + "=true"})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, pod := range pods.Items {
		if pod.Spec.PriorityClassName == scheduling.SystemNodeBalloon && pod.Status.Phase != v1.PodFailed && pod.Status.Phase != v1.PodSucceeded {
			names = append(names, pod.Name)
		}
	}
	return names, nil
}

const harnessBalloon = "feature-lifecycle-harness-balloon"

// Use creates a balloon pod, as the node-balloon DaemonSet does.
func (WaitForNoBalloonPods) Use(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: harnessBalloon, Labels: map[string]string{v1.LabelBalloonPod: "true"}},
		Spec: v1.PodSpec{
			PriorityClassName: scheduling.SystemNodeBalloon,
			Containers:        []v1.Container{{Name: "balloon", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	return err
}

// Release deletes the balloon pod, as an admin does.
func (WaitForNoBalloonPods) Release(ctx context.Context, client kubernetes.Interface) error {
	err := client.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, harnessBalloon, *metav1.NewDeleteOptions(0))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Pristine fails while a balloon pod exists.
func (WaitForNoBalloonPods) Pristine(ctx context.Context, client kubernetes.Interface) error {
	balloons, err := listBalloons(ctx, client)
	if err == nil && len(balloons) > 0 {
		err = fmt.Errorf("balloon pods remain: %s", strings.Join(balloons, ", "))
	}
	return err
}
