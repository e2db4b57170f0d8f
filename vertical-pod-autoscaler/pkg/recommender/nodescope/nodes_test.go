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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// newDaemonSet returns a DaemonSet whose template has the given nodeSelector,
// required node affinity and tolerations.
func newDaemonSet(nodeSelector map[string]string, terms []corev1.NodeSelectorRequirement, tolerations ...corev1.Toleration) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
			Spec:       corev1.PodSpec{NodeSelector: nodeSelector, Tolerations: tolerations},
		}},
	}
	if terms != nil {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: terms}},
		}}}
	}
	return ds
}

// daemonSetPod returns the pod of the DaemonSet on the node as the DaemonSet
// controller of Kubernetes v1.36 creates it (syncNodes in
// pkg/controller/daemon) and the scheduler binds it: the template with the
// controller's tolerations (util.CreatePodTemplate), its required node
// affinity replaced by the node's name
// (util.ReplaceDaemonSetPodNodeNameNodeAffinity), the DaemonSet as controller
// owner (metav1.NewControllerRef), then spec.nodeName. k8s.io/kubernetes is not
// a module the VPA can depend on, so the shape is built here.
func daemonSetPod(ds *appsv1.DaemonSet, node string) *corev1.Pod {
	spec := ds.Spec.Template.Spec.DeepCopy()
	for _, toleration := range []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	} {
		updated := false
		for i := range spec.Tolerations {
			if toleration.MatchToleration(&spec.Tolerations[i]) {
				spec.Tolerations[i], updated = toleration, true
			}
		}
		if !updated {
			spec.Tolerations = append(spec.Tolerations, toleration)
		}
	}
	pin := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}
	switch {
	case spec.Affinity == nil:
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: pin}}}
	case spec.Affinity.NodeAffinity == nil:
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: pin}}
	case spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: pin}
	default:
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = pin
	}
	spec.NodeName = node
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ds.Name + "-" + node,
			GenerateName:    ds.Name + "-",
			Namespace:       ds.Namespace,
			Labels:          ds.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))},
		},
		Spec: *spec,
	}
}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

