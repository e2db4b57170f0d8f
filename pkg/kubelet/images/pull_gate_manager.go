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
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
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

// podLeft reports whether the pull's pod no longer waits for it: ctx is done, or
// the pod context WithPullCancellation recorded is, which reaches ctx only
// asynchronously (pullContext).
func podLeft(ctx context.Context) bool {
	return leaveCause(ctx) != nil
}

// leaveCause is why the pull's pod no longer waits for it, nil while it does.
func leaveCause(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if podCtx, ok := ctx.Value(pullCancellationKey{}).(context.Context); ok && podCtx.Err() != nil {
		return fmt.Errorf("the pod is terminating: %w", context.Cause(podCtx))
	}
	return nil
}

// PullGateConfig configures the image pull gate (KubeletImagePullGate).
type PullGateConfig struct {
	// QueueTimeout is imagePullQueueTimeout: how long a pull may wait for a slot;
	// 0 waits as long as it takes.
	QueueTimeout time.Duration
	// DetachAbandonedPulls is abandonedImagePullPolicy Detach: a running pull no
	// pod waits for any more finishes, holding its slot, instead of being
	// cancelled.
	DetachAbandonedPulls bool
}

// PullGateConfigFrom returns the pull gate's part of the kubelet's
// configuration. An empty abandonedImagePullPolicy detaches, the default: a
// kubelet that turns the gate on by flag alone was defaulted before the flag
// was read, with the gate off.
func PullGateConfigFrom(kubeCfg *kubeletconfiginternal.KubeletConfiguration) PullGateConfig {
	config := PullGateConfig{DetachAbandonedPulls: kubeCfg.AbandonedImagePullPolicy != kubeletconfiginternal.CancelAbandonedImagePulls}
	if kubeCfg.ImagePullQueueTimeout != nil {
		config.QueueTimeout = kubeCfg.ImagePullQueueTimeout.Duration
	}
	return config
}

// newImagePuller returns the pull gate when the KubeletImagePullGate feature is
// enabled (one slot with serialized pulls), upstream's serial or parallel puller
// otherwise.
func newImagePuller(imageService kubecontainer.ImageService, serialized bool, maxParallelImagePulls *int32, config PullGateConfig) imagePuller {
	if utilfeature.DefaultFeatureGate.Enabled(features.KubeletImagePullGate) {
		limit := int32(0)
		switch {
		case serialized:
			limit = 1
		case maxParallelImagePulls != nil:
			limit = *maxParallelImagePulls
		}
		return newPullGate(imageService, limit, config)
	}
	if serialized {
		return newSerialImagePuller(imageService)
	}
	return newParallelImagePuller(imageService, maxParallelImagePulls)
}

// startPull pulls the image. Through the pull gate the pod sees its place in the
// queue (event PullQueued, rate-limited) and the Pulling event when its pull
// reaches the runtime, saying how long it waited for a slot.
func (m *imageManager) startPull(ctx context.Context, objRef *v1.ObjectReference, logPrefix string, podUID types.UID, image string, spec kubecontainer.ImageSpec, credentials []credentialprovider.TrackedAuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) gateResult {
	gate, ok := m.puller.(*pullGate)
	if !ok {
		m.logIt(klog.FromContext(ctx), objRef, v1.EventTypeNormal, events.PullingImage, logPrefix, fmt.Sprintf("Pulling image %q", image))
		pullChan := make(chan pullResult)
		go m.puller.pullImage(ctx, spec, credentials, pullChan, podSandboxConfig)
		return gateResult{pullResult: <-pullChan}
	}
	return gate.pull(ctx, pullRequest{
		spec:             spec,
		credentials:      credentials,
		podSandboxConfig: podSandboxConfig,
		pod:              podUID,
		adopt:            m.adoptPull(ctx, image, spec),
		events: pullEvents{
			queued: func(ahead int) {
				m.logIt(klog.FromContext(ctx), objRef, v1.EventTypeNormal, events.QueuedImagePull, logPrefix, queuedMessage(image, ahead, gate.limit))
			},
			started: func(waited time.Duration) {
				m.logIt(klog.FromContext(ctx), objRef, v1.EventTypeNormal, events.PullingImage, logPrefix, pullingMessage(image, waited, gate.limit))
			},
		},
	})
}

// adoptPull records a pull that goes on after its pod left, as pullImage would
// have: the pod hands its pull intent over to the pull (gateResult.adopted), which
// records the pull as pulled or failed when it ends. Without it, an image pulled
// with the pod's credentials after the pod left would look preloaded to
// KEP-2535's check and be usable by pods without them. A pull that failed (it
// was cancelled) but left the image in the runtime is recorded as pulled with
// unknown credentials, which makes every pod's use of the image verify its own.
func (m *imageManager) adoptPull(ctx context.Context, image string, spec kubecontainer.ImageSpec) func() func(pullResult) {
	return func() func(pullResult) {
		if !utilfeature.DefaultFeatureGate.Enabled(features.KubeletEnsureSecretPulledImages) {
			return nil
		}
		ctx := context.WithoutCancel(ctx)
		return func(res pullResult) {
			if res.err != nil {
				if ref, err := m.imageService.GetImageRef(ctx, spec); err == nil && ref != "" {
					m.imagePullManager.RecordImagePulled(ctx, image, ref, nil)
					return
				}
				m.imagePullManager.RecordImagePullFailed(ctx, image)
				return
			}
			m.imagePullManager.RecordImagePulled(ctx, image, res.imageRef, trackedToImagePullCreds(res.credentialsUsed))
		}
	}
}

// endWithoutPull ends a pull through the gate whose pod no longer waits
// (ErrPullAbandoned), which leaves no failure behind: no Warning event, no
// back-off, no error message kept for the pod.
func (m *imageManager) endWithoutPull(ctx context.Context, logPrefix string, res gateResult) (imageRef, message string, err error) {
	klog.FromContext(ctx).V(2).Info("Image pull abandoned", "pod", logPrefix, "err", res.err)
	return "", res.err.Error(), res.err
}

func queuedMessage(image string, ahead int, slots int64) string {
	return fmt.Sprintf("Waiting for one of %d image pull slots to pull image %q: %d %s ahead in the queue", slots, image, ahead, plural(ahead, "pull", "pulls"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func pullingMessage(image string, waited time.Duration, slots int64) string {
	if waited >= time.Millisecond {
		return fmt.Sprintf("Pulling image %q (waited %v for one of %d image pull slots)", image, waited.Truncate(time.Millisecond), slots)
	}
	return fmt.Sprintf("Pulling image %q", image)
}
