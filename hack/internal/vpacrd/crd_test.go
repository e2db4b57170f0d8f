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

// Package vpacrd tests the CRDs of the VPA series' tree as kube-apiserver
// validates them: the CRDs themselves, and VerticalPodAutoscalers against their
// OpenAPI schema and CEL rules. The tests live in this project's module rather
// than in the VPA's, whose go.mod would otherwise gain
// k8s.io/apiextensions-apiserver and k8s.io/apiserver (with cel-go, grpc and
// OpenTelemetry) for tests alone; upstream, they belong in the VPA's e2e
// module, which has its own go.mod.
package vpacrd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// generatedCRDs reads the CRDs that the VPA's hack/generate-crd-yaml.sh
// writes, from the autoscaler tree (make tree).
func generatedCRDs(t *testing.T) map[string]*apiextensions.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "_output", "autoscaler", "vertical-pod-autoscaler", "deploy", "vpa-v1-crd-gen.yaml"))
	if err != nil {
		t.Fatalf("%v (make tree materializes the autoscaler tree)", err)
	}
	crds := map[string]*apiextensions.CustomResourceDefinition{}
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		v1crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, v1crd); err != nil {
			t.Fatal(err)
		}
		crd := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1crd, crd, nil); err != nil {
			t.Fatal(err)
		}
		crds[crd.Spec.Names.Kind] = crd
	}
	return crds
}

// TestGeneratedCRDIsValid runs the apiserver's own CRD validation, which also
// compiles the CEL rules and checks their estimated cost.
func TestGeneratedCRDIsValid(t *testing.T) {
	for kind, crd := range generatedCRDs(t) {
		// The apiserver records the storage version at creation.
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				crd.Status.StoredVersions = []string{v.Name}
			}
		}
		if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
			t.Errorf("%s: %v", kind, errs.ToAggregate())
		}
	}
}

// TestAlphaKindsAPIReview: the two alpha kinds have had no API review, so they
// carry upstream's annotation for unapproved kinds in a protected group (the
// original VPA CRD's approval is not theirs), and every list of them is
// bounded.
func TestAlphaKindsAPIReview(t *testing.T) {
	crds := generatedCRDs(t)
	const unapproved = "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups"
	for _, kind := range []string{"VerticalPodAutoscalerSlice", "VerticalPodAutoscalerCheckpointSlice"} {
		crd := crds[kind]
		if crd == nil {
			t.Fatalf("no CRD of %s", kind)
		}
		if got := crd.Annotations["api-approved.kubernetes.io"]; got != unapproved {
			t.Errorf("%s: api-approved.kubernetes.io %q, want %q", kind, got, unapproved)
		}
		nodes := crd.Spec.Validation.OpenAPIV3Schema.Properties["nodes"]
		if nodes.MaxItems == nil {
			t.Errorf("%s: nodes has no maxItems", kind)
		}
	}
}

// vpaValidator returns a function that validates a VerticalPodAutoscaler of
// the given spec as the apiserver does with the generated CRD: OpenAPI schema,
// then CEL rules.
func vpaValidator(t *testing.T) func(spec map[string]interface{}) field.ErrorList {
	t.Helper()
	crd := generatedCRDs(t)["VerticalPodAutoscaler"]
	if crd == nil {
		t.Fatal("no VerticalPodAutoscaler CRD in deploy/vpa-v1-crd-gen.yaml")
	}
	var props *apiextensions.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1" {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		t.Fatal("no v1 schema")
	}
	structural, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	celValidator := cel.NewValidator(structural, true, celconfig.PerCallLimit)
	openAPIValidator, _, err := schemavalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatal(err)
	}
	return func(spec map[string]interface{}) field.ErrorList {
		obj := map[string]interface{}{
			"apiVersion": "autoscaling.k8s.io/v1",
			"kind":       "VerticalPodAutoscaler",
			"metadata":   map[string]interface{}{"name": "agent", "namespace": "default"},
			"spec":       spec,
		}
		errs := schemavalidation.ValidateCustomResource(nil, obj, openAPIValidator)
		celErrs, _ := celValidator.Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
		return append(errs, celErrs...)
	}
}

