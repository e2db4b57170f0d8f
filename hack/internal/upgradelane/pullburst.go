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

package upgradelane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// The pull burst's registry: the lane's busybox under one path, pulled under
// aliases (SlowRegistry serves NAME:TAG--ANYTHING as NAME:TAG and counts each
// alias's manifest requests), on a port of its own beside make kind-e2e's 5001.
const (
	burstNamespace = "upgrade-lane-pulls"
	burstPath      = "upgrade-lane/busybox:1"
	burstPort      = "5002"
	burstMetric    = "kubelet_image_pull_queue_pulls_avoided_total"
)

// PullBurst is the pull gate (KubeletImagePullGate) under a burst of pulls on
// the lane's upgraded kubelets: on each worker at once, Copies pods of each of
// Images images no node has pulled, through a registry that answers every
// manifest request after a delay, so that the pulls overlap.
type PullBurst struct {
	Client kubernetes.Interface
	// Serve serves imgs by path on port of the kind network's gateway until
	// ctx ends, calling ready with its address (kind.KindRegistry).
	Serve          func(ctx context.Context, port string, imgs map[string]v1.Image, ready func(addr string)) error
	Image          v1.Image
	Images, Copies int
}

// Run makes the burst and returns what it measured and what it found wrong: a
// pod not running, an image pulled more than once by its node (the gate pulls
// an image once for every pod that waits for it), no pull told its place in
// the queue, no pull avoided by the kubelet's metric. It deletes its pods, and
// the registry stops, when it returns.
func (b PullBurst) Run(ctx context.Context, workers []string) (report string, problems []string, err error) {
	serving, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	img, err := burstImage(b.Image)
	if err != nil {
		return "", nil, err
	}
	go func() {
		served <- b.Serve(serving, burstPort, map[string]v1.Image{burstPath: img}, func(addr string) { ready <- addr })
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		return "", nil, fmt.Errorf("the pull burst's registry: %w", err)
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: burstNamespace}}
	if _, err := b.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", nil, err
	}
	// Bare pods left behind would block the next step's drains.
	defer func() {
		if cleanup := b.deleteNamespace(context.WithoutCancel(ctx)); cleanup != nil && err == nil {
			err = cleanup
		}
	}()

	before := map[string]float64{}
	for _, w := range workers {
		if before[w], err = b.avoided(ctx, w); err != nil {
			return "", nil, err
		}
	}
	start := time.Now()
	pods, aliases := burstPods(addr, workers, b.Images, b.Copies, start.Unix())
	result := burstResult{Pods: len(pods), Images: len(aliases)}
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Client.CoreV1().Pods(burstNamespace).Create(ctx, p, metav1.CreateOptions{})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return "", nil, err
		}
	}
	var pending []string
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := b.Client.CoreV1().Pods(burstNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pending = pending[:0]
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodRunning {
				pending = append(pending, p.Name+" "+string(p.Status.Phase))
			}
		}
		if len(list.Items) < len(pods) || len(pending) > 0 {
			return false, nil
		}
		result.Running = time.Since(start)
		return true, nil
	}); err != nil {
		result.Pending = len(pending)
		problems = append(problems, fmt.Sprintf("pull burst: pods not running 5 minutes after the burst: %s", strings.Join(pending, ", ")))
	}
	for _, alias := range aliases {
		n, err := manifestRequests(ctx, addr, alias)
		if err != nil {
			return "", nil, err
		}
		if n == 1 {
			result.Once++
		} else {
			problems = append(problems, fmt.Sprintf("pull burst: %s was requested %d times by its node's %d pods, want once", alias, n, b.Copies))
		}
	}
	events, err := b.Client.CoreV1().Events(burstNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=PullQueued"})
	if err != nil {
		return "", nil, err
	}
	names := map[string]bool{}
	for _, p := range pods {
		names[p.Name] = true
	}
	for _, e := range events.Items {
		if names[e.InvolvedObject.Name] {
			result.Queued += max(int(e.Count), 1)
		}
	}
	if result.Queued == 0 {
		problems = append(problems, fmt.Sprintf("pull burst: no pull of %d was told its place in the queue (no PullQueued event)", len(pods)))
	}
	for _, w := range workers {
		after, err := b.avoided(ctx, w)
		if err != nil {
			return "", nil, err
		}
		if after <= before[w] {
			problems = append(problems, fmt.Sprintf("pull burst: %s on %s did not grow (%v)", burstMetric, w, after))
		}
		result.Avoided = append(result.Avoided, fmt.Sprintf("%s %v", w, after-before[w]))
	}
	return result.String(), problems, nil
}

