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
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/legacyregistry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images/pullmanager"
	kubeletmetrics "k8s.io/kubernetes/pkg/kubelet/metrics"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeImageRuntime is an image service whose pulls block until released. It
// records what each pull brought to the runtime, in the order the pulls reached it,
// and has an image once a pull of it succeeded.
type fakeImageRuntime struct {
	kubecontainer.ImageService // not called

	mu        sync.Mutex
	pulls     []runtimePull
	cancelled []string // images whose pull context was cancelled while running
	running   int      // pulls in the runtime now
	peak      int      // most pulls in the runtime at once
	release   map[string]chan struct{}
	entered   chan string      // receives an image when its pull reaches the runtime
	err       map[string]error // pull errors by image
	present   map[string]bool
	contexts  map[string]context.Context // of the last pull of each image
	// completesCancelled makes the runtime complete a pull whatever its
	// context, as a runtime that does not stop a pull in progress may.
	completesCancelled bool
	// storesCancelled makes a cancelled pull fail but leave its image, as a
	// runtime cancelled after it stored the image may.
	storesCancelled bool
	// sized, if set, runs when the image size of a pulled image is asked for:
	// after PullImage returned, before the gate records the pull's end.
	sized func()
}

// runtimePull is what one PullImage brought to the runtime.
type runtimePull struct {
	image, namespace, handler string
	annotations               []kubecontainer.Annotation
}

func newFakeImageRuntime() *fakeImageRuntime {
	return &fakeImageRuntime{release: map[string]chan struct{}{}, entered: make(chan string, 100), err: map[string]error{}, present: map[string]bool{}, contexts: map[string]context.Context{}}
}

// pullContext is the context of the last pull of image that reached the runtime.
func (s *fakeImageRuntime) pullContext(image string) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[image]
}

// gate returns the channel that lets the pulls of image finish.
func (s *fakeImageRuntime) gate(image string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release[image] == nil {
		s.release[image] = make(chan struct{})
	}
	return s.release[image]
}

// finish lets every pull of image finish, now and later.
func (s *fakeImageRuntime) finish(image string) { close(s.gate(image)) }

func (s *fakeImageRuntime) PullImage(ctx context.Context, spec kubecontainer.ImageSpec, creds []credentialprovider.TrackedAuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, *credentialprovider.TrackedAuthConfig, error) {
	s.mu.Lock()
	s.pulls = append(s.pulls, runtimePull{image: spec.Image, namespace: sandbox.GetMetadata().GetNamespace(), handler: spec.RuntimeHandler, annotations: spec.Annotations})
	s.contexts[spec.Image] = ctx
	s.running++
	s.peak = max(s.peak, s.running)
	s.mu.Unlock()
	s.entered <- spec.Image
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	done := ctx.Done()
	if s.completesCancelled {
		done = nil
	}
	select {
	case <-s.gate(spec.Image):
	case <-done:
		s.mu.Lock()
		s.cancelled = append(s.cancelled, spec.Image)
		if s.storesCancelled {
			s.present[spec.Image] = true
		}
		s.mu.Unlock()
		return "", nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.err[spec.Image]; err != nil {
		return "", nil, err
	}
	s.present[spec.Image] = true
	var used *credentialprovider.TrackedAuthConfig
	if len(creds) > 0 {
		used = &creds[0]
	}
	return "sha256:" + spec.Image, used, nil
}

func (s *fakeImageRuntime) GetImageRef(_ context.Context, spec kubecontainer.ImageSpec) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.present[spec.Image] {
		return "sha256:" + spec.Image, nil
	}
	return "", nil
}

func (s *fakeImageRuntime) GetImageSize(context.Context, kubecontainer.ImageSpec) (uint64, error) {
	if s.sized != nil {
		s.sized()
	}
	return 1, nil
}

func (s *fakeImageRuntime) startedPulls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var images []string
	for _, p := range s.pulls {
		images = append(images, p.image)
	}
	return images
}

func (s *fakeImageRuntime) pullsOf(image string) []runtimePull {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pulls []runtimePull
	for _, p := range s.pulls {
		if p.image == image {
			pulls = append(pulls, p)
		}
	}
	return pulls
}

// waitEntered waits until the pull of image reaches the runtime.
func (s *fakeImageRuntime) waitEntered(t *testing.T, image string) {
	t.Helper()
	select {
	case got := <-s.entered:
		require.Equal(t, image, got, "the pull that reached the runtime")
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("the pull of %s never reached the runtime", image)
	}
}

