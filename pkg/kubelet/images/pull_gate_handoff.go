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
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// The CRI hand-off of the limit of parallel pulls: a container runtime that
// advertises the image_pull_concurrency feature gets the kubelet's limit
// through UpdateRuntimeConfig, and while it reports that limit in its status
// the gate no longer holds pulls back beyond it (it still orders,
// deduplicates and cancels them).

// limitHandOff is the pull gate's state of the hand-off of its limit.
type limitHandOff struct {
	// delegated is set when the runtime enforces the limit itself: the gate then
	// still orders, deduplicates and cancels, but no longer holds pulls back once
	// the runtime confirmed it still enforces the limit.
	delegated atomic.Bool
	handOff   handOff
	// confirming is set while the runtime is asked whether it still enforces the
	// limit (confirmLocked). Guarded by pullGate.mu.
	confirming bool
	// reports counts the status polls' reports (setDelegated), so that an answer
	// to confirmLocked older than a report is not applied over it. Guarded by
	// pullGate.mu.
	reports uint64
}

// PullLimitHandOff is implemented by an image manager whose limit of parallel pulls
// a container runtime can take over (KubeletImagePullGate).
type PullLimitHandOff interface {
	// HandOffPullLimit follows the runtime's status: whether it enforces pull
	// concurrency, and the limit it reports it enforces (nil: none). The kubelet
	// stops limiting pulls itself only while the runtime reports the kubelet's
	// limit; otherwise it limits them and, if the runtime enforces, sends it the
	// limit again. Before a pull goes beyond the limit, the kubelet asks the
	// runtime again with status.
	HandOffPullLimit(ctx context.Context, runtimeEnforces bool, runtimeLimit *int32, send func(maxParallelImagePulls int32) error, status RuntimePullLimitStatus)
}

// RuntimePullLimitStatus asks the runtime whether it enforces pull concurrency and
// which limit it reports it enforces (nil: none).
type RuntimePullLimitStatus func() (enforces bool, limit *int32, err error)

var _ PullLimitHandOff = &imageManager{}

// handOffErrorInterval is the least time between two logs of the same failure to
// hand the limit to the runtime; the kubelet tries again on every status poll.
const handOffErrorInterval = 5 * time.Minute

// handOff is the state of the hand-off of the pull limit to the runtime.
type handOff struct {
	mu          sync.Mutex
	lastErr     string
	lastErrTime time.Time
	// confirm says whether the runtime enforces the given limit now.
	confirm func(limit int64) bool
}

func (h *handOff) confirmer() func(limit int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.confirm
}

// HandOffPullLimit implements PullLimitHandOff.
func (m *imageManager) HandOffPullLimit(ctx context.Context, runtimeEnforces bool, runtimeLimit *int32, send func(int32) error, status RuntimePullLimitStatus) {
	gate, ok := m.puller.(*pullGate)
	if !ok {
		return
	}
	logger := klog.FromContext(ctx)
	gate.handOff.mu.Lock()
	gate.handOff.confirm = func(limit int64) bool {
		enforces, reported, err := status()
		if err == nil && enforces && reported != nil && int64(*reported) == limit {
			return true
		}
		logger.Info("The container runtime no longer confirms the kubelet's limit of parallel image pulls; the kubelet limits them again until the runtime reports it", "maxParallelImagePulls", limit, "runtimeEnforces", enforces, "err", err)
		return false
	}
	gate.handOff.mu.Unlock()
	delegate := runtimeEnforces && runtimeLimit != nil && int64(*runtimeLimit) == gate.limit
	if gate.setDelegated(delegate) {
		if delegate {
			logger.Info("The container runtime enforces the limit of parallel image pulls from now on", "maxParallelImagePulls", gate.limit)
		} else {
			logger.Info("The container runtime no longer enforces the kubelet's limit of parallel image pulls; the kubelet limits them again", "maxParallelImagePulls", gate.limit, "runtimeEnforces", runtimeEnforces)
		}
	}
	if delegate || !runtimeEnforces {
		return
	}
	if err := send(int32(gate.limit)); err != nil {
		if gate.handOff.shouldLog(err, time.Now()) {
			logger.Error(err, "Failed to hand the limit of parallel image pulls to the container runtime; the kubelet keeps limiting them and tries again", "maxParallelImagePulls", gate.limit)
		}
		return
	}
	logger.V(2).Info("Sent the limit of parallel image pulls to the container runtime; the kubelet limits pulls until the runtime reports it", "maxParallelImagePulls", gate.limit)
}

// shouldLog says whether a failure to hand the limit over is logged: a new error,
// or the same one handOffErrorInterval after it was last logged.
func (h *handOff) shouldLog(err error, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err.Error() == h.lastErr && now.Sub(h.lastErrTime) < handOffErrorInterval {
		return false
	}
	h.lastErr, h.lastErrTime = err.Error(), now
	return true
}

// setDelegated records whether the runtime enforces the limit, as the runtime
// just reported it; it says whether that changed. The report confirms the limit
// for the pulls waiting beyond it, which are granted at once.
func (g *pullGate) setDelegated(delegated bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	changed := g.delegated.Swap(delegated) != delegated
	g.reports++
	g.grantLocked(delegated)
	return changed
}

// confirmLocked asks the runtime, unless a question is already out, whether it
// still enforces the limit, and grants again with the answer: beyond the limit
// when it does; when it does not, the kubelet takes the limit back until the
// runtime reports it again on a status poll.
func (g *pullGate) confirmLocked() {
	confirm := g.handOff.confirmer()
	if g.confirming || confirm == nil {
		return
	}
	g.confirming = true
	asked := g.reports
	go func() {
		enforces := confirm(g.limit)
		g.mu.Lock()
		defer g.mu.Unlock()
		g.confirming = false
		if g.reports != asked {
			// A status poll reported since the question was asked: its
			// report is newer than this answer, and has granted by it.
			g.grantLocked(false)
			return
		}
		if !enforces {
			g.delegated.Store(false)
		}
		g.grantLocked(enforces)
	}()
}
