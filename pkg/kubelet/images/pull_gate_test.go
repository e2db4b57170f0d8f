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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images/pullmanager"
	"k8s.io/utils/ptr"
)

// gatedImageService is an image service whose pulls block until released, recording
// the order and the concurrency of the pulls that reach it.
type gatedImageService struct {
	kubecontainer.ImageService // not called

	mu        sync.Mutex
	started   []string // images, in the order their pulls reached the runtime
	cancelled []string // images whose pull context was cancelled while running
	running   int      // pulls in the runtime now
	peak      int      // most pulls in the runtime at once
	release   map[string]chan struct{}
	entered   chan string      // receives an image when its pull reaches the runtime
	err       map[string]error // pull errors by image
}

func newGatedImageService() *gatedImageService {
	return &gatedImageService{release: map[string]chan struct{}{}, entered: make(chan string, 100), err: map[string]error{}}
}

// gate returns the channel that lets the pulls of image finish.
func (s *gatedImageService) gate(image string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release[image] == nil {
		s.release[image] = make(chan struct{})
	}
	return s.release[image]
}

func (s *gatedImageService) finish(image string) { close(s.gate(image)) }

func (s *gatedImageService) PullImage(ctx context.Context, spec kubecontainer.ImageSpec, creds []credentialprovider.TrackedAuthConfig, _ *runtimeapi.PodSandboxConfig) (string, *credentialprovider.TrackedAuthConfig, error) {
	s.mu.Lock()
	s.started = append(s.started, spec.Image)
	s.running++
	s.peak = max(s.peak, s.running)
	s.mu.Unlock()
	s.entered <- spec.Image
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	select {
	case <-s.gate(spec.Image):
	case <-ctx.Done():
		s.mu.Lock()
		s.cancelled = append(s.cancelled, spec.Image)
		s.mu.Unlock()
		return "", nil, ctx.Err()
	}
	var used *credentialprovider.TrackedAuthConfig
	if len(creds) > 0 {
		used = &creds[0]
	}
	return "sha256:" + spec.Image, used, s.err[spec.Image]
}

func (s *gatedImageService) GetImageSize(context.Context, kubecontainer.ImageSpec) (uint64, error) {
	return 1, nil
}

func (s *gatedImageService) startedPulls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.started...)
}

// waitEntered waits until the pull of image reaches the runtime.
func (s *gatedImageService) waitEntered(t *testing.T, image string) {
	t.Helper()
	select {
	case got := <-s.entered:
		require.Equal(t, image, got, "the pull that reached the runtime")
	case <-time.After(10 * time.Second):
		t.Fatalf("the pull of %s never reached the runtime", image)
	}
}

func (s *gatedImageService) assertNothingEntered(t *testing.T) {
	t.Helper()
	select {
	case got := <-s.entered:
		t.Fatalf("the pull of %s reached the runtime, want it held back", got)
	case <-time.After(50 * time.Millisecond):
	}
}

// pullAsync starts a pull through the gate and returns its result channel.
func pullAsync(ctx context.Context, g *pullGate, image string, creds []credentialprovider.TrackedAuthConfig, always bool) <-chan pullResult {
	ch := make(chan pullResult, 1)
	go func() { ch <- g.pull(ctx, kubecontainer.ImageSpec{Image: image}, creds, nil, always, nil) }()
	return ch
}

func result(t *testing.T, ch <-chan pullResult) pullResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the pull did not return")
		return pullResult{}
	}
}

// waitQueued waits until n pulls wait for a slot (the gate's gauge).
func waitQueued(t *testing.T, n float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := testutil.GetGaugeMetricValue(pullGateQueued)
		return err == nil && v == n
	}, 10*time.Second, time.Millisecond, "waiting for %v queued pulls", n)
}