// nextEntered waits until a pull reaches the runtime and returns its image.
func (s *fakeImageRuntime) nextEntered(t *testing.T) string {
	t.Helper()
	select {
	case got := <-s.entered:
		return got
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no pull reached the runtime")
		return ""
	}
}

// gateEnv is an image manager with the pull gate over a fakeImageRuntime.
type gateEnv struct {
	rt       *fakeImageRuntime
	m        *imageManager
	recorder *record.FakeRecorder
	backOff  *flowcontrol.Backoff
	times    *mockPodPullingTimeRecorder
	// clock is the gate's: waits for a slot time out only when a test steps it.
	clock *testingclock.FakeClock
	seen  []string // events read so far
}

func newGateEnv(t *testing.T, limit int32, queueTimeout time.Duration, pullManager pullmanager.ImagePullManager) *gateEnv {
	return newGateEnvWith(t, limit, PullGateConfig{QueueTimeout: queueTimeout}, pullManager)
}

func newGateEnvWith(t *testing.T, limit int32, config PullGateConfig, pullManager pullmanager.ImagePullManager) *gateEnv {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, true)
	if pullManager == nil {
		pullManager = &pullmanager.NoopImagePullManager{}
	}
	e := &gateEnv{
		rt:       newFakeImageRuntime(),
		recorder: record.NewFakeRecorder(1000),
		backOff:  flowcontrol.NewBackOff(time.Second, time.Minute),
		times:    &mockPodPullingTimeRecorder{startedPullingRecorded: map[ktypes.UID]bool{}, finishedPullingRecorded: map[ktypes.UID]bool{}},
	}
	var maxParallel *int32
	if limit > 0 {
		maxParallel = &limit
	}
	e.m = NewImageManager(e.recorder, &credentialprovider.BasicDockerKeyring{}, e.rt, pullManager, e.backOff,
		false, maxParallel, config, 0, 0, e.times).(*imageManager)
	e.clock = testingclock.NewFakeClock(time.Now())
	e.m.puller.(*pullGate).clock = e.clock
	return e
}

// waitTimers waits until n pulls wait for a slot with a queue timeout running.
func (e *gateEnv) waitTimers(t *testing.T, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return e.clock.Waiters() == n, nil
	}); err != nil {
		t.Fatalf("%d pulls wait with a queue timeout running, want %d", e.clock.Waiters(), n)
	}
}

// gatePod is a pod's request for one image.
type gatePod struct {
	name, namespace, image, handler string
	policy                          v1.PullPolicy
	annotations                     map[string]string
}

type outcome struct {
	ref, msg string
	err      error
}

// ensure runs EnsureImageExists for p until the pod's context ends.
func (e *gateEnv) ensure(podCtx context.Context, p gatePod) <-chan outcome {
	if p.namespace == "" {
		p.namespace = "ns"
	}
	if p.policy == "" {
		p.policy = v1.PullIfNotPresent
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, UID: ktypes.UID("uid-" + p.name), Annotations: p.annotations}}
	ref := &v1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID}
	sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)}}
	ctx := WithPullCancellation(context.WithoutCancel(podCtx), podCtx)
	ch := make(chan outcome, 1)
	go func() {
		r, msg, err := e.m.EnsureImageExists(ctx, ref, pod, p.image, nil, sandbox, p.handler, p.policy)
		ch <- outcome{r, msg, err}
	}()
	return ch
}

func outcomeOf(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("EnsureImageExists did not return")
		return outcome{}
	}
}

// events returns every event recorded so far.
func (e *gateEnv) events() []string {
	for {
		select {
		case ev := <-e.recorder.Events:
			e.seen = append(e.seen, ev)
		default:
			return e.seen
		}
	}
}

// waitEvent waits for an event containing text, returning the events up to it.
func (e *gateEnv) waitEvent(t *testing.T, text string) []string {
	t.Helper()
	var seen []string
	timeout := time.After(wait.ForeverTestTimeout)
	for {
		select {
		case ev := <-e.recorder.Events:
			seen = append(seen, ev)
			e.seen = append(e.seen, ev)
			if strings.Contains(ev, text) {
				return seen
			}
		case <-timeout:
			t.Fatalf("no event %q; events: %q", text, seen)
		}
	}
}

func matching(events []string, text string) []string {
	var m []string
	for _, ev := range events {
		if strings.Contains(ev, text) {
			m = append(m, ev)
		}
	}
	return m
}

