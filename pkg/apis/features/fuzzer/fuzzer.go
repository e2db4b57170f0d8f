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

package fuzzer

import (
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/kubernetes/pkg/apis/features"
	"sigs.k8s.io/randfill"
)

// Funcs returns the fuzzer functions for the features api group: states and
// stages come from their enumerations, so that round trips cover the values
// the server stores.
var Funcs = func(codecs runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(s *features.FeatureStatus, c randfill.Continue) {
			c.FillNoCustom(s)
			states := []features.FeatureState{features.FeatureStateOn, features.FeatureStateOff, features.FeatureStateTurningOn, features.FeatureStateTurningOff}
			s.State = states[c.Intn(len(states))]
			stages := []features.FeatureStage{features.FeatureStageAlpha, features.FeatureStageBeta, features.FeatureStageGA, features.FeatureStageDeprecated}
			s.Stage = stages[c.Intn(len(stages))]
		},
	}
}