func TestPullGateLimitsAndKeepsFIFOOrder(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 2, 0)
	ctx := context.Background()
	var results []<-chan pullResult
	for i := range 6 {
		results = append(results, pullAsync(ctx, g, fmt.Sprintf("image-%d", i), nil, false))
		if i < 2 {
			svc.waitEntered(t, fmt.Sprintf("image-%d", i))
		} else {
			waitQueued(t, float64(i-1))
		}
	}
	svc.assertNothingEntered(t)
	for i := range 6 {
		svc.finish(fmt.Sprintf("image-%d", i))
		r := result(t, results[i])
		require.NoError(t, r.err)
		assert.Equal(t, fmt.Sprintf("sha256:image-%d", i), r.imageRef)
		if i+2 < 6 {
			svc.waitEntered(t, fmt.Sprintf("image-%d", i+2))
		}
	}
	assert.Equal(t, []string{"image-0", "image-1", "image-2", "image-3", "image-4", "image-5"}, svc.startedPulls(), "FIFO order")
	assert.Equal(t, 2, svc.peak, "never more pulls in the runtime than the limit")
}

func TestPullGateAbandonsAQueuedPullAndHandsItsSlotOn(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 1, 0)
	before, _ := testutil.GetCounterMetricValue(pullGateCancelledWaits)

	first := pullAsync(context.Background(), g, "running", nil, false)
	svc.waitEntered(t, "running")
	podCtx, deletePod := context.WithCancel(context.Background())
	queued := pullAsync(podCtx, g, "deleted-pod", nil, false)
	waitQueued(t, 1)
	next := pullAsync(context.Background(), g, "next", nil, false)
	waitQueued(t, 2)

	deletePod()
	r := result(t, queued)
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Contains(t, r.err.Error(), "abandoned")
	waitQueued(t, 1)

	svc.finish("running")
	require.NoError(t, result(t, first).err)
	svc.waitEntered(t, "next")
	svc.finish("next")
	require.NoError(t, result(t, next).err)
	assert.Equal(t, []string{"running", "next"}, svc.startedPulls(), "the deleted pod's pull never reaches the runtime")
	after, _ := testutil.GetCounterMetricValue(pullGateCancelledWaits)
	assert.Equal(t, before+1, after)
}

func TestPullGateCancelsARunningPullWhenEveryWaiterIsGone(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 1, 0)
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	a := pullAsync(ctx1, g, "shared", nil, false)
	svc.waitEntered(t, "shared")
	joinedBefore, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
	b := pullAsync(ctx2, g, "shared", nil, false)
	require.Eventually(t, func() bool {
		v, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
		return v == joinedBefore+1
	}, 10*time.Second, time.Millisecond, "the second pod joins the running pull")

	cancel1()
	require.ErrorIs(t, result(t, a).err, context.Canceled)
	svc.assertNothingEntered(t)
	svc.mu.Lock()
	assert.Empty(t, svc.cancelled, "the pull goes on while a pod still waits for it")
	svc.mu.Unlock()

	cancel2()
	require.ErrorIs(t, result(t, b).err, context.Canceled)
	require.Eventually(t, func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.cancelled) == 1
	}, 10*time.Second, time.Millisecond, "the runtime pull is cancelled when its last waiter leaves")

	// The slot is free again, and a new request starts a new pull.
	c := pullAsync(context.Background(), g, "shared", nil, false)
	svc.waitEntered(t, "shared")
	svc.finish("shared")
	require.NoError(t, result(t, c).err)
}