// holdTheSlot takes the only slot with a pull of "held:1" that lasts until finish("held:1").
func (e *gateEnv) holdTheSlot(t *testing.T) <-chan outcome {
	held := e.ensure(context.Background(), gatePod{name: "holder", image: "held:1"})
	e.rt.waitEntered(t, "held:1")
	return held
}

// Pods take their place in the queue when they arrive (their PullQueued event says
// so) and reach the runtime in that order.
func TestPullGateKeepsArrivalOrder(t *testing.T) {
	e := newGateEnv(t, 1, 0, nil)
	held := e.holdTheSlot(t)
	var pods []<-chan outcome
	for i := range 5 {
		image := fmt.Sprintf("img-%d:1", i)
		pods = append(pods, e.ensure(context.Background(), gatePod{name: fmt.Sprintf("p%d", i), image: image}))
		e.waitEvent(t, fmt.Sprintf("to pull image %q: %d %s ahead in the queue", image, i, plural(i, "pull", "pulls")))
	}
	e.rt.finish("held:1")
	require.NoError(t, outcomeOf(t, held).err)
	for i, ch := range pods {
		image := fmt.Sprintf("img-%d:1", i)
		e.rt.waitEntered(t, image)
		e.rt.finish(image)
		require.NoError(t, outcomeOf(t, ch).err)
	}
	assert.Equal(t, []string{"held:1", "img-0:1", "img-1:1", "img-2:1", "img-3:1", "img-4:1"}, e.rt.startedPulls())
}

// Each pod's queue timeout counts its own wait: a pod that arrives late for an
// image others wait for gets its whole timeout.
func TestPullGateTimesEachPodsOwnWait(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newGateEnv(t, 1, timeout, nil)
	held := e.holdTheSlot(t)
	early := e.ensure(context.Background(), gatePod{name: "early", image: "img:1"})
	e.waitTimers(t, 1)
	e.clock.Step(timeout * 2 / 3)
	late := e.ensure(context.Background(), gatePod{name: "late", image: "img:1"})
	e.waitTimers(t, 2)
	e.clock.Step(timeout / 3)
	require.ErrorIs(t, outcomeOf(t, early).err, ErrTooManyParallelPulls)
	e.waitTimers(t, 1) // the late pod's timeout is still running
	e.clock.Step(timeout * 2 / 3)
	got := outcomeOf(t, late)
	require.ErrorIs(t, got.err, ErrTooManyParallelPulls)
	e.rt.finish("held:1")
	require.NoError(t, outcomeOf(t, held).err)
}

// A pod whose wait timed out comes back, after its back-off, at the place it had:
// ahead of a pod that arrived after it first did.
func TestPullGateKeepsTheirPlaceForPodsThatTimedOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e := newGateEnv(t, 1, timeout, nil)
	held := e.holdTheSlot(t)
	first := e.ensure(context.Background(), gatePod{name: "first", image: "first:1"})
	e.waitTimers(t, 1)
	second := e.ensure(context.Background(), gatePod{name: "second", image: "second:1"})
	e.waitTimers(t, 2)
	e.clock.Step(timeout)
	require.ErrorIs(t, outcomeOf(t, first).err, ErrTooManyParallelPulls)
	require.ErrorIs(t, outcomeOf(t, second).err, ErrTooManyParallelPulls)
	// The second pod comes back first; the first one still goes ahead of it.
	e.backOff.Reset("uid-second_second:1")
	second = e.ensure(context.Background(), gatePod{name: "second", image: "second:1"})
	e.waitEvent(t, `to pull image "second:1": 0 pulls ahead in the queue`)
	e.backOff.Reset("uid-first_first:1")
	first = e.ensure(context.Background(), gatePod{name: "first", image: "first:1"})
	e.waitEvent(t, `to pull image "first:1": 0 pulls ahead in the queue`)
	e.rt.finish("held:1")
	require.NoError(t, outcomeOf(t, held).err)
	e.rt.waitEntered(t, "first:1")
	e.rt.finish("first:1")
	require.NoError(t, outcomeOf(t, first).err)
	e.rt.waitEntered(t, "second:1")
	e.rt.finish("second:1")
	require.NoError(t, outcomeOf(t, second).err)
	assert.Equal(t, []string{"held:1", "first:1", "second:1"}, e.rt.startedPulls())
}

