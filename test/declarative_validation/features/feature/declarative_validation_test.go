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

package feature

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	apitesting "k8s.io/kubernetes/pkg/api/testing"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	registry "k8s.io/kubernetes/pkg/registry/features/feature"
	"k8s.io/kubernetes/test/declarative_validation/meta"
	"k8s.io/utils/ptr"

	// Ensure all API groups are registered with the scheme
	_ "k8s.io/kubernetes/pkg/apis/features/install"
)

func TestDeclarativeValidate(t *testing.T) {
	for _, apiVersion := range apiVersions {
		t.Run(apiVersion, func(t *testing.T) {
			testDeclarativeValidate(t, apiVersion)
		})
	}
}

func testDeclarativeValidate(t *testing.T, apiVersion string) {
	ctx := requestContext(apiVersion, "create", "")
	testCases := map[string]struct {
		input  *featuresapi.Feature
		errors field.ErrorList
	}{
		"valid": {
			input: mkValidFeature(),
		},
		"no feature name": {
			input: mkValidFeature(func(f *featuresapi.Feature) { f.Spec.FeatureName = "" }),
			errors: field.ErrorList{
				field.Required(field.NewPath("spec", "featureName"), ""),
			},
		},
		"unknown state": {
			input: mkValidFeature(func(f *featuresapi.Feature) { f.Status.State = "Maybe" }),
			errors: field.ErrorList{
				field.NotSupported(field.NewPath("status", "state"), "Maybe", []featuresapi.FeatureState{}),
			},
		},
		"unknown stage": {
			input: mkValidFeature(func(f *featuresapi.Feature) { f.Status.Stage = "Gamma" }),
			errors: field.ErrorList{
				field.NotSupported(field.NewPath("status", "stage"), "Gamma", []featuresapi.FeatureStage{}),
			},
		},
	}
	for k, tc := range statusCases() {
		testCases[k] = struct {
			input  *featuresapi.Feature
			errors field.ErrorList
		}{mkValidFeature(tc.tweak), tc.errors}
	}
	for k, tc := range usesCases() {
		testCases[k] = struct {
			input  *featuresapi.Feature
			errors field.ErrorList
		}{mkValidFeature(tc.tweak), tc.errors}
	}
	for k, tc := range testCases {
		t.Run(k, func(t *testing.T) {
			apitesting.VerifyValidationEquivalence(t, ctx, tc.input, registry.Strategy, tc.errors)
		})
	}

	meta.RunObjectMetaTestCases(t, ctx, mkValidFeature(), registry.Strategy, meta.WithStringentFinalizerValidation())
}

func TestDeclarativeValidateUpdate(t *testing.T) {
	for _, apiVersion := range apiVersions {
		t.Run(apiVersion, func(t *testing.T) {
			testDeclarativeValidateUpdate(t, apiVersion)
		})
	}
}

func testDeclarativeValidateUpdate(t *testing.T, apiVersion string) {
	ctx := requestContext(apiVersion, "update", "")
	testCases := map[string]struct {
		update func(*featuresapi.Feature)
		errors field.ErrorList
	}{
		"unchanged": {},
		"feature renamed": {
			update: func(f *featuresapi.Feature) { f.Spec.FeatureName = "BALLOONPOD" },
			errors: field.ErrorList{
				field.Invalid(field.NewPath("spec"), nil, "").WithOrigin("immutable"),
			},
		},
	}
	for k, tc := range testCases {
		t.Run(k, func(t *testing.T) {
			old := mkValidFeature()
			old.ResourceVersion = "0"
			f := mkValidFeature(tc.update)
			f.ResourceVersion = "1"
			apitesting.VerifyUpdateValidationEquivalence(t, ctx, f, old, registry.Strategy, tc.errors)
		})
	}

	meta.RunObjectMetaUpdateTestCases(t, ctx, mkValidFeature(), registry.Strategy, meta.WithStringentFinalizerValidation())
}

// The status subresource is validated by the same rules: kube-apiserver's
// server flow writes every field but uses through it.
func TestDeclarativeValidateStatusUpdate(t *testing.T) {
	for _, apiVersion := range apiVersions {
		t.Run(apiVersion, func(t *testing.T) {
			testDeclarativeValidateSubresourceUpdate(t, apiVersion, "status", registry.StatusStrategy, statusCases())
			ctx := requestContext(apiVersion, "update", "status")
			meta.RunConditionTestCases(t, ctx, field.NewPath("status", "conditions"), &featuresapi.Feature{}, registry.StatusStrategy, func(f *featuresapi.Feature, c []metav1.Condition) {
				*f = *mkValidFeature(func(f *featuresapi.Feature) { f.Status.Conditions = c })
			})
		})
	}
}

