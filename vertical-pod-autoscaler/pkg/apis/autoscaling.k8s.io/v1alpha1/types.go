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

package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
)

const (
	// MaxNodesPerSlice is the most nodes one VerticalPodAutoscalerSlice holds.
	// 100 nodes with ten containers each stay far below etcd's object size limit.
	MaxNodesPerSlice = 100
	// SliceRefreshInterval is how often the recommender rewrites a
	// VerticalPodAutoscalerSlice whose content did not change, to renew its
	// updateTime.
	SliceRefreshInterval = 10 * time.Minute
	// SliceStaleAfter is the age of updateTime from which a
	// VerticalPodAutoscalerSlice is stale: the updater leaves the pods whose
	// recommendation it holds alone, while the admission controller still
	// gives them its values, so that a recommender outage moves no pod. Three
	// refresh intervals, so that two missed refreshes do not matter.
	SliceStaleAfter = 3 * SliceRefreshInterval

	// VPANameLabel is the label that names the VerticalPodAutoscaler of a slice,
	// so that its slices are listed with a label selector. Its value is
	// VPANameLabelValue of the VerticalPodAutoscaler's name; the slice's vpaName
	// holds the name itself.
	VPANameLabel = "autoscaling.k8s.io/vpa-name"

	// UnscopedSinceAnnotation is set by the recommender on a checkpoint slice
	// whose VerticalPodAutoscaler no longer has scope Node: the time (RFC
	// 3339) it first saw it so. The recommender deletes the slice once its
	// grace period has passed since then; a write of the slice, once the
	// scope is back, drops the annotation.
	UnscopedSinceAnnotation = "autoscaling.k8s.io/unscoped-since"

	// MaxCheckpointSliceBytes is the size (JSON) up to which the recommender
	// fills a VerticalPodAutoscalerCheckpointSlice with nodes: half of 1 MiB,
	// well below etcd's default request limit of 1.5 MiB.
	MaxCheckpointSliceBytes = 512 * 1024
)

// VPANameLabelValue returns the value of VPANameLabel for the slices of the
// VerticalPodAutoscaler of the given name. An object name may have 253
// characters, a label value only 63: a longer name is cut to its first 52
// characters, without the dots it ends with, followed by a dash and the first
// 10 hex digits of the name's SHA-256, so that two long names with the same
// beginning get different values. The value is also the slices' generateName
// before its last dash, so a dot before that dash would make every slice name
// invalid.
func VPANameLabelValue(vpaName string) string {
	if len(validation.IsValidLabelValue(vpaName)) == 0 {
		return vpaName
	}
	sum := sha256.Sum256([]byte(vpaName))
	return strings.TrimRight(vpaName[:min(len(vpaName), validation.LabelValueMaxLength-11)], ".") + "-" + hex.EncodeToString(sum[:])[:10]
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=vpaslice
// +kubebuilder:printcolumn:name="VPA",type="string",JSONPath=".vpaName"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups"

// VerticalPodAutoscalerSlice holds the per-node recommendations of one
// VerticalPodAutoscaler with scope node, for at most 100 nodes. The recommender
// writes the slices of a VerticalPodAutoscaler and owns them (ownerReference),
// the admission controller and the updater read them. A node that has no entry
// gets its node group's (groups), or, in no group with one, the
// VerticalPodAutoscaler's own recommendation (status.recommendation).
type VerticalPodAutoscalerSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// vpaName is the name of the VerticalPodAutoscaler, in the slice's
	// namespace, whose recommendations the slice holds.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="vpaName is immutable"
	VPAName string `json:"vpaName"`

	// observedGeneration is the metadata.generation of the
	// VerticalPodAutoscaler when the recommender last wrote the slice.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// updateTime is when the recommender last wrote the slice; it rewrites
	// unchanged slices every 10 minutes (SliceRefreshInterval). A slice
	// without it, or 30 minutes old (SliceStaleAfter), is stale: the updater
	// neither evicts nor resizes the pods whose recommendation it holds, and
	// the admission controller still gives new pods its values.
	// +nullable
	// +optional
	UpdateTime metav1.Time `json:"updateTime,omitempty"`

	// nodes holds the recommendation of each node of the slice.
	// +listType=map
	// +listMapKey=nodeName
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Nodes []NodeRecommendation `json:"nodes,omitempty"`

	// groups holds the recommendation of each node group of the slice's nodes
	// (by the VerticalPodAutoscaler's nodeScope.groupLabel) whose nodes have
	// enough history together. A node of a group that has no entry of its own,
	// such as a new node or one that registered again under the same name,
	// gets its group's: the admission controller and the updater find it by
	// the node's value of the group label, in any slice of the
	// VerticalPodAutoscaler.
	// +listType=map
	// +listMapKey=labelValue
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Groups []GroupRecommendation `json:"groups,omitempty"`
}