func TestPullGateAbandonedPullLeavesNoFailure(t *testing.T) {
	e := newGateEnv(t, 1, 0, nil)
	held := e.holdTheSlot(t)
	podCtx, cancel := context.WithCancel(context.Background())
	gone := e.ensure(podCtx, gatePod{name: "gone", image: "img:1"})
	e.waitEvent(t, `to pull image "img:1"`)
	cancel()
	got := outcomeOf(t, gone)
	require.Error(t, got.err)
	assert.ErrorIs(t, got.err, ErrPullAbandoned)
	assert.Empty(t, matching(e.events(), "Warning"), "no Warning event for an abandoned pull")
	assert.False(t, e.backOff.IsInBackOffSinceUpdate("uid-gone_img:1", e.backOff.Clock.Now()), "no back-off for an abandoned pull")
	_, kept := e.m.prevPullErrMsg.Load("uid-gone_img:1")
	assert.False(t, kept, "no error message kept for an abandoned pull")
	e.rt.finish("held:1")
	require.NoError(t, outcomeOf(t, held).err)
	assert.Equal(t, []string{"held:1"}, e.rt.startedPulls(), "the abandoned pull never reached the runtime")
}

// A pull granted a slot after its pod left never reaches the runtime, and the
// pod gets no Pulling event: the pod context reaches the pull's own context only
// asynchronously, so the gate checks both before the runtime call.
func TestPullGateNeverStartsAPullForAPodThatLeft(t *testing.T) {
	e := newGateEnv(t, 1, 0, nil)
	podCtx, cancel := context.WithCancel(context.Background())
	cancel()
	got := outcomeOf(t, e.ensure(podCtx, gatePod{name: "gone", image: "img:1"}))
	require.ErrorIs(t, got.err, ErrPullAbandoned)
	assert.ErrorIs(t, got.err, context.Canceled)
	assert.Empty(t, e.rt.startedPulls(), "no pull reached the runtime")
	assert.Empty(t, matching(e.events(), "Pulling"), "no Pulling event")
	// The slot was handed on.
	next := e.ensure(context.Background(), gatePod{name: "next", image: "img:2"})
	e.rt.waitEntered(t, "img:2")
	e.rt.finish("img:2")
	require.NoError(t, outcomeOf(t, next).err)
}

// A pod that left before a pull of its image started gets no Pulling event.
func TestPullGateNoEventsForAPodThatLeft(t *testing.T) {
	e := newGateEnv(t, 1, 0, nil)
	held := e.holdTheSlot(t)
	podCtx, cancel := context.WithCancel(context.Background())
	gone := e.ensure(podCtx, gatePod{name: "gone", image: "img:1"})
	e.waitEvent(t, `to pull image "img:1"`)
	stays := e.ensure(context.Background(), gatePod{name: "stays", image: "img:1"})
	e.waitEvent(t, `to pull image "img:1"`)
	cancel()
	require.Error(t, outcomeOf(t, gone).err)
	e.rt.finish("held:1")
	require.NoError(t, outcomeOf(t, held).err)
	e.rt.waitEntered(t, "img:1")
	e.rt.finish("img:1")
	require.NoError(t, outcomeOf(t, stays).err)
	assert.Len(t, matching(e.events(), `Pulling image "img:1"`), 1, "one Pulling event, for the pod that stayed")
}

// With abandonedImagePullPolicy Detach, a pull nobody waits for any more
// finishes, holding its slot until it ends, and the image serves the next pod
// that needs it.
func TestPullGateDetachesAbandonedPulls(t *testing.T) {
	e := newGateEnvWith(t, 1, PullGateConfig{DetachAbandonedPulls: true}, nil)
	ownerCtx, ownerGone := context.WithCancel(context.Background())
	owner := e.ensure(ownerCtx, gatePod{name: "owner", image: "big:1"})
	e.rt.waitEntered(t, "big:1")
	ownerGone()
	require.ErrorIs(t, outcomeOf(t, owner).err, ErrPullAbandoned)

	second := e.ensure(context.Background(), gatePod{name: "second", image: "other:1"})
	e.waitEvent(t, `to pull image "other:1": 0 pulls ahead`) // the detached pull holds the slot
	e.rt.finish("big:1")
	e.rt.waitEntered(t, "other:1")
	e.rt.finish("other:1")
	require.NoError(t, outcomeOf(t, second).err)
	e.rt.mu.Lock()
	assert.Empty(t, e.rt.cancelled, "the detached pull was not cancelled")
	e.rt.mu.Unlock()

	got := outcomeOf(t, e.ensure(context.Background(), gatePod{name: "later", image: "big:1"}))
	require.NoError(t, got.err)
	assert.Len(t, e.rt.pullsOf("big:1"), 1, "the later pod found the image the detached pull fetched")
}

