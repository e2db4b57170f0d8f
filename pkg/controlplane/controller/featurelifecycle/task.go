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
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
)

// Transition is a change a Feature goes through, that tasks may be needed for.
type Transition string

const (
	// TurnOn moves a feature from Off through TurningOn to On.
	TurnOn Transition = "TurnOn"
	// TurnOff moves a feature from On through TurningOff to Off.
	TurnOff Transition = "TurnOff"
	// Upgrade is kube-apiserver moving to a newer binary version, the
	// feature's state unchanged.
	Upgrade Transition = "Upgrade"
	// Downgrade is kube-apiserver moving to an older binary version, the
	// feature's state unchanged.
	Downgrade Transition = "Downgrade"
)

// Task is a step of a transition, registered by a feature's author.
//
// Run must be idempotent: it is run again after an error, after a restart, and
// may run twice at once when two kube-apiservers briefly both lead the
// feature. A task keeps its progress in the cluster (the objects it changes)
// or in the task's status, never in memory.
type Task interface {
	// Name is the task's name in status.tasks: letters and digits, under a
	// domain for third parties (example.com/DrainWidgets).
	Name() string
	// AppliesTo says whether the task is part of the transition.
	AppliesTo(Transition) bool
	// Run does the task, or as much of it as it can now. Done reports that the
	// task is complete; otherwise Message says what it waits for.
	Run(ctx context.Context, tc *TaskContext) (Result, error)
}

// Exercise is what the lifecycle harness needs to run a feature's task on a
// real cluster through On, use and Off (test/integration/featurelifecycle).
// Every registered task implements it: that is how a feature author opts in.
type Exercise interface {
	// Use leaves in the cluster, while the feature is on, what the task
	// cleans up or waits for, the way the feature's users would.
	Use(ctx context.Context, client kubernetes.Interface) error
	// Release does what an admin must do for a task that waits (delete the
	// objects it waits for); it does nothing for a task that cleans up.
	Release(ctx context.Context, client kubernetes.Interface) error
	// Pristine returns an error naming what the feature left behind, nil
	// once nothing remains.
	Pristine(ctx context.Context, client kubernetes.Interface) error
}

// Result is the outcome of a task's run that did not fail.
type Result struct {
	// Done is true when the task is complete.
	Done bool
	// Message says what the task waits for when it is not done; for a task
	// that is done, what its end leaves open, recorded as an event.
	Message string
	// Restart records this run as the task's start again: StartTime is set
	// to the time of this run.
	Restart bool
}

// NotYet is the result of a task that waits for something.
func NotYet(message string) Result { return Result{Message: message} }

// Done is the result of a task that is complete.
var Done = Result{Done: true}

// TaskContext is what a task runs with.
type TaskContext struct {
	// Feature is the object as the controller last read or wrote it. A task
	// that writes the Feature itself sets it to the object the server
	// returned, so that the controller's next write does not conflict.
	Feature *featuresv1alpha1.Feature
	// Task is the task's entry in status.tasks; StartTime is nil on its first run.
	Task featuresv1alpha1.FeatureTask
	// Transition is the transition the task runs in.
	Transition Transition
	// Client is kube-apiserver's loopback client.
	Client kubernetes.Interface
	// Now is the time of this run.
	Now time.Time
	// LiveAPIServers are the identities of the kube-apiservers whose identity
	// lease is live, as this server sees them.
	LiveAPIServers []string

	// FenceFunc checks that the run may still act (Fence); the controller sets it.
	FenceFunc func(ctx context.Context) error
	// ages ages the times other servers stamped (a previous leader's
	// StartTime) on this server's clock.
	ages *localAges
}

// ErrFenced is the error of Fence when the run must stop: this server no
// longer leads the Feature, or the transition the task runs for is no longer
// the Feature's current one. The controller records no failure for it.
var ErrFenced = errors.New("the transition moved on or another kube-apiserver leads the Feature")

// Fence checks, with a quorum read of the Feature, that the task still runs
// for the Feature's current transition (the same object, state and first task,
// started at the same time) and that this server still leads it. A task calls
// it before every side effect on other objects and stops with its error: a
// server that stopped leading, or saw an old object, would otherwise act for a
// transition that is over, such as cleaning up after a feature that was turned
// back on. A TaskContext without a FenceFunc (the lifecycle harness) fences
// nothing.
func (tc *TaskContext) Fence(ctx context.Context) error {
	if tc.FenceFunc == nil {
		return nil
	}
	return tc.FenceFunc(ctx)
}

// Registry holds the tasks of each feature, in the order they run.
type Registry struct {
	waitForUses Task
	tasks       map[featuregate.Feature][]Task
}

// NewRegistry returns a registry whose transitions between On and Off all
// start with waitForUses.
func NewRegistry(waitForUses Task) *Registry {
	return &Registry{waitForUses: waitForUses, tasks: map[featuregate.Feature][]Task{}}
}

// Register adds tasks to a feature's transitions, after those registered before.
func (r *Registry) Register(feature featuregate.Feature, tasks ...Task) {
	r.tasks[feature] = append(r.tasks[feature], tasks...)
}

// Features returns the features that registered tasks.
func (r *Registry) Features() []featuregate.Feature {
	features := make([]featuregate.Feature, 0, len(r.tasks))
	for f := range r.tasks {
		features = append(features, f)
	}
	return features
}

// TasksFor returns the tasks of a feature's transition, in the order they
// run. Turning on or off first waits for the components to use the new value:
// a field must no longer be written before it is cleared, and objects must no
// longer be created before their absence is awaited.
func (r *Registry) TasksFor(feature featuregate.Feature, t Transition) []Task {
	var tasks []Task
	if t == TurnOn || t == TurnOff {
		tasks = append(tasks, r.waitForUses)
	}
	for _, task := range r.tasks[feature] {
		if task.AppliesTo(t) {
			tasks = append(tasks, task)
		}
	}
	return tasks
}

// Wait is implemented by a task that only waits for a state of the cluster
// and writes no object, such as WaitForUses: a rollback that only follows a
// default still runs it, while it skips the tasks that write.
type Wait interface {
	Task
	// WritesNothing marks the task; it is never called.
	WritesNothing()
}

// onRollback splits a transition's tasks, in order, into those a rollback
// that only follows a default runs, the waits and the tasks that are also a
// Downgrade's (they run as the rollback's), and those it skips.
func onRollback(tasks []Task) (run, skipped []Task) {
	for _, task := range tasks {
		if _, wait := task.(Wait); wait || task.AppliesTo(Downgrade) {
			run = append(run, task)
		} else {
			skipped = append(skipped, task)
		}
	}
	return run, skipped
}

// Task returns the named task of the feature, nil if there is none: a task
// stored by a binary that knew it, then read by one that does not.
func (r *Registry) Task(feature featuregate.Feature, name string) Task {
	if name == r.waitForUses.Name() {
		return r.waitForUses
	}
	for _, task := range r.tasks[feature] {
		if task.Name() == name {
			return task
		}
	}
	return nil
}
