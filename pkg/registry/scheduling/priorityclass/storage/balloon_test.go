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

package storage

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

func balloonPriorityClass() *scheduling.PriorityClass {
	never := core.PreemptNever
	return &scheduling.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: scheduling.SystemNodeBalloon},
		Value:            scheduling.SystemCriticalPriority + 1000,
		PreemptionPolicy: &never,
	}
}

// TestDeleteBalloonPriorityClass checks that system-node-balloon is a system
// priority class that cannot be deleted while the gate is on, and an ordinary
// one while it is off.
func TestDeleteBalloonPriorityClass(t *testing.T) {
	tests := []struct {
		name      string
		enabled   bool
		forbidden bool
	}{
		{name: "gate on", enabled: true, forbidden: true},
		{name: "gate off", enabled: false, forbidden: false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, test.enabled)
			storage, server := newStorage(t)
			defer server.Terminate(t)
			defer storage.Store.DestroyFunc()
			ctx := genericapirequest.NewContext()
			key := "/priorityclasses/" + scheduling.SystemNodeBalloon
			if err := storage.Store.Storage.Create(ctx, key, balloonPriorityClass(), nil, 0, false); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}

			_, _, err := storage.Delete(ctx, scheduling.SystemNodeBalloon, rest.ValidateAllObjectFunc, nil)
			_, getErr := storage.Get(ctx, scheduling.SystemNodeBalloon, &metav1.GetOptions{})
			if test.forbidden {
				if !apierrors.IsForbidden(err) {
					t.Fatalf("expected a Forbidden error, got %v", err)
				}
				if getErr != nil {
					t.Errorf("the class is gone after a forbidden delete: %v", getErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !apierrors.IsNotFound(getErr) {
				t.Errorf("expected the class to be deleted, got %v", getErr)
			}
		})
	}
}

// TestDeleteSystemPriorityClassesBalloon checks that the upstream system
// priority classes stay undeletable with the gate on.
func TestDeleteSystemPriorityClassesBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	storage, server := newStorage(t)
	defer server.Terminate(t)
	defer storage.Store.DestroyFunc()
	ctx := genericapirequest.NewContext()
	for _, name := range []string{scheduling.SystemNodeCritical, scheduling.SystemClusterCritical, scheduling.SystemNodeBalloon} {
		if _, _, err := storage.Delete(ctx, name, rest.ValidateAllObjectFunc, nil); !apierrors.IsForbidden(err) {
			t.Errorf("delete %s: expected a Forbidden error, got %v", name, err)
		}
	}
}
