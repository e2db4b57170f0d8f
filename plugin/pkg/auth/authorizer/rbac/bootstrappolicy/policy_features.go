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

// featureUsesReporter is the prefix of the roles, and their bindings, that let
// kube-controller-manager and kube-scheduler report the values they found for
// their feature gates (KEP-3920): read Features, update their uses, and report
// for their own component (the FeatureRestriction admission plugin asks for
// "report" on features.k8s.io components/NAME), in kube-system only, where
// Kubernetes' own Features are and where they report. Kubelets get the same
// from the node authorizer. A control plane whose components run as other
// identities binds these roles to them.
const featureUsesReporter = "system::feature-uses-reporter:"

// featureUsesReporters are the users of the control plane's components that
// report uses, by the component they report for.
var featureUsesReporters = map[string]string{
	"kube-controller-manager": user.KubeControllerManager,
	"kube-scheduler":          user.KubeScheduler,
}

// withFeatureUseRoles returns roles with the feature uses reporter roles in
// kube-system when the FeatureLifecycle gate is on. The gates are known only
// after the roles of init are registered, so they are added when they are read.
func withFeatureUseRoles(roles map[string][]rbacv1.Role) map[string][]rbacv1.Role {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) {
		return roles
	}
	withRoles := maps.Clone(roles)
	withRoles[metav1.NamespaceSystem] = slices.Clip(roles[metav1.NamespaceSystem])
	for _, component := range slices.Sorted(maps.Keys(featureUsesReporters)) {
		role := rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: featureUsesReporter + component, Namespace: metav1.NamespaceSystem},
			Rules: []rbacv1.PolicyRule{
				rbacv1helpers.NewRule(Read...).Groups(featuresGroup).Resources("features").RuleOrDie(),
				rbacv1helpers.NewRule("get", "update", "patch").Groups(featuresGroup).Resources("features/uses").RuleOrDie(),
				rbacv1helpers.NewRule("report").Groups(featuresGroup).Resources("components").Names(component).RuleOrDie(),
			},
		}
		addDefaultMetadata(&role)
		withRoles[metav1.NamespaceSystem] = append(withRoles[metav1.NamespaceSystem], role)
	}
	return withRoles
}

// withFeatureUseRoleBindings returns bindings with the bindings of the feature
// uses reporter roles to kube-controller-manager and kube-scheduler when the
// FeatureLifecycle gate is on.
func withFeatureUseRoleBindings(bindings map[string][]rbacv1.RoleBinding) map[string][]rbacv1.RoleBinding {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) {
		return bindings
	}
	withBindings := maps.Clone(bindings)
	withBindings[metav1.NamespaceSystem] = slices.Clip(bindings[metav1.NamespaceSystem])
	for _, component := range slices.Sorted(maps.Keys(featureUsesReporters)) {
		binding := rbacv1helpers.NewRoleBinding(featureUsesReporter+component, metav1.NamespaceSystem).Users(featureUsesReporters[component]).BindingOrDie()
		addDefaultMetadata(&binding)
		withBindings[metav1.NamespaceSystem] = append(withBindings[metav1.NamespaceSystem], binding)
	}
	return withBindings
}
