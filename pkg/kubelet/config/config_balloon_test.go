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

package config

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// The removal of a deleted balloon's protection finalizer reaches the pod
// workers, which hold the balloon running until then; other finalizer changes
// are no update, as before.
func TestReleasedBalloonIsAnUpdate(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	tCtx := ktesting.Init(t)
	// Only pods from the API server can be balloons.
	_, ch, config := createPodConfigTester(tCtx)
	channel := config.Channel(tCtx, kubetypes.ApiserverSource)

	// Each update is a pod of its own: the config keeps and annotates what it is sent.
	balloon := func(deleted bool, finalizers ...string) *v1.Pod {
		pod := CreateValidPod("balloon", "kube-system")
		pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
		pod.Finalizers = finalizers
		if deleted {
			pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return pod
	}
	channel <- createSourceUpdate(balloon(false, "example.com/other", kubetypes.BalloonProtectionFinalizer))
	if update := <-ch; update.Op != kubetypes.ADD {
		t.Fatalf("got %v, want ADD", update.Op)
	}

	channel <- createSourceUpdate(balloon(true, "example.com/other", kubetypes.BalloonProtectionFinalizer))
	if update := <-ch; update.Op != kubetypes.DELETE {
		t.Fatalf("got %v, want DELETE", update.Op)
	}

	// Another finalizer goes: nothing the kubelet acts on.
	channel <- createSourceUpdate(balloon(true, kubetypes.BalloonProtectionFinalizer))
	expectNoPodUpdate(t, ch)

	channel <- createSourceUpdate(balloon(true))
	update := <-ch
	if update.Op != kubetypes.DELETE || len(update.Pods) != 1 {
		t.Fatalf("got %v of %d pods, want DELETE of the released balloon", update.Op, len(update.Pods))
	}
	if got := update.Pods[0].Finalizers; slices.Contains(got, kubetypes.BalloonProtectionFinalizer) {
		t.Errorf("finalizers %v: the pod workers must see the release", got)
	}
	expectNoPodUpdate(t, ch)
}
