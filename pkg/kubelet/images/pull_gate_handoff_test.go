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
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// pullLimitRuntime answers the kubelet's questions about the pull limit as a
// runtime that advertises image_pull_concurrency and enforces limit (nil: none,
// as after a restart).
type pullLimitRuntime struct {
	mu    sync.Mutex
	limit *int32
	asked int
}

func (r *pullLimitRuntime) status() (bool, *int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	return true, r.limit, nil
}

func (r *pullLimitRuntime) set(limit *int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limit = limit
}

func (r *pullLimitRuntime) questions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// poll is the kubelet's status poll of r (SyncImagePullLimit).
func (e *gateEnv) poll(r *pullLimitRuntime) {
	_, limit, _ := r.status()
	e.m.HandOffPullLimit(context.Background(), true, limit, func(int32) error { return nil }, r.status)
}

func TestPullGateDelegatedToTheRuntimeHoldsNothingBack(t *testing.T) {
	e := newGateEnv(t, 1, time.Millisecond, nil)
	runtime := &pullLimitRuntime{limit: ptr.To[int32](1)}
	e.poll(runtime)
	require.True(t, e.m.puller.(*pullGate).delegated.Load())
	asked := runtime.questions()
	a := e.ensure(context.Background(), gatePod{name: "a", image: "a:1"})
	e.rt.waitEntered(t, "a:1")
	b := e.ensure(context.Background(), gatePod{name: "b", image: "b:1"})
	e.rt.waitEntered(t, "b:1")
	assert.Equal(t, 1, runtime.questions()-asked, "the runtime confirmed the limit once, for the pull beyond it")
	e.rt.finish("a:1")
	e.rt.finish("b:1")
	require.NoError(t, outcomeOf(t, a).err)
	require.NoError(t, outcomeOf(t, b).err)
	assert.Equal(t, 2, e.rt.peak)
}

// A runtime restarted since the kubelet's last status poll enforces no limit
// yet: no pull goes beyond the limit until the runtime reports it again.
func TestPullGateGoesBeyondTheLimitOnlyWhenTheRuntimeConfirmsIt(t *testing.T) {
	e := newGateEnv(t, 1, 0, nil)
	runtime := &pullLimitRuntime{limit: ptr.To[int32](1)}
	e.poll(runtime)
	require.True(t, e.m.puller.(*pullGate).delegated.Load())

	runtime.set(nil) // restarted between two polls
	a := e.ensure(context.Background(), gatePod{name: "a", image: "a:1"})
	e.rt.waitEntered(t, "a:1")
	b := e.ensure(context.Background(), gatePod{name: "b", image: "b:1"})
	e.waitEvent(t, `to pull image "b:1"`) // queued until the runtime answers
	gate := e.m.puller.(*pullGate)
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return !gate.delegated.Load(), nil
	}), "the kubelet takes the limit back when the runtime does not confirm it")
	assert.Equal(t, []string{"a:1"}, e.rt.startedPulls())

	// The next poll sees the limit the kubelet sent again: the pull waiting
	// beyond the limit goes on at once.
	runtime.set(ptr.To[int32](1))
	e.poll(runtime)
	e.rt.waitEntered(t, "b:1")
	e.rt.finish("a:1")
	e.rt.finish("b:1")
	require.NoError(t, outcomeOf(t, a).err)
	require.NoError(t, outcomeOf(t, b).err)
}

// Pulls started while the runtime enforced the limit count against it once
// the kubelet enforces it again (the runtime stopped advertising the feature,
// or reports another limit): the runtime never sees more than the limit from
// pulls the kubelet starts after that.
func TestPullGateCountsPullsStartedWhileTheRuntimeEnforced(t *testing.T) {
	e := newGateEnv(t, 1, 0, nil)
	gate := e.m.puller.(*pullGate)
	runtime := &pullLimitRuntime{limit: ptr.To[int32](1)}
	e.poll(runtime)
	a := e.ensure(context.Background(), gatePod{name: "a", image: "a:1"})
	b := e.ensure(context.Background(), gatePod{name: "b", image: "b:1"})
	// With the runtime enforcing the limit, both pulls reach it at once.
	assert.ElementsMatch(t, []string{"a:1", "b:1"}, []string{e.rt.nextEntered(t), e.rt.nextEntered(t)})
	gate.setDelegated(false)
	c := e.ensure(context.Background(), gatePod{name: "c", image: "c:1"})
	e.waitEvent(t, `to pull image "c:1"`) // queued behind the two running pulls
	e.rt.finish("a:1")
	e.rt.finish("b:1")
	e.rt.waitEntered(t, "c:1")
	e.rt.mu.Lock()
	running := e.rt.running
	e.rt.mu.Unlock()
	assert.Equal(t, 1, running, "pulls in the runtime when the kubelet's next pull reached it")
	e.rt.finish("c:1")
	for _, o := range []<-chan outcome{a, b, c} {
		require.NoError(t, outcomeOf(t, o).err)
	}
}

func TestHandOffPullLimit(t *testing.T) {
	e := newGateEnv(t, 3, 0, nil)
	gate := e.m.puller.(*pullGate)
	var sent []int32
	send := func(limit int32) error { sent = append(sent, limit); return nil }
	ctx := context.Background()

	status := (&pullLimitRuntime{}).status
	e.m.HandOffPullLimit(ctx, false, nil, send, status)
	assert.Empty(t, sent, "nothing to hand to a runtime that does not enforce the limit")
	e.m.HandOffPullLimit(ctx, true, nil, func(int32) error { return errors.New("unimplemented") }, status)
	assert.False(t, gate.delegated.Load(), "the kubelet keeps limiting when the runtime refuses the limit")
	e.m.HandOffPullLimit(ctx, true, nil, send, status)
	assert.Equal(t, []int32{3}, sent)
	assert.False(t, gate.delegated.Load(), "the kubelet limits pulls until the runtime reports the limit")
	e.m.HandOffPullLimit(ctx, true, ptr.To[int32](3), send, status)
	assert.True(t, gate.delegated.Load(), "the runtime reports the kubelet's limit")
	assert.Equal(t, []int32{3}, sent, "nothing to send while the runtime reports the limit")
	e.m.HandOffPullLimit(ctx, true, nil, send, status)
	assert.False(t, gate.delegated.Load(), "a restarted runtime reports no limit")
	assert.Equal(t, []int32{3, 3}, sent, "and gets it again")
	e.m.HandOffPullLimit(ctx, true, ptr.To[int32](5), send, status)
	assert.False(t, gate.delegated.Load(), "a runtime that enforces another limit")
	assert.Equal(t, []int32{3, 3, 3}, sent, "gets the kubelet's")
	e.m.HandOffPullLimit(ctx, true, ptr.To[int32](3), send, status)
	e.m.HandOffPullLimit(ctx, false, ptr.To[int32](3), send, status)
	assert.False(t, gate.delegated.Load(), "a runtime that stops enforcing gives the limit back")
}

func TestHandOffErrorsAreRateLimited(t *testing.T) {
	var h handOff
	now := time.Now()
	refused := errors.New("unimplemented")
	assert.True(t, h.shouldLog(refused, now))
	assert.False(t, h.shouldLog(refused, now.Add(5*time.Second)), "the same error on the next poll")
	assert.True(t, h.shouldLog(errors.New("unavailable"), now.Add(10*time.Second)), "another error")
	assert.True(t, h.shouldLog(refused, now.Add(11*time.Second)))
	assert.True(t, h.shouldLog(refused, now.Add(11*time.Second+handOffErrorInterval)), "the same error after the interval")
}
