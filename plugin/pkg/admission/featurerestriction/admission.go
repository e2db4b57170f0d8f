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

// Package featurerestriction holds the admission plugin that decides which
// identities write which parts of a Feature (KEP-3920).
package featurerestriction

import (
	"context"
	"fmt"
	"io"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

// PluginName is the name of the plugin.
const PluginName = "FeatureRestriction"

const (
	// ReportVerb is the verb a user needs on the synthetic resource
	// "components" of features.k8s.io, named by the component, to change that
	// component's entries in the uses of the Features of a namespace.
	ReportVerb = "report"
	// ComponentsResource is that synthetic resource.
	ComponentsResource = "components"
)

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(config io.Reader) (admission.Interface, error) {
		return NewPlugin(), nil
	})
}

// Plugin lets a user change the uses of a Feature only for the components the
// authorizer lets it report for, and the status of kube-system's Features
// only as kube-apiserver itself.
type Plugin struct {
	*admission.Handler
	authz authorizer.UnconditionalAuthorizer
}

var _ admission.ValidationInterface = &Plugin{}
var _ genericadmissioninit.WantsUnconditionalAuthorizer = &Plugin{}

// NewPlugin creates the plugin.
func NewPlugin() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Update)}
}

// SetUnconditionalAuthorizer sets the authorizer.
func (p *Plugin) SetUnconditionalAuthorizer(authz authorizer.UnconditionalAuthorizer) {
	p.authz = authz
}

// ValidateInitialization ensures an authorizer is set.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s requires an authorizer", PluginName)
	}
	return nil
}

var featureResource = featuresapi.Resource("features")

// Validate checks updates of the uses and status subresources of Features.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != featureResource {
		return nil
	}
	switch a.GetSubresource() {
	case "uses":
		return p.validateUses(ctx, a)
	case "status":
		return validateStatus(a)
	}
	return nil
}

// validateUses asks the authorizer about every component whose entries the
// update adds, changes or removes: kubelets (the node authorizer), the
// control plane's components (the bootstrap roles, or the roles of a control
// plane whose components run as other identities), and anyone a cluster
// administrator lets repair uses.
func (p *Plugin) validateUses(ctx context.Context, a admission.Attributes) error {
	obj, ok := a.GetObject().(*featuresapi.Feature)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a Feature, got %T", a.GetObject()))
	}
	old, ok := a.GetOldObject().(*featuresapi.Feature)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected a Feature, got %T", a.GetOldObject()))
	}
	for _, component := range changedComponents(obj.Status.Uses, old.Status.Uses) {
		decision, _, err := p.authz.Authorize(ctx, authorizer.AttributesRecord{
			User:            a.GetUserInfo(),
			Verb:            ReportVerb,
			Namespace:       a.GetNamespace(),
			APIGroup:        featuresapi.GroupName,
			APIVersion:      "*",
			Resource:        ComponentsResource,
			Name:            component,
			ResourceRequest: true,
		})
		if decision == authorizer.DecisionAllow {
			continue
		}
		reason := fmt.Errorf("user %q may not change the uses of component %q in namespace %q: it needs %q on %s %s/%s there",
			a.GetUserInfo().GetName(), component, a.GetNamespace(), ReportVerb, featuresapi.GroupName, ComponentsResource, component)
		if err != nil {
			reason = fmt.Errorf("%w (authorizer: %v)", reason, err)
		}
		return admission.NewForbidden(a, reason)
	}
	return nil
}

// validateStatus lets only kube-apiserver itself (its loopback identity)
// write the status of the Features in kube-system: their state and tasks are
// its server flow's, whatever RBAC grants, and components report through
// uses. Third parties drive the Features in their own namespaces, as RBAC
// allows.
func validateStatus(a admission.Attributes) error {
	if a.GetNamespace() != metav1.NamespaceSystem || a.GetUserInfo().GetName() == user.APIServerUser {
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("the status of the Features in %s is written by kube-apiserver's feature lifecycle controller only; components report through features/uses", metav1.NamespaceSystem))
}

// changedComponents returns the components whose entries differ between the
// two lists (added, removed or changed), in the order they are found.
func changedComponents(uses, old []featuresapi.FeatureUse) []string {
	var changed []string
	add := func(component string) {
		if !slices.Contains(changed, component) {
			changed = append(changed, component)
		}
	}
	find := func(list []featuresapi.FeatureUse, u featuresapi.FeatureUse) int {
		return slices.IndexFunc(list, func(l featuresapi.FeatureUse) bool { return featuresapi.SameUse(l, u) })
	}
	for _, u := range uses {
		if i := find(old, u); i < 0 || !apiequality.Semantic.DeepEqual(old[i], u) {
			add(u.Component)
		}
	}
	for _, o := range old {
		if find(uses, o) < 0 {
			add(o.Component)
		}
	}
	return changed
}