func TestPullGateDeduplicatesByImageHandlerAndCredentials(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 0, 0)
	before, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
	secretA := []credentialprovider.TrackedAuthConfig{{AuthConfig: credentialprovider.AuthConfig{Username: "a", Password: "1"}}}
	secretB := []credentialprovider.TrackedAuthConfig{{AuthConfig: credentialprovider.AuthConfig{Username: "b", Password: "2"}}}

	var same []<-chan pullResult
	for range 5 {
		same = append(same, pullAsync(context.Background(), g, "busybox", secretA, false))
	}
	svc.waitEntered(t, "busybox")
	require.Eventually(t, func() bool {
		v, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
		return v == before+4
	}, 10*time.Second, time.Millisecond, "the other four pods join the running pull")
	other := pullAsync(context.Background(), g, "busybox", secretB, false)
	svc.waitEntered(t, "busybox")
	handler := make(chan pullResult, 1)
	go func() {
		handler <- g.pull(context.Background(), kubecontainer.ImageSpec{Image: "busybox", RuntimeHandler: "kata"}, secretA, nil, false, nil)
	}()
	svc.waitEntered(t, "busybox")
	svc.finish("busybox")
	for _, ch := range same {
		r := result(t, ch)
		require.NoError(t, r.err)
		assert.Equal(t, "sha256:busybox", r.imageRef)
	}
	require.NoError(t, result(t, other).err)
	require.NoError(t, result(t, handler).err)
	assert.Len(t, svc.startedPulls(), 3, "one pull per image, handler and credentials")
	after, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
	assert.Equal(t, before+4, after)
}

func TestPullGateGivesEveryPodItsOwnCredentialSource(t *testing.T) {
	auth := credentialprovider.AuthConfig{Username: "u", Password: "p"}
	mine := []credentialprovider.TrackedAuthConfig{{AuthConfig: auth, Source: &credentialprovider.CredentialSource{Secret: &credentialprovider.SecretCoordinates{Name: "mine"}}}}
	theirs := credentialprovider.TrackedAuthConfig{AuthConfig: auth, Source: &credentialprovider.CredentialSource{Secret: &credentialprovider.SecretCoordinates{Name: "theirs"}}}
	got := sameCredential(&theirs, mine)
	require.NotNil(t, got)
	assert.Equal(t, "mine", got.Source.Secret.Name)
	assert.Nil(t, sameCredential(nil, mine), "an anonymous pull stays anonymous")
}

func TestPullGateAlwaysPullJoinsOnlyQueuedPulls(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 1, 0)
	blocker := pullAsync(context.Background(), g, "blocker", nil, false)
	svc.waitEntered(t, "blocker")

	queuedA := pullAsync(context.Background(), g, "app", nil, false)
	waitQueued(t, 1)
	joined, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
	queuedB := pullAsync(context.Background(), g, "app", nil, true)
	require.Eventually(t, func() bool {
		v, _ := testutil.GetCounterMetricValue(pullGateDeduplicated)
		return v == joined+1
	}, 10*time.Second, time.Millisecond, "an Always pod joins a pull that still waits for its slot")
	svc.finish("blocker")
	require.NoError(t, result(t, blocker).err)
	svc.waitEntered(t, "app")
	// The pull of "app" runs now: an Always pod asks for a fresh resolution.
	late := pullAsync(context.Background(), g, "app", nil, true)
	waitQueued(t, 1)
	svc.finish("app")
	require.NoError(t, result(t, queuedA).err)
	require.NoError(t, result(t, queuedB).err)
	svc.waitEntered(t, "app")
	require.NoError(t, result(t, late).err)
	assert.Equal(t, []string{"blocker", "app", "app"}, svc.startedPulls())
}

func TestPullGateQueueTimeout(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 1, 30*time.Millisecond)
	before, _ := testutil.GetCounterMetricValue(pullGateQueueTimeouts)
	running := pullAsync(context.Background(), g, "slow", nil, false)
	svc.waitEntered(t, "slow")
	r := result(t, pullAsync(context.Background(), g, "waiting", nil, false))
	require.ErrorIs(t, r.err, ErrTooManyParallelPulls)
	assert.Contains(t, r.err.Error(), "waited 30ms for one of 1 image pull slots")
	after, _ := testutil.GetCounterMetricValue(pullGateQueueTimeouts)
	assert.Equal(t, before+1, after)
	svc.finish("slow")
	require.NoError(t, result(t, running).err)
	assert.Equal(t, []string{"slow"}, svc.startedPulls())
}

