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

// Package featurelifecycle is KEP-3920's server flow: kube-apiserver
// announces the features it knows as Feature objects and drives each one to a
// clean On or Off, through TurningOn or TurningOff and the tasks of the
// transition. Every kube-apiserver runs the loop; each Feature is handled by
// one of them, picked by rendezvous hashing over the live apiserver identity
// leases, so no election traffic is needed.
package featurelifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	featuresinformers "k8s.io/client-go/informers/features/v1alpha1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	featureslisters "k8s.io/client-go/listers/features/v1alpha1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config says which kube-apiserver runs the loop and how.
type Config struct {
	// Namespace holds the Features of the gate: kube-system.
	Namespace string
	// Identity is this kube-apiserver's identity, the name of its identity lease.
	Identity string
	// IdentityLeaseSelector selects the kube-apiserver identity leases in Namespace.
	IdentityLeaseSelector string
	// Gate is the feature gate whose features are announced; its values are
	// the configured ones.
	Gate Gate
	// BinaryVersion and EmulationVersion are kube-apiserver's.
	BinaryVersion, EmulationVersion *version.Version
	// Tasks are the tasks of the transitions.
	Tasks *Registry
	// Liveness is how recently an identity lease must have been renewed for
	// its kube-apiserver to lead features.
	Liveness time.Duration
	// Recheck is how often every Feature is looked at again: leases that
	// stopped being renewed and tasks that wait cause no event.
	Recheck time.Duration
	// UnknownRetention is how many minor versions a Feature unknown to the
	// binary is kept before it is deleted.
	UnknownRetention int
	// PruneInterval is how often, at most, the uses of a Feature are pruned
	// (pruneUses).
	PruneInterval time.Duration
	// UseExpiry is how long an entry of the uses lives after it was last
	// reported or renewed.
	UseExpiry time.Duration
}

// Gate is what the server flow reads of a feature gate: the known features,
// their specs at the emulated version and by version, and their values. It
// never changes the gate.
type Gate interface {
	// Values returns the configured values, without recording checks.
	Values() map[featuregate.Feature]bool
	GetAll() map[featuregate.Feature]featuregate.FeatureSpec
	GetAllVersioned() map[featuregate.Feature]featuregate.VersionedSpecs
	// ExplicitlySet reports whether the flags set the feature's value.
	ExplicitlySet(featuregate.Feature) bool
	// Uses returns the features this server checked so far, with their values.
	Uses() []featurereporting.Use
}

// Controller runs the server flow in one kube-apiserver.
type Controller struct {
	cfg    Config
	client kubernetes.Interface
	clock  clock.Clock
	// ages ages the times other servers stamp, on this server's clock.
	ages *localAges

	featureInformer cache.SharedIndexInformer
	leaseInformer   cache.SharedIndexInformer
	features        featureslisters.FeatureLister
	leases          coordinationlisters.LeaseLister
	queue           workqueue.TypedRateLimitingInterface[string]
	recorder        events.EventRecorder
	broadcaster     events.EventBroadcaster

	// known maps the object names of the gate's features to the features.
	known map[string]featuregate.Feature

	// backoff spaces the runs of a task that failed. It lives in memory: a
	// restart or a new leader retries at once, which tasks allow.
	backoff workqueue.TypedRateLimiter[string]
	mu      sync.Mutex
	retryAt map[string]time.Time
	// waitUntil is when a task that is not done yet runs again: once a
	// Recheck, whatever else queues the Feature (the periodic recheck of
	// every Feature, reports, the watch event of the pass's own write).
	// Otherwise every pass of a waiting task would trigger the next at once
	// and rewrite the Feature for every watcher.
	waitUntil map[string]time.Time
	// nextPrune is when the uses of a Feature are pruned again (pruneUses).
	nextPrune map[string]time.Time
	// pop is the population of live instances as listed at popTime.
	pop     map[string]expected
	popTime time.Time
	// members and leaders are the live apiservers and the leader of each
	// Feature as last seen, for the leader change metric.
	members string
	leaders map[string]string
	// stop stops the loop that Start started and waits until it has.
	stop func()
}

