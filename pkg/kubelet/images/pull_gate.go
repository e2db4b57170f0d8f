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
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
)

// pullGate is the node-wide gate image pulls pass when the KubeletImagePullGate
// feature is enabled. Pulls wait for one of a limited number of slots in FIFO
// order (golang.org/x/sync/semaphore), a waiting pull is abandoned as soon as its
// context is done, concurrent pulls of one image share one runtime PullImage, and
// a shared pull is cancelled when every pod waiting for it is gone.
type pullGate struct {
	imageService kubecontainer.ImageService
	// limit is the number of slots; 0 means no limit.
	limit int64
	slots *semaphore.Weighted
	// delegated is set when the runtime enforces the limit itself: the gate then
	// still deduplicates and cancels, but no longer holds pulls back.
	delegated    atomic.Bool
	queueTimeout time.Duration

	mu      sync.Mutex
	flights map[pullKey]*pullFlight
}

// pullKey identifies pulls that may share one runtime PullImage: the same image,
// runtime handler and credentials, so that no pod can obtain an image through
// credentials it does not have.
type pullKey struct {
	image          string
	runtimeHandler string
	credentials    string
}

// pullFlight is one runtime pull and the pods waiting for it.
type pullFlight struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	result pullResult

	// Guarded by pullGate.mu.
	waiters int
	running bool          // the pull has a slot and reached the runtime
	waited  time.Duration // how long the pull waited for its slot
	notify  []func(pullStart)
}

// pullStart tells a waiting pod that its pull got a slot and reached the runtime.
type pullStart struct {
	// waited is how long the pull waited for a slot.
	waited time.Duration
	// joined is set for a pod that joined a pull started for another pod.
	joined bool
}

// ErrTooManyParallelPulls is returned when an image pull waited longer than
// imagePullQueueTimeout for one of the maxParallelImagePulls slots.
var ErrTooManyParallelPulls = errors.New("TooManyParallelImagePulls")

func newPullGate(imageService kubecontainer.ImageService, limit int32, queueTimeout time.Duration) *pullGate {
	g := &pullGate{
		imageService: imageService,
		queueTimeout: queueTimeout,
		flights:      map[pullKey]*pullFlight{},
	}
	if limit > 0 {
		g.limit = int64(limit)
		g.slots = semaphore.NewWeighted(g.limit)
	}
	return g
}

var _ imagePuller = &pullGate{}

// pullImage implements imagePuller for callers that need no start notification.
func (g *pullGate) pullImage(ctx context.Context, spec kubecontainer.ImageSpec, credentials []credentialprovider.TrackedAuthConfig, pullChan chan<- pullResult, podSandboxConfig *runtimeapi.PodSandboxConfig) {
	go func() { pullChan <- g.pull(ctx, spec, credentials, podSandboxConfig, false, nil) }()
}

// pull returns when the image is pulled, the pull failed, or ctx is done. With
// alwaysPull the pod joins only a pull that has not reached the runtime yet, so that
// its image is resolved no earlier than it asked. started, if set, is called once
// when the pull reaches the runtime (at once when the pod joins a running pull).
func (g *pullGate) pull(ctx context.Context, spec kubecontainer.ImageSpec, credentials []credentialprovider.TrackedAuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig, alwaysPull bool, started func(pullStart)) pullResult {
	ctx, stop := pullContext(ctx)
	defer stop()
	key := pullKey{image: spec.Image, runtimeHandler: spec.RuntimeHandler, credentials: credentialsIdentity(credentials)}

	g.mu.Lock()
	f, joined := g.flights[key]
	if joined && (f.ctx.Err() != nil || (alwaysPull && f.running)) {
		joined = false
	}
	if !joined {
		f = &pullFlight{done: make(chan struct{})}
		// The flight outlives any one pod: it is cancelled when its last waiter leaves.
		f.ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
		g.flights[key] = f
		go g.run(key, f, spec, credentials, podSandboxConfig)
	}
	f.waiters++
	var startedNow *pullStart
	if started != nil {
		if f.running {
			startedNow = &pullStart{waited: f.waited, joined: joined}
		} else {
			f.notify = append(f.notify, func(s pullStart) { s.joined = joined; started(s) })
		}
	}
	g.mu.Unlock()
	if startedNow != nil {
		started(*startedNow)
	}
	if joined {
		pullGateDeduplicated.Inc()
	}

	select {
	case <-f.done:
		res := f.result
		res.credentialsUsed = sameCredential(res.credentialsUsed, credentials)
		return res
	case <-ctx.Done():
		g.leave(key, f)
		pullGateCancelledWaits.Inc()
		return pullResult{err: fmt.Errorf("image pull of %q abandoned: %w", spec.Image, context.Cause(ctx))}
	}
}

