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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:method=UpdateUses,verb=update,subresource=uses,input=Feature,result=Feature
// +genclient:method=ApplyUses,verb=apply,subresource=uses,input=Feature,result=Feature
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +k8s:prerelease-lifecycle-gen:introduced=1.36
// +k8s:supportsSubresource="/status"
// +k8s:supportsSubresource="/uses"

// Feature records the state of one feature gate across a cluster: its default
// and stage, the value kube-apiserver is configured with, where the cluster is
// in turning it on or off, and which values the components found when they
// checked it. Kubernetes' own features live in kube-system; third parties use
// namespaces of their own. The name is the feature gate's name in lower case.
type Feature struct {
	metav1.TypeMeta `json:""`

	// Standard object's metadata.
	// More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec names the feature.
	// +required
	// +k8s:immutable
	Spec FeatureSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`

	// status is the feature's state, written by kube-apiserver; its uses are
	// written by the components through the uses subresource.
	// +optional
	Status FeatureStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// FeatureSpec names a feature.
type FeatureSpec struct {
	// featureName is the feature gate's name as components spell it on their
	// command line, for example "BalloonPod". metadata.name is its lower-case form.
	// +required
	// +k8s:required
	FeatureName string `json:"featureName" protobuf:"bytes,1,opt,name=featureName"`
}

// FeatureState is where a feature is in the cluster.
// +enum
// +k8s:enum
type FeatureState string

const (
	// FeatureStateOn means the feature is on and every component that reported
	// its use found it on.
	FeatureStateOn FeatureState = "On"
	// FeatureStateOff means the feature is off, the state it left behind is
	// cleaned up and no component reported finding it on.
	FeatureStateOff FeatureState = "Off"
	// FeatureStateTurningOn means the feature was configured on and the tasks of
	// turning it on have not all completed.
	FeatureStateTurningOn FeatureState = "TurningOn"
	// FeatureStateTurningOff means the feature was configured off and the tasks
	// of turning it off have not all completed.
	FeatureStateTurningOff FeatureState = "TurningOff"
)

// FeatureStage is the maturity of a feature.
// +enum
// +k8s:enum
type FeatureStage string

const (
	// FeatureStageAlpha is an alpha feature.
	FeatureStageAlpha FeatureStage = "Alpha"
	// FeatureStageBeta is a beta feature.
	FeatureStageBeta FeatureStage = "Beta"
	// FeatureStageGA is a generally available feature.
	FeatureStageGA FeatureStage = "GA"
	// FeatureStageDeprecated is a deprecated feature.
	FeatureStageDeprecated FeatureStage = "Deprecated"
)

const (
	// MaxFeatureTasks is the most tasks a transition may have.
	MaxFeatureTasks = 32
	// MaxFeatureUses is the most entries in status.uses: one per component,
	// value, never one per instance.
	MaxFeatureUses = 64
	// MaxFeatureUseInstances is the most instance names one use may sample.
	MaxFeatureUseInstances = 10
	// MaxFeatureConditions is the most conditions a Feature may have.
	MaxFeatureConditions = 16
	// MaxFeatureOwners is the most components status.owners may name.
	MaxFeatureOwners = 16
)

// Condition types of a Feature, set by kube-apiserver's server flow.
const (
	// FeatureConditionTransitioning is True while a transition runs; its
	// reason is the transition (TurnOn, TurnOff, Upgrade, Downgrade) and its
	// message says what the current task waits for.
	FeatureConditionTransitioning = "Transitioning"
	// FeatureConditionTaskFailed is True when the last run of the current task failed.
	FeatureConditionTaskFailed = "TaskFailed"
	// FeatureConditionConfigurationAgreed is False when kube-apiservers are
	// configured with different values.
	FeatureConditionConfigurationAgreed = "ConfigurationAgreed"
	// FeatureConditionUpgradeSafe says whether the feature's state allows
	// moving kube-apiserver to a newer minor version.
	FeatureConditionUpgradeSafe = "UpgradeSafe"
	// FeatureConditionDowngradeSafe says whether the feature's state allows
	// moving kube-apiserver to an older minor version.
	FeatureConditionDowngradeSafe = "DowngradeSafe"
)

// FeatureStatus is the state of a feature.
type FeatureStatus struct {
	// default is the feature's default value at the announcing kube-apiserver's
	// emulation version.
	// +optional
	Default *bool `json:"default,omitempty" protobuf:"varint,1,opt,name=default"`

	// stage is the feature's maturity at that version.
	// +optional
	// +k8s:optional
	Stage FeatureStage `json:"stage,omitempty" protobuf:"bytes,2,opt,name=stage,casttype=FeatureStage"`

	// lockToDefault is true when the feature cannot be set away from its default.
	// +optional
	LockToDefault *bool `json:"lockToDefault,omitempty" protobuf:"varint,3,opt,name=lockToDefault"`

	// configuredValue is the value the announcing kube-apiserver runs with: its
	// default unless set on its command line.
	// +optional
	ConfiguredValue *bool `json:"configuredValue,omitempty" protobuf:"varint,4,opt,name=configuredValue"`

	// announcer is the identity of the kube-apiserver that last announced the
	// feature (its apiserver identity lease).
	// +optional
	Announcer string `json:"announcer,omitempty" protobuf:"bytes,5,opt,name=announcer"`

	// binaryVersion is the binary version, major.minor, of the announcing
	// kube-apiserver, for example "1.36".
	// +optional
	BinaryVersion string `json:"binaryVersion,omitempty" protobuf:"bytes,6,opt,name=binaryVersion"`

	// emulationVersion is the emulation version, major.minor, of the announcing
	// kube-apiserver.
	// +optional
	EmulationVersion string `json:"emulationVersion,omitempty" protobuf:"bytes,7,opt,name=emulationVersion"`

	// unknownSinceVersion is the first binary version of kube-apiserver that did
	// not know the feature, after an upgrade or a downgrade; empty while the
	// running kube-apiservers know it.
	// +optional
	UnknownSinceVersion string `json:"unknownSinceVersion,omitempty" protobuf:"bytes,8,opt,name=unknownSinceVersion"`

	// state is where the feature is in the cluster.
	// +optional
	// +k8s:optional
	State FeatureState `json:"state,omitempty" protobuf:"bytes,9,opt,name=state,casttype=FeatureState"`

	// tasks are the pending tasks of the current transition, in the order they
	// run; the first one runs next. Task names are unique. Only the server
	// writes them, as a whole: the order is part of the value.
	// +optional
	// +listType=atomic
	// +k8s:optional
	// +k8s:maxItems=32
	Tasks []FeatureTask `json:"tasks,omitempty" protobuf:"bytes,10,rep,name=tasks"`

	// conditions describe the feature's state in more detail.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	// +k8s:optional
	// +k8s:alpha(since: "1.37")=+k8s:listType=map
	// +k8s:alpha(since: "1.37")=+k8s:listMapKey=type
	// +k8s:maxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,11,rep,name=conditions"`

	// uses are the values components found when they checked the feature: one
	// entry per component, value and versions, each with a small sample of the
	// instances that reported it. They are written through the uses
	// subresource. The list is a map keyed by component, value, binary version
	// and emulation version, so that the components' server-side applies
	// merge: each writer owns its own entries and its own name in their
	// instances, and no writer drops another's.
	// +optional
	// +listType=map
	// +listMapKey=component
	// +listMapKey=value
	// +listMapKey=binaryVersion
	// +listMapKey=emulationVersion
	// +k8s:optional
	// +k8s:listType=map
	// +k8s:listMapKey=component
	// +k8s:listMapKey=value
	// +k8s:listMapKey=binaryVersion
	// +k8s:listMapKey=emulationVersion
	// +k8s:maxItems=64
	Uses []FeatureUse `json:"uses,omitempty" protobuf:"bytes,12,rep,name=uses"`

	// owners are the components that check the feature, and so run with its
	// value: kube-apiserver once the announcing kube-apiserver has checked it,
	// and every other component that reports a use (components report only
	// the features they check). A component that is not an owner does not
	// make the feature unsafe to upgrade by running the other value. Set by
	// kube-apiserver's server flow; at most MaxFeatureOwners.
	// +optional
	// +listType=set
	// +k8s:optional
	// +k8s:listType=set
	// +k8s:maxItems=16
	// +k8s:eachVal=+k8s:format=k8s-short-name
	Owners []string `json:"owners,omitempty" protobuf:"bytes,13,rep,name=owners"`
}