// New returns the server flow's controller for one kube-apiserver.
func New(cfg Config, client kubernetes.Interface) *Controller {
	registerMetrics()
	// The namespace index serves the listers' namespaced List, which each
	// recheck makes; without it the lister scans the store and logs a warning.
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	featureInformer := featuresinformers.NewFeatureInformer(client, cfg.Namespace, 0, indexers)
	leaseInformer := coordinationinformers.NewFilteredLeaseInformer(client, cfg.Namespace, 0, indexers, func(o *metav1.ListOptions) {
		o.LabelSelector = cfg.IdentityLeaseSelector
	})
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	c := &Controller{
		cfg:             cfg,
		client:          client,
		clock:           clock.RealClock{},
		ages:            newLocalAges(),
		featureInformer: featureInformer,
		leaseInformer:   leaseInformer,
		features:        featureslisters.NewFeatureLister(featureInformer.GetIndexer()),
		leases:          coordinationlisters.NewLeaseLister(leaseInformer.GetIndexer()),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "feature_lifecycle"}),
		broadcaster: broadcaster,
		recorder:    broadcaster.NewRecorder(scheme.Scheme, "kube-apiserver"),
		known:       map[string]featuregate.Feature{},
		backoff:     workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
		retryAt:     map[string]time.Time{},
		waitUntil:   map[string]time.Time{},
		nextPrune:   map[string]time.Time{},
		leaders:     map[string]string{},
	}
	for key := range cfg.Gate.GetAll() {
		if key != "AllAlpha" && key != "AllBeta" {
			c.known[objectName(key)] = key
		}
	}
	_, _ = featureInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueue(obj) },
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: func(obj any) { c.enqueue(obj) },
	})
	_, _ = leaseInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.membersChanged() },
		UpdateFunc: func(any, any) { c.membersChanged() },
		DeleteFunc: func(any) { c.membersChanged() },
	})
	return c
}

func objectName(key featuregate.Feature) string { return strings.ToLower(string(key)) }

func (c *Controller) enqueue(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if f, ok := obj.(*featuresv1alpha1.Feature); ok {
		c.queue.Add(f.Name)
	}
}

// Start runs the loop in the background until ctx is done or Stop is called.
func (c *Controller) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c.mu.Lock()
	c.stop = func() { cancel(); <-done }
	c.mu.Unlock()
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
}

// Stop stops the loop Start started and returns once no pass of it runs, so
// that the caller may then give up this server's identity lease: another
// server leads its Features as soon as the lease is gone. A loop that was
// never started is stopped already.
func (c *Controller) Stop() {
	c.mu.Lock()
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Run runs the loop until ctx is done, and returns once no pass runs.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	logger.Info("Starting the feature lifecycle controller", "identity", c.cfg.Identity)
	defer logger.Info("Shutting down the feature lifecycle controller")

	if err := c.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		logger.Error(err, "Feature lifecycle events are not recorded")
	}
	defer c.broadcaster.Shutdown()
	go c.featureInformer.RunWithContext(ctx)
	go c.leaseInformer.RunWithContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.featureInformer.HasSynced, c.leaseInformer.HasSynced) {
		c.queue.ShutDown()
		return
	}
	go wait.UntilWithContext(ctx, func(context.Context) { c.recheck() }, c.cfg.Recheck)
	var workers sync.WaitGroup
	workers.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	<-ctx.Done()
	c.queue.ShutDown()
	workers.Wait()
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	if ctx.Err() != nil {
		// Stopping: the queue hands out what it holds, but no pass may start.
		return false
	}
	requeueAfter, err := c.sync(ctx, name)
	switch {
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing a Feature failed", "feature", klog.KRef(c.cfg.Namespace, name))
		c.queue.AddRateLimited(name)
	case requeueAfter > 0:
		c.queue.Forget(name)
		c.queue.AddAfter(name, requeueAfter)
	default:
		c.queue.Forget(name)
	}
	return true
}

