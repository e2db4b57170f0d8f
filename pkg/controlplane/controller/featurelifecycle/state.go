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

package featurelifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/ptr"
)

// apiServerComponent is the component kube-apiserver reports its uses as.
const apiServerComponent = "kube-apiserver"

// stageOf returns the stage of a feature gate's spec.
func stageOf(spec featuregate.FeatureSpec) featuresv1alpha1.FeatureStage {
	switch spec.PreRelease {
	case featuregate.Alpha:
		return featuresv1alpha1.FeatureStageAlpha
	case featuregate.Beta:
		return featuresv1alpha1.FeatureStageBeta
	case featuregate.GA:
		return featuresv1alpha1.FeatureStageGA
	case featuregate.Deprecated:
		return featuresv1alpha1.FeatureStageDeprecated
	}
	return ""
}

func statusEqual(a, b *featuresv1alpha1.FeatureStatus) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}

// reconcile brings the status of a Feature the binary knows up to date: what
// the binary announces, the start of a transition, and the conditions. It
// runs no task.
func (c *Controller) reconcile(f *featuresv1alpha1.Feature, key featuregate.Feature, now time.Time) {
	s := &f.Status
	spec := c.cfg.Gate.GetAll()[key]
	configured := c.cfg.Gate.Enabled(key)
	versionChange := c.versionChange(s.BinaryVersion)

	s.Default = ptr.To(spec.Default)
	s.Stage = stageOf(spec)
	s.LockToDefault = spec.LockToDefault
	s.ConfiguredValue = ptr.To(configured)
	s.Announcer = c.cfg.Identity
	s.BinaryVersion = c.cfg.BinaryVersion.String()
	s.EmulationVersion = fmt.Sprintf("%d.%d", c.cfg.EmulationVersion.Major(), c.cfg.EmulationVersion.Minor())
	s.UnknownSinceVersion = ""

	target, turning, transition := featuresv1alpha1.FeatureStateOff, featuresv1alpha1.FeatureStateTurningOff, TurnOff
	if configured {
		target, turning, transition = featuresv1alpha1.FeatureStateOn, featuresv1alpha1.FeatureStateTurningOn, TurnOn
	}
	disagreeing := disagreeingAPIServers(s.Uses, configured, names(c.liveMembers()))
	setCondition(f, now, featuresv1alpha1.FeatureConditionConfigurationAgreed, len(disagreeing) == 0, "Agreed", "",
		"APIServersDisagree", fmt.Sprintf("kube-apiservers configured %t: %s", !configured, strings.Join(disagreeing, ", ")))

	switch {
	case s.State == "":
		// The first announcement: nothing was turned on or off before.
		s.State = target
	case s.State == turning:
	case s.State != target || len(disagreeing) > 0:
		// Turned the other way, flipped back mid-transition, or an apiserver
		// still runs the old value: (re)start towards the configured value.
		s.State = turning
		// Version tasks still pending (a minor version changed) are kept after
		// the new transition's tasks: data written by the previous release must
		// still be migrated.
		s.Tasks = appendNew(taskEntries(c.cfg.Tasks.TasksFor(key, transition)), c.pendingVersionTasks(key, s.Tasks)...)
		setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, true, string(transition), "", "", "")
		meta.RemoveStatusCondition(&s.Conditions, featuresv1alpha1.FeatureConditionTaskFailed)
		c.recorder.Eventf(f, nil, "Normal", "TransitionStarted", string(transition), "%s is %s; tasks: %s", f.Spec.FeatureName, turning, strings.Join(taskNamesOf(s.Tasks), ", "))
	}
	if len(s.Tasks) == 0 && s.State == target {
		setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, false, "", "", "Stable", "")
	}
	if versionChange != "" && (s.State == featuresv1alpha1.FeatureStateOn || s.State == featuresv1alpha1.FeatureStateOff) {
		if tasks := c.cfg.Tasks.TasksFor(key, versionChange); len(tasks) > 0 {
			// Each task once: during a rolling upgrade the announcer changes
			// between old and new servers, and every change queues the tasks
			// of its direction again.
			s.Tasks = appendNew(s.Tasks, taskEntries(tasks)...)
			setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, true, string(versionChange), "", "", "")
		}
	}
	c.setSafetyConditions(f, key, now)
}

// versionChange returns the version transition from the binary version
// stored by the last announcer to this binary's, by minor version.
func (c *Controller) versionChange(stored string) Transition {
	previous, err := version.ParseGeneric(stored)
	if err != nil {
		return ""
	}
	mine := c.cfg.BinaryVersion
	switch {
	case mine.Major() > previous.Major() || mine.Major() == previous.Major() && mine.Minor() > previous.Minor():
		return Upgrade
	case mine.Major() < previous.Major() || mine.Major() == previous.Major() && mine.Minor() < previous.Minor():
		return Downgrade
	}
	return ""
}

// appendNew appends the entries whose task is not in tasks yet.
func appendNew(tasks []featuresv1alpha1.FeatureTask, entries ...featuresv1alpha1.FeatureTask) []featuresv1alpha1.FeatureTask {
	for _, entry := range entries {
		if !slices.ContainsFunc(tasks, func(t featuresv1alpha1.FeatureTask) bool { return t.Name == entry.Name }) {
			tasks = append(tasks, entry)
		}
	}
	return tasks
}

