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
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	testingclock "k8s.io/utils/clock/testing"
)

var podsResource = v1.SchemeGroupVersion.WithResource("pods")

const deferredMessage = "Node didn't have enough resource: cpu, requested: 3000, used: 3500, capacity: 4000; a balloon grows only into free capacity and never preempts running pods"

func resources(cpu, memory string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory)}
}

func newNode(name, cpu, memory string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")},
		Status:     v1.NodeStatus{Allocatable: resources(cpu, memory)},
	}
}

// newBalloon returns a balloon as the DaemonSet creates it, with the kubelet
// having actuated its requests.
func newBalloon(name, nodeName, cpu, memory string) *v1.Pod {
	requests := resources(cpu, memory)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:       name,
			Namespace:  metav1.NamespaceSystem,
			Labels:     map[string]string{v1.LabelBalloonPod: "true"},
			Generation: 1,
		},
		Spec: v1.PodSpec{
			NodeName:          nodeName,
			PriorityClassName: scheduling.SystemNodeBalloon,
			Containers: []v1.Container{{
				Name:      balloonContainerName,
				Image:     "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: requests},
			}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning,
			ContainerStatuses: []v1.ContainerStatus{{
				Name:               balloonContainerName,
				AllocatedResources: requests.DeepCopy(),
				Resources:          &v1.ResourceRequirements{Requests: requests.DeepCopy()},
			}},
		},
	}
}

// forNode gives an unscheduled balloon the node affinity by which the
// DaemonSet controller pins its pods.
func forNode(pod *v1.Pod, nodeName string) {
	pod.Spec.NodeName = ""
	pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: []string{nodeName}}},
		}}},
	}}
}

// testEnv runs the commands against a fake cluster whose API server
// implements the resize subresource and whose kubelet tests script.
type testEnv struct {
	t           *testing.T
	client      *fake.Clientset
	clock       *testingclock.FakeClock
	out, errOut bytes.Buffer
	// kubelet, if set, acts on the balloon before each get, like a kubelet
	// updating the pod status between two polls.
	kubelet func(pod *v1.Pod)
	// resourceVersion numbers the pod writes; the fake tracker does not.
	resourceVersion int
	// events are the events the commands recorded.
	events *record.FakeRecorder
}

// newTestEnv holds the objects, and the addon's empty ConfigMap of balloon
// sizes unless the objects include one.
func newTestEnv(t *testing.T, objects ...runtime.Object) *testEnv {
	hasSizes := false
	for _, obj := range objects {
		if cm, ok := obj.(*v1.ConfigMap); ok && cm.Name == balloonSizesConfigMap {
			hasSizes = true
		}
	}
	if !hasSizes {
		objects = append(objects, recordedSizesConfigMap(nil))
	}
	e := &testEnv{t: t, client: fake.NewClientset(objects...), clock: testingclock.NewFakeClock(time.Now()), events: record.NewFakeRecorder(100)}
	e.client.PrependReactor("update", "pods", e.resize)
	e.client.PrependReactor("get", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if e.kubelet != nil {
			e.updatePod(action.(clienttesting.GetAction).GetName(), e.kubelet)
		}
		return false, nil, nil
	})
	return e
}

// resize does what the API server does for the resize subresource: it takes
// only the container resources, bumps the generation, and rejects a stale
// resourceVersion.
func (e *testEnv) resize(action clienttesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "resize" {
		return false, nil, nil
	}
	in := action.(clienttesting.UpdateAction).GetObject().(*v1.Pod)
	stored := e.getPod(in.Name)
	if in.ResourceVersion != stored.ResourceVersion {
		return true, nil, apierrors.NewConflict(podsResource.GroupResource(), in.Name, fmt.Errorf("the object has been modified"))
	}
	for i := range stored.Spec.Containers {
		stored.Spec.Containers[i].Resources = in.Spec.Containers[i].Resources
	}
	stored.Generation++
	e.bumpResourceVersion(stored)
	if err := e.client.Tracker().Update(podsResource, stored, stored.Namespace); err != nil {
		return true, nil, err
	}
	return true, e.getPod(in.Name), nil
}

