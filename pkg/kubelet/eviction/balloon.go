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

package eviction

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/features"
)

// observeSummary keeps the summary of this pass for ObservedSummary. The
// balloon usage check reads it rather than asking for stats itself: this one
// was read fresh (the root cgroup is updated for it), and the check runs under
// the allocation manager's lock, where a stats call would hold up every pod's
// admission.
func (m *managerImpl) observeSummary(summary *statsapi.Summary) {
	if utilfeature.DefaultFeatureGate.Enabled(features.BalloonPod) {
		m.observedSummary.Store(summary)
	}
}

// ObservedSummary returns the summary stats of the last pass.
func (m *managerImpl) ObservedSummary() *statsapi.Summary {
	return m.observedSummary.Load()
}
