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

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	"k8s.io/utils/clock"
)

// pullGate is the node-wide queue image pulls pass when the KubeletImagePullGate
// feature is enabled. Every pod's pull takes its place in one FIFO queue when it
// arrives and waits for one of a limited number of slots; a pod whose context ends
// leaves the queue at once. Every pull is the pod's own: it reaches the runtime
// with the pod's image spec, credentials and sandbox config, and no pod ever
// receives another pod's pull result.
type pullGate struct {
	imageService kubecontainer.ImageService
	// limit is the number of slots; 0 means no limit.
	limit int64

	queueTimeout time.Duration
	// clock times the waits for a slot and the places kept in the queue.
	clock clock.WithTicker
	// detachAbandoned lets a running pull no pod waits for finish, holding its
	// slot, instead of cancelling it (abandonedImagePullPolicy Detach).
	detachAbandoned bool

	mu sync.Mutex
	// used is the number of slots held.
	used int64
	// arrivals numbers the pulls in the order they arrive.
	arrivals uint64
	// queue holds the pulls waiting for a slot, by arrival.
	queue []*pullTicket
	// places keeps the place in the queue of a pod whose wait timed out, for its
	// next attempt after the back-off.
	places map[placeKey]keptPlace
}

// imageKey identifies an image in the runtime.
type imageKey struct {
	image          string
	runtimeHandler string
}

type placeKey struct {
	pod   types.UID
	image imageKey
}

type keptPlace struct {
	arrival uint64
	until   time.Time
}

// placeKeptFor is how long a pod whose wait timed out keeps its place in the queue:
// longer than the image pull back-off's maximum (5 minutes).
const placeKeptFor = 10 * time.Minute

// pullTicket is a pull's place in the queue.
type pullTicket struct {
	arrival uint64
	key     imageKey
	// wake receives when the ticket is granted a slot.
	wake chan struct{}
	// Guarded by pullGate.mu.
	granted bool
	held    bool // the grant counts against the limit
}

// runningPull is a pull in the runtime.
type runningPull struct {
	cancel context.CancelFunc
	// Guarded by pullGate.mu.
	held     bool // the pull holds a slot
	detached bool // nobody waits for the pull, which finishes holding its slot
	ended    bool // the runtime's PullImage returned
}

// pullRequest is one pod's request to pull one image.
type pullRequest struct {
	spec             kubecontainer.ImageSpec
	credentials      []credentialprovider.TrackedAuthConfig
	podSandboxConfig *runtimeapi.PodSandboxConfig
	pod              types.UID
	// adopt, if set, is called when the pod leaves its pull after the pull reached
	// the runtime, and returns what records the pull when it ends (nil: nothing
	// to record). The pod hands its record of the pull in progress (KEP-2535's
	// pull intent) over to the pull (gateResult.adopted), which keeps it until
	// PullImage returns, so that the image never looks as if it had not been
	// pulled by the kubelet.
	adopt func() (ended func(pullResult))
	// events, each optional
	events pullEvents
}

// pullEvents tell the pod what happens to its pull while it is in the gate.
type pullEvents struct {
	// queued: the pull waits for a slot, with ahead pulls before it in the queue.
	queued func(ahead int)
	// started: the pull reaches the runtime, after waiting that long.
	started func(waited time.Duration)
}

// queuedEventInterval is the least time between two queued events of one pull.
const queuedEventInterval = 30 * time.Second

// gateResult is a pull's outcome through the gate.
type gateResult struct {
	pullResult
	// adopted is set when the pod left its pull after the pull reached the
	// runtime and the pull's adopt took over recording it: the pod's pull intent
	// now belongs to the pull, which releases it when PullImage returns.
	adopted bool
}

// ErrTooManyParallelPulls is returned when an image pull waited longer than
// imagePullQueueTimeout for one of the maxParallelImagePulls slots.
var ErrTooManyParallelPulls = errors.New("TooManyParallelImagePulls")

// ErrPullAbandoned is returned for a pull its pod no longer waits for: the pod is
// terminating or was deleted. It is no failure of the image or the registry, and
// leaves no failure behind (no Warning event, no back-off).
var ErrPullAbandoned = errors.New("image pull abandoned")