// The runtime never sees more than maxParallelImagePulls pulls from the
// kubelet (one with serializeImagePulls), whatever becomes of the pulls whose
// pods left: detached pulls hold their slots until they end, cancelled ones
// until the runtime returns.
func TestPullGateRuntimeNeverSeesMoreThanTheLimit(t *testing.T) {
	for _, limit := range []int32{1, 2} {
		for _, detach := range []bool{true, false} {
			t.Run(fmt.Sprintf("%d slots/%s", limit, map[bool]string{true: "Detach", false: "Cancel"}[detach]), func(t *testing.T) {
				e := newGateEnvWith(t, limit, PullGateConfig{DetachAbandonedPulls: detach}, nil)
				var left []<-chan outcome
				var gone []context.CancelFunc
				for i := range limit {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					gone = append(gone, cancel)
					left = append(left, e.ensure(ctx, gatePod{name: fmt.Sprintf("left-%d", i), image: fmt.Sprintf("left:%d", i)}))
					e.rt.waitEntered(t, fmt.Sprintf("left:%d", i))
				}
				for _, cancel := range gone {
					cancel()
				}
				for _, o := range left {
					require.ErrorIs(t, outcomeOf(t, o).err, ErrPullAbandoned)
				}
				var stay []<-chan outcome
				for i := range limit {
					image := fmt.Sprintf("stay:%d", i)
					stay = append(stay, e.ensure(context.Background(), gatePod{name: fmt.Sprintf("stay-%d", i), image: image}))
					if detach {
						// Queued behind the detached pulls' slots.
						e.waitEvent(t, fmt.Sprintf(`to pull image %q`, image))
					}
				}
				for i := range limit {
					e.rt.finish(fmt.Sprintf("left:%d", i))
				}
				for i := range limit {
					e.rt.finish(fmt.Sprintf("stay:%d", i))
				}
				for _, o := range stay {
					require.NoError(t, outcomeOf(t, o).err)
				}
				e.rt.mu.Lock()
				defer e.rt.mu.Unlock()
				assert.Equal(t, int(limit), e.rt.peak, "most pulls in the runtime at once")
			})
		}
	}
}

func TestPullGateLimitsPulls(t *testing.T) {
	e := newGateEnv(t, 2, 0, nil)
	var pods []<-chan outcome
	for i := range 5 {
		pods = append(pods, e.ensure(context.Background(), gatePod{name: fmt.Sprintf("p%d", i), image: fmt.Sprintf("img-%d:1", i)}))
	}
	for range 2 {
		<-e.rt.entered
	}
	for range 3 {
		e.waitEvent(t, "to pull image") // the other three wait for a slot
	}
	for i := range 5 {
		e.rt.finish(fmt.Sprintf("img-%d:1", i))
	}
	for _, ch := range pods {
		require.NoError(t, outcomeOf(t, ch).err)
	}
	assert.Equal(t, 2, e.rt.peak)
}

func TestPullCancellationReachesOnlyThePullPath(t *testing.T) {
	podCtx, cancel := context.WithCancel(context.Background())
	detached := context.WithoutCancel(podCtx)

	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, false)
	off := WithPullCancellation(detached, podCtx)
	pctx, stop := pullContext(off)
	cancel()
	assert.NoError(t, pctx.Err(), "without the gate, pulls keep upstream's detached context")
	stop()

	podCtx, cancel = context.WithCancel(context.Background())
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, true)
	on := WithPullCancellation(context.WithoutCancel(podCtx), podCtx)
	pctx, stop = pullContext(on)
	defer stop()
	cancel()
	assert.NoError(t, on.Err(), "the rest of SyncPod stays detached")
	<-pctx.Done()
	assert.ErrorContains(t, context.Cause(pctx), "the pod is terminating")
}

func TestPullGateMessages(t *testing.T) {
	assert.Equal(t, `Pulling image "busybox"`, pullingMessage("busybox", 0, 3))
	assert.Equal(t, `Pulling image "busybox" (waited 1.5s for one of 3 image pull slots)`, pullingMessage("busybox", 1500*time.Millisecond, 3))
	assert.Equal(t, `Waiting for one of 3 image pull slots to pull image "busybox": 1 pull ahead in the queue`, queuedMessage("busybox", 1, 3))
	assert.Equal(t, `Waiting for one of 3 image pull slots to pull image "busybox": 2 pulls ahead in the queue`, queuedMessage("busybox", 2, 3))
}

