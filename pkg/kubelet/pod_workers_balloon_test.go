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

package kubelet

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// A deleted balloon keeps running while its protection finalizer holds it, so
// that the capacity it holds is not free before its node is closed; the update
// that removes the finalizer starts its termination.
func TestPodWorkersHoldADeletedBalloon(t *testing.T) {
	deleted := func(namespace, class string, finalizers ...string) *v1.Pod {
		pod := newNamedPod("1", namespace, "balloon", false)
		pod.Spec.PriorityClassName = class
		pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		pod.Finalizers = finalizers
		return pod
	}
	for _, tc := range []struct {
		name     string
		gate     bool
		pod      *v1.Pod
		wantHeld bool
	}{
		{"balloon with the finalizer", true, deleted("kube-system", scheduling.SystemNodeBalloon, "example.com/other", kubetypes.BalloonProtectionFinalizer), true},
		{"gate off", false, deleted("kube-system", scheduling.SystemNodeBalloon, kubetypes.BalloonProtectionFinalizer), false},
		{"balloon without the finalizer", true, deleted("kube-system", scheduling.SystemNodeBalloon, "example.com/other"), false},
		{"the finalizer on another pod", true, deleted("kube-system", "", kubetypes.BalloonProtectionFinalizer), false},
		{"the class outside kube-system", true, deleted("default", scheduling.SystemNodeBalloon, kubetypes.BalloonProtectionFinalizer), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, tc.gate)
			logger, tCtx := ktesting.NewTestContext(t)
			podWorkers, _, processed := createPodWorkers(logger)

			podWorkers.UpdatePod(tCtx, UpdatePodOptions{Pod: tc.pod, UpdateType: kubetypes.SyncPodUpdate})
			drainAllWorkers(podWorkers)
			if held := !podWorkers.IsPodTerminationRequested(types.UID("1")); held != tc.wantHeld {
				t.Fatalf("held = %v, want %v; syncs %+v", held, tc.wantHeld, processed[types.UID("1")])
			}
			if !tc.wantHeld {
				return
			}
			if syncs := processed[types.UID("1")]; len(syncs) != 1 || syncs[0].updateType != kubetypes.SyncPodUpdate {
				t.Errorf("a held balloon is synced as a running pod, got %+v", syncs)
			}

			// The resize agent closed the node and removed the finalizer.
			released := tc.pod.DeepCopy()
			released.Finalizers = []string{"example.com/other"}
			podWorkers.UpdatePod(tCtx, UpdatePodOptions{Pod: released, UpdateType: kubetypes.SyncPodUpdate})
			drainAllWorkers(podWorkers)
			if !podWorkers.IsPodTerminationRequested(types.UID("1")) {
				t.Errorf("the released balloon must terminate; syncs %+v", processed[types.UID("1")])
			}
		})
	}
}

// A kill the kubelet itself asks for (graceful node shutdown, the pod's removal
// from the API) is carried out on a held balloon too: the hold is only against
// the deletion's own start of termination.
func TestPodWorkersKillAHeldBalloon(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, true)
	logger, tCtx := ktesting.NewTestContext(t)
	podWorkers, _, processed := createPodWorkers(logger)
	pod := newNamedPod("1", "kube-system", "balloon", false)
	pod.Spec.PriorityClassName = scheduling.SystemNodeBalloon
	pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	pod.Finalizers = []string{kubetypes.BalloonProtectionFinalizer}

	podWorkers.UpdatePod(tCtx, UpdatePodOptions{Pod: pod, UpdateType: kubetypes.SyncPodUpdate})
	drainAllWorkers(podWorkers)
	if podWorkers.IsPodTerminationRequested(types.UID("1")) {
		t.Fatal("the deleted balloon must be held")
	}
	podWorkers.UpdatePod(tCtx, UpdatePodOptions{Pod: pod, UpdateType: kubetypes.SyncPodKill, KillPodOptions: &KillPodOptions{}})
	drainAllWorkers(podWorkers)
	if !podWorkers.IsPodTerminationRequested(types.UID("1")) {
		t.Errorf("a kill must terminate a held balloon; syncs %+v", processed[types.UID("1")])
	}
}
