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
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/version"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/ptr"
)

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
// runs no task. live are the live kube-apiservers.
func (c *Controller) reconcile(f *featuresv1alpha1.Feature, key featuregate.Feature, now time.Time, live []member) {
	s := &f.Status
	if mixed := mixedVersions(live); len(mixed) > 0 && s.State != "" {
		c.holdWhileVersionsMixed(f, key, now, mixed, live)
		return
	}
	spec := c.cfg.Gate.GetAll()[key]
	configured := c.cfg.Gate.Values()[key]
	versionChange := c.versionChange(s.BinaryVersion)
	// A rollback of the emulation version alone, as upstream's compatibility
	// versions roll back, is a rollback too.
	rollback := versionChange == Downgrade || minorChange(s.EmulationVersion, c.cfg.EmulationVersion) == Downgrade
	previousDefault, previousState := s.Default, s.State

	s.Default = ptr.To(spec.Default)
	s.Stage = stageOf(spec)
	s.LockToDefault = ptr.To(spec.LockToDefault)
	s.ConfiguredValue = ptr.To(configured)
	s.Announcer = c.cfg.Identity
	s.BinaryVersion = fmt.Sprintf("%d.%d", c.cfg.BinaryVersion.Major(), c.cfg.BinaryVersion.Minor())
	s.EmulationVersion = fmt.Sprintf("%d.%d", c.cfg.EmulationVersion.Major(), c.cfg.EmulationVersion.Minor())
	s.UnknownSinceVersion = ""

	target, turning, transition := featuresv1alpha1.FeatureStateOff, featuresv1alpha1.FeatureStateTurningOff, TurnOff
	if configured {
		target, turning, transition = featuresv1alpha1.FeatureStateOn, featuresv1alpha1.FeatureStateTurningOn, TurnOn
	}
	disagreeing := c.setConfigurationAgreed(f, configured, now, live)

	started := false
	switch {
	case s.State == "":
		// The first announcement: nothing was turned on or off before.
		s.State = target
	case s.State == turning:
	case s.State != target || len(disagreeing) > 0:
		// Turned the other way, flipped back mid-transition, or an apiserver
		// still runs the old value: (re)start towards the configured value.
		s.State = turning
		tasks := c.cfg.Tasks.TasksFor(key, transition)
		if rollback && !c.cfg.Gate.ExplicitlySet(key) && followsDefault(previousDefault, previousState, configured, spec.Default) {
			// A rollback must not rewrite users' objects: the state only
			// follows the default of the release rolled back to, and the
			// release left may come back. The feature's own tasks are left to
			// an explicit transition; those that are also the rollback's
			// version tasks run as such. Waits, which write nothing, run.
			var skipped []Task
			tasks, skipped = onRollback(tasks)
			if len(skipped) > 0 {
				c.recorder.Eventf(f, nil, "Warning", "TasksSkipped", string(transition), "%s follows the default of kube-apiserver %s emulating %s after a rollback; not run: %s",
					f.Spec.FeatureName, s.BinaryVersion, s.EmulationVersion, strings.Join(taskNamesOf(taskEntries(skipped)), ", "))
			}
		}
		// Version tasks still pending (a minor version changed) are kept after
		// the new transition's tasks: data written by the previous release must
		// still be migrated.
		s.Tasks = appendNew(taskEntries(tasks), c.pendingVersionTasks(key, s.Tasks)...)
		setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, true, string(transition), "", "", "")
		meta.RemoveStatusCondition(&s.Conditions, featuresv1alpha1.FeatureConditionTaskFailed)
		started = true
	}
	if len(s.Tasks) == 0 && s.State == target {
		setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, false, "", "", "Stable", "")
	}
	if versionChange != "" {
		if tasks := c.cfg.Tasks.TasksFor(key, versionChange); len(tasks) > 0 {
			// Each task once: during a rolling upgrade the announcer changes
			// between old and new servers, and every change queues the tasks
			// of its direction again. Queued whatever the state: the stored
			// binary version is overwritten now, and the change is not seen
			// again.
			s.Tasks = appendNew(s.Tasks, taskEntries(tasks)...)
			if s.State == featuresv1alpha1.FeatureStateOn || s.State == featuresv1alpha1.FeatureStateOff {
				setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, true, string(versionChange), "", "", "")
			}
		}
	}
	if started {
		c.recorder.Eventf(f, nil, "Normal", "TransitionStarted", string(transition), "%s is %s; tasks: %s", f.Spec.FeatureName, turning, strings.Join(taskNamesOf(s.Tasks), ", "))
	}
	s.Owners = c.owners(s, key, versionChange)
	c.setSafetyConditions(f, key, now)
}

