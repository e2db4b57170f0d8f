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
	attrs := func(verb, subresource string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: node, ResourceRequest: true, Verb: verb, APIGroup: "features.k8s.io", Resource: "features", Subresource: subresource, Namespace: "kube-system", Name: "balloonpod"}
	}
	tests := []struct {
		verb, subresource string
		want              authorizer.Decision
	}{
		{"get", "", authorizer.DecisionAllow},
		{"list", "", authorizer.DecisionAllow},
		{"watch", "", authorizer.DecisionAllow},
		{"update", "uses", authorizer.DecisionAllow},
		{"patch", "uses", authorizer.DecisionAllow},
		{"create", "", authorizer.DecisionNoOpinion},
		{"update", "", authorizer.DecisionNoOpinion},
		{"delete", "", authorizer.DecisionNoOpinion},
		{"update", "status", authorizer.DecisionNoOpinion},
		{"patch", "status", authorizer.DecisionNoOpinion},
	}
	for _, enabled := range []bool{true, false} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.FeatureLifecycle, enabled)
		authz := NewAuthorizer(NewGraph(), nodeidentifier.NewDefaultNodeIdentifier(), bootstrappolicy.NodeRules())
		for _, tc := range tests {
			want := tc.want
			if !enabled {
				want = authorizer.DecisionNoOpinion
			}
			decision, reason, err := authz.Authorize(context.Background(), attrs(tc.verb, tc.subresource))
			if err != nil || decision != want {
				t.Errorf("FeatureLifecycle=%t %s features/%s: got %v (%q, %v), want %v", enabled, tc.verb, tc.subresource, decision, reason, err, want)
			}
		}
	}
}
