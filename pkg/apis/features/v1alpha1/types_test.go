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

package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kubernetes/pkg/generated/openapi"
	"k8s.io/utils/ptr"
)

// Optional fields are pointers: unset, they are left out of the JSON rather
// than written as null (times) or as a false nobody set (lockToDefault).
func TestUnsetOptionalFieldsAreLeftOut(t *testing.T) {
	use, err := json.Marshal(featuresv1alpha1.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.37", EmulationVersion: "1.37"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(use), "ReportTime") {
		t.Errorf("a use without report times serialises them: %s", use)
	}
	status, err := json.Marshal(featuresv1alpha1.FeatureStatus{})
	if err != nil {
		t.Fatal(err)
	}
	if string(status) != "{}" {
		t.Errorf("an empty status serialises as %s, want {}", status)
	}
	locked, err := json.Marshal(featuresv1alpha1.FeatureStatus{LockToDefault: ptr.To(false)})
	if err != nil {
		t.Fatal(err)
	}
	if string(locked) != `{"lockToDefault":false}` {
		t.Errorf("lockToDefault set to false serialises as %s, want it kept", locked)
	}
}

// A strategic merge patch of one condition merges it into the others by type,
// as for the conditions of every built-in status.
func TestConditionsMergeByType(t *testing.T) {
	stored, err := json.Marshal(featuresv1alpha1.FeatureStatus{Conditions: []metav1.Condition{
		{Type: featuresv1alpha1.FeatureConditionTransitioning, Status: metav1.ConditionFalse, Reason: "Settled"},
		{Type: featuresv1alpha1.FeatureConditionUpgradeSafe, Status: metav1.ConditionTrue, Reason: "Safe"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"conditions":[{"type":"Transitioning","status":"True","reason":"TurningOn"}]}`)
	merged, err := strategicpatch.StrategicMergePatch(stored, patch, featuresv1alpha1.FeatureStatus{})
	if err != nil {
		t.Fatal(err)
	}
	var got featuresv1alpha1.FeatureStatus
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Conditions) != 2 || got.Conditions[0].Reason != "TurningOn" || got.Conditions[1].Type != featuresv1alpha1.FeatureConditionUpgradeSafe {
		t.Errorf("a patch of the Transitioning condition gave %+v, want it merged with UpgradeSafe kept", got.Conditions)
	}
}

// tasks is an ordered queue that only the server writes: an atomic list, so
// that no apply merges entries into it out of order.
func TestTasksAreAnAtomicList(t *testing.T) {
	defs := openapi.GetOpenAPIDefinitions(func(path string) spec.Ref { return spec.MustCreateRef("#/definitions/" + path) })
	status, found := defs[featuresv1alpha1.FeatureStatus{}.OpenAPIModelName()]
	if !found {
		t.Fatalf("no OpenAPI definition of %s", featuresv1alpha1.FeatureStatus{}.OpenAPIModelName())
	}
	tasks := status.Schema.Properties["tasks"]
	if got := tasks.Extensions["x-kubernetes-list-type"]; got != "atomic" {
		t.Errorf("tasks: x-kubernetes-list-type %v, want atomic", got)
	}
	if _, found := tasks.Extensions["x-kubernetes-list-map-keys"]; found {
		t.Errorf("tasks has list map keys: %v", tasks.Extensions)
	}
	conditions := status.Schema.Properties["conditions"]
	if got, key := conditions.Extensions["x-kubernetes-patch-strategy"], conditions.Extensions["x-kubernetes-patch-merge-key"]; got != "merge" || key != "type" {
		t.Errorf("conditions: patch strategy %v, merge key %v; want merge by type", got, key)
	}
}
