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

package nodedeclaredfeatures

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/pkg/features"
)

// TestBalloonResizeNeedsTheBalloonPodFeature checks that the resize of a
// balloon is refused on a node that does not declare BalloonPod (an older
// kubelet, or one with the gate off, would preempt for it), whatever the gate
// on kube-apiserver, and that nothing else changes.
func TestBalloonResizeNeedsTheBalloonPodFeature(t *testing.T) {
	nodes := []*v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "declares"}, Status: v1.NodeStatus{DeclaredFeatures: []string{string(features.BalloonPod)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "does-not-declare"}, Status: v1.NodeStatus{DeclaredFeatures: []string{}}},
	}
	client := fake.NewClientset(nodes[0], nodes[1])
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	stopCh := make(chan struct{})
	defer close(stopCh)

	pod := func(node, class, cpu string) *core.Pod {
		return &core.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: metav1.NamespaceSystem, Generation: 1},
			Spec: core.PodSpec{
				NodeName:          node,
				PriorityClassName: class,
				Containers: []core.Container{{
					Name:      "pause",
					Image:     "pause",
					Resources: core.ResourceRequirements{Requests: core.ResourceList{core.ResourceCPU: resource.MustParse(cpu)}},
				}},
			},
		}
	}
	resize := func(node, class string) (*core.Pod, *core.Pod) {
		oldPod, newPod := pod(node, class, "1m"), pod(node, class, "500m")
		newPod.Generation++
		return newPod, oldPod
	}

	for _, balloonGate := range []bool{true, false} {
		tests := []struct {
			name      string
			node      string
			class     string
			expectErr bool
		}{
			{name: "balloon on a node that does not declare BalloonPod", node: "does-not-declare", class: scheduling.SystemNodeBalloon, expectErr: true},
			{name: "balloon on a node that declares BalloonPod", node: "declares", class: scheduling.SystemNodeBalloon},
			{name: "critical pod on a node that does not declare BalloonPod", node: "does-not-declare", class: scheduling.SystemNodeCritical},
		}
		for _, tc := range tests {
			t.Run(fmt.Sprintf("BalloonPod=%v/%s", balloonGate, tc.name), func(t *testing.T) {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.BalloonPod, balloonGate)
				target, err := NewPlugin()
				require.NoError(t, err)
				target.SetExternalKubeInformerFactory(informerFactory)
				target.InspectFeatureGates(utilfeature.DefaultFeatureGate)
				require.NoError(t, target.ValidateInitialization())
				informerFactory.Start(stopCh)
				informerFactory.WaitForCacheSync(stopCh)

				newPod, oldPod := resize(tc.node, tc.class)
				attrs := admission.NewAttributesRecord(newPod, oldPod, core.Kind("Pod").WithVersion("v1"), newPod.Namespace, newPod.Name, core.Resource("pods").WithVersion("v1"), "resize", admission.Update, &metav1.UpdateOptions{}, false, nil)
				err = target.Validate(context.Background(), attrs, nil)
				if tc.expectErr {
					require.ErrorContains(t, err, `pod update requires features BalloonPod which are not available on node "does-not-declare"`)
				} else {
					require.NoError(t, err)
				}
			})
		}
	}
}
