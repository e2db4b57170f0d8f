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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

var (
	featureResource = featuresapi.Resource("features")
	// featureComponentResource is the synthetic resource the
	// FeatureRestriction admission plugin asks about: "report" on
	// components/kubelet lets a node change the kubelet's entries of uses.
	featureComponentResource = featuresapi.Resource("components")
)

// authorizeFeature lets every node read Kubernetes' own Features, those in
// kube-system, and report its kubelet's uses of them; the noderestriction
// admission plugin checks that a node reports only its own. Kubelets report
// nowhere else, so nodes get nothing in other namespaces.
func authorizeFeature(nodeName string, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if attrs.GetNamespace() != metav1.NamespaceSystem {
		klog.V(2).Infof("NODE DENY: '%s' %#v", nodeName, attrs)
		return authorizer.DecisionNoOpinion, "can only access features in " + metav1.NamespaceSystem, nil
	}
	verb := attrs.GetVerb()
	if attrs.GetResource() == featureComponentResource.Resource {
		if verb == "report" && attrs.GetName() == "kubelet" {
			return authorizer.DecisionAllow, "", nil
		}
		klog.V(2).Infof("NODE DENY: '%s' %#v", nodeName, attrs)
		return authorizer.DecisionNoOpinion, "can only report the uses of component kubelet", nil
	}
	switch attrs.GetSubresource() {
	case "":
		if verb == "get" || verb == "list" || verb == "watch" {
			return authorizer.DecisionAllow, "", nil
		}
	case "uses":
		if verb == "get" || verb == "update" || verb == "patch" {
			return authorizer.DecisionAllow, "", nil
		}
	}
	klog.V(2).Infof("NODE DENY: '%s' %#v", nodeName, attrs)
	return authorizer.DecisionNoOpinion, "can only get, list and watch features and update their uses", nil
}
