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
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/scheduling"
)

// validateSystemNodeBalloon requires the balloon priority class never to
// preempt: a balloon that grows must fail rather than displace a running pod.
func validateSystemNodeBalloon(pc *scheduling.PriorityClass) field.ErrorList {
	if pc.Name != scheduling.SystemNodeBalloon {
		return nil
	}
	if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != core.PreemptNever {
		return field.ErrorList{field.Forbidden(field.NewPath("preemptionPolicy"), "the "+scheduling.SystemNodeBalloon+" PriorityClass must have preemptionPolicy "+string(core.PreemptNever))}
	}
	return nil
}
