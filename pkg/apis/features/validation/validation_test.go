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
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/utils/ptr"
)

func validFeature() *featuresapi.Feature {
	return &featuresapi.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: metav1.NamespaceSystem},
		Spec:       featuresapi.FeatureSpec{FeatureName: "BalloonPod"},
		Status: featuresapi.FeatureStatus{
			Default:          ptr.To(false),
			Stage:            featuresapi.FeatureStageAlpha,
			ConfiguredValue:  ptr.To(true),
			Announcer:        "apiserver-6kj3aexs2tcuvb5xyxbfx7fgfe",
			BinaryVersion:    "1.36.3",
			EmulationVersion: "1.36",
			State:            featuresapi.FeatureStateTurningOn,
			Tasks:            []featuresapi.FeatureTask{{Name: "WaitForUses"}, {Name: "example.com/DrainWidgets"}},
			Uses: []featuresapi.FeatureUse{
				{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-6kj3aexs2tcuvb5xyxbfx7fgfe"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
				{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
				{Component: "kubelet", Value: false, Instances: []string{"node-2", "node-3"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
				{Component: "kube-controller-manager", Value: true, Instances: []string{"cp-1_2f4d1c2e-8d1a-4b4e-9c1b-1d2e3f4a5b6c"}, BinaryVersion: "1.36", EmulationVersion: "1.36"},
				// A kubelet one minor version behind, as upstream's skew policy allows.
				{Component: "kubelet", Value: true, Instances: []string{"node-4"}, BinaryVersion: "1.35", EmulationVersion: "1.35"},
			},
			Owners: []string{"kube-apiserver", "kubelet"},
		},
	}
}

func TestValidateFeature(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*featuresapi.Feature)
		wantErr string
	}{
		{name: "valid"},
		{name: "name not the lower-case feature name", mutate: func(f *featuresapi.Feature) { f.Name = "balloon-pod" }, wantErr: `metadata.name: Invalid value: "balloon-pod": must be the feature name in lower case, "balloonpod"`},
		{name: "no namespace", mutate: func(f *featuresapi.Feature) { f.Namespace = "" }, wantErr: "metadata.namespace: Required value"},
		{name: "bad feature name", mutate: func(f *featuresapi.Feature) { f.Spec.FeatureName = "Balloon-Pod"; f.Name = "balloon-pod" }, wantErr: "spec.featureName: Invalid value"},
		{name: "bad version", mutate: func(f *featuresapi.Feature) { f.Status.BinaryVersion = "one" }, wantErr: "status.binaryVersion: Invalid value"},
		{name: "bad task name", mutate: func(f *featuresapi.Feature) { f.Status.Tasks[0].Name = "wait for uses" }, wantErr: "status.tasks[0].name: Invalid value"},
		{name: "task name too long", mutate: func(f *featuresapi.Feature) {
			f.Status.Tasks[1].Name = strings.Repeat("a", 250) + ".com/" + strings.Repeat("T", 63)
		}, wantErr: "status.tasks[1].name: Too long: may not be more than 317 bytes"},
		{name: "task error as long as allowed", mutate: func(f *featuresapi.Feature) {
			f.Status.Tasks[0].LastError = strings.Repeat("x", featuresapi.MaxFeatureTaskErrorLength)
		}},
		{name: "duplicate task", mutate: func(f *featuresapi.Feature) { f.Status.Tasks[1].Name = "WaitForUses" }, wantErr: "status.tasks[1].name: Duplicate value"},
		{name: "use without binary version", mutate: func(f *featuresapi.Feature) { f.Status.Uses[1].BinaryVersion = "" }, wantErr: "status.uses[1].binaryVersion: Required value"},
		{name: "use without emulation version", mutate: func(f *featuresapi.Feature) { f.Status.Uses[1].EmulationVersion = "" }, wantErr: "status.uses[1].emulationVersion: Required value"},
		{name: "use with a patch version", mutate: func(f *featuresapi.Feature) { f.Status.Uses[1].BinaryVersion = "1.36.3" }, wantErr: `status.uses[1].binaryVersion: Invalid value: "1.36.3": must be a version of the form major.minor`},
		{name: "use with a bad emulation version", mutate: func(f *featuresapi.Feature) { f.Status.Uses[1].EmulationVersion = "v1.36" }, wantErr: `status.uses[1].emulationVersion: Invalid value: "v1.36"`},
		{name: "bad instance", mutate: func(f *featuresapi.Feature) { f.Status.Uses[1].Instances[0] = "node 1" }, wantErr: "status.uses[1].instances[0]: Invalid value"},
		{name: "bad condition", mutate: func(f *featuresapi.Feature) {
			f.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "Perhaps", Reason: "Because", LastTransitionTime: metav1.Now()}}
		}, wantErr: "status.conditions[0].status: Unsupported value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := validFeature()
			if tc.mutate != nil {
				tc.mutate(f)
			}
			errs := ValidateFeature(f)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("want no errors, got %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Errorf("want an error containing %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestValidateFeatureUpdates(t *testing.T) {
	old := validFeature()
	old.ResourceVersion = "1"

	badVersion := old.DeepCopy()
	badVersion.Status.EmulationVersion = "one"
	if errs := ValidateFeatureStatusUpdate(badVersion, old); !strings.Contains(errs.ToAggregate().Error(), "status.emulationVersion: Invalid value") {
		t.Errorf("a status update with a bad version must fail, got %v", errs)
	}

	badUse := old.DeepCopy()
	badUse.Status.Uses[0].Instances = []string{"node 1"}
	if errs := ValidateFeatureUsesUpdate(badUse, old); !strings.Contains(errs.ToAggregate().Error(), "status.uses[0].instances[0]: Invalid value") {
		t.Errorf("a uses update with a bad instance must fail, got %v", errs)
	}
	if errs := ValidateFeatureUsesUpdate(old.DeepCopy(), old); len(errs) != 0 {
		t.Errorf("an unchanged uses update must pass, got %v", errs)
	}
}

// An instance reports one value at one version: naming it in two entries of
// its component is Invalid, unless the stored object already did.
func TestValidateOneEntryPerInstance(t *testing.T) {
	old := validFeature()
	old.ResourceVersion = "1"
	both := old.DeepCopy()
	both.Status.Uses[1].Instances = append(both.Status.Uses[1].Instances, "node-2") // node-2 is under false too
	errs := ValidateFeatureUsesUpdate(both, old)
	if !strings.Contains(errs.ToAggregate().Error(), `status.uses[2].instances[0]: Invalid value: "node-2": is named in another entry of component "kubelet" too`) {
		t.Errorf("want node-2 named under both values rejected, got %v", errs)
	}
	twoVersions := old.DeepCopy()
	twoVersions.Status.Uses[4].Instances = append(twoVersions.Status.Uses[4].Instances, "node-1") // node-1 is at 1.36 too
	if errs := ValidateFeatureUsesUpdate(twoVersions, old); !strings.Contains(errs.ToAggregate().Error(), `status.uses[4].instances[1]: Invalid value: "node-1"`) {
		t.Errorf("want node-1 named at two versions rejected, got %v", errs)
	}
	moved := old.DeepCopy()
	moved.Status.Uses[1].Instances = append(moved.Status.Uses[1].Instances, "node-2")
	moved.Status.Uses[2].Instances = []string{"node-3"}
	if errs := ValidateFeatureUsesUpdate(moved, old); len(errs) != 0 {
		t.Errorf("an instance that moved itself to the other value must pass, got %v", errs)
	}
	if errs := ValidateFeatureUsesUpdate(both.DeepCopy(), both); len(errs) != 0 {
		t.Errorf("an object that already named an instance under both values must stay writable, got %v", errs)
	}
	third := both.DeepCopy()
	third.Status.Uses[4].Instances = append(third.Status.Uses[4].Instances, "node-2")
	if errs := ValidateFeatureUsesUpdate(third, both); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), `Invalid value: "node-2": is named in another entry of component "kubelet" too`) {
		t.Errorf("an instance already named in two entries named in a third must fail, got %v", errs)
	}
}

