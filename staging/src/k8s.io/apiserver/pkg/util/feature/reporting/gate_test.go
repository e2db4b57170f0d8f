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

package reporting

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
)

const (
	alphaFeature featuregate.Feature = "AlphaFeature"
	betaFeature  featuregate.Feature = "BetaFeature"
	unchecked    featuregate.Feature = "Unchecked"
)

func newTestGate(t testing.TB) featuregate.MutableVersionedFeatureGate {
	t.Helper()
	gate := featuregate.NewVersionedFeatureGate(version.MustParse("1.36"))
	if err := gate.AddVersioned(map[featuregate.Feature]featuregate.VersionedSpecs{
		alphaFeature: {{Version: version.MustParse("1.36"), Default: false, PreRelease: featuregate.Alpha}},
		betaFeature:  {{Version: version.MustParse("1.35"), Default: true, PreRelease: featuregate.Beta}},
		unchecked:    {{Version: version.MustParse("1.35"), Default: true, PreRelease: featuregate.Beta}},
	}); err != nil {
		t.Fatal(err)
	}
	return gate
}

func TestGateRecordsCheckedFeatures(t *testing.T) {
	g := NewGate(newTestGate(t))
	if len(g.Uses()) != 0 {
		t.Fatalf("uses before any check: %v", g.Uses())
	}
	// Set on the layer, as a component's flags do, before and after checks.
	if err := g.Set("AlphaFeature=true"); err != nil {
		t.Fatal(err)
	}
	if !g.Enabled(alphaFeature) || !g.Enabled(betaFeature) || !g.Enabled(alphaFeature) {
		t.Fatal("the layer must return the underlying gate's values")
	}
	want := []Use{{Feature: alphaFeature, Value: true}, {Feature: betaFeature, Value: true}}
	if got := g.Uses(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("uses = %v, want %v", got, want)
	}
}

func TestGateEnabledDoesNotAllocate(t *testing.T) {
	g := NewGate(newTestGate(t))
	g.Enabled(betaFeature)
	if allocs := testing.AllocsPerRun(1000, func() { g.Enabled(betaFeature) }); allocs != 0 {
		t.Errorf("Enabled allocates %v times per call, want 0", allocs)
	}
}

// BenchmarkEnabled compares upstream's gate with the layer in one run.
func BenchmarkEnabled(b *testing.B) {
	for name, gate := range map[string]featuregate.FeatureGate{
		"upstream": newTestGate(b),
		"layer":    NewGate(newTestGate(b)),
	} {
		b.Run(name, func(b *testing.B) {
			gate.Enabled(betaFeature)
			b.ReportAllocs()
			for b.Loop() {
				gate.Enabled(betaFeature)
			}
		})
	}
}

func TestGateAllUsesListsEveryFeature(t *testing.T) {
	g := NewGate(newTestGate(t))
	if err := g.Set("AlphaFeature=true"); err != nil {
		t.Fatal(err)
	}
	got := map[featuregate.Feature]bool{}
	for _, use := range g.AllUses() {
		got[use.Feature] = use.Value
	}
	if v, ok := got[alphaFeature]; !ok || !v {
		t.Errorf("AllUses lacks %s=true, checked or not: %v", alphaFeature, got)
	}
	if v, ok := got[unchecked]; !ok || !v {
		t.Errorf("AllUses lacks the unchecked %s=true: %v", unchecked, got)
	}
}

// Reading the configuration is not a use: after AllUses and Values, Uses still
// names only the features the component checked, which is how kube-apiserver
// tells the features it owns from those it only reports.
func TestGateReadingValuesChecksNothing(t *testing.T) {
	g := NewGate(newTestGate(t))
	g.Enabled(alphaFeature)
	_ = g.AllUses()
	if v := g.Values(); !v[unchecked] {
		t.Errorf("Values()[%s] = false, want its default, true", unchecked)
	}
	if uses := g.Uses(); len(uses) != 1 || uses[0].Feature != alphaFeature {
		t.Errorf("Uses() = %v after reading the values, want only %s", uses, alphaFeature)
	}
}