// setConfigurationAgreed sets ConfigurationAgreed by the live kube-apiservers
// that report a value other than configured, and returns them.
func (c *Controller) setConfigurationAgreed(f *featuresv1alpha1.Feature, configured bool, now time.Time, live []member) []string {
	disagreeing := disagreeingAPIServers(f.Status.Uses, configured, names(live))
	setCondition(f, now, featuresv1alpha1.FeatureConditionConfigurationAgreed, len(disagreeing) == 0, "Agreed", "",
		"APIServersDisagree", fmt.Sprintf("kube-apiservers configured %t: %s", !configured, strings.Join(disagreeing, ", ")))
	return disagreeing
}

// followsDefault reports whether a state change only follows a binary's
// default: the flags leave the feature at this binary's default, which the
// previously announced default was not, and the state was that previous
// default.
func followsDefault(previousDefault *bool, previousState featuresv1alpha1.FeatureState, configured, def bool) bool {
	if configured != def || previousDefault == nil || *previousDefault == def {
		return false
	}
	was := featuresv1alpha1.FeatureStateOff
	if *previousDefault {
		was = featuresv1alpha1.FeatureStateOn
	}
	return previousState == was
}

// mixedVersions returns the versions the live kube-apiservers run, sorted,
// when they run more than one, and nil otherwise. A server whose lease carries
// no versions runs no server flow and is not counted.
func mixedVersions(members []member) []string {
	versions := sets.New[string]()
	for _, m := range members {
		if m.binary == nil {
			continue
		}
		v := fmt.Sprintf("%d.%d", m.binary.Major(), m.binary.Minor())
		if m.emulation.Major() != m.binary.Major() || m.emulation.Minor() != m.binary.Minor() {
			v = fmt.Sprintf("%s emulating %d.%d", v, m.emulation.Major(), m.emulation.Minor())
		}
		versions.Insert(v)
	}
	if versions.Len() < 2 {
		return nil
	}
	return sets.List(versions)
}

// holdWhileVersionsMixed is reconcile while the kube-apiservers run different
// versions: nothing moves. The servers of each version run their own
// defaults, and either may be the one that stays, so no transition starts, no
// version task is queued (sync runs no task meanwhile either), and the
// announcement stays that of the version the Feature settled at, so that once
// the versions agree the change of version is seen, and a state that only
// follows another release's default is told from a configured one.
// ConfigurationAgreed names the servers configured otherwise than that
// announcement.
func (c *Controller) holdWhileVersionsMixed(f *featuresv1alpha1.Feature, key featuregate.Feature, now time.Time, mixed []string, live []member) {
	s := &f.Status
	if s.ConfiguredValue != nil {
		c.setConfigurationAgreed(f, *s.ConfiguredValue, now, live)
	}
	message := fmt.Sprintf("kube-apiservers run %s: nothing moves until they run one version", strings.Join(mixed, ", "))
	if len(s.Tasks) == 0 && (s.State == featuresv1alpha1.FeatureStateOn || s.State == featuresv1alpha1.FeatureStateOff) {
		setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, false, "", "", "VersionsMixed", message)
	} else if cond := meta.FindStatusCondition(s.Conditions, featuresv1alpha1.FeatureConditionTransitioning); cond != nil && cond.Status == metav1.ConditionTrue {
		// A transition under way waits, and says why.
		setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, true, cond.Reason, message, "", "")
	}
	c.setSafetyConditions(f, key, now)
}

// owners returns the components that check the feature, sorted: kube-apiserver
// once this binary has checked it (and while the binary version the Feature
// was announced at stays, whichever server leads: a server checks some
// features only when a request needs them), and every other component that
// reports a use, as components report only the features they check.
// kube-apiserver reports every feature, its configuration, whether it checks
// it or not.
func (c *Controller) owners(s *featuresv1alpha1.FeatureStatus, key featuregate.Feature, versionChange Transition) []string {
	owners := sets.New[string]()
	if slices.ContainsFunc(c.cfg.Gate.Uses(), func(u featurereporting.Use) bool { return u.Feature == key }) || (versionChange == "" && slices.Contains(s.Owners, kubeAPIServerComponent)) {
		owners.Insert(kubeAPIServerComponent)
	}
	for _, use := range s.Uses {
		if use.Component != kubeAPIServerComponent && owners.Len() < featuresv1alpha1.MaxFeatureOwners {
			owners.Insert(use.Component)
		}
	}
	if owners.Len() == 0 {
		return nil
	}
	return sets.List(owners)
}

// versionChange returns the version transition from the binary version
// stored by the last announcer to this binary's, by minor version.
func (c *Controller) versionChange(stored string) Transition {
	return minorChange(stored, c.cfg.BinaryVersion)
}

