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
	"errors"

	"k8s.io/kubernetes/pkg/kubelet/images"
)

// pullAbandoned tells a container start, or a pod's image volumes, that failed
// because an image pull was abandoned (KubeletImagePullGate): the pod is terminating
// and no longer waits for the image. Nothing failed, so the sync leaves no failure
// behind: no event, no start error in the pod's status or metrics.
func pullAbandoned(err error) bool {
	return errors.Is(err, images.ErrPullAbandoned)
}
