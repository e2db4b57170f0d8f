//go:build smoke

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

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// The burst: burstImages images of burstMiB MiB each (no layer in common but the
// pause image's), burstPodsPerImage pods of each, created at once on the local
// cluster's node (maxParallelImagePulls 3), pulled through a registry that serves
// blobs at burstBandwidth bytes per second.
const (
	burstImages       = 4
	burstMiB          = 100
	burstPodsPerImage = 5
	burstBandwidth    = 40 << 20
)

// BenchmarkImagePullBurst measures on the local cluster's real containerd the time
// from creating a burst of pods until every one runs, with upstream's parallel
// puller (KubeletImagePullGate off) and the gate (on), through a bandwidth-limited
// registry: each blob download limited on its own (a registry or CDN that throttles
// each connection) or all of them sharing one link. Before each burst the images
// and their content are removed from containerd, so every burst pulls every byte.
// It reports seconds per burst, the runtime pulls that reached the registry
// (manifest requests) and the MiB it served.
//
//	go test -tags smoke -run '^$' -bench ImagePullBurst -benchtime 3x ./hack/internal/cluster
func BenchmarkImagePullBurst(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c, cs, pause := upForPullBenchmark(ctx, b)
	set := images.Set{}
	var ids []string
	for i := range burstImages {
		img, err := images.SyntheticVariant(pause, burstMiB, i+1)
		if err != nil {
			b.Fatal(err)
		}
		id, err := img.ConfigName()
		if err != nil {
			b.Fatal(err)
		}
		set[fmt.Sprintf("%s/carry/burst:%d", RegistryAddr, i)] = img
		ids = append(ids, id.String())
	}
	if err := set.Push(ctx); err != nil {
		b.Fatal(err)
	}

	for _, link := range []struct {
		name   string
		shared bool
	}{{"per-connection", false}, {"shared", true}} {
		for _, gate := range []bool{false, true} {
			b.Run(fmt.Sprintf("link=%s/gate=%t", link.name, gate), func(b *testing.B) {
				restartKubeletWithPullGate(ctx, b, c, gate, "")
				registry := startThrottledRegistry(ctx, b, link.shared)
				var seconds float64
				var pulls, served int64
				for i := range b.N {
					b.StopTimer()
					removeImages(ctx, b, c, "/carry/burst", ids)
					registry.reset()
					b.StartTimer()
					took := runBurst(ctx, b, cs, registry.addr)
					b.StopTimer()
					b.Logf("burst %d: %.2f s, %d registry pulls, %.1f MiB", i+1, took.Seconds(), registry.pulls(), float64(registry.blobBytes.Load())/(1<<20))
					seconds += took.Seconds()
					pulls += registry.pulls()
					served += registry.blobBytes.Load()
				}
				b.ReportMetric(seconds/float64(b.N), "s/burst")
				b.ReportMetric(float64(pulls)/float64(b.N), "registry-pulls/burst")
				b.ReportMetric(float64(served)/float64(b.N)/(1<<20), "MiB/burst")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// upForPullBenchmark brings the local cluster up and returns it, a client
// that creates pods at once and the local registry's pause image, on which
// the benchmarks' images are built.
func upForPullBenchmark(ctx context.Context, b *testing.B) (*Cluster, kubernetes.Interface, v1.Image) {
	b.Helper()
	c, _ := upForTest(ctx, b)
	// The default client's 5 requests per second would spread a burst's creation over seconds.
	config, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	config.QPS, config.Burst = 100, 100
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		b.Fatal(err)
	}
	pause, err := remote.Image(mustRef(b, images.Names{Registry: RegistryAddr}.Pause()), remote.WithContext(ctx))
	if err != nil {
		b.Fatal(err)
	}
	return c, cs, pause
}

func mustRef(tb testing.TB, s string) name.Reference {
	ref, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		tb.Fatal(err)
	}
	return ref
}

// restartKubeletWithPullGate restarts the node's kubelet with its configuration
// file but KubeletImagePullGate as given (and abandonedImagePullPolicy, unless
// empty), and checks by the gate's metrics that it took. The gate is set in a copy of the file, not by --feature-gates: the
// file's gates decide the defaults of the gate's fields (as upstream's do for
// KubeletCrashLoopBackOffMax), and the flag would turn the gate off after the
// file had defaulted abandonedImagePullPolicy, which validation then refuses.
func restartKubeletWithPullGate(ctx context.Context, b *testing.B, c *Cluster, on bool, abandonedPolicy string) {
	b.Helper()
	file := c.firstNode().path("etc", "kubelet.yaml")
	config, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	const gateOn = "KubeletImagePullGate: true"
	if !bytes.Contains(config, []byte(gateOn)) {
		b.Fatalf("%s does not turn KubeletImagePullGate on", file)
	}
	config = bytes.Replace(config, []byte(gateOn), fmt.Appendf(nil, "KubeletImagePullGate: %t", on), 1)
	if abandonedPolicy != "" {
		config = fmt.Appendf(config, "abandonedImagePullPolicy: %s\n", abandonedPolicy)
	}
	flipped := filepath.Join(b.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(flipped, config, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := c.restart(ctx, "kubelet", nil, "--config="+flipped); err != nil {
		b.Fatal(err)
	}
	metrics, err := c.kubeletMetrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if got := strings.Contains(string(metrics), "kubelet_image_pull_queue_"); got != on {
		b.Fatalf("the kubelet restarted with KubeletImagePullGate=%t, but its image pull queue metrics are there: %t", on, got)
	}
}

// throttledRegistry is the local registry behind a proxy that limits the bytes
// per second it sends and counts them, and counts the manifest requests.
type throttledRegistry struct {
	addr      string
	shared    *rate.Limiter
	registry  *SlowRegistry
	blobBytes atomic.Int64
}

func startThrottledRegistry(ctx context.Context, b *testing.B, shared bool) *throttledRegistry {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := &throttledRegistry{addr: l.Addr().String(), registry: &SlowRegistry{Upstream: RegistryAddr}}
	if shared {
		r.shared = newBandwidthLimiter()
	}
	srvCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.registry.Serve(srvCtx, listenerFunc{l, r.wrap}) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			b.Errorf("throttled registry: %v", err)
		}
	})
	return r
}

func (r *throttledRegistry) reset() {
	r.registry.mu.Lock()
	r.registry.requests = nil
	r.registry.mu.Unlock()
	r.blobBytes.Store(0)
}

// pulls counts the manifest requests by tag: each is a runtime pull that reached
// the registry (the runtime then fetches the manifest by digest).
func (r *throttledRegistry) pulls() int64 {
	r.registry.mu.Lock()
	defer r.registry.mu.Unlock()
	var n int64
	for ref, count := range r.registry.requests {
		if !strings.Contains(ref, ":sha256:") {
			n += int64(count)
		}
	}
	return n
}

func newBandwidthLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(burstBandwidth), 256<<10)
}