func newPullGate(imageService kubecontainer.ImageService, limit int32, config PullGateConfig) *pullGate {
	return &pullGate{
		imageService:    imageService,
		limit:           max(int64(limit), 0),
		queueTimeout:    config.QueueTimeout,
		clock:           clock.RealClock{},
		detachAbandoned: config.DetachAbandonedPulls,
		places:          map[placeKey]keptPlace{},
	}
}

var _ imagePuller = &pullGate{}

// pullImage implements imagePuller for callers that need no events. Like the
// parallel puller's, it returns once the result is sent: callers run it in a
// goroutine.
func (g *pullGate) pullImage(ctx context.Context, spec kubecontainer.ImageSpec, credentials []credentialprovider.TrackedAuthConfig, pullChan chan<- pullResult, podSandboxConfig *runtimeapi.PodSandboxConfig) {
	pullChan <- g.pull(ctx, pullRequest{spec: spec, credentials: credentials, podSandboxConfig: podSandboxConfig}).pullResult
}

// pull returns when the pod's image is pulled, the pull failed, or ctx is done.
func (g *pullGate) pull(ctx context.Context, r pullRequest) gateResult {
	ctx, stop := pullContext(ctx)
	defer stop()
	arrived := g.clock.Now()
	key := imageKey{image: r.spec.Image, runtimeHandler: r.spec.RuntimeHandler}

	g.mu.Lock()
	t := g.enqueueLocked(r.pod, key, arrived)
	g.mu.Unlock()
	defer g.leaveQueue(t)

	var waitedForSlot time.Duration
	var lastQueued time.Time
	for {
		if podLeft(ctx) {
			return g.abandon(ctx, r.spec)
		}
		g.mu.Lock()
		granted := t.granted
		ahead := g.aheadLocked(t)
		g.mu.Unlock()

		switch {
		case granted:
			return g.run(ctx, t, r, g.clock.Since(arrived))
		default:
			if r.events.queued != nil && g.clock.Since(lastQueued) >= queuedEventInterval {
				r.events.queued(ahead)
				lastQueued = g.clock.Now()
			}
			var timeout <-chan time.Time
			var timer clock.Timer
			if g.queueTimeout > 0 {
				timer = g.clock.NewTimer(g.queueTimeout - waitedForSlot)
				timeout = timer.C()
			}
			start := g.clock.Now()
			select {
			case <-t.wake:
			case <-ctx.Done():
				return g.abandon(ctx, r.spec)
			case <-timeout:
				g.keepPlace(r.pod, t)
				kubeletmetrics.ImagePullQueueTimeoutsTotal.Inc()
				return gateResult{pullResult: pullResult{err: fmt.Errorf("%w: waited %v for one of %d image pull slots (imagePullQueueTimeout)", ErrTooManyParallelPulls, g.queueTimeout, g.limit)}}
			}
			waitedForSlot += g.clock.Since(start)
			if timer != nil {
				timer.Stop()
			}
		}
	}
}

// enqueueLocked gives the pull its place: the one it kept, if its pod comes back
// after its wait timed out, or the end of the queue.
func (g *pullGate) enqueueLocked(pod types.UID, key imageKey, now time.Time) *pullTicket {
	for k, p := range g.places {
		if now.After(p.until) {
			delete(g.places, k)
		}
	}
	t := &pullTicket{key: key, wake: make(chan struct{}, 1)}
	if p, ok := g.places[placeKey{pod, key}]; ok && pod != "" {
		t.arrival = p.arrival
		delete(g.places, placeKey{pod, key})
	} else {
		g.arrivals++
		t.arrival = g.arrivals
	}
	i, _ := slices.BinarySearchFunc(g.queue, t.arrival, func(q *pullTicket, a uint64) int { return cmp.Compare(q.arrival, a) })
	g.queue = slices.Insert(g.queue, i, t)
	kubeletmetrics.ImagePullQueueLength.Inc()
	g.dispatchLocked()
	return t
}

// dispatchLocked grants free slots to the first pulls in the queue.
func (g *pullGate) dispatchLocked() {
	for _, t := range g.queue {
		if t.granted {
			continue
		}
		if g.limit > 0 && g.used >= g.limit {
			return
		}
		t.granted = true
		if g.limit > 0 {
			t.held = true
			g.used++
		}
		signal(t.wake)
	}
}

// aheadLocked is the number of pulls before t in the queue.
func (g *pullGate) aheadLocked(t *pullTicket) int {
	return slices.Index(g.queue, t)
}