// The uses subresource, which kubelets and the other components write, is
// validated by the same rules; a subresource the generated validation does not
// know would fail every write with an internal error.
func TestDeclarativeValidateUsesUpdate(t *testing.T) {
	for _, apiVersion := range apiVersions {
		t.Run(apiVersion, func(t *testing.T) {
			testDeclarativeValidateSubresourceUpdate(t, apiVersion, "uses", registry.UsesStrategy, usesCases())
		})
	}
}

type subresourceCase struct {
	tweak  func(*featuresapi.Feature)
	errors field.ErrorList
}

func testDeclarativeValidateSubresourceUpdate(t *testing.T, apiVersion, subresource string, strategy rest.RESTUpdateStrategy, cases map[string]subresourceCase) {
	ctx := requestContext(apiVersion, "update", subresource)
	cases["unchanged"] = subresourceCase{}
	for k, tc := range cases {
		t.Run(subresource+"/"+k, func(t *testing.T) {
			old := mkValidFeature()
			old.ResourceVersion = "0"
			f := mkValidFeature(tc.tweak)
			f.ResourceVersion = "1"
			apitesting.VerifyUpdateValidationEquivalence(t, ctx, f, old, strategy, tc.errors, apitesting.WithSubResources(subresource))
		})
	}
}

func statusCases() map[string]subresourceCase {
	return map[string]subresourceCase{
		"tasks at the limit": {
			tweak: func(f *featuresapi.Feature) { f.Status.Tasks = mkTasks(featuresapi.MaxFeatureTasks) },
		},
		"too many tasks": {
			tweak: func(f *featuresapi.Feature) { f.Status.Tasks = mkTasks(featuresapi.MaxFeatureTasks + 1) },
			errors: field.ErrorList{
				field.TooMany(field.NewPath("status", "tasks"), featuresapi.MaxFeatureTasks+1, featuresapi.MaxFeatureTasks).WithOrigin("maxItems"),
			},
		},
		"task error as long as allowed": {
			tweak: func(f *featuresapi.Feature) {
				f.Status.Tasks[0].LastError = strings.Repeat("x", featuresapi.MaxFeatureTaskErrorLength)
			},
		},
		"task error too long": {
			tweak: func(f *featuresapi.Feature) {
				f.Status.Tasks[0].LastError = strings.Repeat("x", featuresapi.MaxFeatureTaskErrorLength+1)
			},
			errors: field.ErrorList{
				field.TooLong(field.NewPath("status", "tasks").Index(0).Child("lastError"), "", featuresapi.MaxFeatureTaskErrorLength).WithOrigin("maxLength"),
			},
		},
		"too many conditions": {
			tweak: func(f *featuresapi.Feature) {
				for i := range featuresapi.MaxFeatureConditions + 1 {
					f.Status.Conditions = append(f.Status.Conditions, meta.MkCondition(meta.TweakType(fmt.Sprintf("Condition%d", i))))
				}
			},
			errors: field.ErrorList{
				field.TooMany(field.NewPath("status", "conditions"), featuresapi.MaxFeatureConditions+1, featuresapi.MaxFeatureConditions).WithOrigin("maxItems"),
			},
		},
		"bad owner": {
			tweak: func(f *featuresapi.Feature) { f.Status.Owners[1] = "Kubelet" },
			errors: field.ErrorList{
				field.Invalid(field.NewPath("status", "owners").Index(1), nil, "").WithOrigin("format=k8s-short-name"),
			},
		},
		"duplicate owner": {
			tweak: func(f *featuresapi.Feature) { f.Status.Owners[1] = "kube-apiserver" },
			errors: field.ErrorList{
				field.Duplicate(field.NewPath("status", "owners").Index(1), nil),
			},
		},
		"too many owners": {
			tweak: func(f *featuresapi.Feature) {
				f.Status.Owners = nil
				for i := range featuresapi.MaxFeatureOwners + 1 {
					f.Status.Owners = append(f.Status.Owners, fmt.Sprintf("component-%d", i))
				}
			},
			errors: field.ErrorList{
				field.TooMany(field.NewPath("status", "owners"), featuresapi.MaxFeatureOwners+1, featuresapi.MaxFeatureOwners).WithOrigin("maxItems"),
			},
		},
	}
}

