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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images/pullmanager"
	"k8s.io/utils/ptr"
)

// mustAttempt is an image pull manager whose KEP-2535 check answers with must.
type mustAttempt struct {
	pullmanager.NoopImagePullManager
	must bool
}

func (m *mustAttempt) MustAttemptImagePull(context.Context, string, string, pullmanager.GetPodCredentials) (bool, error) {
	return m.must, nil
}

// A pod that arrives while a pull of its image runs waits for it and checks the
// image again with its own inputs: every pull the runtime sees is the pod's own
// (namespace, annotations, sandbox), and KEP-2535's check decides, per pod,
// whether the image present may be used or the pod pulls it itself.
func TestPullGateWaitersCheckTheImageAgainWithTheirOwnInputs(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletEnsureSecretPulledImages, true)
	for _, tc := range []struct {
		name string
		must bool
		want []runtimePull
	}{{
		name: "the waiter's own check requires a pull: it pulls with its own namespace and annotations",
		must: true,
		want: []runtimePull{
			{image: "img:1", namespace: "lax", annotations: []kubecontainer.Annotation{{Name: "a", Value: "1"}}},
			{image: "img:1", namespace: "strict", annotations: []kubecontainer.Annotation{{Name: "b", Value: "2"}}},
		},
	}, {
		name: "the waiter may use the image present: no pull of its own",
		must: false,
		want: []runtimePull{{image: "img:1", namespace: "lax", annotations: []kubecontainer.Annotation{{Name: "a", Value: "1"}}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newGateEnv(t, 2, 0, &mustAttempt{must: tc.must})
			first := e.ensure(context.Background(), gatePod{name: "first", namespace: "lax", image: "img:1", annotations: map[string]string{"a": "1"}})
			e.rt.waitEntered(t, "img:1")
			second := e.ensure(context.Background(), gatePod{name: "second", namespace: "strict", image: "img:1", annotations: map[string]string{"b": "2"}})
			e.waitEvent(t, `Waiting for a pull of image "img:1" started for another pod`)
			e.rt.finish("img:1")
			require.NoError(t, outcomeOf(t, first).err)
			got := outcomeOf(t, second)
			require.NoError(t, got.err)
			assert.Equal(t, "sha256:img:1", got.ref)
			assert.Equal(t, tc.want, e.rt.pullsOf("img:1"))
			if !tc.must {
				assert.Contains(t, got.msg, "already present on machine, pulled for another pod while this one waited")
			}
			for _, uid := range []ktypes.UID{"uid-first", "uid-second"} {
				assert.True(t, e.times.finishedPullingRecorded[uid], "the pull time of %s is recorded", uid)
			}
		})
	}
}

func TestPullGateNeverWaitsAcrossRuntimeHandlersOrForAlwaysPulls(t *testing.T) {
	e := newGateEnv(t, 3, 0, nil)
	a := e.ensure(context.Background(), gatePod{name: "a", image: "img:1", handler: "runc"})
	e.rt.waitEntered(t, "img:1")
	b := e.ensure(context.Background(), gatePod{name: "b", image: "img:1", handler: "kata"})
	e.rt.waitEntered(t, "img:1")
	c := e.ensure(context.Background(), gatePod{name: "c", image: "img:1", handler: "runc", policy: v1.PullAlways})
	e.rt.waitEntered(t, "img:1")
	e.rt.finish("img:1")
	for _, ch := range []<-chan outcome{a, b, c} {
		require.NoError(t, outcomeOf(t, ch).err)
	}
	var handlers []string
	for _, p := range e.rt.pullsOf("img:1") {
		handlers = append(handlers, p.handler)
	}
	assert.ElementsMatch(t, []string{"runc", "kata", "runc"}, handlers)
}

