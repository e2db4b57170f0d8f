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

// Package validation holds the rules of features.k8s.io that its declarative
// tags cannot say: name patterns, versions, ratcheting of uses. The tags'
// rules (required fields, enums, list bounds and uniqueness, the formats of
// components and owners) run from the generated zz_generated.validations.go
// of each version and are not repeated here.
package validation

import (
	"fmt"
	"regexp"
	"slices"
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
	// minorVersionRegexp matches the major.minor versions of uses.
	minorVersionRegexp = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
	// instanceRegexp matches node names and component identities, which may
	// hold underscores (leader election identities) and colons.
	instanceRegexp = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$`)
)

const maxInstanceLength = 253

// ValidateFeature validates a new Feature.
func ValidateFeature(f *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&f.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&f.Spec, f.Name, field.NewPath("spec"))...)
	allErrs = append(allErrs, validateStatus(&f.Status, field.NewPath("status"))...)
	allErrs = append(allErrs, validateUses(f.Status.Uses, field.NewPath("status", "uses"))...)
	return allErrs
}

// ValidateFeatureUpdate validates an update of a Feature's metadata and spec.
func ValidateFeatureUpdate(f, old *featuresapi.Feature) field.ErrorList {
	return apivalidation.ValidateObjectMetaUpdate(&f.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
}

// ValidateFeatureStatusUpdate validates an update of a Feature's status but
// its uses, which only the uses subresource writes.
func ValidateFeatureStatusUpdate(f, old *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&f.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateStatus(&f.Status, field.NewPath("status"))...)
	return allErrs
}

// ValidateFeatureUsesUpdate validates an update of a Feature's uses.
func ValidateFeatureUsesUpdate(f, old *featuresapi.Feature) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&f.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateUsesUpdate(f.Status.Uses, old.Status.Uses, field.NewPath("status", "uses"))...)
	return allErrs
}

// validateUsesUpdate validates uses, letting entries stored before a rule keep
// what they had (ratcheting): entries without versions, written before uses
// carried them, which may only lose instances (an instance that moves itself
// to an entry with versions), entries without instances, which may only stay
// as they are or go, and instances named in two entries.
func validateUsesUpdate(uses, old []featuresapi.FeatureUse, fldPath *field.Path) field.ErrorList {
	allErrs := validateUses(uses, fldPath)
	allErrs = slices.DeleteFunc(allErrs, func(err *field.Error) bool {
		if err.Type != field.ErrorTypeRequired {
			return false
		}
		for i, use := range uses {
			if err.Field == fldPath.Index(i).Child("instances").String() &&
				slices.ContainsFunc(old, func(o featuresapi.FeatureUse) bool { return featuresapi.SameUse(o, use) && len(o.Instances) == 0 }) {
				return true
			}
			if (err.Field == fldPath.Index(i).Child("binaryVersion").String() || err.Field == fldPath.Index(i).Child("emulationVersion").String()) &&
				slices.ContainsFunc(old, func(o featuresapi.FeatureUse) bool {
					return featuresapi.SameUse(o, use) && !slices.ContainsFunc(use.Instances, func(instance string) bool { return !slices.Contains(o.Instances, instance) })
				}) {
				return true
			}
		}
		return false
	})
	return append(allErrs, validateOneEntryPerInstance(uses, old, fldPath)...)
}

// validateOneEntryPerInstance rejects an instance named in two entries of its
// component (two values, or two versions), unless it was named in as many
// before the update (ratcheting: an object stored so stays writable, but
// no write names the instance in one more entry). An instance reports one
// value at one version, and moves itself from one entry to another when they
// change.
func validateOneEntryPerInstance(uses, old []featuresapi.FeatureUse, fldPath *field.Path) field.ErrorList {
	// A name twice in one entry is the declarative listType=set's Duplicate.
	named := func(uses []featuresapi.FeatureUse) map[string]int {
		count := map[string]int{}
		for _, use := range uses {
			for _, instance := range sets.List(sets.New(use.Instances...)) {
				count[use.Component+"/"+instance]++
			}
		}
		return count
	}
	now, before := named(uses), named(old)
	reported := sets.New[string]()
	var allErrs field.ErrorList
	for i, use := range uses {
		for j, instance := range use.Instances {
			k := use.Component + "/" + instance
			if now[k] < 2 || now[k] <= before[k] {
				continue
			}
			if reported.Has(k) {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("instances").Index(j), instance,
					fmt.Sprintf("is named in another entry of component %q too: an instance reports one value at one version, and moves itself when they change", use.Component)))
			}
			reported.Insert(k)
		}
	}
	return allErrs
}

func validateSpec(spec *featuresapi.FeatureSpec, name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	namePath := fldPath.Child("featureName")
	switch {
	case spec.FeatureName == "":
		// Required by the declarative +k8s:required.
	case !featureNameRegexp.MatchString(spec.FeatureName):
		allErrs = append(allErrs, field.Invalid(namePath, spec.FeatureName, "must be a feature gate name: a letter followed by letters and digits"))
	case name != "" && name != strings.ToLower(spec.FeatureName):
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf("must be the feature name in lower case, %q", strings.ToLower(spec.FeatureName))))
	}
	return allErrs
}

func validateStatus(status *featuresapi.FeatureStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
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
	}
	return append(allErrs, metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))...)
}

func validateUses(uses []featuresapi.FeatureUse, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, use := range uses {
		usePath := fldPath.Index(i)
		for _, v := range []struct {
			name, value string
		}{{"binaryVersion", use.BinaryVersion}, {"emulationVersion", use.EmulationVersion}} {
			switch {
			case v.value == "":
				allErrs = append(allErrs, field.Required(usePath.Child(v.name), "the version, major.minor, that the instances report"))
			case !minorVersionRegexp.MatchString(v.value):
				allErrs = append(allErrs, field.Invalid(usePath.Child(v.name), v.value, "must be a version of the form major.minor, e.g. 1.36"))
			}
		}

		instancesPath := usePath.Child("instances")
		if len(use.Instances) == 0 {
			// An entry nobody names would keep an old value in use for ever:
			// the last instance that leaves an entry removes it.
			allErrs = append(allErrs, field.Required(instancesPath, "at least one instance that reported this value"))
		}
		for j, instance := range use.Instances {
			allErrs = append(allErrs, validateInstance(instance, instancesPath.Index(j))...)
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
