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

// Package feature provides the storage strategies of Features.
package feature

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/kubernetes/pkg/apis/features/validation"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// featureStrategy implements behavior for Feature objects: create and update
// write metadata and spec only. It opts in to declarative validation, as every
// strategy does since 1.37; the group generates none yet (validation-gen=false in
// pkg/apis/features/v1alpha1), so its hand-written validation is what runs.
type featureStrategy struct {
	rest.DeclarativeValidation
	names.NameGenerator
}

// Strategy is the default logic that applies when creating and updating Features.
var Strategy = featureStrategy{rest.DeclarativeValidation{Scheme: legacyscheme.Scheme}, names.SimpleNameGenerator}

func (featureStrategy) NamespaceScoped() bool { return true }

// GetResetFields returns the fields that create and update do not write.
func (featureStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"features.k8s.io/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (featureStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	obj.(*featuresapi.Feature).Status = featuresapi.FeatureStatus{}
}

func (featureStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	obj.(*featuresapi.Feature).Status = old.(*featuresapi.Feature).Status
}

func (featureStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateFeature(obj.(*featuresapi.Feature))
}

func (featureStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }

func (featureStrategy) Canonicalize(obj runtime.Object) {}

func (featureStrategy) AllowCreateOnUpdate(context.Context) bool { return false }

func (featureStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateFeatureUpdate(obj.(*featuresapi.Feature), old.(*featuresapi.Feature))
}

func (featureStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// AllowUnconditionalUpdate is false: Features have many writers (the server flow,
// every reporting component), and an update that does not name the
// resourceVersion it read would drop the writes it did not see.
func (featureStrategy) AllowUnconditionalUpdate(context.Context) bool { return false }

// featureStatusStrategy writes the status, but for its uses: kube-apiserver
// drives the state and tasks, and the components' uses have their own
// subresource so that they can be authorized apart.
type featureStatusStrategy struct {
	featureStrategy
}

// StatusStrategy is the logic of the status subresource.
var StatusStrategy = featureStatusStrategy{Strategy}

func (featureStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"features.k8s.io/v1alpha1": fieldpath.NewSet(
			fieldpath.MakePathOrDie("metadata"),
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("status", "uses"),
		),
	}
}

func (featureStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	f, oldF := obj.(*featuresapi.Feature), old.(*featuresapi.Feature)
	f.Spec = oldF.Spec
	f.Status.Uses = oldF.Status.Uses
	metav1.ResetObjectMetaForStatus(&f.ObjectMeta, &oldF.ObjectMeta)
}

func (featureStatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateFeatureStatusUpdate(obj.(*featuresapi.Feature), old.(*featuresapi.Feature))
}

// featureUsesStrategy writes status.uses only.
type featureUsesStrategy struct {
	featureStrategy
}

// UsesStrategy is the logic of the uses subresource.
var UsesStrategy = featureUsesStrategy{Strategy}

func (featureUsesStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"features.k8s.io/v1alpha1": fieldpath.NewSet(
			fieldpath.MakePathOrDie("metadata"),
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("status", "default"),
			fieldpath.MakePathOrDie("status", "stage"),
			fieldpath.MakePathOrDie("status", "lockToDefault"),
			fieldpath.MakePathOrDie("status", "configuredValue"),
			fieldpath.MakePathOrDie("status", "announcer"),
			fieldpath.MakePathOrDie("status", "binaryVersion"),
			fieldpath.MakePathOrDie("status", "emulationVersion"),
			fieldpath.MakePathOrDie("status", "unknownSinceVersion"),
			fieldpath.MakePathOrDie("status", "state"),
			fieldpath.MakePathOrDie("status", "tasks"),
			fieldpath.MakePathOrDie("status", "conditions"),
			fieldpath.MakePathOrDie("status", "owners"),
		),
	}
}

func (featureUsesStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	f, oldF := obj.(*featuresapi.Feature), old.(*featuresapi.Feature)
	uses := f.Status.Uses
	f.Spec = oldF.Spec
	f.Status = oldF.Status
	f.Status.Uses = uses
	setReportTimes(f.Status.Uses, oldF.Status.Uses, metav1.Now())
	metav1.ResetObjectMetaForStatus(&f.ObjectMeta, &oldF.ObjectMeta)
}

// setReportTimes sets the report times of each use; the server sets them, as
// the age of an entry decides when the server flow trusts or removes it, and
// a reporter's clock or claim must not. An entry that exists (same component,
// value and versions) keeps its first report time; a new one gets now. The
// last report time is now for a new entry, for one that names a new instance,
// and for one whose last report time the writer changed (a sampled instance
// renews the entry by sending any other time); otherwise it is the stored
// one: a write that removes entries or names renews nothing.
func setReportTimes(uses, old []featuresapi.FeatureUse, now metav1.Time) {
	for i := range uses {
		use := &uses[i]
		j := slices.IndexFunc(old, func(o featuresapi.FeatureUse) bool { return featuresapi.SameUse(o, *use) })
		if j < 0 {
			use.FirstReportTime, use.LastReportTime = now.DeepCopy(), now.DeepCopy()
			continue
		}
		use.FirstReportTime = old[j].FirstReportTime
		added := slices.ContainsFunc(use.Instances, func(instance string) bool { return !slices.Contains(old[j].Instances, instance) })
		if added || !use.LastReportTime.Equal(old[j].LastReportTime) {
			use.LastReportTime = now.DeepCopy()
		} else {
			use.LastReportTime = old[j].LastReportTime
		}
	}
}

func (featureUsesStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateFeatureUsesUpdate(obj.(*featuresapi.Feature), old.(*featuresapi.Feature))
}
