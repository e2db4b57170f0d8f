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
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

func stored() *featuresapi.Feature {
	return &featuresapi.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: metav1.NamespaceSystem, ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Spec:       featuresapi.FeatureSpec{FeatureName: "BalloonPod"},
		Status: featuresapi.FeatureStatus{
			Default:         ptr.To(false),
			ConfiguredValue: ptr.To(true),
			State:           featuresapi.FeatureStateTurningOn,
			Tasks:           []featuresapi.FeatureTask{{Name: "WaitForUses"}},
			Uses:            []featuresapi.FeatureUse{{Component: "kubelet", Value: false, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}},
		},
	}
}

// request is what a client sends: it changes every part of the object.
func request() *featuresapi.Feature {
	f := stored()
	f.Labels = map[string]string{"a": "changed"}
	f.Spec.FeatureName = "Other"
	f.Status.State = featuresapi.FeatureStateOn
	f.Status.Tasks = nil
	f.Status.Owners = []string{"kubelet"}
	f.Status.Uses = []featuresapi.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-2"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}}
	return f
}

func TestStrategiesWriteOnlyTheirPart(t *testing.T) {
	ctx := context.Background()

	t.Run("create clears the status", func(t *testing.T) {
		f := request()
		Strategy.PrepareForCreate(ctx, f)
		if diff := cmp.Diff(featuresapi.FeatureStatus{}, f.Status); diff != "" {
			t.Errorf("status after create (-want +got):\n%s", diff)
		}
	})

	t.Run("update writes metadata and spec", func(t *testing.T) {
		f := request()
		Strategy.PrepareForUpdate(ctx, f, stored())
		want := request()
		want.Status = stored().Status
		if diff := cmp.Diff(want, f); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	t.Run("status writes the status but its uses", func(t *testing.T) {
		f := request()
		StatusStrategy.PrepareForUpdate(ctx, f, stored())
		want := stored()
		want.Status = request().Status
		want.Status.Uses = stored().Status.Uses
		if diff := cmp.Diff(want, f); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	t.Run("uses writes the uses only", func(t *testing.T) {
		f := request()
		UsesStrategy.PrepareForUpdate(ctx, f, stored())
		want := stored()
		want.Status.Uses = request().Status.Uses
		// The server's times (TestUsesReportTimesAreTheServers).
		want.Status.Uses[0].FirstReportTime, want.Status.Uses[0].LastReportTime = f.Status.Uses[0].FirstReportTime, f.Status.Uses[0].LastReportTime
		if diff := cmp.Diff(want, f); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// TestUsesResetFieldsCoverTheStatus keeps the uses subresource's reset fields in
// step with the API: every status field but uses, so that a new field cannot be
// written through it.
func TestUsesResetFieldsCoverTheStatus(t *testing.T) {
	uses := UsesStrategy.GetResetFields()["features.k8s.io/v1alpha1"]
	status := StatusStrategy.GetResetFields()["features.k8s.io/v1alpha1"]
	statusType := reflect.TypeFor[featuresv1alpha1.FeatureStatus]()
	for i := range statusType.NumField() {
		name, _, _ := strings.Cut(statusType.Field(i).Tag.Get("json"), ",")
		path := fieldpath.MakePathOrDie("status", name)
		if got, want := uses.Has(path), name != "uses"; got != want {
			t.Errorf("the uses subresource resets status.%s: %t, want %t", name, got, want)
		}
	}
	if !status.Has(fieldpath.MakePathOrDie("status", "uses")) {
		t.Error("the status subresource must reset status.uses")
	}
}

// A reporter cannot choose when its use was reported: new entries get the
// server's time, existing ones keep their first report time, and their last
// one changes to the server's only when a writer renews the entry or adds an
// instance to it.
func TestUsesReportTimesAreTheServers(t *testing.T) {
	old := stored()
	reported := metav1.NewTime(metav1.Now().Add(-time.Hour).Truncate(time.Second))
	old.Status.Uses[0].FirstReportTime, old.Status.Uses[0].LastReportTime = &reported, &reported
	forged := metav1.NewTime(reported.Add(-24 * time.Hour))
	update := old.DeepCopy()
	update.Status.Uses[0].FirstReportTime = &forged
	update.Status.Uses = append(update.Status.Uses, featuresapi.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"node-2"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &forged, LastReportTime: &forged})
	before := metav1.Now().Rfc3339Copy()
	UsesStrategy.PrepareForUpdate(context.Background(), update, old)
	if got := update.Status.Uses[0].FirstReportTime; !got.Equal(&reported) {
		t.Errorf("existing entry: first report time %v, want the stored %v", got, reported)
	}
	if got := update.Status.Uses[0].LastReportTime; !got.Equal(&reported) {
		t.Errorf("existing entry nobody renewed: last report time %v, want the stored %v", got, reported)
	}
	for _, got := range []*metav1.Time{update.Status.Uses[1].FirstReportTime, update.Status.Uses[1].LastReportTime} {
		if got.Before(&before) {
			t.Errorf("new entry: report time %v, want the server's time (not before %v)", got, before)
		}
	}

	for name, change := range map[string]func(*featuresapi.FeatureUse){
		"renewed":          func(use *featuresapi.FeatureUse) { use.LastReportTime = &forged },
		"instance added":   func(use *featuresapi.FeatureUse) { use.Instances = append(use.Instances, "node-9") },
		"instance removed": func(use *featuresapi.FeatureUse) { use.Instances = nil },
	} {
		update := old.DeepCopy()
		change(&update.Status.Uses[0])
		UsesStrategy.PrepareForUpdate(context.Background(), update, old)
		got := update.Status.Uses[0].LastReportTime
		if renewed := !got.Before(&before); renewed != (name != "instance removed") {
			t.Errorf("%s: last report time %v (stored %v)", name, got, reported)
		}
	}
}