// NodeRecommendation is the recommendation for the pod on one node.
type NodeRecommendation struct {
	// nodeName is the name of the node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// nodeUID is the UID of the node, which tells the machine the
	// recommendation is for from a later one of the same name: the admission
	// controller and the updater apply the entry only to the pods of the Node
	// of that name and UID, and an entry without it to none.
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty"`

	// computedTime is when the recommender last computed a recommendation for
	// the node that this entry stands for (the entry itself, or one within
	// the rewrite threshold of it). An entry the recommender keeps while it
	// cannot compute one (the node's own history is too short again) keeps
	// its computedTime, so that it goes stale (SliceStaleAfter) although its
	// slice is written. Without it, the entry is as old as its slice.
	// +optional
	ComputedTime *metav1.Time `json:"computedTime,omitempty"`

	// recommendation holds the resources recommended for the containers of
	// the pod on this node.
	Recommendation vpa_types.RecommendedPodResources `json:"recommendation"`
}

// GroupRecommendation is the recommendation for the pod on a node of one node
// group.
type GroupRecommendation struct {
	// labelValue is the value of the group label on the group's nodes.
	// +kubebuilder:validation:MaxLength=63
	LabelValue string `json:"labelValue"`

	// recommendation holds the resources recommended for the containers of
	// the pod on a node of the group that has no entry of its own.
	Recommendation vpa_types.RecommendedPodResources `json:"recommendation"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VerticalPodAutoscalerSliceList is a list of VerticalPodAutoscalerSlice objects.
type VerticalPodAutoscalerSliceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata"`

	// items is the list of slices.
	Items []VerticalPodAutoscalerSlice `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=vpacheckpointslice
// +kubebuilder:printcolumn:name="VPA",type="string",JSONPath=".vpaName"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups"

// VerticalPodAutoscalerCheckpointSlice holds the checkpoints of the per-node
// usage history of one VerticalPodAutoscaler with scope node, for as many nodes
// as fit in 512 KiB. The recommender writes them and reads them back when it
// starts, so that a restart keeps the history, and with it the recommendation,
// of each node. The VerticalPodAutoscaler owns its checkpoint slices
// (ownerReference); the DaemonSet-wide history stays in its
// VerticalPodAutoscalerCheckpoints.
type VerticalPodAutoscalerCheckpointSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// vpaName is the name of the VerticalPodAutoscaler, in the slice's
	// namespace, whose history the slice holds.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="vpaName is immutable"
	VPAName string `json:"vpaName"`

	// nodes holds the checkpoints of the pod on each node of the slice. The
	// recommender fills a slice up to 512 KiB (MaxCheckpointSliceBytes); no
	// entry is smaller than 65 bytes (a name and a UID), so it never writes
	// more than 8192. The list is atomic, as EndpointSlice's endpoints: one
	// writer replaces it whole, and per-entry field management would double
	// the stored size and the cost of every write. Of a node listed twice the
	// recommender loads the more recent entry.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8192
	// +optional
	Nodes []NodeCheckpoint `json:"nodes,omitempty"`
}

// NodeCheckpoint is the checkpointed history of the pod on one node.
type NodeCheckpoint struct {
	// nodeName is the name of the node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// nodeUID is the UID of the node, which tells the machine whose history
	// this is from a later one of the same name. An entry without it is not
	// loaded.
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty"`

	// containers holds the checkpoint of each container of the node's pod.
	// +listType=map
	// +listMapKey=containerName
	// +optional
	Containers []ContainerCheckpoint `json:"containers,omitempty"`
}

// ContainerCheckpoint is the checkpoint of one container.
type ContainerCheckpoint struct {
	// containerName is the name of the container.
	// +kubebuilder:validation:MinLength=1
	ContainerName string `json:"containerName"`

	// checkpoint is the container's aggregated usage, in the format of
	// VerticalPodAutoscalerCheckpoint's status.
	Checkpoint vpa_types.VerticalPodAutoscalerCheckpointStatus `json:"checkpoint"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VerticalPodAutoscalerCheckpointSliceList is a list of
// VerticalPodAutoscalerCheckpointSlice objects.
type VerticalPodAutoscalerCheckpointSliceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata"`

	// items is the list of checkpoint slices.
	Items []VerticalPodAutoscalerCheckpointSlice `json:"items"`
}