func TestImageManagerThroughThePullGate(t *testing.T) {
	e := newGateEnv(t, 1, 100*time.Millisecond, nil)
	held := e.holdTheSlot(t)

	second := gatePod{name: "second", image: "other:1"}
	timedOut := e.ensure(context.Background(), second)
	e.waitTimers(t, 1)
	e.clock.Step(100 * time.Millisecond)
	got := outcomeOf(t, timedOut)
	require.ErrorIs(t, got.err, ErrTooManyParallelPulls)
	assert.Contains(t, got.msg, "TooManyParallelImagePulls")
	got = outcomeOf(t, e.ensure(context.Background(), second))
	require.ErrorIs(t, got.err, ErrImagePullBackOff, "a timed-out pull backs off")
	assert.Contains(t, got.msg, "TooManyParallelImagePulls")

	third := e.ensure(context.Background(), gatePod{name: "third", image: "third:1"})
	e.waitEvent(t, `to pull image "third:1"`)
	e.clock.Step(5 * time.Millisecond) // so that the Pulling event has a wait to report
	e.rt.finish("held:1")
	require.NoError(t, outcomeOf(t, held).err)
	e.rt.waitEntered(t, "third:1")
	e.rt.finish("third:1")
	require.NoError(t, outcomeOf(t, third).err)

	all := strings.Join(e.events(), "\n")
	assert.Contains(t, all, "Warning TooManyParallelImagePulls Failed to pull image \"other:1\"")
	assert.Contains(t, all, `Normal Pulling Pulling image "third:1" (waited 5ms for one of 1 image pull slots)`)
}

// TestUpstreamImageManagerTestsThroughThePullGate runs the image manager's own tests
// with KubeletImagePullGate enabled: the gate keeps their behaviour.
func TestUpstreamImageManagerTestsThroughThePullGate(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, true)
	for name, test := range map[string]func(*testing.T){
		"ParallelPuller":                     TestParallelPuller,
		"SerializedPuller":                   TestSerializedPuller,
		"PullAndListImageWithPodAnnotations": TestPullAndListImageWithPodAnnotations,
		"PullAndListImageWithRuntimeHandlerInImageCriAPIFeatureGate": TestPullAndListImageWithRuntimeHandlerInImageCriAPIFeatureGate,
		"MaxParallelImagePullsLimit":                                 TestMaxParallelImagePullsLimit,
		"EvalCRIPullErr":                                             TestEvalCRIPullErr,
		"ImagePullPrecheck":                                          TestImagePullPrecheck,
		"EnsureImageExistsWithServiceAccountCoordinates":             TestEnsureImageExistsWithServiceAccountCoordinates,
		"EnsureImageExistsWithNodeCredentialsOnly":                   TestEnsureImageExistsWithNodeCredentialsOnly,
		"ParallelPodPullingTimeRecorderWithErr":                      TestParallelPodPullingTimeRecorderWithErr,
	} {
		t.Run(name, test)
	}
}

const pullQueueMetricsGateEnv = "PULL_QUEUE_METRICS_GATE"

// TestPullQueueMetricsOnlyWithTheGate: the kubelet's /metrics has the image pull
// queue's metrics with KubeletImagePullGate enabled, and is upstream's with it
// disabled. Each case runs in a process of its own, as a kubelet does: metrics
// register once per process.
func TestPullQueueMetricsOnlyWithTheGate(t *testing.T) {
	if gate := os.Getenv(pullQueueMetricsGateEnv); gate != "" {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, gate == "true")
		NewImageManager(record.NewFakeRecorder(1), &credentialprovider.BasicDockerKeyring{}, newFakeImageRuntime(), &pullmanager.NoopImagePullManager{},
			flowcontrol.NewBackOff(time.Second, time.Minute), false, nil, PullGateConfig{}, 0, 0, nil)
		kubeletmetrics.Register()
		families, err := legacyregistry.DefaultGatherer.Gather()
		require.NoError(t, err)
		var names []string
		for _, f := range families {
			if strings.HasPrefix(f.GetName(), "kubelet_image_pull_") && f.GetName() != "kubelet_image_pull_duration_seconds" {
				names = append(names, f.GetName())
			}
		}
		fmt.Printf("registered: [%s]\n", strings.Join(names, " "))
		return
	}
	registered := regexp.MustCompile(`registered: \[(.*)\]`)
	for gate, want := range map[string][]string{
		"true": {
			"kubelet_image_pull_queue_abandoned_total",
			"kubelet_image_pull_queue_length",
			"kubelet_image_pull_queue_running_pulls",
			"kubelet_image_pull_queue_timeouts_total",
			"kubelet_image_pull_queue_wait_duration_seconds",
		},
		"false": nil,
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPullQueueMetricsOnlyWithTheGate$", "-test.v")
		cmd.Env = append(os.Environ(), pullQueueMetricsGateEnv+"="+gate)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		m := registered.FindSubmatch(out)
		require.NotNil(t, m, "%s", out)
		assert.ElementsMatch(t, want, strings.Fields(string(m[1])), "KubeletImagePullGate=%s", gate)
	}
}

