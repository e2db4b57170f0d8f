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

package nodescope

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// daemonPod is a pod as the DaemonSet controller makes it for a node: the
// template's nodeSelector, affinity and tolerations, plus the node affinity to
// the node's name and the tolerations the controller adds.
func daemonPod(node string, nodeSelector map[string]string, terms []corev1.NodeSelectorRequirement, tolerations ...corev1.Toleration) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:     node,
			NodeSelector: nodeSelector,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: terms,
					MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}},
			}}},
			Tolerations: append(tolerations,
				corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			),
		},
	}
	return pod
}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

func TestCanRunOn(t *testing.T) {
	gpu := map[string]string{"gpu": "true"}
	gpuTaint := corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	tolerateGPU := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	inZoneA := []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want bool
	}{
		{name: "plain", pod: daemonPod("n", nil, nil), node: node("n", nil), want: true},
		{name: "cordoned (tolerated by the controller's tolerations)", pod: daemonPod("n", nil, nil),
			node: node("n", nil, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), want: true},
		{name: "untolerated NoSchedule taint", pod: daemonPod("n", nil, nil), node: node("n", nil, gpuTaint), want: false},
		{name: "tolerated NoSchedule taint", pod: daemonPod("n", nil, nil, tolerateGPU), node: node("n", nil, gpuTaint), want: true},
		{name: "untolerated NoExecute taint", pod: daemonPod("n", nil, nil, tolerateGPU),
			node: node("n", nil, corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoExecute}), want: false},
		{name: "untolerated PreferNoSchedule taint", pod: daemonPod("n", nil, nil),
			node: node("n", nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectPreferNoSchedule}), want: true},
		{name: "nodeSelector matches", pod: daemonPod("n", gpu, nil), node: node("n", gpu), want: true},
		{name: "nodeSelector does not match", pod: daemonPod("n", gpu, nil), node: node("n", map[string]string{"gpu": "false"}), want: false},
		{name: "required node affinity matches", pod: daemonPod("n", nil, inZoneA), node: node("n", map[string]string{"zone": "a"}), want: true},
		{name: "required node affinity does not match", pod: daemonPod("n", nil, inZoneA), node: node("n", map[string]string{"zone": "b"}), want: false},
		{name: "the node affinity names another node", pod: daemonPod("m", nil, nil), node: node("n", nil), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CanRunOn(tc.pod, tc.node); got != tc.want {
				t.Errorf("CanRunOn = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodes(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods()
	nodes := NewNodes(pods.Lister(), factory)
	big := node("big", nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoSchedule})
	big.Status.Images = []corev1.ContainerImage{{Names: []string{"registry/image:tag"}, SizeBytes: 1 << 30}}
	for _, obj := range []*corev1.Node{node("plain", nil), big} {
		stripped, err := stripNode(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := factory.Core().V1().Nodes().Informer().GetStore().Add(stripped); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range []*corev1.Pod{daemonPod("plain", nil, nil), daemonPod("big", nil, nil)} {
		if err := pods.Informer().GetStore().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	cached, err := nodes.Nodes.Get("big")
	if err != nil {
		t.Fatal(err)
	}
	if len(cached.Status.Images) != 0 || len(cached.Spec.Taints) != 1 {
		t.Errorf("cached node: %d images, %d taints; want the taints only", len(cached.Status.Images), len(cached.Spec.Taints))
	}
	for _, tc := range []struct {
		pod      string
		node     model.NodeRef
		eligible bool
	}{
		{pod: "agent-plain", node: model.NodeRef{Name: "plain", UID: "uid-plain"}, eligible: true},
		{pod: "agent-big", node: model.NodeRef{Name: "big", UID: "uid-big"}, eligible: false},
		{pod: "agent-unknown", node: model.NodeRef{Name: "plain", UID: "uid-plain"}, eligible: false},
		{pod: "agent-plain", node: model.NodeRef{Name: "gone", UID: "uid-gone"}, eligible: false},
		// An earlier machine of the same name.
		{pod: "agent-plain", node: model.NodeRef{Name: "plain", UID: "uid-earlier"}, eligible: false},
	} {
		if got := nodes.Eligible(model.PodID{Namespace: "default", PodName: tc.pod}, tc.node); got != tc.eligible {
			t.Errorf("Eligible(%s, %v) = %v, want %v", tc.pod, tc.node, got, tc.eligible)
		}
	}
	if uid, found := nodes.NodeUID("plain"); uid != "uid-plain" || !found {
		t.Errorf("NodeUID(plain) = %q, %v; want uid-plain, true", uid, found)
	}
	if uid, found := nodes.NodeUID("gone"); uid != "" || found {
		t.Errorf("NodeUID(gone) = %q, %v; want none", uid, found)
	}
}
