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
	"context"
	"errors"
	"fmt"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/featuregate"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/utils/ptr"
)

// maxTaskErrorLength bounds the error a task records in status, as validation does.
const maxTaskErrorLength = featuresapi.MaxFeatureTaskErrorLength

// runTask runs the first task of the Feature and records the outcome: an
// error on the task, as an event and a condition, with back-off; a task that
// waits, with what it waits for; a task that is done, removed, and the final
// state once none remains.
func (c *Controller) runTask(ctx context.Context, f *featuresv1alpha1.Feature, key featuregate.Feature, now time.Time) (time.Duration, error) {
	entry := f.Status.Tasks[0]
	transition := transitionOf(f)
	task := c.cfg.Tasks.Task(key, entry.Name)
	tc := &TaskContext{Feature: f, Task: entry, Transition: transition, Client: c.client, Now: now, LiveAPIServers: names(c.liveMembers()), FenceFunc: c.fence(f, entry), ages: c.ages}
	var result Result
	var err error
	if task == nil {
		err = fmt.Errorf("task %s is not known to kube-apiserver %s; a kube-apiserver that knows it must finish the transition", entry.Name, c.cfg.BinaryVersion)
	} else {
		result, err = task.Run(ctx, tc)
	}
	if errors.Is(err, ErrFenced) {
		// Not a failure: the watch brings the newer Feature, or its leader runs it.
		taskRuns.WithLabelValues(entry.Name, "fenced").Inc()
		return 0, nil
	}
	updated := tc.Feature.DeepCopy()
	s := &updated.Status
	current := &s.Tasks[0]
	if current.Name != entry.Name {
		return 0, fmt.Errorf("task %s changed the Feature's tasks", entry.Name)
	}
	if current.StartTime == nil || (err == nil && result.Restart) {
		current.StartTime = ptr.To(metav1.NewTime(now))
		c.ages.age(taskStartKey(updated.Name, current.Name), stamp(current.StartTime.Time), now)
	}
	current.LastAttemptTime = ptr.To(metav1.NewTime(now))
	switch {
	case err != nil:
		taskRuns.WithLabelValues(entry.Name, "error").Inc()
		message := err.Error()
		if len(message) > maxTaskErrorLength {
			message = message[:maxTaskErrorLength]
		}
		current.LastError = message
		setCondition(updated, now, featuresv1alpha1.FeatureConditionTaskFailed, true, "TaskFailed", fmt.Sprintf("%s: %s", entry.Name, message), "", "")
		c.recorder.Eventf(updated, nil, "Warning", "TaskFailed", string(transition), "%s: %s", entry.Name, message)
		delay := c.backoff.When(updated.Name)
		c.mu.Lock()
		c.retryAt[updated.Name] = now.Add(delay)
		c.mu.Unlock()
		_, err := c.writeStatus(ctx, updated)
		return delay, err
	case !result.Done:
		taskRuns.WithLabelValues(entry.Name, "not_yet").Inc()
		current.LastError = ""
		message := fmt.Sprintf("%s: %s", entry.Name, result.Message)
		if prev := meta.FindStatusCondition(updated.Status.Conditions, featuresv1alpha1.FeatureConditionTransitioning); result.Restart && (prev == nil || prev.Message != message) {
			// The condition moves on with the next run; the event keeps why
			// the task started over, once for each reason: a task that starts
			// over on every run for the same reason records it once.
			c.recorder.Eventf(updated, nil, "Normal", "TaskRestarted", string(transition), "%s", message)
		}
		setCondition(updated, now, featuresv1alpha1.FeatureConditionTransitioning, true, string(transition), message, "", "")
	default:
		taskRuns.WithLabelValues(entry.Name, "done").Inc()
		if result.Message != "" {
			c.recorder.Eventf(updated, nil, "Normal", "TaskDone", string(transition), "%s: %s", entry.Name, result.Message)
		}
		s.Tasks = s.Tasks[1:]
		if len(s.Tasks) == 0 {
			c.finish(updated, now)
		}
	}
	c.forgetFailures(updated.Name)
	meta.RemoveStatusCondition(&s.Conditions, featuresv1alpha1.FeatureConditionTaskFailed)
	if _, err := c.writeStatus(ctx, updated); err != nil {
		return 0, err
	}
	if result.Done {
		// The next task, if any, runs on the watch event of this write.
		return 0, nil
	}
	c.mu.Lock()
	c.waitUntil[updated.Name] = now.Add(c.cfg.Recheck)
	c.mu.Unlock()
	return c.cfg.Recheck, nil
}

// fence returns the Fence of a run of the Feature's first task, entry.
func (c *Controller) fence(f *featuresv1alpha1.Feature, entry featuresv1alpha1.FeatureTask) func(context.Context) error {
	return func(ctx context.Context) error {
		if !c.leads(f.Name) || len(mixedVersions(c.liveMembers())) > 0 {
			// A server of another version joined since the run started.
			return ErrFenced
		}
		// A get without a resourceVersion is a quorum read, whatever the cache says.
		current, err := c.client.FeaturesV1alpha1().Features(f.Namespace).Get(ctx, f.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ErrFenced
		}
		if err != nil {
			return fmt.Errorf("fencing %s: %w", entry.Name, err)
		}
		s := &current.Status
		if current.UID != f.UID || s.State != f.Status.State || len(s.Tasks) == 0 || s.Tasks[0].Name != entry.Name ||
			!s.Tasks[0].StartTime.Equal(entry.StartTime) {
			return ErrFenced
		}
		return nil
	}
}

// finish ends a transition whose tasks are all done.
func (c *Controller) finish(f *featuresv1alpha1.Feature, now time.Time) {
	s := &f.Status
	switch s.State {
	case featuresv1alpha1.FeatureStateTurningOn:
		s.State = featuresv1alpha1.FeatureStateOn
	case featuresv1alpha1.FeatureStateTurningOff:
		s.State = featuresv1alpha1.FeatureStateOff
	}
	if started := meta.FindStatusCondition(s.Conditions, featuresv1alpha1.FeatureConditionTransitioning); started != nil && started.Status == metav1.ConditionTrue {
		transitionDuration.WithLabelValues(started.Reason).Observe(now.Sub(started.LastTransitionTime.Time).Seconds())
	}
	setCondition(f, now, featuresv1alpha1.FeatureConditionTransitioning, false, "", "", "Stable", "")
	c.setSafetyConditions(f, c.known[f.Name], now)
	c.recorder.Eventf(f, nil, "Normal", "TransitionComplete", "Complete", "%s is %s", f.Spec.FeatureName, s.State)
}

func (c *Controller) forgetFailures(name string) {
	c.backoff.Forget(name)
	c.mu.Lock()
	delete(c.retryAt, name)
	delete(c.waitUntil, name)
	c.mu.Unlock()
}

// transitionOf returns the transition the Feature's tasks belong to.
func transitionOf(f *featuresv1alpha1.Feature) Transition {
	switch f.Status.State {
	case featuresv1alpha1.FeatureStateTurningOn:
		return TurnOn
	case featuresv1alpha1.FeatureStateTurningOff:
		return TurnOff
	}
	if cond := meta.FindStatusCondition(f.Status.Conditions, featuresv1alpha1.FeatureConditionTransitioning); cond != nil {
		return Transition(cond.Reason)
	}
	return ""
}
