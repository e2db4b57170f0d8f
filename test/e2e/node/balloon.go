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

package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/test/e2e/feature"
	"k8s.io/kubernetes/test/e2e/framework"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	e2epod "k8s.io/kubernetes/test/e2e/framework/pod"
	e2etestfiles "k8s.io/kubernetes/test/e2e/framework/testfiles"
	imageutils "k8s.io/kubernetes/test/utils/image"
	admissionapi "k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"
)

const balloonResizeTimeout = 2 * time.Minute

var _ = SIGDescribe("Node resizing with balloon pods", feature.BalloonPod, framework.WithFeatureGate(features.BalloonPod), framework.WithSerial(), func() {
	f := framework.NewDefaultFramework("balloon")
	f.NamespacePodSecurityLevel = admissionapi.LevelBaseline
	var node *v1.Node

	// podsOnNode lists the node's pods once the pods of earlier tests are
	// gone: those deleted, and those of namespaces being deleted, which the
	// namespace controller deletes later.
	podsOnNode := func(ctx context.Context) *v1.PodList {
		var pods *v1.PodList
		gomega.Eventually(ctx, func(ctx context.Context) (leaving []string, err error) {
			pods, err = f.ClientSet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
			if err != nil {
				return nil, err
			}
			namespaces, err := f.ClientSet.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			deleted := sets.New[string]()
			for _, ns := range namespaces.Items {
				if ns.DeletionTimestamp != nil {
					deleted.Insert(ns.Name)
				}
			}
			for _, pod := range pods.Items {
				if pod.DeletionTimestamp != nil || deleted.Has(pod.Namespace) {
					leaving = append(leaving, pod.Namespace+"/"+pod.Name)
				}
			}
			return leaving, nil
		}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(gomega.BeEmpty(), "pods of earlier tests still on the node")
		return pods
	}

	ginkgo.BeforeEach(func(ctx context.Context) {
		var err error
		node, err = e2enode.GetRandomReadySchedulableNode(ctx, f.ClientSet)
		framework.ExpectNoError(err)
		podsOnNode(ctx)
	})

	// freeCPU is the node's allocatable cpu, in millicores, that no pod holds.
	freeCPU := func(ctx context.Context) int64 {
		pods := podsOnNode(ctx)
		free := node.Status.Allocatable.Cpu().MilliValue()
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
				continue
			}
			requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
			free -= requests.Cpu().MilliValue()
		}
		return free
	}

	podOnNode := func(namespace, name string, cpuMilli int64, bind bool) *v1.Pod {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: v1.PodSpec{
				Containers: []v1.Container{{
					Name:      "balloon",
					Image:     imageutils.GetPauseImageName(),
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI), v1.ResourceMemory: resource.MustParse("1Mi")}},
					ResizePolicy: []v1.ContainerResizePolicy{
						{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired},
						{ResourceName: v1.ResourceMemory, RestartPolicy: v1.NotRequired},
					},
				}},
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Tolerations:                   []v1.Toleration{{Operator: v1.TolerationOpExists}},
			},
		}
		if bind {
			// Bound by name, the pod goes straight to the kubelet's admission.
			pod.Spec.NodeName = node.Name
		} else {
			pod.Spec.NodeSelector = map[string]string{v1.LabelHostname: node.Labels[v1.LabelHostname]}
		}
		return pod
	}

	createBalloon := func(ctx context.Context, cpuMilli int64, bind bool) *v1.Pod {
		pod := podOnNode(metav1.NamespaceSystem, "e2e-balloon-"+string(uuid.NewUUID())[:8], cpuMilli, bind)
		pod.Labels = map[string]string{v1.LabelBalloonPod: "true"}
		pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
		created, err := f.ClientSet.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, pod, metav1.CreateOptions{})
		framework.ExpectNoError(err)
		ginkgo.DeferCleanup(func(ctx context.Context) {
			framework.ExpectNoError(e2epod.DeletePodWithWaitByName(ctx, f.ClientSet, created.Name, created.Namespace))
		})
		return created
	}

	// createWorkload creates a pod that is gone before the next test computes what is free.
	createWorkload := func(ctx context.Context, name string, cpuMilli int64, bind bool) *v1.Pod {
		pod := e2epod.NewPodClient(f).Create(ctx, podOnNode(f.Namespace.Name, name, cpuMilli, bind))
		ginkgo.DeferCleanup(func(ctx context.Context) {
			framework.ExpectNoError(e2epod.DeletePodWithWaitByName(ctx, f.ClientSet, pod.Name, pod.Namespace))
		})
		return pod
	}

	// resizeBalloon asks for a new cpu request and returns the kubelet's verdict:
	// nil once the resize is actuated, else the PodResizePending condition.
	resizeBalloon := func(ctx context.Context, balloon *v1.Pod, cpuMilli int64) *v1.PodCondition {
		pod, err := f.ClientSet.CoreV1().Pods(balloon.Namespace).Get(ctx, balloon.Name, metav1.GetOptions{})
		framework.ExpectNoError(err)
		want := *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI)
		pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = want
		pod, err = f.ClientSet.CoreV1().Pods(pod.Namespace).UpdateResize(ctx, pod.Name, pod, metav1.UpdateOptions{})
		framework.ExpectNoError(err)
		generation := pod.Generation
		var pending *v1.PodCondition
		gomega.Eventually(ctx, func(ctx context.Context) error {
			pod, err := f.ClientSet.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for i := range pod.Status.Conditions {
				c := &pod.Status.Conditions[i]
				if c.Type == v1.PodResizePending && c.ObservedGeneration >= generation {
					pending = c
					return nil
				}
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == v1.PodResizeInProgress || c.Type == v1.PodResizePending {
					return fmt.Errorf("resize %s", c.Type)
				}
			}
			if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].Resources == nil ||
				!pod.Status.ContainerStatuses[0].Resources.Requests.Cpu().Equal(want) {
				return fmt.Errorf("cpu request not actuated yet: %v", pod.Status.ContainerStatuses)
			}
			pending = nil
			return nil
		}).WithTimeout(balloonResizeTimeout).WithPolling(time.Second).Should(gomega.Succeed())
		return pending
	}

	runningPodsOnNode := func(ctx context.Context) map[types.UID]string {
		pods, err := f.ClientSet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
		framework.ExpectNoError(err)
		running := map[types.UID]string{}
		for _, pod := range pods.Items {
			if pod.Status.Phase == v1.PodRunning && pod.DeletionTimestamp == nil {
				running[pod.UID] = pod.Namespace + "/" + pod.Name
			}
		}
		return running
	}

	ginkgo.It("defers a balloon upsize that does not fit on a busy node and disturbs no pod", func(ctx context.Context) {
		balloon := createBalloon(ctx, 1, true)
		framework.ExpectNoError(e2epod.WaitForPodNameRunningInNamespace(ctx, f.ClientSet, balloon.Name, balloon.Namespace))
		free := freeCPU(ctx)
		gomega.Expect(free).To(gomega.BeNumerically(">", 200), "the node needs some free cpu")
		workload := createWorkload(ctx, "busy", free/2, true)
		framework.ExpectNoError(e2epod.WaitForPodNameRunningInNamespace(ctx, f.ClientSet, workload.Name, workload.Namespace))
		before := runningPodsOnNode(ctx)

		ginkgo.By("growing the balloon into the cpu the workload holds")
		pending := resizeBalloon(ctx, balloon, 1+free-free/2+100)
		gomega.Expect(pending).NotTo(gomega.BeNil(), "the upsize must not be actuated")
		gomega.Expect(pending.Reason).To(gomega.Equal(v1.PodReasonDeferred))
		gomega.Expect(pending.Message).To(gomega.ContainSubstring("never preempts running pods"))

		gomega.Eventually(ctx, func(ctx context.Context) ([]v1.Event, error) {
			list, err := f.ClientSet.CoreV1().Events(balloon.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": balloon.Name, "reason": events.ResizeDeferred}.String()})
			if err != nil {
				return nil, err
			}
			return list.Items, nil
		}).WithTimeout(time.Minute).Should(gomega.Not(gomega.BeEmpty()), "want a %s event on the balloon", events.ResizeDeferred)

		ginkgo.By("checking that every pod that ran on the node still runs")
		gomega.Consistently(ctx, runningPodsOnNode).WithTimeout(15 * time.Second).WithPolling(time.Second).Should(gomega.Equal(before))
		workload, err := f.ClientSet.CoreV1().Pods(workload.Namespace).Get(ctx, workload.Name, metav1.GetOptions{})
		framework.ExpectNoError(err)
		gomega.Expect(workload.Status.ContainerStatuses[0].RestartCount).To(gomega.BeZero())
		for _, c := range workload.Status.Conditions {
			gomega.Expect(c.Type).NotTo(gomega.Equal(v1.DisruptionTarget))
		}
	})

	ginkgo.It("shrinks a free node so that a pod no longer fits, and grows it back so that the pod is admitted", func(ctx context.Context) {
		balloon := createBalloon(ctx, 1, true)
		framework.ExpectNoError(e2epod.WaitForPodNameRunningInNamespace(ctx, f.ClientSet, balloon.Name, balloon.Namespace))
		free := freeCPU(ctx)
		gomega.Expect(free).To(gomega.BeNumerically(">", 300), "the node needs some free cpu")

		ginkgo.By("growing the balloon to all but 100m of the free cpu")
		gomega.Expect(resizeBalloon(ctx, balloon, 1+free-100)).To(gomega.BeNil(), "the upsize fits and must be actuated")

		ginkgo.By("binding a pod of 200m to the node: the kubelet rejects it")
		rejected := createWorkload(ctx, "does-not-fit", 200, true)
		framework.ExpectNoError(e2epod.WaitForPodCondition(ctx, f.ClientSet, rejected.Namespace, rejected.Name, "rejected with OutOfcpu", time.Minute, func(pod *v1.Pod) (bool, error) {
			return pod.Status.Phase == v1.PodFailed && pod.Status.Reason == "OutOfcpu", nil
		}))

		ginkgo.By("shrinking the balloon back: the same pod is admitted")
		gomega.Expect(resizeBalloon(ctx, balloon, 1)).To(gomega.BeNil(), "the downsize must be actuated")
		admitted := createWorkload(ctx, "fits-again", 200, true)
		framework.ExpectNoError(e2epod.WaitForPodNameRunningInNamespace(ctx, f.ClientSet, admitted.Name, admitted.Namespace))
	})

	ginkgo.It("keeps a new balloon that does not fit Pending rather than displacing work", func(ctx context.Context) {
		free := freeCPU(ctx)
		gomega.Expect(free).To(gomega.BeNumerically(">", 200), "the node needs some free cpu")
		workload := createWorkload(ctx, "fills-the-node", free-50, false)
		framework.ExpectNoError(e2epod.WaitForPodNameRunningInNamespace(ctx, f.ClientSet, workload.Name, workload.Namespace))
		before := runningPodsOnNode(ctx)

		balloon := createBalloon(ctx, freeCPU(ctx)+100, false)
		framework.ExpectNoError(e2epod.WaitForPodCondition(ctx, f.ClientSet, balloon.Namespace, balloon.Name, "unschedulable", time.Minute, func(pod *v1.Pod) (bool, error) {
			for _, c := range pod.Status.Conditions {
				if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
					return true, nil
				}
			}
			return false, nil
		}))
		gomega.Consistently(ctx, func(ctx context.Context) (string, error) {
			pod, err := f.ClientSet.CoreV1().Pods(balloon.Namespace).Get(ctx, balloon.Name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return pod.Spec.NodeName + pod.Status.NominatedNodeName, nil
		}).WithTimeout(10*time.Second).WithPolling(time.Second).Should(gomega.BeEmpty(), "the balloon must neither bind nor nominate a node")
		gomega.Expect(runningPodsOnNode(ctx)).To(gomega.Equal(before))
	})

	// Reproduced on a cluster before balloons were told by their class: a pod of
	// the balloon class without the balloon label, bound to a full node, made the
	// kubelet preempt a running workload.
	ginkgo.It("refuses a pod of the balloon class without the balloon label, and the label without the class", func(ctx context.Context) {
		unlabelled := podOnNode(metav1.NamespaceSystem, "e2e-unlabelled-"+string(uuid.NewUUID())[:8], 100, true)
		unlabelled.Spec.PriorityClassName = scheduling.SystemNodeBalloon
		_, err := f.ClientSet.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, unlabelled, metav1.CreateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrueBecause("a pod of the balloon class without the label must be refused, got %v", err))

		labelOnly := podOnNode(f.Namespace.Name, "label-only", 100, true)
		labelOnly.Labels = map[string]string{v1.LabelBalloonPod: "true"}
		_, err = f.ClientSet.CoreV1().Pods(f.Namespace.Name).Create(ctx, labelOnly, metav1.CreateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrueBecause("the balloon label without the class must be refused, got %v", err))

		ginkgo.By("removing the label from a balloon")
		balloon := createBalloon(ctx, 1, true)
		patch := []byte(`{"metadata":{"labels":{"` + v1.LabelBalloonPod + `":null}}}`)
		_, err = f.ClientSet.CoreV1().Pods(balloon.Namespace).Patch(ctx, balloon.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrueBecause("the balloon label must stay on a balloon, got %v", err))
	})

	ginkgo.It("runs the addon DaemonSet's balloons, which can be resized", func(ctx context.Context) {
		manifest, err := e2etestfiles.Read("cluster/addons/node-balloon/balloon-daemonset.yaml")
		framework.ExpectNoError(err)
		ds := &appsv1.DaemonSet{}
		framework.ExpectNoError(utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(manifest)), 4096).Decode(ds))
		// A name of its own, and the pause image of the e2e image repository.
		ds.Name = "e2e-" + ds.Name + "-" + string(uuid.NewUUID())[:8]
		ds.Spec.Selector.MatchLabels["e2e-daemonset"] = ds.Name
		ds.Spec.Template.Labels["e2e-daemonset"] = ds.Name
		ds.Spec.Template.Spec.Containers[0].Image = imageutils.GetPauseImageName()
		ds, err = f.ClientSet.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{})
		framework.ExpectNoError(err)
		ginkgo.DeferCleanup(f.ClientSet.AppsV1().DaemonSets(ds.Namespace).Delete, ds.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})

		var balloon *v1.Pod
		gomega.Eventually(ctx, func(ctx context.Context) error {
			pods, err := f.ClientSet.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "e2e-daemonset=" + ds.Name, FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
			if err != nil {
				return err
			}
			if len(pods.Items) != 1 || pods.Items[0].Status.Phase != v1.PodRunning {
				return fmt.Errorf("want one running balloon on %s, got %d pods", node.Name, len(pods.Items))
			}
			balloon = &pods.Items[0]
			return nil
		}).WithTimeout(2 * time.Minute).Should(gomega.Succeed())

		gomega.Expect(balloon.Status.QOSClass).To(gomega.Equal(v1.PodQOSBurstable))
		gomega.Expect(balloon.Spec.Priority).To(gomega.Equal(ptr.To(scheduling.SystemCriticalPriority + 1000)))
		gomega.Expect(balloon.Spec.PreemptionPolicy).To(gomega.Equal(ptr.To(v1.PreemptNever)))
		gomega.Expect(resizeBalloon(ctx, balloon, 50)).To(gomega.BeNil(), "the addon's balloon must be resizable in place")
		gomega.Expect(resizeBalloon(ctx, balloon, 1)).To(gomega.BeNil())
	})
})
