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

// Package reporting adds to a feature gate the reporting of feature uses
// (KEP-3920): which features a component checked, and with which value, end up
// in status.uses of the features.k8s.io Feature objects.
package reporting

import (
	"slices"
	"strings"

	"k8s.io/component-base/featuregate"
)

// queriedFeatures is implemented by upstream's feature gates, which record the
// features checked through Enabled.
type queriedFeatures interface {
	QueriedFeatures() []featuregate.Feature
}

// Gate is a drop-in layer over a MutableVersionedFeatureGate: components keep
// using it as their gate, and once started (see Start) it reports the features
// they checked. It is created before flags are parsed. Enabled is the
// underlying gate's own: the gate already records the features it is asked
// about, so the layer costs nothing per check.
type Gate struct {
	featuregate.MutableVersionedFeatureGate
}

var _ featuregate.MutableVersionedFeatureGate = &Gate{}

// NewGate returns a layer over gate that reports the features checked through it.
func NewGate(gate featuregate.MutableVersionedFeatureGate) *Gate {
	return &Gate{MutableVersionedFeatureGate: gate}
}

// Use is a feature the component checked and the value it runs with.
type Use struct {
	Feature featuregate.Feature
	Value   bool
}

// Uses returns the features the component checked, sorted, with their values.
// The values are the gate's current ones: a gate is set at start-up, so they
// are the values the component runs with. A gate that does not record its
// checks has no uses to report.
func (g *Gate) Uses() []Use {
	q, ok := g.MutableVersionedFeatureGate.(queriedFeatures)
	if !ok {
		return nil
	}
	queried := q.QueriedFeatures()
	uses := make([]Use, 0, len(queried))
	for _, key := range queried {
		uses = append(uses, Use{Feature: key, Value: g.MutableVersionedFeatureGate.Enabled(key)})
	}
	return uses
}

// AllUses returns every feature the gate knows, checked or not, sorted, with
// its value: the gate's whole configuration.
func (g *Gate) AllUses() []Use {
	values := g.Values()
	uses := make([]Use, 0, len(values))
	for key, value := range values {
		uses = append(uses, Use{Feature: key, Value: value})
	}
	slices.SortFunc(uses, func(a, b Use) int { return strings.Compare(string(a.Feature), string(b.Feature)) })
	return uses
}

// Values returns the value of every feature the gate knows, without recording
// a check of any: reading the configuration (to report it, or for
// kube-apiserver's server flow) is not a use, and Uses must name only the
// features the component's own code checked. It reads a copy of the gate.
func (g *Gate) Values() map[featuregate.Feature]bool {
	gate := g.MutableVersionedFeatureGate.DeepCopy()
	all := gate.GetAll()
	values := make(map[featuregate.Feature]bool, len(all))
	for key := range all {
		values[key] = gate.Enabled(key)
	}
	return values
}