// recordingPullManager keeps KEP-2535's records of pulls as counts: pull intents
// per image, and the images recorded as pulled.
type recordingPullManager struct {
	pullmanager.NoopImagePullManager
	mu       sync.Mutex
	intents  map[string]int
	recorded int
	pulled   []string
	creds    []*kubeletconfiginternal.ImagePullCredentials
	// intentsBeforeFailing, if set, is the number of pull intents recorded
	// before every later one fails, as when the intents' directory is not
	// writable.
	intentsBeforeFailing int
}

func (r *recordingPullManager) RecordPullIntent(_ klog.Logger, image string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.intentsBeforeFailing > 0 && r.recorded == r.intentsBeforeFailing {
		return errors.New("cannot record the pull intent")
	}
	r.intents[image]++
	r.recorded++
	return nil
}

// intentsRecorded is the number of pull intents recorded so far, released or not.
func (r *recordingPullManager) intentsRecorded() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorded
}

func (r *recordingPullManager) RecordImagePulled(_ context.Context, image, _ string, creds *kubeletconfiginternal.ImagePullCredentials) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.intents[image]--
	r.pulled = append(r.pulled, image)
	r.creds = append(r.creds, creds)
}

// credentials are the credentials of each pulled record, in order.
func (r *recordingPullManager) credentials() []*kubeletconfiginternal.ImagePullCredentials {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.creds)
}

func (r *recordingPullManager) RecordImagePullFailed(_ context.Context, image string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.intents[image]--
}

func (r *recordingPullManager) state() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.intents["private:1"], slices.Clone(r.pulled)
}

// A pull that reached the runtime is recorded by its actual result whatever
// happens to its pod, and KEP-2535's pull intent is kept until PullImage
// returns: otherwise an image pulled with the pod's credentials would look
// preloaded to KEP-2535's check and be usable by pods without them. Under
// either abandonedImagePullPolicy: the pull goes on detached, is cancelled and
// stopped by the runtime, is cancelled but completed by the runtime anyway, or
// ends as its pod leaves (the gate sees both at once; run repeatedly).
// leaveWhilePulling starts a pull of private:1 for a pod that leaves once the
// pull is in the runtime.
func leaveWhilePulling(t *testing.T, e *gateEnv) {
	t.Helper()
	ownerCtx, ownerGone := context.WithCancel(context.Background())
	owner := e.ensure(ownerCtx, gatePod{name: "owner", image: "private:1"})
	e.rt.waitEntered(t, "private:1")
	ownerGone()
	require.ErrorIs(t, outcomeOf(t, owner).err, ErrPullAbandoned)
}

