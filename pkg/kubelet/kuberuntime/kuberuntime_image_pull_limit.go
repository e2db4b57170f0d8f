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

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubernetes/pkg/features"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images"
)

// SyncImagePullLimit hands the kubelet's limit of parallel image pulls to a runtime
// that advertises it enforces one (KubeletImagePullGate), following the runtime's
// status on each of the kubelet's polls of it (updateRuntimeUp): the kubelet stops
// limiting pulls itself only while the runtime reports the kubelet's limit back, and
// sends the limit again whenever the runtime reports another or none, as after a
// restart. A runtime that stops advertising the feature gets the kubelet's own
// limit back. Before a pull goes beyond the limit, the kubelet asks the runtime's
// status again, so that a runtime restarted since the poll gets no more pulls
// than the limit.
func SyncImagePullLimit(ctx context.Context, runtime kubecontainer.Runtime, status *kubecontainer.RuntimeStatus) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.KubeletImagePullGate) {
		return
	}
	m, ok := runtime.(*kubeGenericRuntimeManager)
	if !ok {
		return
	}
	handOff, ok := m.imagePuller.(images.PullLimitHandOff)
	if !ok {
		return
	}
	handOff.HandOffPullLimit(ctx, enforcesPullLimit(status), status.ImagePullLimit, func(limit int32) error {
		return m.runtimeService.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{
			ImagePullConfig: &runtimeapi.ImagePullConfig{MaxParallelImagePulls: limit},
		})
	}, func() (bool, *int32, error) {
		status, err := m.Status(ctx)
		if err != nil {
			return false, nil, err
		}
		return enforcesPullLimit(status), status.ImagePullLimit, nil
	})
}

func enforcesPullLimit(status *kubecontainer.RuntimeStatus) bool {
	return status.Features != nil && status.Features.ImagePullConcurrency
}

// reportedImagePullLimit is the limit of parallel image pulls the runtime reports
// it enforces, nil when it reports none.
func reportedImagePullLimit(resp *runtimeapi.StatusResponse) *int32 {
	if c := resp.GetImagePullConfig(); c != nil {
		return &c.MaxParallelImagePulls
	}
	return nil
}
