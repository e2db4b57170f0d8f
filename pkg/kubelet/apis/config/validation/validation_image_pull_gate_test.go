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

package validation_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/utils/ptr"
)

func TestValidateImagePullQueueTimeout(t *testing.T) {
	featureGate := utilfeature.DefaultFeatureGate.DeepCopy()
	logsapi.AddFeatureGates(featureGate)
	cases := []struct {
		name        string
		timeout     time.Duration
		gate        bool
		serialize   bool
		maxParallel *int32
		errMsg      string
	}{
		{name: "zero waits as upstream", timeout: 0},
		{name: "with the gate and a limit", timeout: time.Minute, gate: true, maxParallel: ptr.To[int32](3)},
		{name: "with the gate and serialized pulls", timeout: time.Minute, gate: true, serialize: true},
		{name: "negative", timeout: -time.Second, gate: true, maxParallel: ptr.To[int32](3),
			errMsg: "invalid configuration: imagePullQueueTimeout -1s must not be negative"},
		{name: "without the gate", timeout: time.Minute, maxParallel: ptr.To[int32](3),
			errMsg: "invalid configuration: imagePullQueueTimeout 1m0s requires the feature gate KubeletImagePullGate"},
		{name: "without a limit to wait for", timeout: time.Minute, gate: true,
			errMsg: "invalid configuration: imagePullQueueTimeout 1m0s needs a limit to wait for: set maxParallelImagePulls or serializeImagePulls"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := successConfig.DeepCopy()
			conf.FeatureGates = map[string]bool{"KubeletImagePullGate": tc.gate}
			conf.ImagePullQueueTimeout = &metav1.Duration{Duration: tc.timeout}
			conf.SerializeImagePulls = tc.serialize
			conf.MaxParallelImagePulls = tc.maxParallel
			err := validation.ValidateKubeletConfiguration(conf, featureGate)
			switch {
			case tc.errMsg == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.errMsg != "" && (err == nil || err.Error() != tc.errMsg):
				t.Errorf("got %v, want %q", err, tc.errMsg)
			}
		})
	}
}

func TestValidateAbandonedImagePullPolicy(t *testing.T) {
	featureGate := utilfeature.DefaultFeatureGate.DeepCopy()
	logsapi.AddFeatureGates(featureGate)
	for _, tc := range []struct {
		name   string
		policy kubeletconfig.AbandonedImagePullPolicy
		gate   bool
		errMsg string
	}{
		{name: "unset without the gate, as upstream"},
		{name: "Detach", policy: kubeletconfig.DetachAbandonedImagePulls, gate: true},
		{name: "Cancel", policy: kubeletconfig.CancelAbandonedImagePulls, gate: true},
		{name: "unknown", policy: "Keep", gate: true,
			errMsg: `invalid configuration: abandonedImagePullPolicy "Keep" must be "Cancel" or "Detach"`},
		{name: "without the gate", policy: kubeletconfig.CancelAbandonedImagePulls,
			errMsg: `invalid configuration: abandonedImagePullPolicy "Cancel" requires the feature gate KubeletImagePullGate`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := successConfig.DeepCopy()
			conf.FeatureGates = map[string]bool{"KubeletImagePullGate": tc.gate}
			conf.AbandonedImagePullPolicy = tc.policy
			err := validation.ValidateKubeletConfiguration(conf, featureGate)
			switch {
			case tc.errMsg == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.errMsg != "" && (err == nil || err.Error() != tc.errMsg):
				t.Errorf("got %v, want %q", err, tc.errMsg)
			}
		})
	}
}