// FeatureTask is a step of a transition that must complete before the feature
// reaches On or Off.
type FeatureTask struct {
	// name is the task's registered name, for example "WaitForUses".
	// +required
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`

	// startTime is when the task first ran.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty" protobuf:"bytes,2,opt,name=startTime"`

	// lastAttemptTime is when the task last ran.
	// +optional
	LastAttemptTime *metav1.Time `json:"lastAttemptTime,omitempty" protobuf:"bytes,3,opt,name=lastAttemptTime"`

	// lastError is why the task's last run did not complete; empty when it has
	// not failed.
	// +optional
	// +k8s:optional
	// +k8s:maxLength=1024
	LastError string `json:"lastError,omitempty" protobuf:"bytes,4,opt,name=lastError"`
}

// FeatureUse is the value one kind of component found when it checked a feature.
type FeatureUse struct {
	// component is the kind of component, for example "kubelet" or
	// "kube-apiserver".
	// +required
	// +k8s:required
	// +k8s:format=k8s-short-name
	Component string `json:"component" protobuf:"bytes,1,opt,name=component"`

	// value is the value the component found.
	// +required
	Value bool `json:"value" protobuf:"varint,2,opt,name=value"`

	// instances is a sample of the instances that reported this value (node
	// names for kubelets, identities for the others), at most
	// MaxFeatureUseInstances.
	// +optional
	// +listType=set
	// +k8s:optional
	// +k8s:listType=set
	// +k8s:maxItems=10
	Instances []string `json:"instances,omitempty" protobuf:"bytes,3,rep,name=instances"`

	// firstReportTime is when the entry was written.
	// +optional
	FirstReportTime *metav1.Time `json:"firstReportTime,omitempty" protobuf:"bytes,4,opt,name=firstReportTime"`

	// binaryVersion is the version, major.minor, of the binary of the
	// instances that reported this value, for example "1.36".
	// +required
	BinaryVersion string `json:"binaryVersion" protobuf:"bytes,5,opt,name=binaryVersion"`

	// emulationVersion is the version, major.minor, whose behaviour these
	// instances run: their binary version unless they emulate an older one.
	// Together with binaryVersion it tells version skew that Kubernetes
	// supports from a component configured otherwise than the cluster.
	// +required
	EmulationVersion string `json:"emulationVersion" protobuf:"bytes,6,opt,name=emulationVersion"`

	// lastReportTime is when one of the sampled instances last reported or
	// renewed the entry. The sampled instances renew it periodically, and
	// kube-apiserver removes an entry that nobody renewed for a while: its
	// instances are gone or no longer report. Set by the server.
	// +optional
	LastReportTime *metav1.Time `json:"lastReportTime,omitempty" protobuf:"bytes,7,opt,name=lastReportTime"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +k8s:prerelease-lifecycle-gen:introduced=1.36

// FeatureList is a list of Features.
type FeatureList struct {
	metav1.TypeMeta `json:""`

	// Standard list metadata.
	// More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items is the list of Features.
	Items []Feature `json:"items" protobuf:"bytes,2,rep,name=items"`
}