// wrap throttles and counts what one connection sends: the registry's answers.
func (r *throttledRegistry) wrap(conn net.Conn) net.Conn {
	limiter := r.shared
	if limiter == nil {
		limiter = newBandwidthLimiter()
	}
	return &throttledConn{Conn: conn, limiter: limiter, registry: r}
}

// listenerFunc hands every accepted connection through wrap.
type listenerFunc struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l listenerFunc) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(conn), nil
}

// throttledConn limits and counts the bytes written on a connection.
type throttledConn struct {
	net.Conn
	limiter  *rate.Limiter
	registry *throttledRegistry
}

func (c *throttledConn) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		chunk := min(len(p)-written, c.limiter.Burst())
		if err := c.limiter.WaitN(context.Background(), chunk); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(p[written : written+chunk])
		written += n
		c.registry.blobBytes.Add(int64(n))
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// removeImages waits until the kubelet has removed the containers of images of
// the repository (their snapshots keep the images' unpacked layers, and a pull
// fetches no layer whose snapshot exists), then removes those images, by every
// name the runtime gave them (tag, digest and image id), and synchronously their
// content and snapshots from the node's containerd.
func removeImages(ctx context.Context, b *testing.B, c *Cluster, repository string, ids []string) {
	b.Helper()
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.firstNode().ContainerdSocket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		out, err := ctr("containers", "ls")
		return !strings.Contains(out, repository), err
	}); err != nil {
		b.Fatalf("containers of %s are still there: %v", repository, err)
	}
	out, err := ctr("images", "ls", "-q")
	if err != nil {
		b.Fatal(err)
	}
	var refs []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, repository) || slices.Contains(ids, line) {
			refs = append(refs, line)
		}
	}
	if len(refs) > 0 {
		if _, err := ctr(append([]string{"images", "rm", "--sync"}, refs...)...); err != nil {
			b.Fatal(err)
		}
	}
}

// runBurst creates the burst's pods at once and returns the time until every one
// runs; it deletes them afterwards.
func runBurst(ctx context.Context, b *testing.B, cs kubernetes.Interface, registry string) time.Duration {
	b.Helper()
	var pods []*corev1.Pod
	for i := range burstImages {
		for j := range burstPodsPerImage {
			pods = append(pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%d-%d", i, j), Namespace: metav1.NamespaceDefault},
				Spec: corev1.PodSpec{
					NodeName:                      NodeName(),
					TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{
						Name:            "burst",
						Image:           fmt.Sprintf("%s/carry/burst:%d", registry, i),
						ImagePullPolicy: corev1.PullIfNotPresent,
					}},
				},
			})
		}
	}
	defer func() {
		for _, p := range pods {
			deletePod(b, cs, p)
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, p := range pods {
		wg.Go(func() {
			if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "burst-") && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == len(pods), nil
	}); err != nil {
		b.Fatalf("not every pod of the burst runs: %v", err)
	}
	return time.Since(start)
}
