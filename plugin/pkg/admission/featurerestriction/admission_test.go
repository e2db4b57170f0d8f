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

package featurerestriction

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

// reporters is an authorizer that lets each user report for the components
// listed for it, in the namespaces listed, and nothing else.
type reporters map[string][]string

func (r reporters) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetVerb() != ReportVerb || a.GetAPIGroup() != featuresapi.GroupName || a.GetResource() != ComponentsResource || !a.IsResourceRequest() {
		return authorizer.DecisionNoOpinion, "", nil
	}
	for _, allowed := range r[a.GetUser().GetName()] {
		if allowed == a.GetNamespace()+"/"+a.GetName() || allowed == "*" {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func TestEachIdentityChangesOnlyTheUsesItMayReport(t *testing.T) {
	stored := &featuresapi.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: metav1.NamespaceSystem},
		Status: featuresapi.FeatureStatus{Uses: []featuresapi.FeatureUse{
			{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-a"}, BinaryVersion: "1.37", EmulationVersion: "1.37"},
			{Component: "kube-scheduler", Value: true, Instances: []string{"scheduler-1"}, BinaryVersion: "1.37", EmulationVersion: "1.37"},
		}},
	}
	authz := reporters{
		user.KubeScheduler:         {"kube-system/kube-scheduler"},
		user.KubeControllerManager: {"kube-system/kube-controller-manager"},
		"system:node:node-1":       {"kube-system/kubelet"},
		// A control plane whose scheduler runs as another identity.
		"my-scheduler": {"kube-system/kube-scheduler"},
		// A cluster administrator, allowed everything.
		"admin":  {"*"},
		"widget": {"widgets/widget-controller"},
	}
	with := func(namespace string, change func(*featuresapi.Feature)) *featuresapi.Feature {
		f := stored.DeepCopy()
		f.Namespace = namespace
		change(f)
		return f
	}
	addScheduler := func(f *featuresapi.Feature) {
		f.Status.Uses[1].Instances = append(f.Status.Uses[1].Instances, "scheduler-2")
	}
	forgeAPIServer := func(f *featuresapi.Feature) { f.Status.Uses[0].Value = false }
	dropAPIServer := func(f *featuresapi.Feature) { f.Status.Uses = f.Status.Uses[1:] }
	addKubelet := func(f *featuresapi.Feature) {
		f.Status.Uses = append(f.Status.Uses, featuresapi.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.37", EmulationVersion: "1.37"})
	}
	addWidget := func(f *featuresapi.Feature) {
		f.Status.Uses = append(f.Status.Uses, featuresapi.FeatureUse{Component: "widget-controller", Value: true, Instances: []string{"w-1"}, BinaryVersion: "1.0", EmulationVersion: "1.0"})
	}
	unchanged := func(*featuresapi.Feature) {}
	for _, tc := range []struct {
		name, user string
		obj        *featuresapi.Feature
		forbidden  string
	}{
		{name: "scheduler reports its own", user: user.KubeScheduler, obj: with(metav1.NamespaceSystem, addScheduler)},
		{name: "scheduler of another identity reports the scheduler's", user: "my-scheduler", obj: with(metav1.NamespaceSystem, addScheduler)},
		{name: "node reports the kubelet's", user: "system:node:node-1", obj: with(metav1.NamespaceSystem, addKubelet)},
		{name: "nobody changed", user: "nobody", obj: with(metav1.NamespaceSystem, unchanged)},
		{name: "controller manager forges kube-apiserver's", user: user.KubeControllerManager, obj: with(metav1.NamespaceSystem, forgeAPIServer), forbidden: `user "system:kube-controller-manager" may not change the uses of component "kube-apiserver" in namespace "kube-system"`},
		{name: "scheduler removes kube-apiserver's", user: user.KubeScheduler, obj: with(metav1.NamespaceSystem, dropAPIServer), forbidden: `may not change the uses of component "kube-apiserver"`},
		{name: "node changes the scheduler's", user: "system:node:node-1", obj: with(metav1.NamespaceSystem, addScheduler), forbidden: `may not change the uses of component "kube-scheduler"`},
		{name: "unauthorized user changes the scheduler's", user: "someone", obj: with(metav1.NamespaceSystem, addScheduler), forbidden: `it needs "report" on features.k8s.io components/kube-scheduler there`},
		{name: "cluster administrator repairs uses", user: "admin", obj: with(metav1.NamespaceSystem, dropAPIServer)},
		{name: "third party reports its own in its namespace", user: "widget", obj: with("widgets", addWidget)},
		{name: "third party forges kube-apiserver's in its namespace", user: "widget", obj: with("widgets", forgeAPIServer), forbidden: `may not change the uses of component "kube-apiserver" in namespace "widgets"`},
		{name: "scheduler reports in another namespace", user: user.KubeScheduler, obj: with("widgets", addScheduler), forbidden: `in namespace "widgets"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := stored.DeepCopy()
			old.Namespace = tc.obj.Namespace
			err := validate(t, authz, tc.obj, old, "uses", tc.user)
			switch {
			case tc.forbidden == "" && err != nil:
				t.Errorf("want allowed, got %v", err)
			case tc.forbidden != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbidden)):
				t.Errorf("want Forbidden containing %q, got %v", tc.forbidden, err)
			}
		})
	}
}

func TestOnlyKubeAPIServerWritesTheStatusOfItsFeatures(t *testing.T) {
	for _, tc := range []struct {
		user, namespace string
		allowed         bool
	}{
		{user.APIServerUser, metav1.NamespaceSystem, true},
		{"admin", metav1.NamespaceSystem, false},
		{user.KubeControllerManager, metav1.NamespaceSystem, false},
		{"admin", "widgets", true},
	} {
		f := &featuresapi.Feature{ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: tc.namespace}}
		old := f.DeepCopy()
		f.Status.State = featuresapi.FeatureStateOn
		err := validate(t, reporters{"admin": {"*"}}, f, old, "status", tc.user)
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s in %s: want allowed, got %v", tc.user, tc.namespace, err)
		case !tc.allowed && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "feature lifecycle controller only")):
			t.Errorf("%s in %s: want Forbidden naming who writes the status, got %v", tc.user, tc.namespace, err)
		}
	}
}

func validate(t *testing.T, authz authorizer.UnconditionalAuthorizer, obj, old *featuresapi.Feature, subresource, userName string) error {
	t.Helper()
	p := NewPlugin()
	p.SetUnconditionalAuthorizer(authz)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	attrs := admission.NewAttributesRecord(obj, old, featuresapi.Kind("Feature").WithVersion("v1alpha1"), obj.Namespace, obj.Name,
		featuresapi.Resource("features").WithVersion("v1alpha1"), subresource, admission.Update, &metav1.UpdateOptions{}, false, &user.DefaultInfo{Name: userName})
	return p.Validate(context.Background(), attrs, nil)
}