func TestPullGateDelegatedToTheRuntimeHoldsNothingBack(t *testing.T) {
	svc := newGatedImageService()
	g := newPullGate(svc, 1, time.Millisecond)
	g.delegated.Store(true)
	a := pullAsync(context.Background(), g, "a", nil, false)
	b := pullAsync(context.Background(), g, "b", nil, false)
	for range 2 {
		select {
		case <-svc.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("with the runtime enforcing the limit, both pulls reach it at once")
		}
	}
	svc.finish("a")
	svc.finish("b")
	require.NoError(t, result(t, a).err)
	require.NoError(t, result(t, b).err)
	assert.Equal(t, 2, svc.peak)
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

func TestPullingMessage(t *testing.T) {
	assert.Equal(t, `Pulling image "busybox"`, pullingMessage("busybox", pullStart{}, 3))
	assert.Equal(t, `Pulling image "busybox" (waited 1.5s for one of 3 image pull slots)`, pullingMessage("busybox", pullStart{waited: 1500 * time.Millisecond}, 3))
	assert.Equal(t, `Pulling image "busybox" (joined a pull of the same image started for another pod)`, pullingMessage("busybox", pullStart{waited: time.Second, joined: true}, 3))
}

// TestImageManagerThroughThePullGate drives EnsureImageExists with the gate on: the
// Pulling event says how long a pull waited, and a queue timeout fails with its own
// reason and enters the back-off.
func TestImageManagerThroughThePullGate(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, true)
	svc := newGatedImageService()
	svc.ImageService = imageRefLookup{}
	recorder := record.NewFakeRecorder(100)
	backOff := flowcontrol.NewBackOff(time.Second, time.Minute)
	timeRecorder := &mockPodPullingTimeRecorder{startedPullingRecorded: map[ktypes.UID]bool{}, finishedPullingRecorded: map[ktypes.UID]bool{}}
	m := NewImageManager(recorder, &credentialprovider.BasicDockerKeyring{}, svc, &pullmanager.NoopImagePullManager{}, backOff,
		false, ptr.To[int32](1), 100*time.Millisecond, 0, 0, timeRecorder)
	pod := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: ktypes.UID("uid-" + name)}}
	}
	ensure := func(p *v1.Pod, image string) (string, string, error) {
		ref := &v1.ObjectReference{Kind: "Pod", Name: p.Name, Namespace: p.Namespace, UID: p.UID}
		sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: string(p.UID)}}
		return m.EnsureImageExists(context.Background(), ref, p, image, nil, sandbox, "", v1.PullIfNotPresent)
	}

	type outcome struct {
		ref, msg string
		err      error
	}
	first := make(chan outcome, 1)
	go func() { r, msg, err := ensure(pod("first"), "slow:1"); first <- outcome{r, msg, err} }()
	svc.waitEntered(t, "slow:1")

	_, msg, err := ensure(pod("second"), "other:1")
	require.ErrorIs(t, err, ErrTooManyParallelPulls)
	assert.Contains(t, msg, "TooManyParallelImagePulls")
	_, msg, err = ensure(pod("second"), "other:1")
	require.ErrorIs(t, err, ErrImagePullBackOff, "a timed-out pull backs off")
	assert.Contains(t, msg, "TooManyParallelImagePulls")

	waiting := make(chan outcome, 1)
	go func() { r, msg, err := ensure(pod("third"), "third:1"); waiting <- outcome{r, msg, err} }()
	waitQueued(t, 1)
	time.Sleep(5 * time.Millisecond) // so that the Pulling event has a wait to report
	svc.finish("slow:1")
	require.NoError(t, (<-first).err)
	svc.waitEntered(t, "third:1")
	svc.finish("third:1")
	require.NoError(t, (<-waiting).err)

	var events []string
	for len(recorder.Events) > 0 {
		events = append(events, <-recorder.Events)
	}
	all := strings.Join(events, "\n")
	assert.Contains(t, all, "Warning TooManyParallelImagePulls Failed to pull image \"other:1\"")
	assert.Regexp(t, `Normal Pulling Pulling image "third:1" \(waited [0-9.]+m?s for one of 1 image pull slots\)`, all)
	assert.Contains(t, all, `Normal Pulling Pulling image "slow:1"`)
}