// liveMembers returns the live kube-apiservers.
func (c *Controller) liveMembers() []member {
	leases, err := c.leases.List(labels.Everything())
	if err != nil {
		leases = nil
	}
	return liveAPIServers(leases, c.ages, c.cfg.Identity, c.clock.Now(), c.cfg.Liveness)
}

// membersChanged looks at every Feature again when the live apiservers or
// their versions change; lease renewals alone change nothing.
func (c *Controller) membersChanged() {
	members := fmt.Sprint(c.liveMembers())
	c.mu.Lock()
	changed := members != c.members
	c.mu.Unlock()
	if changed {
		c.recheck()
	}
}

// recheck queues every Feature, known or stored, counts the leaders that
// changed since the last recheck and refreshes the state gauge.
func (c *Controller) recheck() {
	live := c.liveMembers()
	members := candidates(live)
	stored, err := c.features.Features(c.cfg.Namespace).List(labels.Everything())
	if err != nil {
		stored = nil
	}
	names := make(map[string]bool, len(c.known)+len(stored))
	for name := range c.known {
		names[name] = true
	}
	byState := map[featuresv1alpha1.FeatureState]int{}
	for _, f := range stored {
		names[f.Name] = true
		byState[f.Status.State]++
	}
	recordStates(byState)

	c.mu.Lock()
	c.members = fmt.Sprint(live)
	for name := range names {
		leader := LeaderOf(name, members)
		if previous, ok := c.leaders[name]; ok && previous != leader {
			leaderChanges.Inc()
		}
		c.leaders[name] = leader
	}
	c.mu.Unlock()
	for name := range names {
		c.queue.Add(name)
	}
}

// leads reports whether this kube-apiserver leads the named Feature.
func (c *Controller) leads(name string) bool {
	return LeaderOf(name, candidates(c.liveMembers())) == c.cfg.Identity
}

// sync handles one Feature if this kube-apiserver leads it. It writes at most
// the Feature's status once, guarded by the resourceVersion it read, plus
// what the task it runs writes; a conflict is retried from a fresh read.
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	if !c.leads(name) {
		return 0, nil
	}
	now := c.clock.Now()
	c.mu.Lock()
	retryAt, waiting := c.retryAt[name]
	c.mu.Unlock()
	if waiting && now.Before(retryAt) {
		return retryAt.Sub(now), nil
	}

	key, known := c.known[name]
	// One view of the live servers for the whole pass: a server of another
	// version seen by one step and not by another would let a transition start.
	live := c.liveMembers()
	mixed := mixedVersions(live)
	f, err := c.features.Features(c.cfg.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err) && known:
		return 0, c.create(ctx, key)
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, err
	case len(mixed) > 0 && (!known || f.Spec.FeatureName != string(key)):
		// A feature of another version's servers, while they still run.
		return 0, nil
	case !known || f.Spec.FeatureName != string(key):
		return 0, c.syncUnknown(ctx, f)
	}

	updated := f.DeepCopy()
	c.reconcile(updated, key, now, live)
	if !statusEqual(&f.Status, &updated.Status) {
		// Run the task on the written object in the same pass: two servers
		// that both lead for a moment rewrite the announcer in turn, and the
		// transition must progress meanwhile.
		if updated, err = c.writeStatus(ctx, updated); updated == nil || err != nil {
			return 0, err
		}
	}
	if updated, err = c.holdWhileTransitioning(ctx, updated); updated == nil || err != nil {
		return 0, err
	}
	// Every pass sees the uses, so that their ages count from when their
	// reports arrived, not from the next prune.
	for _, use := range updated.Status.Uses {
		c.useAge(updated, use, now)
	}
	if pruned, err := c.pruneUses(ctx, updated, now); pruned || err != nil {
		// The watch event of the write queues the Feature again.
		return 0, err
	}
	if len(updated.Status.Tasks) == 0 || len(mixed) > 0 {
		// While versions are mixed a transition's tasks wait: a task chosen by
		// one version's configuration would act while the other's runs.
		return 0, nil
	}
	c.mu.Lock()
	waitUntil, waiting := c.waitUntil[name]
	c.mu.Unlock()
	if waiting && now.Before(waitUntil) && len(f.Status.Tasks) > 0 && f.Status.Tasks[0].Name == updated.Status.Tasks[0].Name {
		return waitUntil.Sub(now), nil
	}
	return c.runTask(ctx, updated.DeepCopy(), key, now)
}