func TestPullGateRecordsAPullThatGoesOnWithoutItsPod(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletEnsureSecretPulledImages, true)
	for _, detach := range []bool{true, false} {
		policy := map[bool]string{true: "Detach", false: "Cancel"}[detach]
		setup := func(t *testing.T) (*gateEnv, *recordingPullManager) {
			records := &recordingPullManager{intents: map[string]int{}}
			return newGateEnvWith(t, 1, PullGateConfig{DetachAbandonedPulls: detach}, records), records
		}
		recordedAsPulled := func(t *testing.T, records *recordingPullManager) {
			t.Helper()
			require.Eventually(t, func() bool {
				intents, pulled := records.state()
				return intents == 0 && slices.Equal(pulled, []string{"private:1"})
			}, 10*time.Second, time.Millisecond, "the pull is recorded as pulled when it ends, and its intent released")
		}

		t.Run(policy+"/the pod leaves while the pull runs", func(t *testing.T) {
			e, records := setup(t)
			leaveWhilePulling(t, e)
			if !detach {
				require.Eventually(t, func() bool {
					intents, pulled := records.state()
					return intents == 0 && len(pulled) == 0
				}, 10*time.Second, time.Millisecond, "a pull the runtime stopped is recorded as failed, its intent released")
				assert.Equal(t, 1, records.intentsRecorded(), "the pod handed its intent over to the pull")
				ref, _ := e.rt.GetImageRef(context.Background(), kubecontainer.ImageSpec{Image: "private:1"})
				assert.Empty(t, ref, "the runtime stopped the pull: no image")
				return
			}
			intents, pulled := records.state()
			assert.Equal(t, 1, intents, "the detached pull keeps an intent while it runs")
			assert.Empty(t, pulled)
			e.rt.finish("private:1")
			recordedAsPulled(t, records)
		})

		t.Run(policy+"/the pod leaves and the runtime completes the pull anyway", func(t *testing.T) {
			e, records := setup(t)
			e.rt.completesCancelled = true
			leaveWhilePulling(t, e)
			intents, pulled := records.state()
			assert.Equal(t, 1, intents, "the pull keeps an intent while the runtime's PullImage runs")
			assert.Empty(t, pulled)
			e.rt.finish("private:1")
			recordedAsPulled(t, records)
		})

		// Only a cancelled pull can fail after the runtime stored its image.
		t.Run(policy+"/the pod leaves and the runtime stores the image of the cancelled pull", func(t *testing.T) {
			if detach {
				return
			}
			e, records := setup(t)
			e.rt.storesCancelled = true
			leaveWhilePulling(t, e)
			require.Eventually(t, func() bool {
				intents, pulled := records.state()
				return intents == 0 && slices.Equal(pulled, []string{"private:1"})
			}, 10*time.Second, time.Millisecond, "the image the cancelled pull left is recorded as pulled, its intent released")
			assert.Equal(t, []*kubeletconfiginternal.ImagePullCredentials{nil}, records.credentials(), "recorded with unknown credentials, so that every pod verifies its own")
		})

		t.Run(policy+"/the pod leaves as PullImage returns", func(t *testing.T) {
			e, records := setup(t)
			ownerCtx, ownerGone := context.WithCancel(context.Background())
			// The pod leaves once PullImage returned, and the result reaches the
			// gate only after the pod's EnsureImageExists returned, so the gate
			// sees the pod gone first.
			ownerReturned := make(chan struct{})
			e.rt.sized = func() {
				ownerGone()
				select {
				case <-ownerReturned:
				case <-time.After(wait.ForeverTestTimeout):
				}
			}
			e.rt.finish("private:1")
			owner := outcomeOf(t, e.ensure(ownerCtx, gatePod{name: "owner", image: "private:1"}))
			close(ownerReturned)
			require.ErrorIs(t, owner.err, ErrPullAbandoned)
			recordedAsPulled(t, records)
		})

		// The pod's intent goes over to the pull, so nothing can fail between
		// the pod's leave and the pull's record.
		t.Run(policy+"/the pod leaves and no further intent can be recorded", func(t *testing.T) {
			e, records := setup(t)
			records.intentsBeforeFailing = 1
			e.rt.completesCancelled = true
			leaveWhilePulling(t, e)
			e.rt.finish("private:1")
			recordedAsPulled(t, records)
		})

		t.Run(policy+"/the pod leaves as the pull ends, both at once", func(t *testing.T) {
			for range 20 {
				e, records := setup(t)
				ownerCtx, ownerGone := context.WithCancel(context.Background())
				e.rt.sized = ownerGone
				e.rt.finish("private:1")
				owner := outcomeOf(t, e.ensure(ownerCtx, gatePod{name: "owner", image: "private:1"}))
				if owner.err != nil {
					require.ErrorIs(t, owner.err, ErrPullAbandoned)
				}
				recordedAsPulled(t, records)
			}
		})
	}
}

// A kubelet that turns the gate on by flag alone was defaulted with the gate
// off, so its abandonedImagePullPolicy is empty: it detaches, the documented
// default, rather than cancel.
func TestPullGateConfigFrom(t *testing.T) {
	for policy, detach := range map[kubeletconfiginternal.AbandonedImagePullPolicy]bool{
		"": true,
		kubeletconfiginternal.DetachAbandonedImagePulls: true,
		kubeletconfiginternal.CancelAbandonedImagePulls: false,
	} {
		got := PullGateConfigFrom(&kubeletconfiginternal.KubeletConfiguration{AbandonedImagePullPolicy: policy, ImagePullQueueTimeout: &metav1.Duration{Duration: time.Minute}})
		assert.Equal(t, PullGateConfig{QueueTimeout: time.Minute, DetachAbandonedPulls: detach}, got, "abandonedImagePullPolicy %q", policy)
	}
}
