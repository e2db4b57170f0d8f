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

package node

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/auth/nodeidentifier"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

func TestNodeAuthorizerFeatures(t *testing.T) {
	node := &user.DefaultInfo{Name: "system:node:node0", Groups: []string{"system:nodes"}}
	tests := []struct {
		verb, subresource, namespace string
		want                         authorizer.Decision
	}{
		{"get", "", "kube-system", authorizer.DecisionAllow},
		{"list", "", "kube-system", authorizer.DecisionAllow},
		{"watch", "", "kube-system", authorizer.DecisionAllow},
		{"update", "uses", "kube-system", authorizer.DecisionAllow},
		{"patch", "uses", "kube-system", authorizer.DecisionAllow},
		{"create", "", "kube-system", authorizer.DecisionNoOpinion},
		{"update", "", "kube-system", authorizer.DecisionNoOpinion},
		{"delete", "", "kube-system", authorizer.DecisionNoOpinion},
		{"update", "status", "kube-system", authorizer.DecisionNoOpinion},
		{"patch", "status", "kube-system", authorizer.DecisionNoOpinion},
		// Kubelets report only Kubernetes' own features, in kube-system.
		{"get", "", "example", authorizer.DecisionNoOpinion},
		{"update", "uses", "example", authorizer.DecisionNoOpinion},
		{"patch", "uses", "example", authorizer.DecisionNoOpinion},
		{"list", "", "", authorizer.DecisionNoOpinion},
		{"watch", "", "", authorizer.DecisionNoOpinion},
	}
	for _, enabled := range []bool{true, false} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.FeatureLifecycle, enabled)
		authz := NewAuthorizer(NewGraph(), nodeidentifier.NewDefaultNodeIdentifier(), bootstrappolicy.NodeRules())
		for _, tc := range tests {
			want := tc.want
			if !enabled {
				want = authorizer.DecisionNoOpinion
			}
			attrs := authorizer.AttributesRecord{User: node, ResourceRequest: true, Verb: tc.verb, APIGroup: "features.k8s.io", Resource: "features", Subresource: tc.subresource, Namespace: tc.namespace, Name: "balloonpod"}
			decision, reason, err := authz.Authorize(context.Background(), attrs)
			if err != nil || decision != want {
				t.Errorf("FeatureLifecycle=%t %s features/%s in %q: got %v (%q, %v), want %v", enabled, tc.verb, tc.subresource, tc.namespace, decision, reason, err, want)
			}
		}
		// The FeatureRestriction admission plugin asks whether a node may
		// change the entries of a component: the kubelet's, in kube-system.
		for _, tc := range []struct {
			verb, component, namespace string
			want                       authorizer.Decision
		}{
			{"report", "kubelet", "kube-system", authorizer.DecisionAllow},
			{"report", "kube-apiserver", "kube-system", authorizer.DecisionNoOpinion},
			{"report", "kube-scheduler", "kube-system", authorizer.DecisionNoOpinion},
			{"report", "kubelet", "example", authorizer.DecisionNoOpinion},
			{"get", "kubelet", "kube-system", authorizer.DecisionNoOpinion},
		} {
			want := tc.want
			if !enabled {
				want = authorizer.DecisionNoOpinion
			}
			attrs := authorizer.AttributesRecord{User: node, ResourceRequest: true, Verb: tc.verb, APIGroup: "features.k8s.io", Resource: "components", Namespace: tc.namespace, Name: tc.component}
			decision, reason, err := authz.Authorize(context.Background(), attrs)
			if err != nil || decision != want {
				t.Errorf("FeatureLifecycle=%t %s components/%s in %q: got %v (%q, %v), want %v", enabled, tc.verb, tc.component, tc.namespace, decision, reason, err, want)
			}
		}
	}
}