// useAge is how long ago this server first saw the use's last report. The
// report was stamped by whichever kube-apiserver served it: its age is
// measured on this server's clock.
func (c *Controller) useAge(f *featuresv1alpha1.Feature, use featuresv1alpha1.FeatureUse, now time.Time) time.Duration {
	last := use.LastReportTime
	if last.IsZero() {
		last = use.FirstReportTime
	}
	var reported time.Time
	if last != nil {
		reported = last.Time
	}
	key := fmt.Sprintf("use/%s/%s/%s/%s/%t", f.Name, use.Component, use.BinaryVersion, use.EmulationVersion, use.Value)
	return c.ages.age(key, stamp(reported), now)
}

// pruneUses removes from the uses what speaks for no running instance, at
// most once a PruneInterval per Feature: entries stored without versions (by
// a reporter older than versioned uses); of the components whose live
// instances are all known (kubelets by their node leases, kube-apiservers by
// their identity leases, which do not renew their entries), the names of
// instances that are gone, with an entry that names no live instance; of the
// others, entries nobody reported or renewed within UseExpiry (their sampled
// instances are gone, or no longer report). Uses
// are never cleared wholesale: clearing made every instance report again, a
// herd of writes and watch events that grew with the cluster, and the
// Feature read Safe until they had. It reports whether it wrote.
func (c *Controller) pruneUses(ctx context.Context, f *featuresv1alpha1.Feature, now time.Time) (bool, error) {
	if len(f.Status.Uses) == 0 {
		return false, nil
	}
	c.mu.Lock()
	next, looked := c.nextPrune[f.Name]
	if looked && now.Before(next) {
		c.mu.Unlock()
		return false, nil
	}
	c.nextPrune[f.Name] = now.Add(c.cfg.PruneInterval)
	c.mu.Unlock()
	pop, err := c.population(ctx, now)
	if err != nil {
		c.mu.Lock()
		delete(c.nextPrune, f.Name)
		c.mu.Unlock()
		return false, err
	}
	kept := make([]featuresv1alpha1.FeatureUse, 0, len(f.Status.Uses))
	for _, use := range f.Status.Uses {
		if use.BinaryVersion == "" || use.EmulationVersion == "" {
			continue
		}
		exp, known := pop[use.Component]
		age := c.useAge(f, use, now)
		if !known || exp.atLeast {
			// Their liveness is not visible: their entries are renewed.
			if age < c.cfg.UseExpiry {
				kept = append(kept, use)
			}
			continue
		}
		// A name reported in the last PruneInterval stays: a kubelet may
		// report before its node lease exists.
		if age >= c.cfg.PruneInterval {
			use.Instances = slices.DeleteFunc(slices.Clone(use.Instances), func(instance string) bool { return !exp.names.Has(instance) })
		}
		if len(use.Instances) > 0 {
			kept = append(kept, use)
		}
	}
	if apiequality.Semantic.DeepEqual(kept, f.Status.Uses) {
		return false, nil
	}
	pruned := f.DeepCopy()
	pruned.Status.Uses = kept
	_, err = c.client.FeaturesV1alpha1().Features(f.Namespace).UpdateUses(ctx, f.Name, pruned, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// population returns the live instances of each component, listing the node
// leases at most once a Recheck period for all Features.
func (c *Controller) population(ctx context.Context, now time.Time) (map[string]expected, error) {
	c.mu.Lock()
	if c.pop != nil && now.Before(c.popTime.Add(c.cfg.Recheck)) {
		defer c.mu.Unlock()
		return c.pop, nil
	}
	c.mu.Unlock()
	pop, err := population(ctx, c.client, c.ages, now, names(c.liveMembers()))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.pop, c.popTime = pop, now
	c.mu.Unlock()
	return pop, nil
}

// TransitionFinalizer keeps a Feature that is deleted mid-transition until its
// transition is done: recreated at once, it would start at its configured
// value and skip the tasks that were left.
const TransitionFinalizer = "features.k8s.io/transition"

// holdWhileTransitioning puts TransitionFinalizer on a Feature that has tasks
// and takes it off one that has none. It returns the written object, nil after
// a conflict, as writeStatus does.
func (c *Controller) holdWhileTransitioning(ctx context.Context, f *featuresv1alpha1.Feature) (*featuresv1alpha1.Feature, error) {
	transitioning := len(f.Status.Tasks) > 0
	held := slices.Contains(f.Finalizers, TransitionFinalizer)
	if transitioning == held {
		return f, nil
	}
	updated := f.DeepCopy()
	if transitioning {
		updated.Finalizers = append(updated.Finalizers, TransitionFinalizer)
	} else {
		updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(s string) bool { return s == TransitionFinalizer })
	}
	written, err := c.client.FeaturesV1alpha1().Features(f.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	return written, err
}

func (c *Controller) create(ctx context.Context, key featuregate.Feature) error {
	_, err := c.client.FeaturesV1alpha1().Features(c.cfg.Namespace).Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(key), Namespace: c.cfg.Namespace},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: string(key)},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Another apiserver created it, or the cache is behind: the watch brings it.
		return nil
	}
	return err
}

