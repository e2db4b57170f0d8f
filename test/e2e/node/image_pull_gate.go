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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/test/e2e/feature"
	"k8s.io/kubernetes/test/e2e/framework"
	e2epod "k8s.io/kubernetes/test/e2e/framework/pod"
	e2eskipper "k8s.io/kubernetes/test/e2e/framework/skipper"
	imageutils "k8s.io/kubernetes/test/utils/image"
	admissionapi "k8s.io/pod-security-admission/api"
)

// The pull gate tests need pulls that take long enough to overlap: a registry that
// serves the e2e images with every manifest request delayed by a few seconds,
// serves "<tag>--<suffix>" as "<tag>" (so every test pulls an image the node has not
// seen), holds the manifest requests of such a tag that ends with "-held" until GET
// /carry/release/<name>:<tag>, and answers GET /carry/requests/<name>:<tag> with the
// number of manifest requests a tag received. KUBE_TEST_SLOW_REGISTRY names it, e.g. 127.0.0.1:5001
// (the local cluster of kube-carry runs one).
const slowRegistryEnv = "KUBE_TEST_SLOW_REGISTRY"

var _ = SIGDescribe("Kubelet image pull gate", feature.KubeletImagePullGate, framework.WithFeatureGate(features.KubeletImagePullGate), func() {
	f := framework.NewDefaultFramework("image-pull-gate")
	f.NamespacePodSecurityLevel = admissionapi.LevelBaseline
	var registry string

	ginkgo.BeforeEach(func() {
		registry = os.Getenv(slowRegistryEnv)
		if registry == "" {
			e2eskipper.Skipf("%s is not set: these tests need a registry that serves manifests slowly", slowRegistryEnv)
		}
	})

	// slowImage is the e2e busybox image through the slow registry, under a tag no
	// node has pulled before.
	slowImage := func() (image, ref string) {
		busybox := imageutils.GetE2EImage(imageutils.BusyBox)
		_, path, _ := strings.Cut(busybox, "/") // the image's path, without its registry
		ref = path + "--" + string(uuid.NewUUID())
		return registry + "/" + ref, ref
	}
	// heldImage is a slowImage whose pulls the registry holds until release(ref).
	heldImage := func() (image, ref string) {
		image, ref = slowImage()
		return image + "-held", ref + "-held"
	}
	carry := func(path string) string {
		resp, err := http.Get("http://" + registry + "/carry/" + path)
		framework.ExpectNoError(err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		framework.ExpectNoError(err)
		return strings.TrimSpace(string(body))
	}
	manifestRequests := func(ref string) int {
		n, err := strconv.Atoi(carry("requests/" + ref))
		framework.ExpectNoError(err)
		return n
	}
	release := func(ref string) { carry("release/" + ref) }
	pod := func(name, image string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{
				Containers: []v1.Container{{
					Name:            "c",
					Image:           image,
					ImagePullPolicy: v1.PullIfNotPresent,
					Command:         []string{"sleep", "3600"},
				}},
			},
		}
	}
	createAll := func(ctx context.Context, pods []*v1.Pod) {
		var wg sync.WaitGroup
		for _, p := range pods {
			wg.Add(1)
			go func() {
				defer ginkgo.GinkgoRecover()
				defer wg.Done()
				_, err := f.ClientSet.CoreV1().Pods(f.Namespace.Name).Create(ctx, p, metav1.CreateOptions{})
				framework.ExpectNoError(err)
			}()
		}
		wg.Wait()
	}

	ginkgo.It("never pulls the image of a pod deleted while its pull waits for a slot", func(ctx context.Context) {
		const n = 8 // more than the node's maxParallelImagePulls
		var pods []*v1.Pod
		refs := map[string]string{}
		for i := range n {
			image, ref := heldImage()
			p := pod(fmt.Sprintf("queued-%d", i), image)
			pods = append(pods, p)
			refs[p.Name] = ref
		}
		node := pinToOneNode(ctx, f, pods)
		// Whatever fails, no pull stays held.
		ginkgo.DeferCleanup(func() {
			for _, ref := range refs {
				release(ref)
			}
		})
		createAll(ctx, pods)

		ginkgo.By("waiting for the pulls that got a slot to reach the registry")
		// The pulls that got a slot reach the registry within moments of each
		// other and hold their slots until released: once no new pull has
		// arrived for a second, the others wait for a slot.
		var started, queued []string
		var lastCount int
		var lastChange time.Time
		gomega.Eventually(ctx, func() bool {
			started = started[:0]
			for _, p := range pods {
				if manifestRequests(refs[p.Name]) > 0 {
					started = append(started, p.Name)
				}
			}
			if len(started) != lastCount {
				lastCount, lastChange = len(started), time.Now()
			}
			return len(started) > 0 && time.Since(lastChange) >= time.Second
		}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(gomega.BeTrueBecause("the pulls that got a slot reach the registry"))
		for _, p := range pods {
			if manifestRequests(refs[p.Name]) == 0 {
				queued = append(queued, p.Name)
			}
		}
		gomega.Expect(queued).NotTo(gomega.BeEmpty(), "with %d pods at once, some pulls wait for a slot (maxParallelImagePulls must be below %d)", n, n)

		ginkgo.By("checking that every pod whose pull waits was told its place in the queue")
		gomega.Eventually(ctx, func(ctx context.Context) []string {
			events, err := f.ClientSet.CoreV1().Events(f.Namespace.Name).List(ctx, metav1.ListOptions{FieldSelector: "reason=PullQueued"})
			framework.ExpectNoError(err)
			told := map[string]bool{}
			for _, e := range events.Items {
				if strings.Contains(e.Message, "ahead in the queue") {
					told[e.InvolvedObject.Name] = true
				}
			}
			var untold []string
			for _, name := range queued {
				if !told[name] {
					untold = append(untold, name)
				}
			}
			return untold
		}).WithTimeout(30*time.Second).WithPolling(time.Second).Should(gomega.BeEmpty(), "pods without a PullQueued event")

		ginkgo.By(fmt.Sprintf("deleting the pods whose pulls wait: %v", queued))
		for _, name := range queued {
			framework.ExpectNoError(f.ClientSet.CoreV1().Pods(f.Namespace.Name).Delete(ctx, name, *metav1.NewDeleteOptions(0)))
		}
		ginkgo.By("waiting until the kubelet no longer runs the deleted pods, then ending the pulls that hold the slots")
		gomega.Eventually(ctx, func(ctx context.Context) []string {
			raw, err := f.ClientSet.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "pods").DoRaw(ctx)
			framework.ExpectNoError(err)
			var running v1.PodList
			framework.ExpectNoError(json.Unmarshal(raw, &running))
			var left []string
			for _, p := range running.Items {
				if p.Namespace == f.Namespace.Name && slices.Contains(queued, p.Name) {
					left = append(left, p.Name)
				}
			}
			return left
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(gomega.BeEmpty(), "deleted pods the kubelet still runs")
		for _, name := range started {
			release(refs[name])
		}
		for _, name := range started {
			framework.ExpectNoError(e2epod.WaitTimeoutForPodRunningInNamespace(ctx, f.ClientSet, name, f.Namespace.Name, 3*time.Minute))
		}
		ginkgo.By("checking that the deleted pods' images never reached the registry")
		gomega.Consistently(ctx, func() []string {
			var pulled []string
			for _, name := range queued {
				if manifestRequests(refs[name]) > 0 {
					pulled = append(pulled, name)
				}
			}
			return pulled
		}).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(gomega.BeEmpty())
	})
})

// pinToOneNode puts the pods on one schedulable node, so that one kubelet's gate sees
// them all, and returns its name.
func pinToOneNode(ctx context.Context, f *framework.Framework, pods []*v1.Pod) string {
	nodes, err := f.ClientSet.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "spec.unschedulable=false"})
	framework.ExpectNoError(err)
	gomega.Expect(nodes.Items).NotTo(gomega.BeEmpty())
	name := nodes.Items[0].Name
	for _, p := range pods {
		p.Spec.NodeName = name
	}
	return name
}