// pendingVersionTasks returns the entries of tasks that belong to a version
// change (Upgrade or Downgrade) of the feature.
func (c *Controller) pendingVersionTasks(key featuregate.Feature, tasks []featuresv1alpha1.FeatureTask) []featuresv1alpha1.FeatureTask {
	var pending []featuresv1alpha1.FeatureTask
	for _, entry := range tasks {
		if task := c.cfg.Tasks.Task(key, entry.Name); task != nil && (task.AppliesTo(Upgrade) || task.AppliesTo(Downgrade)) {
			pending = append(pending, entry)
		}
	}
	return pending
}

func taskNamesOf(tasks []featuresv1alpha1.FeatureTask) []string {
	names := make([]string, 0, len(tasks))
	for _, t := range tasks {
		names = append(names, t.Name)
	}
	return names
}

func taskEntries(tasks []Task) []featuresv1alpha1.FeatureTask {
	entries := make([]featuresv1alpha1.FeatureTask, 0, len(tasks))
	for _, t := range tasks {
		entries = append(entries, featuresv1alpha1.FeatureTask{Name: t.Name()})
	}
	return entries
}

// disagreeingAPIServers returns the sampled kube-apiservers that report a
// value other than configured, among the live ones: an entry naming a server
// without a live identity lease is one that left (or was never one), and
// speaks for no running server.
func disagreeingAPIServers(uses []featuresv1alpha1.FeatureUse, configured bool, live []string) []string {
	var instances []string
	for _, use := range uses {
		if use.Component == apiServerComponent && use.Value != configured {
			for _, instance := range use.Instances {
				if slices.Contains(live, instance) {
					instances = append(instances, instance)
				}
			}
		}
	}
	slices.Sort(instances)
	return instances
}

// setCondition sets a condition to True or False with the reason and message
// of that status.
func setCondition(f *featuresv1alpha1.Feature, now time.Time, conditionType string, isTrue bool, trueReason, trueMessage, falseReason, falseMessage string) {
	cond := metav1.Condition{Type: conditionType, Status: metav1.ConditionFalse, Reason: falseReason, Message: falseMessage, ObservedGeneration: f.Generation, LastTransitionTime: metav1.NewTime(now)}
	if isTrue {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, trueReason, trueMessage
	}
	meta.SetStatusCondition(&f.Status.Conditions, cond)
}

// setSafetyConditions says whether kube-apiserver may move to another minor
// version: not while a transition runs, not while components report a value
// other than the state's (a component configured otherwise than the
// cluster), and not downgrading below the release that introduced a feature
// that is on.
func (c *Controller) setSafetyConditions(f *featuresv1alpha1.Feature, key featuregate.Feature, now time.Time) {
	s := &f.Status
	reason, message := "", ""
	switch s.State {
	case featuresv1alpha1.FeatureStateTurningOn, featuresv1alpha1.FeatureStateTurningOff:
		reason, message = "TransitionInProgress", fmt.Sprintf("the feature is %s; finish the transition first", s.State)
	default:
		if dangling := danglingUses(s.Uses, s.State == featuresv1alpha1.FeatureStateOn); len(dangling) > 0 {
			reason, message = "DanglingUses", fmt.Sprintf("components run the feature %s while it is %s: %s", onOff(s.State != featuresv1alpha1.FeatureStateOn), s.State, strings.Join(dangling, "; "))
		}
	}
	setCondition(f, now, featuresv1alpha1.FeatureConditionUpgradeSafe, reason == "", "Safe", "", reason, message)

	if reason == "" && s.State == featuresv1alpha1.FeatureStateOn && !c.knownAtPreviousMinor(key) {
		reason, message = "UnknownToPreviousVersion", fmt.Sprintf("kube-apiserver %d.%d does not know %s; turn it off before downgrading", c.cfg.EmulationVersion.Major(), c.cfg.EmulationVersion.Minor()-1, key)
	}
	setCondition(f, now, featuresv1alpha1.FeatureConditionDowngradeSafe, reason == "", "Safe", "", reason, message)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// danglingUses returns the uses, as "component (instances)", that report a
// value other than value.
func danglingUses(uses []featuresv1alpha1.FeatureUse, value bool) []string {
	var dangling []string
	for _, use := range uses {
		if use.Value != value {
			dangling = append(dangling, fmt.Sprintf("%s (%s)", use.Component, strings.Join(use.Instances, ", ")))
		}
	}
	slices.Sort(dangling)
	return dangling
}

// knownAtPreviousMinor reports whether the release before the emulated one
// has the feature (beyond pre-alpha).
func (c *Controller) knownAtPreviousMinor(key featuregate.Feature) bool {
	emulated := c.cfg.EmulationVersion
	if emulated.Minor() == 0 {
		return true
	}
	previous := version.MajorMinor(emulated.Major(), emulated.Minor()-1)
	for _, spec := range c.cfg.Gate.GetAllVersioned()[key] {
		if spec.PreRelease != featuregate.PreAlpha && spec.Version != nil && !spec.Version.GreaterThan(previous) {
			return true
		}
	}
	return false
}