// writeStatus writes the Feature's status and returns the written object,
// nil after a conflict: the watch brings the newer object, which is synced
// again.
func (c *Controller) writeStatus(ctx context.Context, f *featuresv1alpha1.Feature) (*featuresv1alpha1.Feature, error) {
	written, err := c.client.FeaturesV1alpha1().Features(f.Namespace).UpdateStatus(ctx, f, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	return written, err
}

// syncUnknown keeps a Feature the binary does not know, after an upgrade
// removed the feature or a downgrade went back before it, for
// UnknownRetention minor versions, then deletes it.
func (c *Controller) syncUnknown(ctx context.Context, f *featuresv1alpha1.Feature) error {
	mine := c.cfg.BinaryVersion
	if f.Status.UnknownSinceVersion == "" {
		updated := f.DeepCopy()
		updated.Status.UnknownSinceVersion = fmt.Sprintf("%d.%d", mine.Major(), mine.Minor())
		_, err := c.writeStatus(ctx, updated)
		return err
	}
	since, err := version.ParseGeneric(f.Status.UnknownSinceVersion)
	if err != nil || since.Major() != mine.Major() || mine.Minor() < since.Minor()+uint(c.cfg.UnknownRetention) {
		return nil
	}
	err = c.client.FeaturesV1alpha1().Features(f.Namespace).Delete(ctx, f.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &f.UID, ResourceVersion: &f.ResourceVersion},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

var (
	// UsesWaitPeriod is how long WaitForUses gives the components to report
	// after it cleared the uses: longer than a reporter's longest delay (30 s)
	// plus its check interval (10 s), with room for a slow informer. It is
	// exposed so integration tests can tune it.
	UsesWaitPeriod = 2 * time.Minute
	// UsesMaxWaitPeriod is how long WaitForUses waits at most, while a
	// component has begun to report but fewer of its live instances have
	// than would if all had: a reporter that failed backs off up to 5 min
	// (5.5 with jitter), one that started before the API was served checks
	// discovery up to every 10 min (15 with jitter), and either then waits up
	// to its 30 s delay. It is exposed so integration tests can tune it.
	UsesMaxWaitPeriod = 16 * time.Minute
	// UnknownRetentionMinorVersions is how many minor versions a Feature the
	// binary does not know is kept: long enough for a downgrade back to a
	// release that knows it.
	UnknownRetentionMinorVersions = 3
)