// imageRefLookup answers GetImageRef: no image is present yet.
type imageRefLookup struct{ kubecontainer.ImageService }

func (imageRefLookup) GetImageRef(context.Context, kubecontainer.ImageSpec) (string, error) {
	return "", nil
}

// TestUpstreamImageManagerTestsThroughThePullGate runs the image manager's own tests
// with KubeletImagePullGate enabled: the gate keeps their behaviour. One is left
// out: TestParallelPodPullingTimeRecorderWithErr counts two runtime pulls for two
// pods that pull one image at once, which the gate deduplicates by design;
// TestPullGateSharedPullErrorReachesEveryPod covers that case with the gate.
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
	} {
		t.Run(name, test)
	}
}

// TestPullGateSharedPullErrorReachesEveryPod: pods that share a pull share its
// error, each with its own pull-time recording and back-off.
func TestPullGateSharedPullErrorReachesEveryPod(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, true)
	svc := newGatedImageService()
	svc.ImageService = imageRefLookup{}
	svc.err["broken:1"] = errors.New("manifest unknown")
	timeRecorder := &mockPodPullingTimeRecorder{startedPullingRecorded: map[ktypes.UID]bool{}, finishedPullingRecorded: map[ktypes.UID]bool{}}
	m := NewImageManager(record.NewFakeRecorder(100), &credentialprovider.BasicDockerKeyring{}, svc, &pullmanager.NoopImagePullManager{},
		flowcontrol.NewBackOff(time.Second, time.Minute), false, ptr.To[int32](2), 0, 0, 0, timeRecorder)
	errs := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: ktypes.UID(name)}}
		sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: name}}
		go func() {
			_, _, err := m.EnsureImageExists(context.Background(), nil, p, "broken:1", nil, sandbox, "", v1.PullIfNotPresent)
			errs <- err
		}()
	}
	svc.waitEntered(t, "broken:1")
	require.Eventually(t, func() bool {
		timeRecorder.Lock()
		defer timeRecorder.Unlock()
		return timeRecorder.startedPullingRecorded["a"] && timeRecorder.startedPullingRecorded["b"]
	}, 10*time.Second, time.Millisecond)
	svc.finish("broken:1")
	for range 2 {
		require.ErrorIs(t, <-errs, ErrImagePull)
	}
	assert.Equal(t, []string{"broken:1"}, svc.startedPulls(), "one runtime pull for both pods")
	assert.False(t, timeRecorder.finishedPullingRecorded["a"])
	assert.False(t, timeRecorder.finishedPullingRecorded["b"])
}

func TestHandOffPullLimit(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, true)
	m := NewImageManager(record.NewFakeRecorder(10), &credentialprovider.BasicDockerKeyring{}, newGatedImageService(), &pullmanager.NoopImagePullManager{},
		flowcontrol.NewBackOff(time.Second, time.Minute), false, ptr.To[int32](3), 0, 0, 0, nil).(*imageManager)
	gate := m.puller.(*pullGate)
	var sent []int32
	send := func(limit int32) error { sent = append(sent, limit); return nil }

	m.HandOffPullLimit(context.Background(), false, send)
	assert.Empty(t, sent, "nothing to hand to a runtime that does not enforce the limit")
	m.HandOffPullLimit(context.Background(), true, func(int32) error { return errors.New("unimplemented") })
	assert.False(t, gate.delegated.Load(), "the kubelet keeps limiting when the runtime refuses the limit")
	m.HandOffPullLimit(context.Background(), true, send)
	m.HandOffPullLimit(context.Background(), true, send)
	assert.Equal(t, []int32{3}, sent, "the limit is sent once")
	assert.True(t, gate.delegated.Load())
	m.HandOffPullLimit(context.Background(), false, send)
	assert.False(t, gate.delegated.Load(), "a runtime that stops enforcing gives the limit back")
}