func usesCases() map[string]subresourceCase {
	usesPath := field.NewPath("status", "uses")
	return map[string]subresourceCase{
		"use without component": {
			tweak: func(f *featuresapi.Feature) { f.Status.Uses[0].Component = "" },
			errors: field.ErrorList{
				field.Required(usesPath.Index(0).Child("component"), ""),
			},
		},
		"bad component": {
			tweak: func(f *featuresapi.Feature) { f.Status.Uses[0].Component = "Kube_APIServer" },
			errors: field.ErrorList{
				field.Invalid(usesPath.Index(0).Child("component"), nil, "").WithOrigin("format=k8s-short-name"),
			},
		},
		"duplicate component, value and versions": {
			tweak: func(f *featuresapi.Feature) { f.Status.Uses[2].Value = true },
			errors: field.ErrorList{
				field.Duplicate(usesPath.Index(2), nil),
			},
		},
		"instances at the limit": {
			tweak: func(f *featuresapi.Feature) {
				f.Status.Uses[1].Instances = mkInstances(featuresapi.MaxFeatureUseInstances)
			},
		},
		"too many instances": {
			tweak: func(f *featuresapi.Feature) {
				f.Status.Uses[1].Instances = mkInstances(featuresapi.MaxFeatureUseInstances + 1)
			},
			errors: field.ErrorList{
				field.TooMany(usesPath.Index(1).Child("instances"), featuresapi.MaxFeatureUseInstances+1, featuresapi.MaxFeatureUseInstances).WithOrigin("maxItems"),
			},
		},
		"duplicate instance": {
			tweak: func(f *featuresapi.Feature) { f.Status.Uses[2].Instances[1] = "node-2" },
			errors: field.ErrorList{
				field.Duplicate(usesPath.Index(2).Child("instances").Index(1), nil),
			},
		},
		"too many uses": {
			tweak: func(f *featuresapi.Feature) {
				f.Status.Uses = nil
				for i := range featuresapi.MaxFeatureUses + 1 {
					f.Status.Uses = append(f.Status.Uses, featuresapi.FeatureUse{Component: fmt.Sprintf("component-%d", i), Value: true, Instances: []string{"instance"}, BinaryVersion: "1.37", EmulationVersion: "1.37"})
				}
			},
			errors: field.ErrorList{
				field.TooMany(usesPath, featuresapi.MaxFeatureUses+1, featuresapi.MaxFeatureUses).WithOrigin("maxItems"),
			},
		},
	}
}

func requestContext(apiVersion, verb, subresource string) context.Context {
	return genericapirequest.WithRequestInfo(genericapirequest.NewDefaultContext(), &genericapirequest.RequestInfo{
		APIGroup:          "features.k8s.io",
		APIVersion:        apiVersion,
		Resource:          "features",
		Subresource:       subresource,
		IsResourceRequest: true,
		Verb:              verb,
	})
}

func mkValidFeature(tweaks ...func(*featuresapi.Feature)) *featuresapi.Feature {
	f := &featuresapi.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: metav1.NamespaceSystem},
		Spec:       featuresapi.FeatureSpec{FeatureName: "BalloonPod"},
		Status: featuresapi.FeatureStatus{
			Default:          ptr.To(false),
			Stage:            featuresapi.FeatureStageAlpha,
			ConfiguredValue:  ptr.To(true),
			Announcer:        "apiserver-6kj3aexs2tcuvb5xyxbfx7fgfe",
			BinaryVersion:    "1.37.2",
			EmulationVersion: "1.37",
			State:            featuresapi.FeatureStateTurningOn,
			Tasks:            []featuresapi.FeatureTask{{Name: "WaitForUses"}, {Name: "example.com/DrainWidgets"}},
			Uses: []featuresapi.FeatureUse{
				{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-6kj3aexs2tcuvb5xyxbfx7fgfe"}, BinaryVersion: "1.37", EmulationVersion: "1.37"},
				{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.37", EmulationVersion: "1.37"},
				{Component: "kubelet", Value: false, Instances: []string{"node-2", "node-3"}, BinaryVersion: "1.37", EmulationVersion: "1.37"},
			},
			Owners: []string{"kube-apiserver", "kubelet"},
		},
	}
	for _, tweak := range tweaks {
		if tweak != nil {
			tweak(f)
		}
	}
	return f
}

func mkTasks(n int) []featuresapi.FeatureTask {
	tasks := make([]featuresapi.FeatureTask, n)
	for i := range tasks {
		tasks[i].Name = fmt.Sprintf("Task%d", i)
	}
	return tasks
}

func mkInstances(n int) []string {
	instances := make([]string, n)
	for i := range instances {
		instances[i] = fmt.Sprintf("node-1-%d", i)
	}
	return instances
}
