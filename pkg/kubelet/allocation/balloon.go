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

package allocation

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// pendingResizeMessage says why a balloon's resize waits for capacity: a
// balloon grows only into free capacity and never preempts running pods. Only
// a resize that lacks capacity says so; preemption would not have admitted one
// that waits for anything else (usage, a node feature), and one that is
// Infeasible never applies.
func pendingResizeMessage(pod *v1.Pod, reason, message string) string {
	if !strings.HasPrefix(reason, lifecycle.InsufficientResourcePrefix) || !kubetypes.IsBalloonPod(pod) {
		return message
	}
	return fmt.Sprintf("%s; a balloon grows only into free capacity and never preempts running pods", message)
}

// compareBalloonsLast orders balloons after other pods.
func compareBalloonsLast(a, b *v1.Pod) int {
	switch aBalloon, bBalloon := kubetypes.IsBalloonPod(a), kubetypes.IsBalloonPod(b); {
	case aBalloon == bBalloon:
		return 0
	case aBalloon:
		return 1
	default:
		return -1
	}
}
