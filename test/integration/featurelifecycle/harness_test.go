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
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientset "k8s.io/client-go/kubernetes"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle/tasks"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/test/integration/framework"
)

// TestLifecycleHarness runs every feature that registers lifecycle tasks
// (pkg/controlplane/controller/featurelifecycle/tasks) through On, use and
// Off on a kube-apiserver, and checks that the cluster is back to pristine:
// nothing the tasks clean up or wait for remains, no component reports the
// feature on, no task is left. A task that waits for the users (objects an
// admin must delete) must hold the feature TurningOff until the harness
// releases it. A feature author opts in by registering the task.
func TestLifecycleHarness(t *testing.T) {
	ctx := context.Background()
	fastLifecycle(t)
	registry := featurelifecycle.NewRegistry(featurelifecycle.NewWaitForUses(usesWait, usesWait))
	tasks.Register(registry)
	registered := registry.Features()
	slices.Sort(registered)
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.FeatureLifecycle, true)
	for _, feature := range registered {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, feature, true)
	}
	server := startAPIServer(t, "harness", framework.SharedEtcd())
	t.Cleanup(server.TearDownFn)
	client := clientset.NewForConfigOrDie(server.ClientConfig)
	featureClient := featureClientFor(server)

	for _, feature := range registered {
		t.Run(string(feature), func(t *testing.T) {
			name := strings.ToLower(string(feature))
			exercises := map[string]featurelifecycle.Exercise{}
			for _, transition := range []featurelifecycle.Transition{featurelifecycle.TurnOn, featurelifecycle.TurnOff} {
				for _, task := range registry.TasksFor(feature, transition) {
					if task.Name() == featurelifecycle.WaitForUsesName {
						continue
					}
					exercise, ok := task.(featurelifecycle.Exercise)
					if !ok {
						t.Fatalf("task %s does not implement featurelifecycle.Exercise", task.Name())
					}
					exercises[task.Name()] = exercise
				}
			}

			waitFor(t, featureClient, name, stepWait, "On", func(f *featuresv1alpha1.Feature) bool {
				return f.Status.State == featuresv1alpha1.FeatureStateOn
			})
			for taskName, exercise := range exercises {
				if err := exercise.Use(ctx, client); err != nil {
					t.Fatalf("%s: using the feature: %v", taskName, err)
				}
			}

			started := time.Now()
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, feature, false)
			heldSince := map[string]time.Time{}
			released := map[string]bool{}
			f := waitFor(t, featureClient, name, stepWait, "Off", func(f *featuresv1alpha1.Feature) bool {
				if f.Status.State == featuresv1alpha1.FeatureStateOff {
					return true
				}
				if len(f.Status.Tasks) == 0 {
					return false
				}
				current := f.Status.Tasks[0].Name
				exercise, ok := exercises[current]
				if !ok || released[current] || f.Status.Tasks[0].StartTime == nil {
					return false
				}
				if f.Status.State != featuresv1alpha1.FeatureStateTurningOff {
					t.Errorf("%s runs while the feature is %s, want TurningOff", current, f.Status.State)
				}
				// A task that cleans up finishes by itself; one that waits for
				// the admin holds the feature: after three rechecks, act as the
				// admin.
				if _, ok := heldSince[current]; !ok {
					heldSince[current] = time.Now()
				} else if time.Since(heldSince[current]) > 3*renewPeriod {
					t.Logf("%s held %s TurningOff for %v: %s", current, feature, time.Since(heldSince[current]).Round(100*time.Millisecond),
						meta.FindStatusCondition(f.Status.Conditions, featuresv1alpha1.FeatureConditionTransitioning).Message)
					if err := exercise.Release(ctx, client); err != nil {
						t.Fatalf("%s: releasing: %v", current, err)
					}
					released[current] = true
				}
				return false
			})
			t.Logf("%s: On, used, Off in %v", feature, time.Since(started).Round(100*time.Millisecond))

			for taskName, exercise := range exercises {
				if err := exercise.Pristine(ctx, client); err != nil {
					t.Errorf("%s left the cluster changed: %v", taskName, err)
				}
			}
			for _, use := range f.Status.Uses {
				if use.Value {
					t.Errorf("a component still reports %s on: %+v", feature, use)
				}
			}
			if len(f.Status.Tasks) != 0 || meta.FindStatusCondition(f.Status.Conditions, featuresv1alpha1.FeatureConditionTaskFailed) != nil {
				t.Errorf("tasks or a failure left after Off: %s", dump(f))
			}
		})
	}
}
