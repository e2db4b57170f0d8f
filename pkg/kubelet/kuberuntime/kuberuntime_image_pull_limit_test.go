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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images"
	imagepullmanager "k8s.io/kubernetes/pkg/kubelet/images/pullmanager"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/utils/ptr"
)

// TestImagePullLimitHandOffThroughTheCRI drives the hand-off over gRPC with the fake
// remote runtime, polled as the kubelet polls it (Status, then SyncImagePullLimit):
// a runtime that advertises image_pull_concurrency receives the kubelet's limit, and
// the kubelet stops limiting pulls only once the runtime reports that limit back; a
// runtime restarted (it reports no limit) receives it again; one that does not
// advertise the feature never receives it.
func TestImagePullLimitHandOffThroughTheCRI(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gate     bool
		enforces bool
		wantSent bool
	}{
		{name: "runtime enforces the limit", gate: true, enforces: true, wantSent: true},
		{name: "runtime does not", gate: true, enforces: false},
		{name: "feature gate off", gate: false, enforces: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletImagePullGate, tc.gate)
			tCtx := ktesting.Init(t)
			endpoint, err := fakeremote.GenerateEndpoint()
			require.NoError(t, err)
			fake := fakeremote.NewFakeRemoteRuntime()
			require.NoError(t, fake.Start(endpoint))
			t.Cleanup(fake.Stop)
			fake.RuntimeService.FakeFeatures = &runtimeapi.RuntimeFeatures{ImagePullConcurrency: tc.enforces}

			runtimeService, err := remote.NewRemoteRuntimeService(tCtx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
			require.NoError(t, err)
			m := &kubeGenericRuntimeManager{runtimeService: runtimeService}
			m.imagePuller = images.NewImageManager(&record.FakeRecorder{}, &credentialprovider.BasicDockerKeyring{}, m,
				&imagepullmanager.NoopImagePullManager{}, flowcontrol.NewBackOff(time.Second, time.Minute),
				false, ptr.To[int32](4), images.PullGateConfig{}, 0, 0, &fakePodPullingTimeRecorder{})
			poll := func() *kubecontainer.RuntimeStatus {
				status, err := m.Status(tCtx)
				require.NoError(t, err)
				SyncImagePullLimit(tCtx, m, status)
				return status
			}
			updates := func() int {
				n := 0
				for _, c := range fake.RuntimeService.Called {
					if c == "UpdateRuntimeConfig" {
						n++
					}
				}
				return n
			}

			for range 3 {
				poll()
			}
			if !tc.wantSent {
				assert.Zero(t, updates(), "UpdateRuntimeConfig calls")
				return
			}
			assert.Equal(t, 1, updates(), "the limit is sent until the runtime reports it")
			assert.Equal(t, ptr.To[int32](4), poll().ImagePullLimit, "the runtime reports the limit it received")

			// The kubelet's other runtime config updates (the pod CIDR) carry no
			// image pull config, which leaves the runtime's limit as it was.
			require.NoError(t, runtimeService.UpdateRuntimeConfig(tCtx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.0.0.0/24"}}))
			assert.Equal(t, ptr.To[int32](4), poll().ImagePullLimit, "the limit after a pod CIDR update")
			assert.Equal(t, 2, updates(), "no limit sent again after a pod CIDR update")

			// A restarted runtime reports no limit: the kubelet sends it again.
			fake.RuntimeService.ImagePullConfig = nil
			assert.Nil(t, poll().ImagePullLimit)
			assert.Equal(t, 3, updates(), "the limit is sent again after a restart")
			poll()
			assert.Equal(t, 3, updates())

			// A runtime without the feature gets the kubelet's own limit back; when it
			// advertises the feature again, the limit it reports is taken as it is.
			fake.RuntimeService.FakeFeatures = nil
			poll()
			fake.RuntimeService.FakeFeatures = &runtimeapi.RuntimeFeatures{ImagePullConcurrency: true}
			poll()
			assert.Equal(t, 3, updates())
		})
	}
}
