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

package validation

import (
	"fmt"
	"regexp"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	apivalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

var (
	// featureNameRegexp matches feature gate names as components spell them.
	featureNameRegexp = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	// taskNameRegexp matches registered task names: Kubernetes' own, for example
	// WaitForUses, and third parties' under a domain, for example example.com/DrainWidgets.
	taskNameRegexp = regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z][A-Za-z0-9]*$`)
	// instanceRegexp matches node names and component identities, which may
	// hold underscores (leader election identities) and colons.
	instanceRegexp = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$`)

	validStates = sets.New(featuresapi.FeatureStateOn, featuresapi.FeatureStateOff, featuresapi.FeatureStateTurningOn, featuresapi.FeatureStateTurningOff)
	validStages = sets.New(featuresapi.FeatureStageAlpha, featuresapi.FeatureStageBeta, featuresapi.FeatureStageGA, featuresapi.FeatureStageDeprecated)
)

const maxInstanceLength = 253

// ValidateFeature validates a new Feature.
func ValidateFeature(f *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&f.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&f.Spec, f.Name, field.NewPath("spec"))...)
	allErrs = append(allErrs, validateStatus(&f.Status, field.NewPath("status"))...)
	return allErrs
}

// ValidateFeatureUpdate validates an update of a Feature's metadata and spec.
func ValidateFeatureUpdate(f, old *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&f.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(f.Spec, old.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateFeatureStatusUpdate validates an update of a Feature's status.
func ValidateFeatureStatusUpdate(f, old *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&f.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateStatus(&f.Status, field.NewPath("status"))...)
	return allErrs
}

// ValidateFeatureUsesUpdate validates an update of a Feature's uses.
func ValidateFeatureUsesUpdate(f, old *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&f.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateUses(f.Status.Uses, field.NewPath("status", "uses"))...)
	allErrs = append(allErrs, validateOneValuePerInstance(f.Status.Uses, old.Status.Uses, field.NewPath("status", "uses"))...)
	return allErrs
}

// validateOneValuePerInstance rejects an instance named under both values of a
// component, unless it already was before the update (ratcheting: objects
// written before the rule keep working). An instance that changes its value
// moves itself from one entry to the other.
func validateOneValuePerInstance(uses, old []featuresapi.FeatureUse, fldPath *field.Path) field.ErrorList {
	both := func(uses []featuresapi.FeatureUse) sets.Set[string] {
		byValue := map[bool]sets.Set[string]{true: sets.New[string](), false: sets.New[string]()}
		for _, use := range uses {
			for _, instance := range use.Instances {
				byValue[use.Value].Insert(use.Component + "/" + instance)
			}
		}
		return byValue[true].Intersection(byValue[false])
	}
	named, allowed := both(uses), both(old)
	var allErrs field.ErrorList
	for i, use := range uses {
		for j, instance := range use.Instances {
			k := use.Component + "/" + instance
			if use.Value && named.Has(k) && !allowed.Has(k) {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("instances").Index(j), instance,
					fmt.Sprintf("is also named under value false of component %q: an instance reports one value, and moves itself when its value changes", use.Component)))
			}
		}
	}
	return allErrs
}

func validateSpec(spec *featuresapi.FeatureSpec, name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	namePath := fldPath.Child("featureName")
	switch {
	case spec.FeatureName == "":
		allErrs = append(allErrs, field.Required(namePath, "the feature gate's name"))
	case !featureNameRegexp.MatchString(spec.FeatureName):
		allErrs = append(allErrs, field.Invalid(namePath, spec.FeatureName, "must be a feature gate name: a letter followed by letters and digits"))
	case name != "" && name != strings.ToLower(spec.FeatureName):
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf("must be the feature name in lower case, %q", strings.ToLower(spec.FeatureName))))
	}
	return allErrs
}

