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

package internalversion

import (
	"slices"
	"strings"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/kubernetes/pkg/printers"
)

func addFeatureHandlers(h printers.PrintHandler) {
	featureColumnDefinitions := []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "State", Type: "string", Description: featuresv1alpha1.FeatureStatus{}.SwaggerDoc()["state"]},
		{Name: "Default", Type: "string", Description: featuresv1alpha1.FeatureStatus{}.SwaggerDoc()["default"]},
		{Name: "Configured", Type: "string", Description: featuresv1alpha1.FeatureStatus{}.SwaggerDoc()["configuredValue"]},
		{Name: "Uses", Type: "string", Description: "The values components reported, per component."},
		{Name: "Upgrade/Downgrade", Type: "string", Description: "Whether the feature's state allows moving kube-apiserver to a newer or an older minor version (conditions UpgradeSafe and DowngradeSafe)."},
		{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
		{Name: "Stage", Type: "string", Priority: 1, Description: featuresv1alpha1.FeatureStatus{}.SwaggerDoc()["stage"]},
		{Name: "Tasks", Type: "string", Priority: 1, Description: featuresv1alpha1.FeatureStatus{}.SwaggerDoc()["tasks"]},
	}
	_ = h.TableHandler(featureColumnDefinitions, printFeature)
	_ = h.TableHandler(featureColumnDefinitions, printFeatureList)
}

func printFeature(obj *featuresapi.Feature, options printers.GenerateOptions) ([]metav1.TableRow, error) {
	row := metav1.TableRow{
		Object: runtime.RawExtension{Object: obj},
	}
	state := string(obj.Status.State)
	if state == "" {
		state = "<unknown>"
	}
	versionChange := safety(obj, featuresapi.FeatureConditionUpgradeSafe) + "/" + safety(obj, featuresapi.FeatureConditionDowngradeSafe)
	row.Cells = append(row.Cells, obj.Name, state, onOff(obj.Status.Default), onOff(obj.Status.ConfiguredValue), featureUses(obj.Status.Uses), versionChange, translateTimestampSince(obj.CreationTimestamp))
	if options.Wide {
		tasks := make([]string, 0, len(obj.Status.Tasks))
		for _, task := range obj.Status.Tasks {
			tasks = append(tasks, task.Name)
		}
		row.Cells = append(row.Cells, string(obj.Status.Stage), listOrNone(tasks))
	}
	return []metav1.TableRow{row}, nil
}

func printFeatureList(list *featuresapi.FeatureList, options printers.GenerateOptions) ([]metav1.TableRow, error) {
	rows := make([]metav1.TableRow, 0, len(list.Items))
	for i := range list.Items {
		r, err := printFeature(&list.Items[i], options)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// safety prints a safety condition: Safe, Unsafe or <unknown>.
func safety(obj *featuresapi.Feature, conditionType string) string {
	for _, c := range obj.Status.Conditions {
		if c.Type != conditionType {
			continue
		}
		switch c.Status {
		case metav1.ConditionTrue:
			return "Safe"
		case metav1.ConditionFalse:
			return "Unsafe"
		}
	}
	return "<unknown>"
}

func onOff(value *bool) string {
	switch {
	case value == nil:
		return "<unknown>"
	case *value:
		return "On"
	default:
		return "Off"
	}
}

// featureUses summarizes the uses per component, e.g. "kube-apiserver=On,kubelet=On/Off".
func featureUses(uses []featuresapi.FeatureUse) string {
	values := map[string][]string{}
	for _, use := range uses {
		v := onOff(&use.Value)
		if !slices.Contains(values[use.Component], v) {
			values[use.Component] = append(values[use.Component], v)
		}
	}
	components := make([]string, 0, len(values))
	for component := range values {
		components = append(components, component)
	}
	slices.Sort(components)
	summary := make([]string, 0, len(components))
	for _, component := range components {
		slices.Sort(values[component])
		summary = append(summary, component+"="+strings.Join(values[component], "/"))
	}
	return listOrNone(summary)
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "<none>"
	}
	return strings.Join(items, ",")
}