// When the pod that started a pull leaves, the pull goes on for the pods that wait
// for it; when they have all left too, it is cancelled (abandonedImagePullPolicy
// Cancel).
func TestPullGateCancelsARunningPullOnlyWhenNobodyWaits(t *testing.T) {
	e := newGateEnv(t, 2, 0, nil)
	ownerCtx, ownerGone := context.WithCancel(context.Background())
	owner := e.ensure(ownerCtx, gatePod{name: "owner", image: "img:1"})
	e.rt.waitEntered(t, "img:1")
	waiterCtx, waiterGone := context.WithCancel(context.Background())
	waiter := e.ensure(waiterCtx, gatePod{name: "waiter", image: "img:1"})
	e.waitEvent(t, `Waiting for a pull of image "img:1"`)
	ownerGone()
	require.ErrorIs(t, outcomeOf(t, owner).err, ErrPullAbandoned)
	// The gate cancels a pull under its lock before the pod that left gets its
	// outcome, so the pull's context says at once whether it was cancelled.
	assert.NoError(t, e.rt.pullContext("img:1").Err(), "the pull goes on for the pod that waits for it")
	waiterGone()
	require.ErrorIs(t, outcomeOf(t, waiter).err, ErrPullAbandoned)
	require.Eventually(t, func() bool {
		e.rt.mu.Lock()
		defer e.rt.mu.Unlock()
		return len(e.rt.cancelled) == 1
	}, 10*time.Second, time.Millisecond, "the pull is cancelled once nobody waits for it")
}

// A waiter whose pull failed for the other pod pulls the image itself, at its place.
func TestPullGateWaiterPullsItselfWhenTheOtherPullFailed(t *testing.T) {
	e := newGateEnv(t, 2, 0, nil)
	e.rt.err["img:1"] = errors.New("manifest unknown")
	first := e.ensure(context.Background(), gatePod{name: "first", image: "img:1"})
	e.rt.waitEntered(t, "img:1")
	second := e.ensure(context.Background(), gatePod{name: "second", image: "img:1"})
	e.waitEvent(t, `Waiting for a pull of image "img:1"`)
	e.rt.finish("img:1")
	require.ErrorIs(t, outcomeOf(t, first).err, ErrImagePull)
	require.ErrorIs(t, outcomeOf(t, second).err, ErrImagePull)
	assert.Len(t, e.rt.pullsOf("img:1"), 2, "the waiter tried the image itself")
}

// A pull of its image started for another pod that runs longer than
// otherPullWaitLimit no longer holds a pod: it stops waiting, says so, and
// takes its place for a pull of its own. With a free slot it pulls at once;
// without one, the pull it stopped waiting for may end first, and it then
// checks the image again instead of pulling. Meanwhile it keeps its interest
// in that pull, so that a pull whose own pod left is not cancelled on its
// account (abandonedImagePullPolicy Cancel).
func TestPullGateBoundsTheWaitForAnotherPodsPull(t *testing.T) {
	for _, limit := range []int32{2, 1} {
		t.Run(fmt.Sprintf("%d slots", limit), func(t *testing.T) {
			e := newGateEnv(t, limit, 0, nil)
			ownerCtx, ownerGone := context.WithCancel(context.Background())
			defer ownerGone()
			owner := e.ensure(ownerCtx, gatePod{name: "owner", image: "img:1"})
			e.rt.waitEntered(t, "img:1")
			waiter := e.ensure(context.Background(), gatePod{name: "waiter", image: "img:1"})
			e.waitEvent(t, `Waiting for a pull of image "img:1"`)
			e.waitTimers(t, 1)
			e.clock.Step(otherPullWaitLimit)
			e.waitEvent(t, `Stopped waiting for a pull of image "img:1" started for another pod, still running after 5m0s; pulling it for this pod`)
			if limit == 2 {
				e.rt.waitEntered(t, "img:1")
				e.rt.finish("img:1")
				require.NoError(t, outcomeOf(t, owner).err)
				require.NoError(t, outcomeOf(t, waiter).err)
				assert.Len(t, e.rt.pullsOf("img:1"), 2, "with a free slot, the waiter pulled the image itself")
				return
			}
			ownerGone()
			require.ErrorIs(t, outcomeOf(t, owner).err, ErrPullAbandoned)
			assert.NoError(t, e.rt.pullContext("img:1").Err(), "the pull goes on for the pod that stopped waiting for it")
			e.rt.finish("img:1")
			require.NoError(t, outcomeOf(t, waiter).err)
			assert.Len(t, e.rt.pullsOf("img:1"), 1, "the pull ended before the waiter had a slot: it found the image")
			e.waitEvent(t, "pulled for another pod while this one waited")
		})
	}
}