// minorChange returns Upgrade or Downgrade when mine is a newer or older minor
// version than stored, "" otherwise or when stored does not parse.
func minorChange(stored string, mine *version.Version) Transition {
	previous, err := version.ParseGeneric(stored)
	if err != nil {
		return ""
	}
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
		if use.Component == kubeAPIServerComponent && use.Value != configured {
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
// version: not while a transition runs, not while a component that checks
// the feature runs a value other than the cluster's (usesUnsafe), and not
// downgrading below the release that introduced a feature that is on.
func (c *Controller) setSafetyConditions(f *featuresv1alpha1.Feature, key featuregate.Feature, now time.Time) {
	s := &f.Status
	reason, message := "", ""
	switch s.State {
	case featuresv1alpha1.FeatureStateTurningOn, featuresv1alpha1.FeatureStateTurningOff:
		reason, message = "TransitionInProgress", fmt.Sprintf("the feature is %s; finish the transition first", s.State)
	default:
		reason, message = c.usesUnsafe(s, key)
	}
	setCondition(f, now, featuresv1alpha1.FeatureConditionUpgradeSafe, reason == "", "Safe", "", reason, message)

	if reason == "" && s.State == featuresv1alpha1.FeatureStateOn && !c.knownAtPreviousMinor(key) {
		reason, message = "UnknownToPreviousVersion", fmt.Sprintf("kube-apiserver %d.%d does not know %s; turn it off before downgrading", c.cfg.EmulationVersion.Major(), c.cfg.EmulationVersion.Minor()-1, key)
	}
	setCondition(f, now, featuresv1alpha1.FeatureConditionDowngradeSafe, reason == "", "Safe", "", reason, message)
}

// usesUnsafe returns why the uses of a stable Feature make it unsafe to move
// kube-apiserver to another minor version, or "" when they do not. Only the
// owners' uses count.
//   - A feature kube-apiserver checks has the cluster's value, the state: a
//     use of the other value is DanglingUses when it is not the default at
//     the use's emulation version (a component configured otherwise than the
//     cluster), and VersionSkew when it is (a component of another version,
//     as upstream's skew policy allows, on its version's default; finish
//     that upgrade first).
//   - A feature kube-apiserver does not check (a kubelet-only gate, say) has
//     no cluster value: kube-apiserver's configuration does not matter to it.
//     Its uses are unsafe only when its owners run both values.
func (c *Controller) usesUnsafe(s *featuresv1alpha1.FeatureStatus, key featuregate.Feature) (string, string) {
	var uses []featuresv1alpha1.FeatureUse
	for _, use := range s.Uses {
		if slices.Contains(s.Owners, use.Component) {
			uses = append(uses, use)
		}
	}
	if !slices.Contains(s.Owners, kubeAPIServerComponent) {
		if slices.ContainsFunc(uses, func(u featuresv1alpha1.FeatureUse) bool { return u.Value }) && slices.ContainsFunc(uses, func(u featuresv1alpha1.FeatureUse) bool { return !u.Value }) {
			return "DanglingUses", fmt.Sprintf("the components that check the feature run it both on and off (kube-apiserver does not check it): %s", strings.Join(describeUses(uses), "; "))
		}
		return "", ""
	}
	on := s.State == featuresv1alpha1.FeatureStateOn
	var misconfigured, skewed []featuresv1alpha1.FeatureUse
	for _, use := range uses {
		switch {
		case use.Value == on:
		case use.EmulationVersion != s.EmulationVersion && c.defaultAt(key, use.EmulationVersion) == use.Value:
			skewed = append(skewed, use)
		default:
			misconfigured = append(misconfigured, use)
		}
	}
	if len(misconfigured) > 0 {
		return "DanglingUses", fmt.Sprintf("components run the feature %s while it is %s: %s", onOff(!on), s.State, strings.Join(describeUses(misconfigured), "; "))
	}
	if len(skewed) > 0 {
		return "VersionSkew", fmt.Sprintf("components of other versions run the feature %s, their version's default, while it is %s: %s; finish their upgrade or downgrade first", onOff(!on), s.State, strings.Join(describeUses(skewed), "; "))
	}
	return "", ""
}

// defaultAt returns the feature's default at an emulation version (major.minor):
// off before the feature existed, or for a version that does not parse. A
// use does not carry its component's minimum compatibility version, so it is
// taken to be upstream's default, one minor version before the emulation
// version: a spec that needs a newer one (MinCompatibilityVersion, first used
// in 1.37) is not that version's default.
func (c *Controller) defaultAt(key featuregate.Feature, emulation string) bool {
	v, err := version.Parse(emulation)
	if err != nil {
		return false
	}
	minCompatibility := v.SubtractMinor(1)
	def := false
	for _, spec := range c.cfg.Gate.GetAllVersioned()[key] {
		if spec.Version == nil || spec.Version.GreaterThan(v) {
			continue
		}
		if spec.MinCompatibilityVersion != nil && !minCompatibility.AtLeast(spec.MinCompatibilityVersion) {
			continue
		}
		def = spec.Default
	}
	return def
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// describeUses returns the uses as "component value at emulation version
// (instances)", sorted.
func describeUses(uses []featuresv1alpha1.FeatureUse) []string {
	var out []string
	for _, use := range uses {
		out = append(out, fmt.Sprintf("%s %s at %s (%s)", use.Component, onOff(use.Value), use.EmulationVersion, strings.Join(use.Instances, ", ")))
	}
	slices.Sort(out)
	return out
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