// Entries stored before uses carried versions stay writable while they only
// lose instances, so that instances can move out and kube-apiserver can remove
// them; a new one, or one that gains an instance, needs versions.
func TestValidateUsesWithoutVersionsRatchet(t *testing.T) {
	old := validFeature()
	old.ResourceVersion = "1"
	old.Status.Uses[3].BinaryVersion, old.Status.Uses[3].EmulationVersion = "", ""
	if errs := ValidateFeatureUsesUpdate(old.DeepCopy(), old); len(errs) != 0 {
		t.Errorf("an unchanged entry without versions must pass, got %v", errs)
	}
	gained := old.DeepCopy()
	gained.Status.Uses[3].Instances = append(gained.Status.Uses[3].Instances, "cp-2")
	if errs := ValidateFeatureUsesUpdate(gained, old); !strings.Contains(errs.ToAggregate().Error(), "status.uses[3].binaryVersion: Required value") {
		t.Errorf("an entry without versions that gains an instance must fail, got %v", errs)
	}
	old.Status.Uses[3].Instances = append(old.Status.Uses[3].Instances, "cp-2")
	lost := old.DeepCopy()
	lost.Status.Uses[3].Instances = lost.Status.Uses[3].Instances[1:]
	if errs := ValidateFeatureUsesUpdate(lost, old); len(errs) != 0 {
		t.Errorf("an entry without versions that loses an instance must pass, got %v", errs)
	}
	removed := old.DeepCopy()
	removed.Status.Uses = removed.Status.Uses[:3]
	if errs := ValidateFeatureUsesUpdate(removed, old); len(errs) != 0 {
		t.Errorf("removing an entry without versions must pass, got %v", errs)
	}
}

// An entry that names nobody would keep an old value in use for ever: no
// write may leave one, but one stored before the rule may stay as it is
// (ratcheting) or go.
func TestValidateUsesNameAnInstance(t *testing.T) {
	f := validFeature()
	f.Status.Uses[1].Instances = nil
	if errs := ValidateFeature(f); !strings.Contains(errs.ToAggregate().Error(), "status.uses[1].instances: Required value") {
		t.Errorf("a new entry without instances must fail, got %v", errs)
	}
	old := validFeature()
	old.ResourceVersion = "1"
	emptied := old.DeepCopy()
	emptied.Status.Uses[1].Instances = nil
	if errs := ValidateFeatureUsesUpdate(emptied, old); !strings.Contains(errs.ToAggregate().Error(), "status.uses[1].instances: Required value") {
		t.Errorf("an entry left without instances must fail, got %v", errs)
	}
	old.Status.Uses[1].Instances = nil
	if errs := ValidateFeatureUsesUpdate(old.DeepCopy(), old); len(errs) != 0 {
		t.Errorf("an unchanged stored entry without instances must pass, got %v", errs)
	}
	removed := old.DeepCopy()
	removed.Status.Uses = slices.Delete(removed.Status.Uses, 1, 2)
	if errs := ValidateFeatureUsesUpdate(removed, old); len(errs) != 0 {
		t.Errorf("removing a stored entry without instances must pass, got %v", errs)
	}
}