func (e *testEnv) getPod(name string) *v1.Pod {
	obj, err := e.client.Tracker().Get(podsResource, metav1.NamespaceSystem, name)
	if err != nil {
		e.t.Fatalf("getting pod %s: %v", name, err)
	}
	return obj.(*v1.Pod)
}

func (e *testEnv) updatePod(name string, mutate func(*v1.Pod)) {
	pod := e.getPod(name)
	mutate(pod)
	e.bumpResourceVersion(pod)
	if err := e.client.Tracker().Update(podsResource, pod, pod.Namespace); err != nil {
		e.t.Fatalf("updating pod %s: %v", name, err)
	}
}

func (e *testEnv) bumpResourceVersion(pod *v1.Pod) {
	e.resourceVersion++
	pod.ResourceVersion = strconv.Itoa(e.resourceVersion)
}

func (e *testEnv) run(args ...string) int {
	return e.runWith(e.client, args...)
}

// runWith runs the command against client, which reaches e's cluster.
func (e *testEnv) runWith(client kubernetes.Interface, args ...string) int {
	cmd := newCmdBalloon(deps{
		streams:      genericiooptions.IOStreams{Out: &e.out, ErrOut: &e.errOut},
		newClient:    func() (kubernetes.Interface, error) { return client, nil },
		newRecorder:  func(kubernetes.Interface) (record.EventRecorder, func()) { return e.events, func() {} },
		clock:        e.clock,
		pollInterval: time.Second,
	})
	return execute(cmd, args, &e.errOut)
}

// resizes returns the requests of each resize the command sent, in order.
func (e *testEnv) resizes() []v1.ResourceList {
	var sent []v1.ResourceList
	for _, action := range e.client.Actions() {
		if action.GetVerb() == "update" && action.GetSubresource() == "resize" {
			pod := action.(clienttesting.UpdateAction).GetObject().(*v1.Pod)
			sent = append(sent, pod.Spec.Containers[0].Resources.Requests)
		}
	}
	return sent
}

// writes returns every action that could have changed the cluster.
func (e *testEnv) writes() []clienttesting.Action {
	var writes []clienttesting.Action
	for _, action := range e.client.Actions() {
		switch action.GetVerb() {
		case "get", "list", "watch":
		default:
			writes = append(writes, action)
		}
	}
	return writes
}

// actuate is a kubelet that carries out the resize at once.
func actuate(pod *v1.Pod) {
	requests := pod.Spec.Containers[0].Resources.Requests
	pod.Status.ContainerStatuses[0].AllocatedResources = requests.DeepCopy()
	pod.Status.ContainerStatuses[0].Resources = &v1.ResourceRequirements{Requests: requests.DeepCopy()}
	pod.Status.Conditions = nil
}

// refuse returns a kubelet that leaves the resize pending with reason.
func refuse(reason, message string) func(*v1.Pod) {
	return func(pod *v1.Pod) {
		pod.Status.Conditions = []v1.PodCondition{{
			Type:               v1.PodResizePending,
			Status:             v1.ConditionTrue,
			Reason:             reason,
			Message:            message,
			ObservedGeneration: pod.Generation,
		}}
	}
}

func assertResources(t *testing.T, got, want v1.ResourceList) {
	t.Helper()
	if !equalResources(got, want) || len(got) != len(want) {
		t.Errorf("requests = %s, want %s", formatResources(got), formatResources(want))
	}
}

// recordedSizesConfigMap is the ConfigMap of balloon sizes with data.
func recordedSizesConfigMap(data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: balloonSizesConfigMap, Namespace: metav1.NamespaceSystem}, Data: data}
}

// recordedEvents returns the events recorded so far.
func (e *testEnv) recordedEvents() []string {
	var events []string
	for {
		select {
		case event := <-e.events.Events:
			events = append(events, event)
		default:
			return events
		}
	}
}

// recordedSize returns the node's entry in the ConfigMap of balloon sizes.
func (e *testEnv) recordedSize(node string) string {
	e.t.Helper()
	cm, err := e.client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(context.Background(), balloonSizesConfigMap, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return cm.Data[node]
}