// leave removes a waiter; the last one to leave cancels the pull.
func (g *pullGate) leave(key pullKey, f *pullFlight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.waiters--
	if f.waiters > 0 {
		return
	}
	f.cancel()
	if g.flights[key] == f {
		delete(g.flights, key)
	}
}

// run waits for a slot and pulls the image for every waiter of f.
func (g *pullGate) run(key pullKey, f *pullFlight, spec kubecontainer.ImageSpec, credentials []credentialprovider.TrackedAuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) {
	defer func() {
		g.mu.Lock()
		if g.flights[key] == f {
			delete(g.flights, key)
		}
		g.mu.Unlock()
		f.cancel()
		close(f.done)
	}()

	queuedAt := time.Now()
	held, err := g.acquire(f.ctx)
	if err != nil {
		f.result = pullResult{err: err}
		return
	}
	if held {
		defer g.slots.Release(1)
	}
	waited := time.Since(queuedAt)

	g.mu.Lock()
	f.running, f.waited = true, waited
	notify := f.notify
	f.notify = nil
	g.mu.Unlock()
	for _, n := range notify {
		n(pullStart{waited: waited})
	}

	pullGateInFlight.Inc()
	defer pullGateInFlight.Dec()
	startTime := time.Now()
	imageRef, creds, err := g.imageService.PullImage(f.ctx, spec, credentials, podSandboxConfig)
	var size uint64
	if err == nil && imageRef != "" {
		// Getting the image size with best effort, ignoring the error.
		size, _ = g.imageService.GetImageSize(f.ctx, spec)
	}
	f.result = pullResult{
		imageRef:        imageRef,
		imageSize:       size,
		err:             err,
		pullDuration:    time.Since(startTime),
		credentialsUsed: creds,
	}
}

// acquire waits for a slot, at most queueTimeout when one is set; held says
// whether the pull holds a slot it must release.
func (g *pullGate) acquire(ctx context.Context) (held bool, err error) {
	if g.slots == nil || g.delegated.Load() {
		return false, nil
	}
	pullGateQueued.Inc()
	defer pullGateQueued.Dec()
	start := time.Now()
	actx := ctx
	if g.queueTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, g.queueTimeout)
		defer cancel()
	}
	err = g.slots.Acquire(actx, 1)
	pullGateSlotWait.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() == nil:
		pullGateQueueTimeouts.Inc()
		return false, fmt.Errorf("%w: waited %v for one of %d image pull slots (imagePullQueueTimeout)", ErrTooManyParallelPulls, g.queueTimeout, g.limit)
	default:
		return false, fmt.Errorf("waiting for an image pull slot: %w", context.Cause(ctx))
	}
}

// credentialsIdentity hashes the credentials a pull would try, in order.
func credentialsIdentity(credentials []credentialprovider.TrackedAuthConfig) string {
	if len(credentials) == 0 {
		return ""
	}
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, c := range credentials {
		// AuthConfig marshals without error: it holds only strings.
		_ = enc.Encode(c.AuthConfig)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sameCredential returns the pod's own credential that equals the one the shared
// pull used, so that every pod records its own credential source.
func sameCredential(used *credentialprovider.TrackedAuthConfig, own []credentialprovider.TrackedAuthConfig) *credentialprovider.TrackedAuthConfig {
	if used == nil {
		return nil
	}
	for i := range own {
		if own[i].AuthConfig == used.AuthConfig {
			return &own[i]
		}
	}
	return used
}
