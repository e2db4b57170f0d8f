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

package features

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/util/feature/reporting"
	featuresapply "k8s.io/client-go/applyconfigurations/features/v1alpha1"
)

// usesWriter is one instance of a component that reports its use of a feature.
type usesWriter struct {
	component, instance string
	value               bool
}

func (w usesWriter) apply(name string) *featuresapply.FeatureApplyConfiguration {
	return featuresapply.Feature(name, thirdPartyNamespace).
		WithStatus(featuresapply.FeatureStatus().WithUses(featuresapply.FeatureUse().
			WithComponent(w.component).WithValue(w.value).WithBinaryVersion("1.36").WithEmulationVersion("1.36").WithInstances(w.instance)))
}

// TestConcurrentUsesWritersKeepEachOthersEntries races writers of different
// components and instances on one Feature, each applying only its own entry
// through the uses subresource as its own field manager, forced and without a
// resourceVersion: none may drop another's entry or name, and an instance that
// applies the other value moves out of its old entry without touching the
// others'.
func TestConcurrentUsesWritersKeepEachOthersEntries(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t, "--feature-gates=FeatureLifecycle=true", "--runtime-config=features.k8s.io/v1alpha1=true")
	features := client.FeaturesV1alpha1().Features(thirdPartyNamespace)
	if _, err := features.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "racingwriters"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "RacingWriters"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writers := []usesWriter{
		{"kube-scheduler", "scheduler-1", true},
		{"kube-controller-manager", "controller-manager-1", true},
		{"kubelet", "node-1", true},
		{"kubelet", "node-2", true},
		{"kubelet", "node-3", false},
		{"kubelet", "node-4", false},
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(writers))
	for _, w := range writers {
		wg.Go(func() {
			<-start
			_, err := features.ApplyUses(ctx, "racingwriters", w.apply("racingwriters"),
				metav1.ApplyOptions{FieldManager: reporting.FieldManager(w.component, w.instance), Force: true})
			if err != nil {
				errs <- fmt.Errorf("%s/%s: %w", w.component, w.instance, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	want := map[string][]string{
		"kube-scheduler=true":          {"scheduler-1"},
		"kube-controller-manager=true": {"controller-manager-1"},
		"kubelet=true":                 {"node-1", "node-2"},
		"kubelet=false":                {"node-3", "node-4"},
	}
	f, err := features.Get(ctx, "racingwriters", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkUses(t, "after the race", f, want)
	for _, w := range writers {
		manager := reporting.FieldManager(w.component, w.instance)
		if !slices.ContainsFunc(f.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
			return m.Manager == manager && m.Operation == metav1.ManagedFieldsOperationApply && m.Subresource == "uses"
		}) {
			t.Errorf("no applied fields of %s on the uses subresource: %+v", manager, f.ManagedFields)
		}
	}

	// node-3 restarts with the feature on: its apply moves it, and node-4
	// keeps the entry of the old value.
	moved := usesWriter{"kubelet", "node-3", true}
	f, err = features.ApplyUses(ctx, "racingwriters", moved.apply("racingwriters"),
		metav1.ApplyOptions{FieldManager: reporting.FieldManager(moved.component, moved.instance), Force: true})
	if err != nil {
		t.Fatal(err)
	}
	want["kubelet=true"] = []string{"node-1", "node-2", "node-3"}
	want["kubelet=false"] = []string{"node-4"}
	checkUses(t, "after node-3 moved", f, want)
}

func checkUses(t *testing.T, when string, f *featuresv1alpha1.Feature, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for _, u := range f.Status.Uses {
		key := fmt.Sprintf("%s=%t", u.Component, u.Value)
		got[key] = slices.Sorted(slices.Values(u.Instances))
		if u.FirstReportTime.IsZero() {
			t.Errorf("%s: %s has no first report time", when, key)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: uses %v, want %v", when, got, want)
		return
	}
	for key, instances := range want {
		if !slices.Equal(got[key], instances) {
			t.Errorf("%s: uses %v, want %v", when, got, want)
			return
		}
	}
}
