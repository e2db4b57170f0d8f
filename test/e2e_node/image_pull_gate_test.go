//go:build linux

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

package e2enode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletevents "k8s.io/kubernetes/pkg/kubelet/events"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	"k8s.io/kubernetes/test/e2e/feature"
	"k8s.io/kubernetes/test/e2e/framework"
	e2epod "k8s.io/kubernetes/test/e2e/framework/pod"
	e2eskipper "k8s.io/kubernetes/test/e2e/framework/skipper"
	"k8s.io/kubernetes/test/e2e_node/criproxy"
	imageutils "k8s.io/kubernetes/test/utils/image"
	admissionapi "k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"
)

// uniqueRegistryEnv names a registry that serves the e2e images and serves
// "<tag>--<suffix>" as "<tag>", so that every spec pulls an image the node has
// never seen (kube-carry's make node-e2e runs one).
const uniqueRegistryEnv = "KUBE_TEST_SLOW_REGISTRY"

// The pull gate's specs hold every PullImage at the CRI proxy until the spec
// releases it, so that they see what reaches the runtime, and in which order,
// without depending on how long a pull takes.
var _ = SIGDescribe("Kubelet image pull gate", feature.CriProxy, framework.WithFeatureGate(features.KubeletImagePullGate), framework.WithSerial(), func() {
	f := framework.NewDefaultFramework("image-pull-gate")
	f.NamespacePodSecurityLevel = admissionapi.LevelBaseline

	var registry string
	var pulls *pullBlocker

	ginkgo.BeforeEach(func(ctx context.Context) {
		e2eskipper.SkipUnlessFeatureGateEnabled(features.KubeletImagePullGate)
		registry = os.Getenv(uniqueRegistryEnv)
		if registry == "" {
			e2eskipper.Skipf("%s is not set: these tests pull images under names the node has never seen", uniqueRegistryEnv)
		}
		if err := resetCRIProxyInjector(e2eCriProxy); err != nil {
			ginkgo.Skip("Skip the test since the CRI Proxy is undefined.")
		}
		// A pod of an earlier spec whose namespace is still being deleted may pull
		// again (back-off, or the kubelet's restart): its PullImage would count.
		ginkgo.By("waiting for the pods of earlier specs to be gone")
		gomega.Eventually(ctx, func(ctx context.Context) ([]v1.Pod, error) {
			pods, err := f.ClientSet.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return pods.Items, nil
		}).WithTimeout(3 * time.Minute).Should(gomega.BeEmpty())
		pulls = newPullBlocker()
		framework.ExpectNoError(addCRIProxyInjector(e2eCriProxy, pulls.inject))
		ginkgo.DeferCleanup(func() error {
			pulls.releaseAll()
			return resetCRIProxyInjector(e2eCriProxy)
		})
	})

	// newImage is the e2e busybox image under a tag the node has never pulled.
	newImage := func() string {
		_, path, _ := strings.Cut(imageutils.GetE2EImage(imageutils.BusyBox), "/")
		return registry + "/" + path + "--" + string(uuid.NewUUID())
	}
	// newPodIn creates a pod of image in a namespace, with a pull secret unless secret is "".
	newPodIn := func(ctx context.Context, namespace, name, image string, policy v1.PullPolicy, secret string) *v1.Pod {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{
				Containers: []v1.Container{{
					Name:            "c",
					Image:           image,
					ImagePullPolicy: policy,
					Command:         []string{"sleep", "3600"},
				}},
				TerminationGracePeriodSeconds: ptr.To[int64](0),
			},
		}
		if secret != "" {
			pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: secret}}
		}
		return e2epod.PodClientNS(f, namespace).Create(ctx, pod)
	}
	newPod := func(ctx context.Context, name, image string, policy v1.PullPolicy) *v1.Pod {
		return newPodIn(ctx, f.Namespace.Name, name, image, policy, "")
	}
	// messagesIn are the messages of the events of one reason for each pod of a namespace.
	messagesIn := func(ctx context.Context, namespace, reason string) map[string][]string {
		events, err := f.ClientSet.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		framework.ExpectNoError(err)
		out := map[string][]string{}
		for _, e := range events.Items {
			out[e.InvolvedObject.Name] = append(out[e.InvolvedObject.Name], e.Message)
		}
		return out
	}
	messages := func(ctx context.Context, reason string) map[string][]string {
		return messagesIn(ctx, f.Namespace.Name, reason)
	}
	eventuallyIn := func(ctx context.Context, namespace, reason, pod, substr string) {
		ginkgo.GinkgoHelper()
		gomega.Eventually(ctx, func(ctx context.Context) []string {
			return messagesIn(ctx, namespace, reason)[pod]
		}).WithTimeout(time.Minute).Should(gomega.ContainElement(gomega.ContainSubstring(substr)), "a %s event of pod %s/%s", reason, namespace, pod)
	}
	eventually := func(ctx context.Context, reason, pod, substr string) {
		ginkgo.GinkgoHelper()
		eventuallyIn(ctx, f.Namespace.Name, reason, pod, substr)
	}
	arrived := func(n int, why string) {
		ginkgo.GinkgoHelper()
		gomega.Eventually(pulls.arrived).WithTimeout(time.Minute).Should(gomega.Equal(n), why)
		gomega.Consistently(pulls.arrived).WithTimeout(3*time.Second).Should(gomega.Equal(n), why)
	}
	running := func(ctx context.Context, pods ...*v1.Pod) {
		ginkgo.GinkgoHelper()
		for _, p := range pods {
			framework.ExpectNoError(e2epod.WaitTimeoutForPodRunningInNamespace(ctx, f.ClientSet, p.Name, p.Namespace, 2*time.Minute))
		}
	}

	ginkgo.Context("with maxParallelImagePulls=2", func() {
		tempSetCurrentKubeletConfig(f, func(ctx context.Context, initialConfig *kubeletconfig.KubeletConfiguration) {
			initialConfig.SerializeImagePulls = false
			initialConfig.MaxParallelImagePulls = ptr.To[int32](2)
			initialConfig.ImagePullQueueTimeout = nil
		})

		ginkgo.It("should let no more than 2 pulls reach the runtime and queue the others in order", func(ctx context.Context) {
			before := pullQueueMetrics(ctx)
			var pods []*v1.Pod
			for i := range 2 {
				pods = append(pods, newPod(ctx, fmt.Sprintf("pod-%d", i), newImage(), v1.PullIfNotPresent))
			}
			arrived(2, "the first two pulls reach the runtime")
			// The others arrive one at a time, so that their places in the queue are known.
			for i := 2; i < 5; i++ {
				pods = append(pods, newPod(ctx, fmt.Sprintf("pod-%d", i), newImage(), v1.PullIfNotPresent))
				eventually(ctx, kubeletevents.QueuedImagePull, pods[i].Name, fmt.Sprintf("Waiting for one of 2 image pull slots to pull image %q: %d", pods[i].Spec.Containers[0].Image, i-2))
			}
			arrived(2, "the queued pulls wait for a slot")
			gomega.Expect(pullQueueMetrics(ctx)).To(gomega.HaveKeyWithValue(kubeletmetrics.ImagePullQueueLengthKey, 3.0))
			gomega.Expect(pullQueueMetrics(ctx)).To(gomega.HaveKeyWithValue(kubeletmetrics.ImagePullQueueRunningPullsKey, 2.0))

			ginkgo.By("releasing one pull at a time: each lets the next queued pull reach the runtime, first come first served")
			for next := 2; next < 5; next++ {
				pulls.release(next - 2)
				arrived(next+1, "a released pull frees one slot")
				gomega.Eventually(ctx, func(ctx context.Context) []string {
					return messages(ctx, kubeletevents.PullingImage)[pods[next].Name]
				}).WithTimeout(time.Minute).Should(gomega.ContainElement(gomega.ContainSubstring("for one of 2 image pull slots")), "the pull of %s started", pods[next].Name)
				for _, later := range pods[next+1:] {
					gomega.Expect(messages(ctx, kubeletevents.PullingImage)).NotTo(gomega.HaveKey(later.Name), "%s pulls before %s", later.Name, pods[next].Name)
				}
			}
			pulls.releaseAll()
			running(ctx, pods...)
			gomega.Expect(pulls.maxInFlight()).To(gomega.Equal(2))

			after := pullQueueMetrics(ctx)
			gomega.Expect(after).To(gomega.HaveKeyWithValue(kubeletmetrics.ImagePullQueueLengthKey, 0.0))
			gomega.Expect(after).To(gomega.HaveKeyWithValue(kubeletmetrics.ImagePullQueueRunningPullsKey, 0.0))
			gomega.Expect(after[kubeletmetrics.ImagePullQueueWaitDurationKey+"_count"] - before[kubeletmetrics.ImagePullQueueWaitDurationKey+"_count"]).To(gomega.Equal(5.0))
		})

		ginkgo.It("should never pull the image of a pod deleted while its pull waits for a slot", func(ctx context.Context) {
			before := pullQueueMetrics(ctx)
			holders := []*v1.Pod{
				newPod(ctx, "holder-0", newImage(), v1.PullIfNotPresent),
				newPod(ctx, "holder-1", newImage(), v1.PullIfNotPresent),
			}
			arrived(2, "both slots are taken")
			queued := newPod(ctx, "queued", newImage(), v1.PullIfNotPresent)
			eventually(ctx, kubeletevents.QueuedImagePull, queued.Name, "0 pulls ahead in the queue")

			ginkgo.By("deleting the pod whose pull waits")
			e2epod.NewPodClient(f).DeleteSync(ctx, queued.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, time.Minute)
			gomega.Eventually(ctx, pullQueueMetrics).WithTimeout(time.Minute).Should(gomega.HaveKeyWithValue(kubeletmetrics.ImagePullQueueLengthKey, 0.0))

			pulls.releaseAll()
			running(ctx, holders...)
			gomega.Consistently(pulls.arrived).WithTimeout(5*time.Second).Should(gomega.Equal(2), "the deleted pod's image is pulled")
			after := pullQueueMetrics(ctx)
			gomega.Expect(after[kubeletmetrics.ImagePullQueueAbandonedKey] - before[kubeletmetrics.ImagePullQueueAbandonedKey]).To(gomega.Equal(1.0))
			for _, reason := range []string{kubeletevents.FailedToPullImage, kubeletevents.BackOffPullImage, kubeletevents.PullingImage} {
				gomega.Expect(messages(ctx, reason)).NotTo(gomega.HaveKey(queued.Name), "a %s event of the deleted pod", reason)
			}
		})
	})

	ginkgo.Context("with maxParallelImagePulls=1 and imagePullQueueTimeout=5s", func() {
		tempSetCurrentKubeletConfig(f, func(ctx context.Context, initialConfig *kubeletconfig.KubeletConfiguration) {
			initialConfig.SerializeImagePulls = false
			initialConfig.MaxParallelImagePulls = ptr.To[int32](1)
			initialConfig.ImagePullQueueTimeout = &metav1.Duration{Duration: 5 * time.Second}
		})

		ginkgo.It("should fail a pull that waited longer than the timeout for a slot, and pull it once a slot is free", func(ctx context.Context) {
			before := pullQueueMetrics(ctx)
			first := newPod(ctx, "first", newImage(), v1.PullIfNotPresent)
			arrived(1, "the first pod takes the slot")
			late := newPod(ctx, "late", newImage(), v1.PullIfNotPresent)
			eventually(ctx, kubeletevents.TooManyParallelImagePulls, late.Name, "waited 5s for one of 1 image pull slots (imagePullQueueTimeout)")
			gomega.Expect(pulls.arrived()).To(gomega.Equal(1), "the pull that timed out reached the runtime")
			gomega.Expect(pullQueueMetrics(ctx)[kubeletmetrics.ImagePullQueueTimeoutsTotalKey] - before[kubeletmetrics.ImagePullQueueTimeoutsTotalKey]).To(gomega.BeNumerically(">=", 1))

			pulls.releaseAll()
			running(ctx, first, late)
		})
	})

	// abandonRunningPull deletes a pod while its pull runs in the runtime (held
	// at the CRI proxy) and starts a pod of another image: a cancelled pull gives
	// its slot up at once, a detached one keeps it until it ends. Then it lets
	// every pull go on. It returns the image of the deleted pod and whether the
	// image is on the node.
	abandonRunningPull := func(ctx context.Context, detached bool) (string, func(context.Context) bool) {
		ginkgo.GinkgoHelper()
		image := newImage()
		newPod(ctx, "abandoned", image, v1.PullIfNotPresent)
		arrived(1, "the pod's pull reaches the runtime")
		ginkgo.By("deleting the pod whose pull runs")
		e2epod.NewPodClient(f).DeleteSync(ctx, "abandoned", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, time.Minute)
		next := newPod(ctx, "next", newImage(), v1.PullIfNotPresent)
		if detached {
			arrived(1, "the detached pull keeps its slot: the next pod's pull waits")
			pulls.releaseAll()
			arrived(2, "the detached pull ended and handed its slot on")
		} else {
			arrived(2, "the cancelled pull gives up its slot")
			pulls.releaseAll()
		}
		running(ctx, next)

		_, is, err := getCRIClient(ctx)
		framework.ExpectNoError(err)
		return image, func(ctx context.Context) bool {
			status, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
			framework.ExpectNoError(err)
			return status.GetImage() != nil
		}
	}

	ginkgo.Context("with maxParallelImagePulls=1 and abandonedImagePullPolicy=Detach", func() {
		tempSetCurrentKubeletConfig(f, func(ctx context.Context, initialConfig *kubeletconfig.KubeletConfiguration) {
			initialConfig.SerializeImagePulls = false
			initialConfig.MaxParallelImagePulls = ptr.To[int32](1)
			initialConfig.ImagePullQueueTimeout = nil
			initialConfig.AbandonedImagePullPolicy = kubeletconfig.DetachAbandonedImagePulls
		})

		ginkgo.It("should let the running pull of a deleted pod finish, holding its slot", func(ctx context.Context) {
			image, present := abandonRunningPull(ctx, true)
			gomega.Eventually(ctx, present).WithTimeout(time.Minute).Should(gomega.BeTrueBecause("the detached pull completes"))
			again := newPod(ctx, "again", image, v1.PullIfNotPresent)
			running(ctx, again)
			gomega.Expect(pulls.arrived()).To(gomega.Equal(2), "a new pod of the image pulled it again")
		})
	})

	ginkgo.Context("with maxParallelImagePulls=1 and abandonedImagePullPolicy=Cancel", func() {
		tempSetCurrentKubeletConfig(f, func(ctx context.Context, initialConfig *kubeletconfig.KubeletConfiguration) {
			initialConfig.SerializeImagePulls = false
			initialConfig.MaxParallelImagePulls = ptr.To[int32](1)
			initialConfig.ImagePullQueueTimeout = nil
			initialConfig.AbandonedImagePullPolicy = kubeletconfig.CancelAbandonedImagePulls
		})

		ginkgo.It("should cancel the running pull of a deleted pod", func(ctx context.Context) {
			image, present := abandonRunningPull(ctx, false)
			// The proxy hands the released call to the runtime with the context the
			// kubelet cancelled: the pull fails.
			gomega.Consistently(ctx, present).WithTimeout(5 * time.Second).Should(gomega.BeFalseBecause("the cancelled pull left the image"))
			again := newPod(ctx, "again", image, v1.PullIfNotPresent)
			running(ctx, again)
			gomega.Expect(pulls.arrived()).To(gomega.Equal(3), "a new pod of the image pulls it")
		})
	})
})