func TestCRDScopeValidation(t *testing.T) {
	validate := vpaValidator(t)
	for _, tc := range []struct {
		name       string
		apiVersion string // default apps/v1
		kind       string
		scope      *string
		wantErr    string
	}{
		{name: "no scope, Deployment", kind: "Deployment"},
		{name: "no scope, DaemonSet", kind: "DaemonSet"},
		{name: "explicit empty scope", kind: "Deployment", scope: strPtr("")},
		{name: "node scope, DaemonSet", kind: "DaemonSet", scope: strPtr("Node")},
		{name: "node scope, Deployment", kind: "Deployment", scope: strPtr("Node"),
			wantErr: `spec.scope: Invalid value: scope Node is allowed only when targetRef is an apps DaemonSet`},
		{name: "node scope, StatefulSet", kind: "StatefulSet", scope: strPtr("Node"),
			wantErr: `spec.scope: Invalid value: scope Node is allowed only when targetRef is an apps DaemonSet`},
		{name: "node scope, DaemonSet of another group", apiVersion: "example.com/v1", kind: "DaemonSet", scope: strPtr("Node"),
			wantErr: `spec.scope: Invalid value: scope Node is allowed only when targetRef is an apps DaemonSet`},
		{name: "lower case", kind: "DaemonSet", scope: strPtr("node"),
			wantErr: `spec.scope: Unsupported value: "node": supported values: "", "Node"`},
		{name: "unknown scope", kind: "DaemonSet", scope: strPtr("zone"),
			wantErr: `spec.scope: Unsupported value: "zone": supported values: "", "Node"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apiVersion := "apps/v1"
			if tc.apiVersion != "" {
				apiVersion = tc.apiVersion
			}
			spec := map[string]interface{}{
				"targetRef": map[string]interface{}{"apiVersion": apiVersion, "kind": tc.kind, "name": "agent"},
			}
			if tc.scope != nil {
				spec["scope"] = *tc.scope
			}
			checkErrors(t, validate(spec), tc.wantErr)
		})
	}
}

func TestCRDNodeScopeValidation(t *testing.T) {
	validate := vpaValidator(t)
	for _, tc := range []struct {
		name       string
		scope      string
		groupLabel string
		wantErr    string
	}{
		{name: "instance type", scope: "Node", groupLabel: "node.kubernetes.io/instance-type"},
		{name: "label without prefix", scope: "Node", groupLabel: "pool"},
		{name: "longest key", scope: "Node", groupLabel: strings.Repeat("a", 253) + "/" + strings.Repeat("b", 63)},
		{name: "without scope node", groupLabel: "pool",
			wantErr: `spec.nodeScope: Invalid value: nodeScope is allowed only when scope is Node`},
		{name: "invalid key", scope: "Node", groupLabel: "pool name",
			wantErr: `spec.nodeScope.groupLabel: Invalid value: "pool name": spec.nodeScope.groupLabel in body should match`},
		{name: "name part too long", scope: "Node", groupLabel: "example.com/" + strings.Repeat("a", 64),
			wantErr: `spec.nodeScope.groupLabel: Invalid value: "example.com/` + strings.Repeat("a", 64) + `": spec.nodeScope.groupLabel in body should match`},
		{name: "prefix too long", scope: "Node", groupLabel: strings.Repeat("a", 254) + "/b",
			wantErr: `spec.nodeScope.groupLabel: Invalid value: "` + strings.Repeat("a", 254) + `/b": the prefix of groupLabel must be no more than 253 characters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]interface{}{
				"targetRef": map[string]interface{}{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"},
				"nodeScope": map[string]interface{}{"groupLabel": tc.groupLabel},
			}
			if tc.scope != "" {
				spec["scope"] = tc.scope
			}
			checkErrors(t, validate(spec), tc.wantErr)
		})
	}
}

func checkErrors(t *testing.T, errs field.ErrorList, want string) {
	t.Helper()
	if want == "" {
		if len(errs) > 0 {
			t.Fatalf("unexpected errors: %v", errs.ToAggregate())
		}
		return
	}
	if len(errs) != 1 {
		t.Fatalf("got %d errors (%v), want one: %s", len(errs), errs.ToAggregate(), want)
	}
	if got := errs[0].Error(); !strings.HasPrefix(got, want) {
		t.Fatalf("got error %q, want %q", got, want)
	}
}

func strPtr(s string) *string { return &s }
