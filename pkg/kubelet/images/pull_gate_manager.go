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
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/events"
)

type pullCancellationKey struct{}

// WithPullCancellation returns detached carrying the cancellation of podCtx for the
// image pull path only. The kubelet runs SyncPod detached from the pod worker's
// context (see kubelet.SyncPod), so that a terminating pod does not interrupt
// runtime cleanup; its image pulls, though, should stop waiting when the pod goes.
// Without the KubeletImagePullGate feature it returns detached as it is.
func WithPullCancellation(detached, podCtx context.Context) context.Context {
	if !utilfeature.DefaultFeatureGate.Enabled(features.KubeletImagePullGate) {
		return detached
	}
	return context.WithValue(detached, pullCancellationKey{}, podCtx)
}

// pullContext is ctx, cancelled also when the pod context recorded by
// WithPullCancellation is.
func pullContext(ctx context.Context) (context.Context, context.CancelFunc) {
	podCtx, ok := ctx.Value(pullCancellationKey{}).(context.Context)
	if !ok {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(podCtx, func() { cancel(fmt.Errorf("the pod is terminating: %w", context.Cause(podCtx))) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// newImagePuller returns the pull gate when the KubeletImagePullGate feature is
// enabled (one slot with serialized pulls), upstream's serial or parallel puller
// otherwise.
func newImagePuller(imageService kubecontainer.ImageService, serialized bool, maxParallelImagePulls *int32, queueTimeout time.Duration) imagePuller {
	if utilfeature.DefaultFeatureGate.Enabled(features.KubeletImagePullGate) {
		limit := int32(0)
		switch {
		case serialized:
			limit = 1
		case maxParallelImagePulls != nil:
			limit = *maxParallelImagePulls
		}
		return newPullGate(imageService, limit, queueTimeout)
	}
	if serialized {
		return newSerialImagePuller(imageService)
	}
	return newParallelImagePuller(imageService, maxParallelImagePulls)
}

// startPull emits the Pulling event and pulls the image. Through the pull gate the
// event comes when the pull reaches the runtime, and says how long it waited for a
// slot or that it joined another pod's pull.
func (m *imageManager) startPull(ctx context.Context, objRef *v1.ObjectReference, logPrefix, image string, spec kubecontainer.ImageSpec, credentials []credentialprovider.TrackedAuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig, pullPolicy v1.PullPolicy) pullResult {
	gate, ok := m.puller.(*pullGate)
	if !ok {
		m.logIt(objRef, v1.EventTypeNormal, events.PullingImage, logPrefix, fmt.Sprintf("Pulling image %q", image), klog.Info)
		pullChan := make(chan pullResult)
		m.puller.pullImage(ctx, spec, credentials, pullChan, podSandboxConfig)
		return <-pullChan
	}
	return gate.pull(ctx, spec, credentials, podSandboxConfig, pullPolicy == v1.PullAlways, func(s pullStart) {
		m.logIt(objRef, v1.EventTypeNormal, events.PullingImage, logPrefix, pullingMessage(image, s, gate.limit), klog.Info)
	})
}

func pullingMessage(image string, s pullStart, slots int64) string {
	switch {
	case s.joined:
		return fmt.Sprintf("Pulling image %q (joined a pull of the same image started for another pod)", image)
	case s.waited >= time.Millisecond:
		return fmt.Sprintf("Pulling image %q (waited %v for one of %d image pull slots)", image, s.waited.Truncate(time.Millisecond), slots)
	default:
		return fmt.Sprintf("Pulling image %q", image)
	}
}

// PullLimitHandOff is implemented by an image manager whose limit of parallel pulls
// a container runtime can take over (KubeletImagePullGate).
type PullLimitHandOff interface {
	// HandOffPullLimit follows what the runtime advertises: when it enforces pull
	// concurrency, send gives it the kubelet's limit and the kubelet stops limiting
	// pulls itself; when it no longer does, the kubelet limits them again.
	HandOffPullLimit(ctx context.Context, runtimeEnforces bool, send func(maxParallelImagePulls int32) error)
}

var _ PullLimitHandOff = &imageManager{}

// HandOffPullLimit implements PullLimitHandOff.
func (m *imageManager) HandOffPullLimit(ctx context.Context, runtimeEnforces bool, send func(int32) error) {
	gate, ok := m.puller.(*pullGate)
	if !ok || gate.delegated.Load() == runtimeEnforces {
		return
	}
	logger := klog.FromContext(ctx)
	if !runtimeEnforces {
		gate.delegated.Store(false)
		logger.Info("The container runtime no longer enforces the limit of parallel image pulls; the kubelet limits them again", "maxParallelImagePulls", gate.limit)
		return
	}
	if err := send(int32(gate.limit)); err != nil {
		logger.Error(err, "Failed to hand the limit of parallel image pulls to the container runtime; the kubelet keeps limiting them", "maxParallelImagePulls", gate.limit)
		return
	}
	gate.delegated.Store(true)
	logger.Info("The container runtime enforces the limit of parallel image pulls from now on", "maxParallelImagePulls", gate.limit)
}
