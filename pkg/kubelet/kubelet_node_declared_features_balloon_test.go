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
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	ndffeatures "k8s.io/component-helpers/nodedeclaredfeatures/features"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// TestBalloonPodFeatureDeclaration checks that a kubelet declares BalloonPod
// exactly when its gate is on, that the gate off declares what upstream
// declares, and that a kubelet that does not declare it refuses balloons at
// admission (it would admit them as critical pods that preempt).
func TestBalloonPodFeatureDeclaration(t *testing.T) {
	balloon := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "balloon", Namespace: metav1.NamespaceSystem},
		Spec:       v1.PodSpec{PriorityClassName: scheduling.SystemNodeBalloon},
	}
	critical := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "critical", Namespace: metav1.NamespaceSystem},
		Spec:       v1.PodSpec{PriorityClassName: scheduling.SystemNodeCritical},
	}
	withoutBalloonPod := slices.DeleteFunc(slices.Clone(ndffeatures.AllFeatures), func(f ndf.Feature) bool {
		return f.Name() == string(features.BalloonPod)
	})
	kubeletVersion := version.MustParse("1.36.3")

	for _, enabled := range []bool{true, false} {
		t.Run(fmt.Sprintf("BalloonPod=%v", enabled), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.NodeDeclaredFeatures, true)
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, enabled)
			testKubelet := newTestKubelet(t, false /* controllerAttachDetachEnabled */)
			defer testKubelet.Cleanup()
			kl := testKubelet.kubelet
			kl.version = kubeletVersion

			kl.nodeDeclaredFeaturesFramework = ndf.New(withoutBalloonPod)
			upstream := kl.discoverNodeDeclaredFeatures()
			kl.nodeDeclaredFeaturesFramework = ndf.DefaultFramework
			declared := kl.discoverNodeDeclaredFeatures()

			want := upstream
			if enabled {
				want = append(slices.Clone(upstream), string(features.BalloonPod))
				slices.Sort(want)
			}
			if !slices.Equal(declared, want) {
				t.Fatalf("declared features %v, want %v", declared, want)
			}

			handler := lifecycle.NewDeclaredFeaturesAdmitHandler(ndf.DefaultFramework, ndf.DefaultFramework.MustMapSorted(declared), kubeletVersion)
			if result := handler.Admit(ktesting.Init(t), &lifecycle.PodAdmitAttributes{Pod: critical}); !result.Admit {
				t.Errorf("critical pod not admitted: %s: %s", result.Reason, result.Message)
			}
			result := handler.Admit(ktesting.Init(t), &lifecycle.PodAdmitAttributes{Pod: balloon})
			if result.Admit != enabled {
				t.Fatalf("balloon admitted %v, want %v (%s: %s)", result.Admit, enabled, result.Reason, result.Message)
			}
			if !enabled && result.Message != "Pod requires node features that are not available: BalloonPod" {
				t.Errorf("unexpected message %q", result.Message)
			}
		})
	}
}
