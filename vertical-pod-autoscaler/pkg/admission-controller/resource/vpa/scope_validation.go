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

package vpa

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
)

// allowNodeScope tells whether spec.scope and spec.nodeScope may be set: with
// the DaemonSetNodeScope gate on, or on an update of a VPA that has either
// already.
func allowNodeScope(oldObj *vpa_types.VerticalPodAutoscaler) bool {
	return features.Enabled(features.DaemonSetNodeScope) || (oldObj != nil && (oldObj.Spec.Scope != "" || oldObj.Spec.NodeScope != nil))
}

// validateVPASpecScope repeats the CRD's rules for spec.scope (for CRDs
// installed before the field existed) and forbids the field while the
// DaemonSetNodeScope gate is off.
func validateVPASpecScope(spec *vpa_types.VerticalPodAutoscalerSpec, fldPath *field.Path, opts VPAValidationOptions) field.ErrorList {
	if spec.Scope == "" {
		return nil
	}
	if !opts.AllowNodeScope {
		return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf("in order to use scope, you must enable feature gate %s in the admission-controller args", features.DaemonSetNodeScope))}
	}
	if spec.Scope != vpa_types.ScopeNode {
		return field.ErrorList{field.NotSupported(fldPath, spec.Scope, []vpa_types.VerticalPodAutoscalerScope{vpa_types.ScopeNode})}
	}
	if spec.TargetRef == nil || spec.TargetRef.Kind != "DaemonSet" || !strings.HasPrefix(spec.TargetRef.APIVersion, "apps/") {
		return field.ErrorList{field.Invalid(fldPath, spec.Scope, "scope Node is allowed only when targetRef is an apps DaemonSet")}
	}
	return nil
}

// validateVPASpecNodeScope repeats the CRD's rules for spec.nodeScope: allowed
// only with scope node, and groupLabel a valid label key.
func validateVPASpecNodeScope(spec *vpa_types.VerticalPodAutoscalerSpec, fldPath *field.Path, opts VPAValidationOptions) field.ErrorList {
	if spec.NodeScope == nil {
		return nil
	}
	if !opts.AllowNodeScope {
		return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf("in order to use nodeScope, you must enable feature gate %s in the admission-controller args", features.DaemonSetNodeScope))}
	}
	if spec.Scope != vpa_types.ScopeNode {
		return field.ErrorList{field.Forbidden(fldPath, "nodeScope is allowed only when scope is Node")}
	}
	var allErrs field.ErrorList
	if key := spec.NodeScope.GroupLabel; key != "" {
		for _, msg := range validation.IsQualifiedName(key) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("groupLabel"), key, msg))
		}
	}
	return allErrs
}
