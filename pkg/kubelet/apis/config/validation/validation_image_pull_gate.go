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

package validation

import (
	"fmt"

	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
)

// validateImagePullQueueTimeout checks imagePullQueueTimeout: never negative, and
// set only with the KubeletImagePullGate feature and a limit of parallel pulls to
// wait for.
func validateImagePullQueueTimeout(kc *kubeletconfig.KubeletConfiguration, featureGate featuregate.FeatureGate) []error {
	if kc.ImagePullQueueTimeout == nil {
		return nil
	}
	timeout := kc.ImagePullQueueTimeout.Duration
	switch {
	case timeout == 0:
		return nil
	case timeout < 0:
		return []error{fmt.Errorf("invalid configuration: imagePullQueueTimeout %v must not be negative", timeout)}
	case !featureGate.Enabled(features.KubeletImagePullGate):
		return []error{fmt.Errorf("invalid configuration: imagePullQueueTimeout %v requires the feature gate KubeletImagePullGate", timeout)}
	case !kc.SerializeImagePulls && kc.MaxParallelImagePulls == nil:
		return []error{fmt.Errorf("invalid configuration: imagePullQueueTimeout %v needs a limit to wait for: set maxParallelImagePulls or serializeImagePulls", timeout)}
	}
	return nil
}

// validateAbandonedImagePullPolicy checks abandonedImagePullPolicy: Cancel or
// Detach, and set only with the KubeletImagePullGate feature.
func validateAbandonedImagePullPolicy(kc *kubeletconfig.KubeletConfiguration, featureGate featuregate.FeatureGate) []error {
	policy := kc.AbandonedImagePullPolicy
	switch {
	case policy == "":
		return nil
	case !featureGate.Enabled(features.KubeletImagePullGate):
		return []error{fmt.Errorf("invalid configuration: abandonedImagePullPolicy %q requires the feature gate KubeletImagePullGate", policy)}
	case policy != kubeletconfig.CancelAbandonedImagePulls && policy != kubeletconfig.DetachAbandonedImagePulls:
		return []error{fmt.Errorf("invalid configuration: abandonedImagePullPolicy %q must be %q or %q", policy, kubeletconfig.CancelAbandonedImagePulls, kubeletconfig.DetachAbandonedImagePulls)}
	}
	return nil
}
