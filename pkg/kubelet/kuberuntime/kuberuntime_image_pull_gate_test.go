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

package kuberuntime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// abandoningImageManager abandons every pull: its pod is terminating.
type abandoningImageManager struct{ images.ImageManager }

func (abandoningImageManager) EnsureImageExists(_ context.Context, _ *v1.ObjectReference, _ *v1.Pod, image string, _ []v1.Secret, _ *runtimeapi.PodSandboxConfig, _ string, _ v1.PullPolicy) (string, string, error) {
	err := fmt.Errorf("%w: %q: the pod is terminating: %w", images.ErrPullAbandoned, image, context.Canceled)
	return "", err.Error(), err
}

// TestAbandonedImagePullLeavesNoFailure: a container whose image pull, or the pull of
// one of its image volumes, was abandoned because its pod is terminating gets no
// Warning event and no failed sync, which would otherwise reach the pod's status
// through the reason cache.
func TestAbandonedImagePullLeavesNoFailure(t *testing.T) {
	for name, spec := range map[string]v1.PodSpec{
		"container image": {Containers: []v1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent}}},
		"image volume": {
			Containers: []v1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent, VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/v"}}}},
			Volumes:    []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "artifact", PullPolicy: v1.PullIfNotPresent}}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tCtx := ktesting.Init(t)
			fakeRuntime, _, m, err := createTestRuntimeManager(tCtx)
			require.NoError(t, err)
			recorder := record.NewFakeRecorder(10)
			m.recorder = recorder
			m.imagePuller = abandoningImageManager{}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "12345678", Name: "foo", Namespace: "new"}, Spec: spec}
			result := m.SyncPod(tCtx, pod, &kubecontainer.PodStatus{}, nil, flowcontrol.NewBackOff(time.Second, time.Minute), false)
			assert.NoError(t, result.Error(), "the pod's sync")
			assert.Empty(t, fakeRuntime.Containers, "no container without its image")
			close(recorder.Events)
			for event := range recorder.Events {
				assert.False(t, strings.HasPrefix(event, v1.EventTypeWarning), "event %q", event)
			}
		})
	}
}

// abandonCounter abandons every pull, as abandoningImageManager, and keeps the
// images asked for.
type abandonCounter struct {
	abandoningImageManager
	images []string
}

func (m *abandonCounter) EnsureImageExists(ctx context.Context, ref *v1.ObjectReference, pod *v1.Pod, image string, secrets []v1.Secret, sandbox *runtimeapi.PodSandboxConfig, handler string, policy v1.PullPolicy) (string, string, error) {
	m.images = append(m.images, image)
	return m.abandoningImageManager.EnsureImageExists(ctx, ref, pod, image, secrets, sandbox, handler, policy)
}

// TestAbandonedImagePullEndsThePodsSync: once a pull was abandoned because the
// pod is terminating, SyncPod pulls none of its other containers' images: each
// would be queued for a pod that left.
func TestAbandonedImagePullEndsThePodsSync(t *testing.T) {
	tCtx := ktesting.Init(t)
	fakeRuntime, _, m, err := createTestRuntimeManager(tCtx)
	require.NoError(t, err)
	puller := &abandonCounter{}
	m.imagePuller = puller
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "12345678", Name: "foo", Namespace: "new"}, Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Image: "a:1", ImagePullPolicy: v1.PullIfNotPresent},
		{Name: "b", Image: "b:1", ImagePullPolicy: v1.PullIfNotPresent},
		{Name: "c", Image: "c:1", ImagePullPolicy: v1.PullIfNotPresent},
	}}}
	result := m.SyncPod(tCtx, pod, &kubecontainer.PodStatus{}, nil, flowcontrol.NewBackOff(time.Second, time.Minute), false)
	assert.NoError(t, result.Error(), "the pod's sync")
	assert.Equal(t, []string{"a:1"}, puller.images, "the images pulled for the pod")
	assert.Empty(t, fakeRuntime.Containers, "no container without its image")
}
