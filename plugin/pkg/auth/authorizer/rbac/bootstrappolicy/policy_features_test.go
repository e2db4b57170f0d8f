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

package bootstrappolicy_test

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	rbacregistryvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// kube-controller-manager and kube-scheduler report their feature uses in
// kube-system, where Kubernetes' own Features are, and nowhere else; with the
// gate off the bootstrap policy gives them no access to features.k8s.io.
func TestFeatureUsesReporterRoles(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.FeatureLifecycle, enabled)
		authz := bootstrapAuthorizer()
		for _, component := range []string{user.KubeControllerManager, user.KubeScheduler} {
			for _, tc := range []struct {
				verb, subresource, namespace string
				allowed                      bool
			}{
				// (kube-controller-manager lists and watches every resource.)
				{"get", "", "kube-system", enabled},
				{"get", "", "example", false},
				{"update", "uses", "kube-system", enabled},
				{"patch", "uses", "kube-system", enabled},
				{"update", "uses", "example", false},
				{"patch", "uses", "example", false},
				{"update", "status", "kube-system", false},
				{"update", "", "kube-system", false},
				{"delete", "", "kube-system", false},
			} {
				attrs := authorizer.AttributesRecord{
					User: &user.DefaultInfo{Name: component}, ResourceRequest: true, Verb: tc.verb,
					APIGroup: "features.k8s.io", Resource: "features", Subresource: tc.subresource, Namespace: tc.namespace, Name: "featurelifecycle",
				}
				decision, reason, err := authz.Authorize(context.Background(), attrs)
				if err != nil || (decision == authorizer.DecisionAllow) != tc.allowed {
					t.Errorf("FeatureLifecycle=%t %s: %s features/%s in %q: got %v (%q, %v), want allowed %t", enabled, component, tc.verb, tc.subresource, tc.namespace, decision, reason, err, tc.allowed)
				}
			}
			// Each reports for its own component only (the FeatureRestriction
			// admission plugin's check), and only in kube-system.
			own := strings.TrimPrefix(component, "system:")
			for _, tc := range []struct {
				reportFor, namespace string
				allowed              bool
			}{
				{own, "kube-system", enabled},
				{own, "example", false},
				{"kube-apiserver", "kube-system", false},
				{"kubelet", "kube-system", false},
			} {
				attrs := authorizer.AttributesRecord{
					User: &user.DefaultInfo{Name: component}, ResourceRequest: true, Verb: "report",
					APIGroup: "features.k8s.io", Resource: "components", Namespace: tc.namespace, Name: tc.reportFor,
				}
				decision, reason, err := authz.Authorize(context.Background(), attrs)
				if err != nil || (decision == authorizer.DecisionAllow) != tc.allowed {
					t.Errorf("FeatureLifecycle=%t %s: report for %s in %q: got %v (%q, %v), want allowed %t", enabled, component, tc.reportFor, tc.namespace, decision, reason, err, tc.allowed)
				}
			}
		}
	}
}

// bootstrapAuthorizer is an RBAC authorizer of the bootstrap policy alone.
func bootstrapAuthorizer() *rbac.RBACAuthorizer {
	var roles []*rbacv1.Role
	for _, namespaced := range bootstrappolicy.NamespaceRoles() {
		for i := range namespaced {
			roles = append(roles, &namespaced[i])
		}
	}
	var bindings []*rbacv1.RoleBinding
	for _, namespaced := range bootstrappolicy.NamespaceRoleBindings() {
		for i := range namespaced {
			bindings = append(bindings, &namespaced[i])
		}
	}
	var clusterRoles []*rbacv1.ClusterRole
	for _, r := range bootstrappolicy.ClusterRoles() {
		clusterRoles = append(clusterRoles, &r)
	}
	var clusterRoleBindings []*rbacv1.ClusterRoleBinding
	for _, b := range bootstrappolicy.ClusterRoleBindings() {
		clusterRoleBindings = append(clusterRoleBindings, &b)
	}
	_, static := rbacregistryvalidation.NewTestRuleResolver(roles, bindings, clusterRoles, clusterRoleBindings)
	return rbac.New(static, static, static, static)
}
