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

package featurelifecycle

import (
	"sync"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const (
	namespace = "apiserver"
	subsystem = "feature_lifecycle"
)

var (
	featuresByState = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Subsystem:      subsystem,
		Name:           "features",
		Help:           "Number of Features in kube-system by state, as this kube-apiserver's cache has them.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	transitionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      namespace,
		Subsystem:      subsystem,
		Name:           "transition_duration_seconds",
		Help:           "Time from the start of a transition to its end, by transition (TurnOn, TurnOff, Upgrade, Downgrade), observed by the kube-apiserver that finished it.",
		Buckets:        metrics.ExponentialBuckets(1, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"transition"})
	taskRuns = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Subsystem:      subsystem,
		Name:           "task_runs_total",
		Help:           "Number of runs of transition tasks by task and result (done, not_yet, error, fenced).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"task", "result"})
	leaderChanges = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      namespace,
		Subsystem:      subsystem,
		Name:           "leader_changes_total",
		Help:           "Number of Features whose leading kube-apiserver changed, as this kube-apiserver sees the live apiservers.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(featuresByState, transitionDuration, taskRuns, leaderChanges)
	})
}

// recordStates sets the gauge of Features by state; states without Features read 0.
func recordStates(byState map[featuresv1alpha1.FeatureState]int) {
	for _, state := range []featuresv1alpha1.FeatureState{featuresv1alpha1.FeatureStateOn, featuresv1alpha1.FeatureStateOff, featuresv1alpha1.FeatureStateTurningOn, featuresv1alpha1.FeatureStateTurningOff} {
		featuresByState.WithLabelValues(string(state)).Set(float64(byState[state]))
	}
}
