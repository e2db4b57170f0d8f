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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// Nodes tells which nodes count for a VPA with scope node.
type Nodes struct {
	Pods  listersv1.PodLister
	Nodes listersv1.NodeLister
}

// NewNodes returns Nodes over the given pod lister and a node informer of the
// factory, which keeps only what eligibility and identity need of a node
// (name, UID, labels, taints) so that the cache stays small on large clusters.
func NewNodes(pods listersv1.PodLister, factory informers.SharedInformerFactory) *Nodes {
	informer := factory.Core().V1().Nodes()
	if err := informer.Informer().SetTransform(stripNode); err != nil {
		klog.ErrorS(err, "Cannot trim the cached nodes")
	}
	return &Nodes{Pods: pods, Nodes: informer.Lister()}
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

// Eligible tells whether the DaemonSet of the pod can run on the node, by the
// rules of the DaemonSet controller: no taint with effect NoSchedule or
// NoExecute that the pod does not tolerate, and the pod's nodeSelector and
// required node affinity match the node. It reads the pod's own spec, which
// holds the DaemonSet's template and the tolerations the DaemonSet controller
// adds (not-ready, unreachable, unschedulable, pressure conditions). A pod or
// node that is not known is not eligible, nor a node whose name another
// machine (UID) has now.
func (n *Nodes) Eligible(podID model.PodID, ref model.NodeRef) bool {
	pod, err := n.Pods.Pods(podID.Namespace).Get(podID.PodName)
	if err != nil {
		return false
	}
	node, err := n.Nodes.Get(ref.Name)
	if err != nil || node.UID != ref.UID {
		return false
	}
	return CanRunOn(pod, node)
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

// CanRunOn tells whether the pod may run on the node: it tolerates the node's
// NoSchedule and NoExecute taints and its required node affinity (nodeSelector
// and requiredDuringSchedulingIgnoredDuringExecution) matches the node.
func CanRunOn(pod *corev1.Pod, node *corev1.Node) bool {
	// Tolerations with the comparison operators (Gt, Lt) exist only where the
	// API server allows them, so they are honoured here.
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, true); untolerated {
		return false
	}
	matches, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	return err == nil && matches
}