// leaveQueue removes t from the queue, if it is still there, returning a slot it
// holds but did not use.
func (g *pullGate) leaveQueue(t *pullTicket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, t)
	if i < 0 {
		return
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	kubeletmetrics.ImagePullQueueLength.Dec()
	if t.held {
		t.held = false
		g.used--
	}
	g.dispatchLocked()
}

// keepPlace remembers the place of a pull whose wait timed out, for its pod's next
// attempt.
func (g *pullGate) keepPlace(pod types.UID, t *pullTicket) {
	if pod == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.places[placeKey{pod, t.key}] = keptPlace{arrival: t.arrival, until: g.clock.Now().Add(placeKeptFor)}
}

// abandonLocked handles a running pull whose pod left: unless it already ended,
// it is cancelled, or, with detachAbandoned, detached: it finishes, so that the
// bytes it fetched serve the next pod that needs the image. A detached pull keeps
// its slot until it ends: the runtime never sees more than limit pulls from the
// kubelet.
func (g *pullGate) abandonLocked(p *runningPull) {
	if p.ended {
		return
	}
	if !g.detachAbandoned {
		p.cancel()
		return
	}
	p.detached = true
}

func (g *pullGate) abandon(ctx context.Context, spec kubecontainer.ImageSpec) gateResult {
	kubeletmetrics.ImagePullQueueAbandoned.Inc()
	return gateResult{pullResult: pullResult{err: fmt.Errorf("%w: %q: %w", ErrPullAbandoned, spec.Image, leaveCause(ctx))}}
}

// run pulls the image for the pod that holds ticket t. The pull runs apart from the
// pod: when the pod leaves, it is cancelled or detached (abandonLocked).
func (g *pullGate) run(ctx context.Context, t *pullTicket, r pullRequest, waited time.Duration) gateResult {
	p := &runningPull{}
	var pctx context.Context
	pctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))

	g.mu.Lock()
	if podLeft(ctx) {
		// A dead context never reaches the runtime, nor does the pod get a
		// Pulling event; the caller's leaveQueue hands the slot on.
		g.mu.Unlock()
		return g.abandon(ctx, r.spec)
	}
	if i := slices.Index(g.queue, t); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		kubeletmetrics.ImagePullQueueLength.Dec()
	}
	p.held, t.held = t.held, false
	g.mu.Unlock()
	kubeletmetrics.ImagePullQueueWaitDuration.Observe(waited.Seconds())
	if r.events.started != nil {
		r.events.started(waited)
	}

	result := make(chan pullResult, 1)
	go func() {
		kubeletmetrics.ImagePullQueueRunningPulls.Inc()
		startTime := time.Now()
		imageRef, creds, err := g.imageService.PullImage(pctx, r.spec, r.credentials, r.podSandboxConfig)
		var size uint64
		if err == nil && imageRef != "" {
			// Getting the image size with best effort, ignoring the error.
			size, _ = g.imageService.GetImageSize(pctx, r.spec)
		}
		kubeletmetrics.ImagePullQueueRunningPulls.Dec()
		g.mu.Lock()
		p.ended = true
		if p.held {
			p.held = false
			g.used--
		}
		g.dispatchLocked()
		g.mu.Unlock()
		p.cancel()
		result <- pullResult{imageRef: imageRef, imageSize: size, err: err, pullDuration: time.Since(startTime), credentialsUsed: creds}
	}()

	select {
	case res := <-result:
		return gateResult{pullResult: res}
	case <-ctx.Done():
		g.mu.Lock()
		g.abandonLocked(p)
		g.mu.Unlock()
		// The pull reached the runtime, so it is recorded by its actual result
		// when PullImage returns (adopt), whatever happens to its pod: it may go
		// on detached, be cancelled but completed by the runtime anyway, or have
		// ended as the pod left. The pod's own pull intent is released when it
		// leaves; an image pulled with its credentials and recorded by no one
		// would look preloaded to KEP-2535's check, so the pod hands that
		// intent over to the pull instead.
		var ended func(pullResult)
		if r.adopt != nil {
			ended = r.adopt()
		}
		if ended != nil {
			go func() { ended(<-result) }()
		}
		res := g.abandon(ctx, r.spec)
		res.adopted = ended != nil
		return res
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