// TestPullGatePodPullingTimeRecorder is TestParallelPodPullingTimeRecorderWithErr with
// the gate: two pods pull one image at once, the first pull fails, and the second
// pod, which waited for it, pulls the image itself; both recordings start, and
// finish once each pod has its image.
func TestPullGatePodPullingTimeRecorder(t *testing.T) {
	e := newGateEnv(t, 2, 0, nil)
	e.rt.err["img:1"] = errors.New("pull image error")
	first := e.ensure(context.Background(), gatePod{name: "first", image: "img:1"})
	e.rt.waitEntered(t, "img:1")
	second := e.ensure(context.Background(), gatePod{name: "second", image: "img:1"})
	e.waitEvent(t, `Waiting for a pull of image "img:1"`)
	e.times.Lock()
	assert.True(t, e.times.startedPullingRecorded["uid-first"])
	assert.True(t, e.times.startedPullingRecorded["uid-second"])
	e.times.Unlock()
	e.rt.finish("img:1")
	require.ErrorIs(t, outcomeOf(t, first).err, ErrImagePull)
	require.ErrorIs(t, outcomeOf(t, second).err, ErrImagePull)
	assert.False(t, e.times.finishedPullingRecorded["uid-first"])
	assert.False(t, e.times.finishedPullingRecorded["uid-second"])

	e.rt.mu.Lock()
	delete(e.rt.err, "img:1")
	e.rt.mu.Unlock()
	e.backOff.Reset("uid-first_img:1")
	e.backOff.Reset("uid-second_img:1")
	require.NoError(t, outcomeOf(t, e.ensure(context.Background(), gatePod{name: "first", image: "img:1"})).err)
	require.NoError(t, outcomeOf(t, e.ensure(context.Background(), gatePod{name: "second", image: "img:1"})).err)
	assert.Len(t, e.rt.pullsOf("img:1"), 3, "two failed pulls, one that succeeded; the second pod found the image present")
	assert.True(t, e.times.finishedPullingRecorded["uid-first"])
	assert.True(t, e.times.finishedPullingRecorded["uid-second"])
}

// ensureAll has one pod per image ask for it through the image manager, all at
// once, and returns when every pod has its image.
func ensureAll(b *testing.B, m ImageManager, images []string) {
	errs := make(chan error, len(images))
	for i, image := range images {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i), Namespace: "ns", UID: ktypes.UID(fmt.Sprint(i))}}
		sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)}}
		go func() {
			_, _, err := m.EnsureImageExists(context.Background(), nil, pod, image, nil, sandbox, "", v1.PullIfNotPresent)
			errs <- err
		}()
	}
	for range images {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPullGateBurst: 50 pods over 5 distinct images with maxParallelImagePulls
// 3, through the image manager with the gate off (upstream's parallelImagePuller)
// and on - runtime pulls and makespan.
func BenchmarkPullGateBurst(b *testing.B) {
	var images []string
	for i := range 50 {
		images = append(images, fmt.Sprintf("image-%d:1", i%5))
	}
	const mib = 1 << 20
	burst := func(gate bool) (pulls int64, makespan time.Duration) {
		featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, gate)
		svc := &simImageService{link: newLink(200 * mib), latency: 5 * time.Millisecond, size: 4 * mib}
		m := NewImageManager(&record.FakeRecorder{}, &credentialprovider.BasicDockerKeyring{}, svc, &pullmanager.NoopImagePullManager{},
			flowcontrol.NewBackOff(time.Second, time.Minute), false, ptr.To[int32](3), PullGateConfig{}, 0, 0, &mockPodPullingTimeRecorder{startedPullingRecorded: map[ktypes.UID]bool{}, finishedPullingRecorded: map[ktypes.UID]bool{}})
		start := time.Now()
		ensureAll(b, m, images)
		return svc.pulls.Load(), time.Since(start)
	}
	var upstreamPulls, gatePulls int64
	var upstreamTime, gateTime time.Duration
	for range b.N {
		pulls, makespan := burst(false)
		upstreamPulls, upstreamTime = upstreamPulls+pulls, upstreamTime+makespan
		pulls, makespan = burst(true)
		gatePulls, gateTime = gatePulls+pulls, gateTime+makespan
	}
	n := float64(b.N)
	b.ReportMetric(float64(upstreamPulls)/n, "upstream-runtime-pulls")
	b.ReportMetric(float64(gatePulls)/n, "gate-runtime-pulls")
	b.ReportMetric(upstreamTime.Seconds()*1000/n, "upstream-makespan-ms")
	b.ReportMetric(gateTime.Seconds()*1000/n, "gate-makespan-ms")
	b.ReportMetric(upstreamTime.Seconds()/gateTime.Seconds(), "makespan-speedup")
}
