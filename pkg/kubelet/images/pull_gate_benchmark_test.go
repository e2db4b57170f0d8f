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

package images

// Benchmarks of the pull gate against upstream's parallelImagePuller, side by side
// in one run, on a simulated image service: every pull waits a fixed latency, then
// transfers its image over one link whose bandwidth the running transfers share.
//
//	go test -run '^$' -bench PullGate -benchtime 5x ./pkg/kubelet/images/

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/utils/ptr"
)

// link is a network link of fixed bandwidth shared equally by its transfers.
type link struct {
	bytesPerSecond float64

	mu        sync.Mutex
	transfers map[*transfer]struct{}
	last      time.Time
	timer     *time.Timer
}

type transfer struct {
	remaining float64
	done      chan struct{}
}

func newLink(bytesPerSecond float64) *link {
	return &link{bytesPerSecond: bytesPerSecond, transfers: map[*transfer]struct{}{}}
}

// send transfers size bytes, sharing the link with the other transfers.
func (l *link) send(ctx context.Context, size float64) error {
	tr := &transfer{remaining: size, done: make(chan struct{})}
	l.mu.Lock()
	l.advance()
	l.transfers[tr] = struct{}{}
	l.schedule()
	l.mu.Unlock()
	select {
	case <-tr.done:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		l.advance()
		delete(l.transfers, tr)
		l.schedule()
		l.mu.Unlock()
		return ctx.Err()
	}
}

// advance moves every transfer forward to now; l.mu is held.
func (l *link) advance() {
	now := time.Now()
	if n := len(l.transfers); n > 0 {
		sent := now.Sub(l.last).Seconds() * l.bytesPerSecond / float64(n)
		for tr := range l.transfers {
			tr.remaining -= sent
			if tr.remaining <= 0 {
				close(tr.done)
				delete(l.transfers, tr)
			}
		}
	}
	l.last = now
}

// schedule sets a timer for the next transfer to finish; l.mu is held.
func (l *link) schedule() {
	if l.timer != nil {
		l.timer.Stop()
	}
	n := len(l.transfers)
	if n == 0 {
		return
	}
	least := -1.0
	for tr := range l.transfers {
		if least < 0 || tr.remaining < least {
			least = tr.remaining
		}
	}
	l.timer = time.AfterFunc(time.Duration(least*float64(n)/l.bytesPerSecond*float64(time.Second)), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.advance()
		l.schedule()
	})
}

// simImageService pulls images over a link after a fixed latency; an image pulled
// is present.
type simImageService struct {
	kubecontainer.ImageService
	link    *link
	latency time.Duration
	size    float64
	pulls   atomic.Int64
	present sync.Map
}

