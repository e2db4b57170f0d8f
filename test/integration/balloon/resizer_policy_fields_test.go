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

package balloon

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// TestResizerPoliciesCompareEveryWritableField keeps the resizer's node and pod
// policies allow-lists: each compares every field an update can change, but
// the one it allows, so that a field upstream adds is denied to the resizer
// until it is classified here.
func TestResizerPoliciesCompareEveryWritableField(t *testing.T) {
	expressions := map[string]string{}
	for _, obj := range readAddon(t, filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon", "balloon-resizer-policy.yaml")) {
		if policy, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
			for _, v := range policy.Spec.Validations {
				expressions[policy.Name] += v.Expression + "\n"
			}
		}
	}
	// What an update cannot change (the API server keeps or sets it), or what
	// steers nothing (managedFields).
	serverKept := sets.New("name", "namespace", "selfLink", "uid", "resourceVersion", "generation",
		"creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields")
	for _, tc := range []struct {
		policy  string
		typ     reflect.Type
		path    string
		allowed sets.Set[string]
	}{
		{"node-balloon-resizer-nodes", reflect.TypeFor[metav1.ObjectMeta](), "metadata", serverKept},
		{"node-balloon-resizer-nodes", reflect.TypeFor[v1.NodeSpec](), "spec", sets.New("taints")},
		{"node-balloon-resizer-pods", reflect.TypeFor[metav1.ObjectMeta](), "metadata", serverKept.Clone().Insert("finalizers")},
	} {
		text, ok := expressions[tc.policy]
		if !ok {
			t.Fatalf("no policy %s in the addon", tc.policy)
		}
		for i := range tc.typ.NumField() {
			name, _, _ := strings.Cut(tc.typ.Field(i).Tag.Get("json"), ",")
			if name == "" || tc.allowed.Has(name) {
				continue
			}
			if compared := "object." + tc.path + ".?" + name + " == oldObject." + tc.path + ".?" + name; !strings.Contains(text, compared) {
				t.Errorf("%s does not compare %s.%s (want %q in a validation)", tc.policy, tc.path, name, compared)
			}
		}
	}
	if !strings.Contains(expressions["node-balloon-resizer-pods"], "object.spec == oldObject.spec") {
		t.Error("node-balloon-resizer-pods must compare the whole pod spec")
	}
}
