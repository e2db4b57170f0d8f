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

package bootstrappolicy

import (
	"maps"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	rbacv1helpers "k8s.io/kubernetes/pkg/apis/rbac/v1"
	"k8s.io/kubernetes/pkg/features"
)

const featuresGroup = "features.k8s.io"

// featureUsesReporter is the role, and its binding, that lets
// kube-controller-manager and kube-scheduler report the values they found for
// their feature gates (KEP-3920): read Features and update their uses, in
// kube-system only, where Kubernetes' own Features are and where they report.
// Kubelets get the same from the node authorizer.
const featureUsesReporter = "system::feature-uses-reporter"

// withFeatureUseRoles returns roles with the feature uses reporter role in
// kube-system when the FeatureLifecycle gate is on. The gates are known only
// after the roles of init are registered, so it is added when they are read.
func withFeatureUseRoles(roles map[string][]rbacv1.Role) map[string][]rbacv1.Role {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) {
		return roles
	}
	role := rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: featureUsesReporter, Namespace: metav1.NamespaceSystem},
		Rules: []rbacv1.PolicyRule{
			rbacv1helpers.NewRule(Read...).Groups(featuresGroup).Resources("features").RuleOrDie(),
			rbacv1helpers.NewRule("get", "update", "patch").Groups(featuresGroup).Resources("features/uses").RuleOrDie(),
		},
	}
	addDefaultMetadata(&role)
	withRole := maps.Clone(roles)
	withRole[metav1.NamespaceSystem] = append(slices.Clip(roles[metav1.NamespaceSystem]), role)
	return withRole
}

// withFeatureUseRoleBindings returns bindings with the binding of the feature
// uses reporter role to kube-controller-manager and kube-scheduler when the
// FeatureLifecycle gate is on.
func withFeatureUseRoleBindings(bindings map[string][]rbacv1.RoleBinding) map[string][]rbacv1.RoleBinding {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) {
		return bindings
	}
	binding := rbacv1helpers.NewRoleBinding(featureUsesReporter, metav1.NamespaceSystem).Users(user.KubeControllerManager, user.KubeScheduler).BindingOrDie()
	addDefaultMetadata(&binding)
	withBinding := maps.Clone(bindings)
	withBinding[metav1.NamespaceSystem] = append(slices.Clip(bindings[metav1.NamespaceSystem]), binding)
	return withBinding
}