func (s *simImageService) PullImage(ctx context.Context, spec kubecontainer.ImageSpec, _ []credentialprovider.TrackedAuthConfig, _ *runtimeapi.PodSandboxConfig) (string, *credentialprovider.TrackedAuthConfig, error) {
	s.pulls.Add(1)
	select {
	case <-time.After(s.latency):
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	if s.link != nil {
		if err := s.link.send(ctx, s.size); err != nil {
			return "", nil, err
		}
	}
	s.present.Store(spec.Image, true)
	return "sha256:" + spec.Image, nil, nil
}

func (s *simImageService) GetImageRef(_ context.Context, spec kubecontainer.ImageSpec) (string, error) {
	if _, ok := s.present.Load(spec.Image); ok {
		return "sha256:" + spec.Image, nil
	}
	return "", nil
}

func (s *simImageService) GetImageSize(context.Context, kubecontainer.ImageSpec) (uint64, error) {
	return uint64(s.size), nil
}

// pullAll pulls images (one pull request each, all at once) and returns when every
// pull has finished.
func pullAll(b *testing.B, p imagePuller, images []string) {
	ch := make(chan pullResult, len(images))
	for _, image := range images {
		go p.pullImage(context.Background(), kubecontainer.ImageSpec{Image: image}, nil, ch, nil)
	}
	for range images {
		if r := <-ch; r.err != nil {
			b.Fatal(r.err)
		}
	}
}

// slotService holds the pull of image "a" until releaseA is closed; every other
// pull takes 200ms.
type slotService struct {
	kubecontainer.ImageService
	entered  chan string
	releaseA chan struct{}
}

func (s *slotService) PullImage(ctx context.Context, spec kubecontainer.ImageSpec, _ []credentialprovider.TrackedAuthConfig, _ *runtimeapi.PodSandboxConfig) (string, *credentialprovider.TrackedAuthConfig, error) {
	s.entered <- spec.Image
	release, wait := s.releaseA, time.After(200*time.Millisecond)
	if spec.Image != "a" {
		release = nil
	} else {
		wait = nil
	}
	select {
	case <-release:
	case <-wait:
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	return "sha256:" + spec.Image, nil, nil
}

func (s *slotService) GetImageSize(context.Context, kubecontainer.ImageSpec) (uint64, error) {
	return 0, nil
}

// BenchmarkPullGateDeletedPodSlotReuse: with maxParallelImagePulls 1, pod B waits
// behind A and is deleted; how long after A finishes does C, queued behind B, reach
// the runtime? Upstream's token channel hands the slot to B's orphaned pull, so C
// waits for that whole pull (200ms); the gate hands it to C at once.
func BenchmarkPullGateDeletedPodSlotReuse(b *testing.B) {
	measure := func(newPuller func(kubecontainer.ImageService) imagePuller) time.Duration {
		svc := &slotService{entered: make(chan string, 3), releaseA: make(chan struct{})}
		p := newPuller(svc)
		results := make(chan pullResult, 3)
		go p.pullImage(context.Background(), kubecontainer.ImageSpec{Image: "a"}, nil, results, nil)
		<-svc.entered
		// As in the kubelet: SyncPod runs detached from the pod worker's context, and
		// only the gate sees the pod's cancellation (WithPullCancellation).
		podB, deleteB := context.WithCancel(context.Background())
		ctxB := context.WithValue(context.WithoutCancel(podB), pullCancellationKey{}, podB)
		go p.pullImage(ctxB, kubecontainer.ImageSpec{Image: "b"}, nil, results, nil)
		time.Sleep(time.Millisecond)
		go p.pullImage(context.Background(), kubecontainer.ImageSpec{Image: "c"}, nil, results, nil)
		time.Sleep(time.Millisecond)
		deleteB()
		start := time.Now()
		close(svc.releaseA)
		for image := range svc.entered {
			if image == "c" {
				break
			}
		}
		elapsed := time.Since(start)
		for range 3 {
			<-results
		}
		return elapsed
	}
	var upstream, gate time.Duration
	for range b.N {
		upstream += measure(func(s kubecontainer.ImageService) imagePuller { return newParallelImagePuller(s, ptr.To[int32](1)) })
		gate += measure(func(s kubecontainer.ImageService) imagePuller { return newPullGate(s, 1, PullGateConfig{}) })
	}
	b.ReportMetric(upstream.Seconds()*1000/float64(b.N), "upstream-slot-reuse-ms")
	b.ReportMetric(gate.Seconds()*1000/float64(b.N), "gate-slot-reuse-ms")
}

// BenchmarkPullGateOverhead: the cost of one pull through each puller with a runtime
// that answers at once.
func BenchmarkPullGateOverhead(b *testing.B) {
	for _, tc := range []struct {
		name   string
		puller func(kubecontainer.ImageService) imagePuller
	}{
		{"upstream", func(s kubecontainer.ImageService) imagePuller { return newParallelImagePuller(s, ptr.To[int32](3)) }},
		{"gate", func(s kubecontainer.ImageService) imagePuller { return newPullGate(s, 3, PullGateConfig{}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := tc.puller(&simImageService{})
			ch := make(chan pullResult, 1)
			spec := kubecontainer.ImageSpec{Image: "image"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				go p.pullImage(context.Background(), spec, nil, ch, nil)
				<-ch
			}
		})
	}
}

// BenchmarkPullGateBandwidthBound: K distinct images with maxParallelImagePulls 3 on
// a shared link - makespan against the ideal bound (all bytes at full bandwidth plus
// one latency).
func BenchmarkPullGateBandwidthBound(b *testing.B) {
	const (
		mib     = 1 << 20
		k       = 12
		size    = 8 * mib
		rate    = 400 * mib
		latency = 2 * time.Millisecond
	)
	var images []string
	for i := range k {
		images = append(images, fmt.Sprintf("image-%d", i))
	}
	ideal := time.Duration(float64(k*size)/rate*float64(time.Second)) + latency
	var upstream, gate time.Duration
	for range b.N {
		start := time.Now()
		pullAll(b, newParallelImagePuller(&simImageService{link: newLink(rate), latency: latency, size: size}, ptr.To[int32](3)), images)
		upstream += time.Since(start)
		start = time.Now()
		pullAll(b, newPullGate(&simImageService{link: newLink(rate), latency: latency, size: size}, 3, PullGateConfig{}), images)
		gate += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(ideal.Seconds()*1000, "ideal-ms")
	b.ReportMetric(upstream.Seconds()/n/ideal.Seconds(), "upstream-vs-ideal")
	b.ReportMetric(gate.Seconds()/n/ideal.Seconds(), "gate-vs-ideal")
}
