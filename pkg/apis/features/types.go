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

package features

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Feature records the state of one feature gate across a cluster: its default
// and stage, the value kube-apiserver is configured with, where the cluster is
// in turning it on or off, and which values the components found when they
// checked it. Kubernetes' own features live in kube-system; third parties use
// namespaces of their own. The name is the feature gate's name in lower case.
type Feature struct {
	metav1.TypeMeta

	// Standard object's metadata.
	// More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata
	// +optional
	metav1.ObjectMeta

	// spec names the feature.
	// +required
	Spec FeatureSpec

	// status is the feature's state, written by kube-apiserver; its uses are
	// written by the components through the uses subresource.
	// +optional
	Status FeatureStatus
}

// FeatureSpec names a feature.
type FeatureSpec struct {
	// featureName is the feature gate's name as components spell it on their
	// command line, for example "BalloonPod". metadata.name is its lower-case form.
	// +required
	FeatureName string
}

// FeatureState is where a feature is in the cluster.
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
	// MaxFeatureTaskNameLength is the longest task name: a qualified name's,
	// a DNS subdomain, '/' and 63 characters.
	MaxFeatureTaskNameLength = 253 + 1 + 63
	// MaxFeatureTaskErrorLength is the longest lastError of a task.
	MaxFeatureTaskErrorLength = 1024
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
	Default *bool

	// stage is the feature's maturity at that version.
	// +optional
	Stage FeatureStage

	// lockToDefault is true when the feature cannot be set away from its default.
	// +optional
	LockToDefault *bool

	// configuredValue is the value the announcing kube-apiserver runs with: its
	// default unless set on its command line.
	// +optional
	ConfiguredValue *bool

	// announcer is the identity of the kube-apiserver that last announced the
	// feature (its apiserver identity lease).
	// +optional
	Announcer string

	// binaryVersion is the binary version, major.minor, of the announcing
	// kube-apiserver, for example "1.36".
	// +optional
	BinaryVersion string

	// emulationVersion is the emulation version, major.minor, of the announcing
	// kube-apiserver.
	// +optional
	EmulationVersion string

	// unknownSinceVersion is the first binary version of kube-apiserver that did
	// not know the feature, after an upgrade or a downgrade; empty while the
	// running kube-apiservers know it.
	// +optional
	UnknownSinceVersion string

	// state is where the feature is in the cluster.
	// +optional
	State FeatureState

	// tasks are the pending tasks of the current transition, in the order they
	// run; the first one runs next. Task names are unique. Only the server
	// writes them, as a whole: the order is part of the value.
	// +optional
	// +listType=atomic
	Tasks []FeatureTask

	// conditions describe the feature's state in more detail.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition

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
	Uses []FeatureUse

	// owners are the components that check the feature, and so run with its
	// value: kube-apiserver once the announcing kube-apiserver has checked it,
	// and every other component that reports a use (components report only
	// the features they check). A component that is not an owner does not
	// make the feature unsafe to upgrade by running the other value. Set by
	// kube-apiserver's server flow; at most MaxFeatureOwners.
	// +optional
	// +listType=set
	Owners []string
}

// FeatureTask is a step of a transition that must complete before the feature
// reaches On or Off.
type FeatureTask struct {
	// name is the task's registered name, for example "WaitForUses".
	// +required
	Name string

	// startTime is when the task first ran.
	// +optional
	StartTime *metav1.Time

	// lastAttemptTime is when the task last ran.
	// +optional
	LastAttemptTime *metav1.Time

	// lastError is why the task's last run did not complete; empty when it has
	// not failed.
	// +optional
	LastError string
}

// FeatureUse is the value one kind of component found when it checked a feature.
type FeatureUse struct {
	// component is the kind of component, for example "kubelet" or
	// "kube-apiserver".
	// +required
	Component string

	// value is the value the component found.
	// +required
	Value bool

	// instances is a sample of the instances that reported this value (node
	// names for kubelets, identities for the others), at most
	// MaxFeatureUseInstances.
	// +optional
	// +listType=set
	Instances []string

	// firstReportTime is when the entry was written.
	// +optional
	FirstReportTime *metav1.Time

	// binaryVersion is the version, major.minor, of the binary of the
	// instances that reported this value, for example "1.36".
	// +required
	BinaryVersion string

	// emulationVersion is the version, major.minor, whose behaviour these
	// instances run: their binary version unless they emulate an older one.
	// Together with binaryVersion it tells version skew that Kubernetes
	// supports from a component configured otherwise than the cluster.
	// +required
	EmulationVersion string

	// lastReportTime is when one of the sampled instances last reported or
	// renewed the entry. The sampled instances renew it periodically, and
	// kube-apiserver removes an entry that nobody renewed for a while: its
	// instances are gone or no longer report. Set by the server.
	// +optional
	LastReportTime *metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FeatureList is a list of Features.
type FeatureList struct {
	metav1.TypeMeta

	// Standard list metadata.
	// More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata
	// +optional
	metav1.ListMeta

	// items is the list of Features.
	Items []Feature
}
