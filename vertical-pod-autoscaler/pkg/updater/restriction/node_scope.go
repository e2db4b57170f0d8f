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

package restriction

import (
	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/utils"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/nodescope"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// NodeScoped returns r deciding on the VPA as each pod sees it through the
// recommendation processor (nodescope.ForPod): for a VPA with scope node, the
// recommendation of the pod's node is the one that must exist and the one
// compared with the pod's last infeasible attempt. Without the node scope
// processor (the DaemonSetNodeScope gate off) it returns r itself.
func NodeScoped(r PodsInPlaceRestriction, processor vpa_api_util.RecommendationProcessor) PodsInPlaceRestriction {
	if _, scoped := processor.(*nodescope.RecommendationProcessor); !scoped {
		return r
	}
	return &nodeScopedInPlaceRestriction{PodsInPlaceRestriction: r, processor: processor}
}

type nodeScopedInPlaceRestriction struct {
	PodsInPlaceRestriction
	processor vpa_api_util.RecommendationProcessor
}

func (r *nodeScopedInPlaceRestriction) CanInPlaceUpdate(pod *corev1.Pod, vpa *vpa_types.VerticalPodAutoscaler, infeasibleAttempts map[k8stypes.UID]*vpa_types.RecommendedPodResources) utils.InPlaceDecision {
	return r.PodsInPlaceRestriction.CanInPlaceUpdate(pod, nodescope.ForPod(r.processor, vpa, pod), infeasibleAttempts)
}
