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
	"reflect"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
)

func scopedVPA(kind string, scope vpa_types.VerticalPodAutoscalerScope) *vpa_types.VerticalPodAutoscaler {
	return &vpa_types.VerticalPodAutoscaler{Spec: vpa_types.VerticalPodAutoscalerSpec{
		TargetRef: &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: kind, Name: "agent"},
		Scope:     scope,
	}}
}

func TestValidateVPAScope(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gate    bool
		oldObj  *vpa_types.VerticalPodAutoscaler
		vpa     *vpa_types.VerticalPodAutoscaler
		wantErr string
	}{
		{name: "no scope, gate off", vpa: scopedVPA("Deployment", "")},
		{name: "no scope, gate on", gate: true, vpa: scopedVPA("Deployment", "")},
		{name: "node scope on a DaemonSet, gate on", gate: true, vpa: scopedVPA("DaemonSet", vpa_types.ScopeNode)},
		{name: "node scope, gate off", vpa: scopedVPA("DaemonSet", vpa_types.ScopeNode),
			wantErr: "spec.scope: Forbidden: in order to use scope, you must enable feature gate DaemonSetNodeScope in the admission-controller args"},
		{name: "node scope kept on update, gate off", oldObj: scopedVPA("DaemonSet", vpa_types.ScopeNode), vpa: scopedVPA("DaemonSet", vpa_types.ScopeNode)},
		{name: "node scope on a Deployment", gate: true, vpa: scopedVPA("Deployment", vpa_types.ScopeNode),
			wantErr: `spec.scope: Invalid value: "Node": scope Node is allowed only when targetRef is an apps DaemonSet`},
		{name: "node scope on a DaemonSet of another group", gate: true, vpa: func() *vpa_types.VerticalPodAutoscaler {
			v := scopedVPA("DaemonSet", vpa_types.ScopeNode)
			v.Spec.TargetRef.APIVersion = "example.com/v1"
			return v
		}(), wantErr: `spec.scope: Invalid value: "Node": scope Node is allowed only when targetRef is an apps DaemonSet`},
		{name: "lower case", gate: true, vpa: scopedVPA("DaemonSet", "node"),
			wantErr: `spec.scope: Unsupported value: "node": supported values: "Node"`},
		{name: "unknown scope", gate: true, vpa: scopedVPA("DaemonSet", "zone"),
			wantErr: `spec.scope: Unsupported value: "zone": supported values: "Node"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, tc.gate)
			_, errs := validateVPA(tc.vpa, getValidationOptionsForVPA(tc.oldObj))
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Fatalf("unexpected errors: %v", errs.ToAggregate())
			case tc.wantErr != "" && (len(errs) != 1 || errs[0].Error() != tc.wantErr):
				t.Fatalf("got errors %v, want %q", errs.ToAggregate(), tc.wantErr)
			}
		})
	}
}

func groupedVPA(scope vpa_types.VerticalPodAutoscalerScope, groupLabel string) *vpa_types.VerticalPodAutoscaler {
	vpa := scopedVPA("DaemonSet", scope)
	vpa.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: groupLabel}
	return vpa
}

func TestValidateVPANodeScope(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gate     bool
		oldObj   *vpa_types.VerticalPodAutoscaler
		vpa      *vpa_types.VerticalPodAutoscaler
		wantErrs []string
	}{
		{name: "instance type", gate: true, vpa: groupedVPA(vpa_types.ScopeNode, "node.kubernetes.io/instance-type")},
		{name: "label without prefix", gate: true, vpa: groupedVPA(vpa_types.ScopeNode, "pool")},
		{name: "empty options", gate: true, vpa: groupedVPA(vpa_types.ScopeNode, "")},
		{name: "gate off", vpa: groupedVPA(vpa_types.ScopeNode, "pool"), wantErrs: []string{
			"spec.scope: Forbidden: in order to use scope, you must enable feature gate DaemonSetNodeScope in the admission-controller args",
			"spec.nodeScope: Forbidden: in order to use nodeScope, you must enable feature gate DaemonSetNodeScope in the admission-controller args",
		}},
		{name: "gate off, without scope", vpa: groupedVPA("", "pool"),
			wantErrs: []string{"spec.nodeScope: Forbidden: in order to use nodeScope, you must enable feature gate DaemonSetNodeScope in the admission-controller args"}},
		{name: "kept on update, gate off", oldObj: groupedVPA(vpa_types.ScopeNode, "pool"), vpa: groupedVPA(vpa_types.ScopeNode, "pool")},
		{name: "without scope node", gate: true, vpa: groupedVPA("", "pool"),
			wantErrs: []string{"spec.nodeScope: Forbidden: nodeScope is allowed only when scope is Node"}},
		{name: "invalid key", gate: true, vpa: groupedVPA(vpa_types.ScopeNode, "pool name"),
			wantErrs: []string{`spec.nodeScope.groupLabel: Invalid value: "pool name": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`}},
		{name: "name part too long", gate: true, vpa: groupedVPA(vpa_types.ScopeNode, "example.com/"+strings.Repeat("a", 64)),
			wantErrs: []string{`spec.nodeScope.groupLabel: Invalid value: "example.com/` + strings.Repeat("a", 64) + `": name part must be no more than 63 bytes`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, tc.gate)
			_, errs := validateVPA(tc.vpa, getValidationOptionsForVPA(tc.oldObj))
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
			}
			if !reflect.DeepEqual(got, tc.wantErrs) {
				t.Fatalf("got errors %q, want %q", got, tc.wantErrs)
			}
		})
	}
}