func validateStatus(status *featuresapi.FeatureStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if status.State != "" && !validStates.Has(status.State) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("state"), status.State, sets.List(validStates)))
	}
	if status.Stage != "" && !validStages.Has(status.Stage) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("stage"), status.Stage, sets.List(validStages)))
	}
	for _, v := range []struct {
		name, value string
	}{{"binaryVersion", status.BinaryVersion}, {"emulationVersion", status.EmulationVersion}, {"unknownSinceVersion", status.UnknownSinceVersion}} {
		if v.value == "" {
			continue
		}
		if _, err := version.ParseGeneric(v.value); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(v.name), v.value, err.Error()))
		}
	}
	if status.Announcer != "" {
		allErrs = append(allErrs, validateInstance(status.Announcer, fldPath.Child("announcer"))...)
	}

	tasksPath := fldPath.Child("tasks")
	if len(status.Tasks) > featuresapi.MaxFeatureTasks {
		allErrs = append(allErrs, field.TooMany(tasksPath, len(status.Tasks), featuresapi.MaxFeatureTasks))
	}
	tasks := sets.New[string]()
	for i, task := range status.Tasks {
		namePath := tasksPath.Index(i).Child("name")
		if len(task.Name) > featuresapi.MaxFeatureTaskNameLength {
			allErrs = append(allErrs, field.TooLong(namePath, "", featuresapi.MaxFeatureTaskNameLength))
		} else if !taskNameRegexp.MatchString(task.Name) {
			allErrs = append(allErrs, field.Invalid(namePath, task.Name, "must be a task name: letters and digits starting with a letter, optionally after a domain and '/'"))
		}
		if tasks.Has(task.Name) {
			allErrs = append(allErrs, field.Duplicate(namePath, task.Name))
		}
		tasks.Insert(task.Name)
		if len(task.LastError) > featuresapi.MaxFeatureTaskErrorLength {
			allErrs = append(allErrs, field.TooLong(tasksPath.Index(i).Child("lastError"), "", featuresapi.MaxFeatureTaskErrorLength))
		}
	}

	if len(status.Conditions) > featuresapi.MaxFeatureConditions {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("conditions"), len(status.Conditions), featuresapi.MaxFeatureConditions))
	}
	allErrs = append(allErrs, metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))...)
	allErrs = append(allErrs, validateUses(status.Uses, fldPath.Child("uses"))...)
	return allErrs
}

func validateUses(uses []featuresapi.FeatureUse, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(uses) > featuresapi.MaxFeatureUses {
		allErrs = append(allErrs, field.TooMany(fldPath, len(uses), featuresapi.MaxFeatureUses))
	}
	type key struct {
		component string
		value     bool
	}
	seen := sets.New[key]()
	for i, use := range uses {
		usePath := fldPath.Index(i)
		if use.Component == "" {
			allErrs = append(allErrs, field.Required(usePath.Child("component"), "the kind of component, e.g. kubelet"))
		} else {
			for _, msg := range apimachineryvalidation.NameIsDNSLabel(use.Component, false) {
				allErrs = append(allErrs, field.Invalid(usePath.Child("component"), use.Component, msg))
			}
		}
		k := key{use.Component, use.Value}
		if seen.Has(k) {
			allErrs = append(allErrs, field.Duplicate(usePath, fmt.Sprintf("component %q with value %t", use.Component, use.Value)))
		}
		seen.Insert(k)

		instancesPath := usePath.Child("instances")
		if len(use.Instances) > featuresapi.MaxFeatureUseInstances {
			allErrs = append(allErrs, field.TooMany(instancesPath, len(use.Instances), featuresapi.MaxFeatureUseInstances))
		}
		instances := sets.New[string]()
		for j, instance := range use.Instances {
			allErrs = append(allErrs, validateInstance(instance, instancesPath.Index(j))...)
			if instances.Has(instance) {
				allErrs = append(allErrs, field.Duplicate(instancesPath.Index(j), instance))
			}
			instances.Insert(instance)
		}
	}
	return allErrs
}

func validateInstance(instance string, fldPath *field.Path) field.ErrorList {
	if len(instance) > maxInstanceLength {
		return field.ErrorList{field.TooLong(fldPath, "", maxInstanceLength)}
	}
	if !instanceRegexp.MatchString(instance) {
		return field.ErrorList{field.Invalid(fldPath, instance, "must be a node name or a component identity: letters, digits, '.', '_', ':' and '-', starting and ending with a letter or digit")}
	}
	return nil
}