// pullBlocker is a CRI proxy injector that holds every PullImage until the spec
// releases it, counting the calls that reached the proxy.
type pullBlocker struct {
	mu       sync.Mutex
	calls    []chan struct{} // by arrival
	inFlight int
	maxIn    int
	all      chan struct{} // closed: let every call through
	once     sync.Once
}

func newPullBlocker() *pullBlocker { return &pullBlocker{all: make(chan struct{})} }

func (b *pullBlocker) inject(apiName string) error {
	if apiName != criproxy.PullImage {
		return nil
	}
	c := make(chan struct{})
	b.mu.Lock()
	b.calls = append(b.calls, c)
	b.inFlight++
	b.maxIn = max(b.maxIn, b.inFlight)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	select {
	case <-c:
	case <-b.all:
	case <-time.After(5 * time.Minute):
		return errors.New("PullImage never released by the test")
	}
	return nil
}

func (b *pullBlocker) arrived() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func (b *pullBlocker) maxInFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxIn
}

// release lets the i-th PullImage (by arrival) through.
func (b *pullBlocker) release(i int) {
	b.mu.Lock()
	c := b.calls[i]
	b.mu.Unlock()
	close(c)
}

func (b *pullBlocker) releaseAll() { b.once.Do(func() { close(b.all) }) }

// pullQueueMetrics are the kubelet's image pull queue metrics by name, a
// histogram's as NAME_count and NAME_sum. Counters count from the kubelet's start:
// specs compare them with a reading taken before.
func pullQueueMetrics(ctx context.Context) map[string]float64 {
	ms, err := getKubeletMetrics(ctx)
	framework.ExpectNoError(err)
	out := map[string]float64{}
	for name, samples := range ms {
		name = strings.TrimPrefix(name, kubeletmetrics.KubeletSubsystem+"_")
		if !strings.HasPrefix(name, "image_pull_queue_") {
			continue
		}
		for _, s := range samples {
			out[name] += float64(s.Value)
		}
	}
	return out
}
