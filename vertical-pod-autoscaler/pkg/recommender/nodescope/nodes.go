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
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// Nodes tells which nodes count for a VPA with scope node.
type Nodes struct {
	Pods       listersv1.PodLister
	Nodes      listersv1.NodeLister
	DaemonSets appslisters.DaemonSetLister
}

// NewNodes returns Nodes over the given pod lister, a node informer of the
// factory, which keeps only what eligibility and identity need of a node
// (name, UID, labels, taints) so that the cache stays small on large clusters,
// and the factory's DaemonSet informer (the controller fetcher's).
func NewNodes(pods listersv1.PodLister, factory informers.SharedInformerFactory) *Nodes {
	informer := factory.Core().V1().Nodes()
	if err := informer.Informer().SetTransform(stripNode); err != nil {
		klog.ErrorS(err, "Cannot trim the cached nodes")
	}
	return &Nodes{Pods: pods, Nodes: informer.Lister(), DaemonSets: factory.Apps().V1().DaemonSets().Lister()}
}

func stripNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion, Labels: node.Labels},
		Spec:       corev1.NodeSpec{Taints: node.Spec.Taints},
	}, nil
}

// Eligible tells whether the DaemonSet that controls the pod keeps its pod on
// the node (KeepsPodOn). A pod without a DaemonSet as its controller, a DaemonSet,
// pod or node that is not known is not eligible, nor a node whose name another
// machine (UID) has now.
func (n *Nodes) Eligible(podID model.PodID, ref model.NodeRef) bool {
	pod, err := n.Pods.Pods(podID.Namespace).Get(podID.PodName)
	if err != nil {
		return false
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "DaemonSet" || owner.APIVersion != appsv1.SchemeGroupVersion.String() {
		return false
	}
	ds, err := n.DaemonSets.DaemonSets(pod.Namespace).Get(owner.Name)
	if err != nil || ds.UID != owner.UID {
		return false
	}
	node, err := n.Nodes.Get(ref.Name)
	if err != nil || node.UID != ref.UID {
		return false
	}
	return KeepsPodOn(ds, node)
}

// NodeUID returns the UID of the node of the given name, and whether the node
// exists.
func (n *Nodes) NodeUID(nodeName string) (types.UID, bool) {
	node, err := n.Nodes.Get(nodeName)
	if err != nil {
		return "", false
	}
	return node.UID, true
}

// NodeLabel returns the value of the label of the given key on the node of the
// given name, and whether the node has it.
func (n *Nodes) NodeLabel(nodeName, key string) (string, bool) {
	node, err := n.Nodes.Get(nodeName)
	if err != nil {
		return "", false
	}
	value, found := node.Labels[key]
	return value, found
}

// KeepsPodOn tells whether the DaemonSet keeps a pod it runs on the node, as
// the DaemonSet controller decides (the second result of
// NodeShouldRunDaemonPod): the template's nodeSelector and required node
// affinity match the node, and its tolerations, with those the controller adds
// to every pod of a DaemonSet, tolerate the node's NoExecute taints. An
// untolerated NoSchedule taint keeps new pods off the node but not the running
// one: the node lifecycle controller adds node.kubernetes.io/not-ready:NoSchedule
// whenever a node is NotReady, for as long as a kubelet restarts. It reads the
// template, not a pod: the controller replaces a pod's required node affinity
// by the node's name.
func KeepsPodOn(ds *appsv1.DaemonSet, node *corev1.Node) bool {
	spec := &ds.Spec.Template.Spec
	tolerations := append(slices.Clip(spec.Tolerations), daemonPodTolerations...)
	// Tolerations with the comparison operators (Gt, Lt) exist only where the
	// API server allows them, so they are honoured here.
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, tolerations,
		func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }, true); untolerated {
		return false
	}
	template := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: spec.NodeSelector, Affinity: spec.Affinity}}
	matches, err := nodeaffinity.GetRequiredNodeAffinity(template).Match(node)
	return err == nil && matches
}

// daemonPodTolerations are the NoExecute tolerations the DaemonSet controller
// adds to every pod of a DaemonSet (k8s.io/kubernetes/pkg/controller/daemon/util
// AddOrUpdateDaemonPodTolerations; the others it adds are of NoSchedule taints,
// which do not remove a running pod). Appending them to the template's has the
// same effect on which NoExecute taints are tolerated as the controller's update.
var daemonPodTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
}