// burstResult is what a burst measured.
type burstResult struct {
	Pods, Images int
	// Running is how long after the first creation every pod ran; Pending
	// how many did not when the wait ended.
	Running time.Duration
	Pending int
	// Once is how many images their node pulled once (manifest requests);
	// Queued the PullQueued events of the burst's pods.
	Once, Queued int
	// Avoided is the growth of burstMetric on each worker.
	Avoided []string
}

func (r burstResult) String() string {
	running := fmt.Sprintf("all running %s after their creation", r.Running.Round(time.Second))
	if r.Pending > 0 || r.Running == 0 {
		running = fmt.Sprintf("%d not running when the wait ended", r.Pending)
	}
	return fmt.Sprintf("%d pods of %d images new to their nodes, %s; %d of the %d images pulled once (manifest requests); %d PullQueued events; %s grew by %s",
		r.Pods, r.Images, running, r.Once, r.Images, r.Queued, burstMetric, strings.Join(r.Avoided, ", "))
}

// burstPods are Copies pods of each of images aliases on every worker, the
// aliases unique to the run and the worker so that no node has pulled them.
func burstPods(addr string, workers []string, images, copies int, run int64) (pods []*corev1.Pod, aliases []string) {
	for _, w := range workers {
		for i := range images {
			alias := fmt.Sprintf("%s--%d-%s-%d", burstPath, run, w, i)
			aliases = append(aliases, alias)
			for c := range copies {
				grace := int64(1)
				pods = append(pods, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pull-%s-%d-%d", w, i, c)},
					Spec: corev1.PodSpec{
						NodeSelector:                  map[string]string{corev1.LabelHostname: w},
						RestartPolicy:                 corev1.RestartPolicyNever,
						TerminationGracePeriodSeconds: &grace,
						Containers: []corev1.Container{{
							Name:            "c",
							Image:           addr + "/" + alias,
							ImagePullPolicy: corev1.PullIfNotPresent,
							Command:         []string{"sleep", "3600"},
						}},
					},
				})
			}
		}
	}
	return pods, aliases
}

// burstImage is img with a label in its config, so another image ID. The
// kubelet keeps the credentials of its pulls by image ID
// (KubeletEnsureSecretPulledImages): once it pulls an image ID under the
// burst's names, that ID no longer counts as preloaded under any other name,
// and the workloads' pods of the same busybox, preloaded with pull policy
// Never, fail with ErrImageNeverPull wherever a drain moves them
// (kubernetes/kubernetes#138175, open in v1.37.2).
func burstImage(img v1.Image) (v1.Image, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	cfg.Config.Labels["kube-carry.io/upgrade-lane"] = "pull-burst"
	return mutate.ConfigFile(img, cfg)
}

// avoided reads the pull gate's count of pulls avoided from the kubelet's
// metrics, through the API server's node proxy.
func (b PullBurst) avoided(ctx context.Context, node string) (float64, error) {
	data, err := b.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("the kubelet's metrics of %s: %w", node, err)
	}
	return metricValue(string(data), burstMetric)
}

// metricValue is the value of a metric without labels in Prometheus' text
// format; a counter never incremented is absent, and zero.
func metricValue(text, name string) (float64, error) {
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == name {
			return strconv.ParseFloat(fields[1], 64)
		}
	}
	return 0, nil
}

// manifestRequests asks the registry how often alias's manifest was requested.
func manifestRequests(ctx context.Context, addr, alias string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/carry/requests/"+alias, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(body)))
}

// deleteNamespace deletes the burst's pods with their namespace and waits
// until it is gone, so that the next step's drains meet none of them.
func (b PullBurst) deleteNamespace(ctx context.Context) error {
	if err := b.Client.CoreV1().Namespaces().Delete(ctx, burstNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.Client.CoreV1().Namespaces().Get(ctx, burstNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("the pull burst's namespace %s not gone 3 minutes after its deletion", burstNamespace)
	}
	return nil
}
