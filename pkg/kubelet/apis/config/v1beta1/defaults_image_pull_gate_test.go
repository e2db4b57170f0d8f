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

package v1beta1

import (
	"testing"

	"k8s.io/kubelet/config/v1beta1"
)

// abandonedImagePullPolicy defaults to Detach only with KubeletImagePullGate
// enabled; with it disabled the configuration stays upstream's.
func TestAbandonedImagePullPolicyDefault(t *testing.T) {
	for gate, want := range map[bool]v1beta1.AbandonedImagePullPolicy{
		true:  v1beta1.DetachAbandonedImagePulls,
		false: "",
	} {
		cfg := &v1beta1.KubeletConfiguration{FeatureGates: map[string]bool{"KubeletImagePullGate": gate}}
		SetDefaults_KubeletConfiguration(cfg)
		if cfg.AbandonedImagePullPolicy != want {
			t.Errorf("KubeletImagePullGate=%v: abandonedImagePullPolicy defaults to %q, want %q", gate, cfg.AbandonedImagePullPolicy, want)
		}
	}
	cfg := &v1beta1.KubeletConfiguration{
		FeatureGates:             map[string]bool{"KubeletImagePullGate": true},
		AbandonedImagePullPolicy: v1beta1.CancelAbandonedImagePulls,
	}
	SetDefaults_KubeletConfiguration(cfg)
	if cfg.AbandonedImagePullPolicy != v1beta1.CancelAbandonedImagePulls {
		t.Errorf("a policy that is set is kept: got %q", cfg.AbandonedImagePullPolicy)
	}
}