// newNodes returns Nodes over informer caches of the given objects.
func newNodes(t *testing.T, objs ...runtime.Object) *Nodes {
	t.Helper()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	pods := factory.Core().V1().Pods()
	nodes := NewNodes(pods.Lister(), factory)
	for _, obj := range objs {
		var store cache.Store
		switch o := obj.(type) {
		case *corev1.Pod:
			store = pods.Informer().GetStore()
		case *corev1.Node:
			store = factory.Core().V1().Nodes().Informer().GetStore()
			stripped, err := stripNode(o)
			if err != nil {
				t.Fatal(err)
			}
			obj = stripped.(*corev1.Node)
		case *appsv1.DaemonSet:
			store = factory.Apps().V1().DaemonSets().Informer().GetStore()
		}
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// TestEligibleDaemonSetPods checks eligibility with pods as the DaemonSet
// controller makes them, whose required node affinity names only their node.
func TestEligibleDaemonSetPods(t *testing.T) {
	gpu := map[string]string{"gpu": "true"}
	gpuTaint := corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	tolerateGPU := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	inZoneA := []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		node *corev1.Node
		want bool
	}{
		{name: "plain", ds: newDaemonSet(nil, nil), node: node("n", nil), want: true},
		{name: "cordoned (tolerated by the controller's tolerations)", ds: newDaemonSet(nil, nil),
			node: node("n", nil, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), want: true},
		{name: "memory pressure (tolerated by the controller's tolerations)", ds: newDaemonSet(nil, nil),
			node: node("n", nil, corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}), want: true},
		// The controller keeps a running pod on a node with a NoSchedule taint
		// it does not tolerate: the node still runs the pod.
		{name: "untolerated NoSchedule taint", ds: newDaemonSet(nil, nil), node: node("n", nil, gpuTaint), want: true},
		{name: "NotReady (the node lifecycle controller's NoSchedule taint)", ds: newDaemonSet(nil, nil),
			node: node("n", nil, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}), want: true},
		{name: "unreachable (NoExecute, tolerated by the controller's tolerations)", ds: newDaemonSet(nil, nil),
			node: node("n", nil, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}), want: true},
		{name: "tolerated NoSchedule taint", ds: newDaemonSet(nil, nil, tolerateGPU), node: node("n", nil, gpuTaint), want: true},
		{name: "untolerated NoExecute taint", ds: newDaemonSet(nil, nil, tolerateGPU),
			node: node("n", nil, corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoExecute}), want: false},
		{name: "untolerated PreferNoSchedule taint", ds: newDaemonSet(nil, nil),
			node: node("n", nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectPreferNoSchedule}), want: true},
		{name: "nodeSelector matches", ds: newDaemonSet(gpu, nil), node: node("n", gpu), want: true},
		{name: "nodeSelector does not match", ds: newDaemonSet(gpu, nil), node: node("n", map[string]string{"gpu": "false"}), want: false},
		{name: "required node affinity matches", ds: newDaemonSet(nil, inZoneA), node: node("n", map[string]string{"zone": "a"}), want: true},
		{name: "required node affinity does not match", ds: newDaemonSet(nil, inZoneA), node: node("n", map[string]string{"zone": "b"}), want: false},
		{name: "required node affinity, node without the label", ds: newDaemonSet(nil, inZoneA), node: node("n", nil), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := daemonSetPod(tc.ds, tc.node.Name)
			if terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(terms) != 1 || len(terms[0].MatchExpressions) != 0 {
				t.Fatalf("the pod's required node affinity %+v, want the node's name only", terms)
			}
			nodes := newNodes(t, tc.ds, pod, tc.node)
			if got := nodes.Eligible(model.PodID{Namespace: "default", PodName: pod.Name}, model.NodeRef{Name: tc.node.Name, UID: tc.node.UID}); got != tc.want {
				t.Errorf("Eligible = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEligibleOwner: a pod counts only through the DaemonSet that controls it.
func TestEligibleOwner(t *testing.T) {
	ds := newDaemonSet(nil, nil)
	n := node("n", nil)
	ref := model.NodeRef{Name: "n", UID: "uid-n"}
	orphan := daemonSetPod(ds, "n")
	orphan.OwnerReferences = nil
	recreated := ds.DeepCopy()
	recreated.UID = "ds-uid-2"
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want bool
	}{
		{name: "controlled by the DaemonSet", objs: []runtime.Object{ds, daemonSetPod(ds, "n"), n}, want: true},
		{name: "no controller", objs: []runtime.Object{ds, orphan, n}, want: false},
		{name: "DaemonSet not known", objs: []runtime.Object{daemonSetPod(ds, "n"), n}, want: false},
		{name: "DaemonSet created again", objs: []runtime.Object{recreated, daemonSetPod(ds, "n"), n}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newNodes(t, tc.objs...).Eligible(model.PodID{Namespace: "default", PodName: "agent-n"}, ref); got != tc.want {
				t.Errorf("Eligible = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodes(t *testing.T) {
	big := node("big", nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute})
	big.Status.Images = []corev1.ContainerImage{{Names: []string{"registry/image:tag"}, SizeBytes: 1 << 30}}
	ds := newDaemonSet(nil, nil)
	nodes := newNodes(t, ds, node("plain", map[string]string{"pool": "spot"}), big, daemonSetPod(ds, "plain"), daemonSetPod(ds, "big"))
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
	// The cache keeps the labels, by which nodes are grouped.
	for _, tc := range []struct {
		node, key, value string
		found            bool
	}{
		{node: "plain", key: "pool", value: "spot", found: true},
		{node: "plain", key: "zone"},
		{node: "big", key: "pool"},
		{node: "gone", key: "pool"},
	} {
		if value, found := nodes.NodeLabel(tc.node, tc.key); value != tc.value || found != tc.found {
			t.Errorf("NodeLabel(%s, %s) = %q, %v; want %q, %v", tc.node, tc.key, value, found, tc.value, tc.found)
		}
	}
}
