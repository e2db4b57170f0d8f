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

package reporting

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/util/compatibility"
	featuresapply "k8s.io/client-go/applyconfigurations/features/v1alpha1"
	"k8s.io/client-go/discovery"
	featuresinformers "k8s.io/client-go/informers/features/v1alpha1"
	"k8s.io/client-go/kubernetes"
	featuresclient "k8s.io/client-go/kubernetes/typed/features/v1alpha1"
	featureslisters "k8s.io/client-go/listers/features/v1alpha1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Options say where and as whom a component reports its uses.
type Options struct {
	// Namespace holds the Feature objects: kube-system for Kubernetes' own.
	Namespace string
	// Component is the kind of component, for example "kubelet".
	Component string
	// Instance names this instance: the node name of a kubelet, the identity of
	// the others.
	Instance string
	// MaxDelay bounds the random delay before a pass writes (suppressionDelay).
	// A reporter that finds the entry written when its delay ends does not
	// write, so that thousands of instances that agree cause a handful of
	// writes, not thousands.
	MaxDelay time.Duration
	// MaxInstances is how many instances of the component a cluster may run,
	// at most: the shape of the delays (suppressionDelay). 1 or less: the
	// delays are uniform, right for the few instances of a control-plane
	// component, which also fill a sample within MaxDelay rather than
	// FillInterval (fillBound).
	MaxInstances int
	// SampleSize is how many instances an entry names at most; the first ones
	// to report add themselves.
	SampleSize int
	// CheckInterval is how often the reporter looks for features checked for
	// the first time and for uses missing from the cache.
	CheckInterval time.Duration
	// Resync is the informer's resync period.
	Resync time.Duration
	// RenewInterval is how often a sampled instance renews its entry, so that
	// the entry outlives it by at most UseExpiry: entries nobody renews are
	// removed by kube-apiserver. The sampled instances of an entry race for it
	// after a random delay of up to MaxDelay, and the first write renews the
	// entry for all of them, so an entry costs about one write a RenewInterval
	// whatever the number of instances. 0: no renewal, for components whose
	// instances' liveness kube-apiserver reads from their leases.
	RenewInterval time.Duration
	// FillInterval bounds the delay after which an instance of a component
	// of many instances (MaxInstances above 1) that a sample with room does
	// not name adds itself to it (suppressionDelay, from when the instance
	// first saw the sample as it is: joinDue).
	FillInterval time.Duration
	// AllFeatures reports every feature the gate knows, checked or not.
	// kube-apiserver does: its values are its configuration, which the server
	// flow compares across kube-apiservers.
	AllFeatures bool
	// BinaryVersion and EmulationVersion are the versions, major.minor, the
	// instance reports its uses at. Empty: the build's binary version, and
	// the gate's emulation version.
	BinaryVersion, EmulationVersion string
}

const (
	// RenewInterval is the default Options.RenewInterval.
	RenewInterval = 10 * time.Minute
	// FillInterval is the default Options.FillInterval.
	FillInterval = 10 * time.Minute
	// UseExpiry is how long an entry of status.uses lives after it was last
	// reported or renewed: three renew intervals, so that an entry whose
	// sampled instances missed a renewal or two stays.
	UseExpiry = 3 * RenewInterval
)

// DefaultOptions returns the options of a component's reporting.
func DefaultOptions(namespace, component, instance string) Options {
	return Options{Namespace: namespace, Component: component, Instance: instance, MaxDelay: 30 * time.Second, SampleSize: 3, CheckInterval: 10 * time.Second, Resync: 10 * time.Minute, RenewInterval: RenewInterval, FillInterval: FillInterval}
}

// MinorVersion is how uses spell a version: major.minor.
func MinorVersion(v *version.Version) string { return fmt.Sprintf("%d.%d", v.Major(), v.Minor()) }

// Start reports the component's uses until ctx is done. It never blocks the
// component: it returns at once, and while the API is unreachable it retries
// with back-off, holding nothing but the gate's set of checked features.
func (g *Gate) Start(ctx context.Context, client kubernetes.Interface, opts Options) {
	if opts.BinaryVersion == "" {
		opts.BinaryVersion = MinorVersion(compatibility.DefaultBuildEffectiveVersion().BinaryVersion())
	}
	if opts.EmulationVersion == "" {
		opts.EmulationVersion = MinorVersion(g.EmulationVersion())
	}
	informer := featuresinformers.NewFeatureInformer(client, opts.Namespace, opts.Resync, cache.Indexers{})
	r := newReporter(g, client.FeaturesV1alpha1().Features(opts.Namespace), featureslisters.NewFeatureLister(informer.GetIndexer()), opts)
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.poke() },
		UpdateFunc: func(any, any) { r.poke() },
	})
	go func() {
		if !r.waitForAPI(ctx, client.Discovery()) {
			return
		}
		go informer.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			return
		}
		r.run(ctx)
	}()
}

// waitForAPI returns once the servers serve the Feature API, false if ctx ends
// first. The API is alpha and served only when enabled: rather than a watch
// that fails and logs without end, a component checks discovery, less and
// less often up to the resync period, so that thousands of kubelets of a
// cluster without the API cost little.
func (r *reporter) waitForAPI(ctx context.Context, client discovery.DiscoveryInterface) bool {
	backoff := wait.Backoff{Duration: r.opts.CheckInterval, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: r.opts.Resync}
	for ctx.Err() == nil {
		_, err := client.ServerResourcesForGroupVersion(featuresv1alpha1.SchemeGroupVersion.String())
		if err == nil {
			return true
		}
		klog.FromContext(ctx).V(4).Info("The Feature API is not served, feature uses are not reported yet", "err", err)
		r.sleep(ctx, backoff.Step())
	}
	return false
}

type reporter struct {
	gate   *Gate
	client featuresclient.FeatureInterface
	lister featureslisters.FeatureLister
	opts   Options
	// clock tells the join times (joinDue) and the renewals' due times.
	clock clock.Clock
	// changes is signalled when a Feature changes in the cache.
	changes chan struct{}
	// sleep waits for d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration)
	// uniform draws from [0, 1), shuffle permutes n elements; tests replace
	// them.
	uniform func() float64
	shuffle func(n int, swap func(i, j int))
	// joinAt is, for each Feature whose sample of this instance's entry has
	// room, when this instance adds itself if the sample is still the one it
	// saw. One goroutine runs the passes.
	joinAt map[string]joinTime
}

// joinTime is when an instance joins a sample with room, and the sample it
// drew the time for.
type joinTime struct {
	at     time.Time
	sample string
}

func newReporter(g *Gate, client featuresclient.FeatureInterface, lister featureslisters.FeatureLister, opts Options) *reporter {
	return &reporter{gate: g, client: client, lister: lister, opts: opts, clock: clock.RealClock{}, changes: make(chan struct{}, 1),
		sleep: sleepContext, uniform: rand.Float64, shuffle: rand.Shuffle, joinAt: map[string]joinTime{}}
}

// suppressionDelay draws a delay in [0, bound). For a component of many
// instances (Options.MaxInstances) it draws from a truncated exponential
// distribution whose density grows towards bound (Nonnenmacher and Biersack,
// "Scalable feedback for large groups", IEEE/ACM ToN 7(3), 1999): the
// feedback-suppression timer of reliable multicast, where one member of a
// group of unknown size answers for all. With uniform delays the instances
// whose delay ends before the first write reaches their caches grow with
// their number (each loses a conflict: 124,545 for 231 writes with 5,000
// kubelets, measured); with this one few instances draw early delays whatever
// their number, up to MaxInstances, and the first write reaches the others'
// caches before most delays end. The price is a later first report: the
// first of MaxInstances instances waits about a tenth of bound, the first of
// 3 most of it, which is why the few instances of other components draw
// uniform delays.
func (r *reporter) suppressionDelay(bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	if r.opts.MaxInstances <= 1 {
		return time.Duration(float64(bound) * r.uniform())
	}
	lambda := math.Log(float64(r.opts.MaxInstances)) + 1
	d := time.Duration(float64(bound) / lambda * math.Log1p(r.uniform()*math.Expm1(lambda)))
	// A draw within a few ulps of 1 rounds to bound.
	return min(d, bound-1)
}

func sleepContext(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *reporter) poke() {
	select {
	case r.changes <- struct{}{}:
	default:
	}
}

// run reports, then waits for a Feature to change (its uses cleared, say) or
// for the check interval, which also finds features checked for the first time.
func (r *reporter) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 10, Cap: 5 * time.Minute}
	}
	backoff := newBackoff()
	for ctx.Err() == nil {
		if err := r.reportOnce(ctx); err != nil {
			delay := backoff.Step()
			logger.V(2).Info("Reporting feature uses failed, retrying", "err", err, "delay", delay)
			r.sleep(ctx, delay)
			continue
		}
		backoff = newBackoff()
		timer := time.NewTimer(r.opts.CheckInterval)
		select {
		case <-ctx.Done():
		case <-r.changes:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// reportOnce waits a random delay when some use is missing, then writes the
// uses that are still missing, in an order of its own: instances whose
// delays ended together then write different Features first, and each finds
// some of its others written by the others. What changes what a Feature says
// (an entry missing, the instance moved to another value) is written before
// the joins of samples, which only restore a sample's redundancy: a pass of a
// kube-apiserver may join the samples of all its Features, hundreds of writes,
// and the report of a changed value must not wait behind them.
func (r *reporter) reportOnce(ctx context.Context) error {
	if len(r.missing()) == 0 {
		return nil
	}
	if r.opts.MaxDelay > 0 {
		r.sleep(ctx, r.suppressionDelay(r.opts.MaxDelay))
	}
	missing := r.missing()
	r.shuffle(len(missing), func(i, j int) { missing[i], missing[j] = missing[j], missing[i] })
	var changes, joins []Use
	for _, use := range missing {
		if r.joins(use) {
			joins = append(joins, use)
		} else {
			changes = append(changes, use)
		}
	}
	var errs []error
	for _, use := range append(changes, joins...) {
		if err := r.write(ctx, use); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// missing returns the uses the Feature objects in the cache lack; a sample
// with room lacks this instance only once its join time came (joinDue). It
// forgets the join times of Features that left the cache.
func (r *reporter) missing() []Use {
	var missing []Use
	uses := r.gate.Uses
	if r.opts.AllFeatures {
		uses = r.gate.AllUses
	}
	cached := map[string]bool{}
	for _, use := range uses() {
		f, err := r.lister.Features(r.opts.Namespace).Get(objectName(use))
		if err != nil {
			// Not announced (yet): kube-apiserver creates the Features it knows.
			continue
		}
		cached[f.Name] = true
		if r.needsReport(f, use) {
			missing = append(missing, use)
		}
	}
	for name := range r.joinAt {
		if !cached[name] {
			delete(r.joinAt, name)
		}
	}
	return missing
}

func objectName(use Use) string { return strings.ToLower(string(use.Feature)) }

// own reports whether u is this instance's entry for use: its component, the
// value and its versions.
func (r *reporter) own(u featuresv1alpha1.FeatureUse, use Use) bool {
	return u.Component == r.opts.Component && u.Value == use.Value && u.BinaryVersion == r.opts.BinaryVersion && u.EmulationVersion == r.opts.EmulationVersion
}

func (r *reporter) entry(f *featuresv1alpha1.Feature, use Use) int {
	return slices.IndexFunc(f.Status.Uses, func(u featuresv1alpha1.FeatureUse) bool { return r.own(u, use) })
}

// needsReport tells whether the Feature lacks this instance's use: no entry for
// the value and versions, or a sample with room that does not name it once
// this instance's join time came, or this instance named in another entry of
// its component (it ran with another value or version before), or its entry
// due for renewal.
func (r *reporter) needsReport(f *featuresv1alpha1.Feature, use Use) bool {
	i := r.entry(f, use)
	named := i >= 0 && slices.Contains(f.Status.Uses[i].Instances, r.opts.Instance)
	room := i >= 0 && !named && len(f.Status.Uses[i].Instances) < r.opts.SampleSize
	if !room {
		delete(r.joinAt, f.Name)
	}
	switch {
	case r.namedElsewhere(f, use) >= 0 || i < 0:
		return true
	case named:
		return r.renewalDue(f.Status.Uses[i])
	}
	return room && r.joinDue(f.Name, strings.Join(f.Status.Uses[i].Instances, ","))
}

// joinDue reports whether this instance adds itself to the sample of the
// Feature, which has room: once a suppressionDelay of up to fillBound has
// passed since it first saw the sample as it is now. A sample that changed
// (filled and left room again while this instance did not look) gets a new
// delay, or every instance whose old one had passed would join at once. The
// entry exists, so its value is reported: the fill only restores the sample's
// redundancy, and when a sampled instance left, thousands of instances that
// race for its place at once are a herd of conflicting writes (666 for one
// kubelet of 5,000, measured).
func (r *reporter) joinDue(name, sample string) bool {
	now := r.clock.Now()
	j, ok := r.joinAt[name]
	if !ok || j.sample != sample {
		j = joinTime{at: now.Add(r.suppressionDelay(r.fillBound())), sample: sample}
		r.joinAt[name] = j
	}
	return !now.Before(j.at)
}

// fillBound is the longest delay before this instance joins a sample with
// room: FillInterval for a component of many instances, MaxDelay, as for a
// report, for the few instances of a control-plane component. They are no
// herd to spread, and the server flow waits for every live kube-apiserver to
// be named before a transition goes on: a kube-apiserver that restarted after
// the leader had pruned its name held the transitions for up to FillInterval.
func (r *reporter) fillBound() time.Duration {
	if r.opts.MaxInstances <= 1 {
		return r.opts.MaxDelay
	}
	return r.opts.FillInterval
}

// joins reports whether writing the use would only add this instance to the
// sample of an entry that reports its value already.
func (r *reporter) joins(use Use) bool {
	f, err := r.lister.Features(r.opts.Namespace).Get(objectName(use))
	if err != nil || r.namedElsewhere(f, use) >= 0 {
		return false
	}
	i := r.entry(f, use)
	return i >= 0 && !slices.Contains(f.Status.Uses[i].Instances, r.opts.Instance)
}

// renewalDue reports whether an entry was last reported RenewInterval ago or
// more. An entry stored without a last report time has its first one.
func (r *reporter) renewalDue(u featuresv1alpha1.FeatureUse) bool {
	last := u.LastReportTime
	if last.IsZero() {
		last = u.FirstReportTime
	}
	return r.opts.RenewInterval > 0 && (last.IsZero() || r.clock.Since(last.Time) >= r.opts.RenewInterval)
}

// namedElsewhere returns the index of another entry of this component that
// names this instance, or -1.
func (r *reporter) namedElsewhere(f *featuresv1alpha1.Feature, use Use) int {
	return slices.IndexFunc(f.Status.Uses, func(u featuresv1alpha1.FeatureUse) bool {
		return u.Component == r.opts.Component && !r.own(u, use) && slices.Contains(u.Instances, r.opts.Instance)
	})
}

// write adds this instance's use to the Feature. It applies its own entry
// only, as its own field manager, so that it cannot drop another writer's
// entries: status.uses is a list-map keyed by component and value, and the
// server merges the entry and the instance's name into what it stores. The
// apply is conditional on the resourceVersion the cache holds, which keeps the
// sample small: a reporter whose cache is behind loses with a conflict, and the
// next pass, once the cache has the other write, decides whether this one still
// needs to report.
func (r *reporter) write(ctx context.Context, use Use) error {
	f, err := r.lister.Features(r.opts.Namespace).Get(objectName(use))
	if err != nil || !r.needsReport(f, use) {
		return nil
	}
	if r.namedElsewhere(f, use) >= 0 {
		return r.move(ctx, f, use)
	}
	entry := featuresapply.FeatureUse().
		WithComponent(r.opts.Component).
		WithValue(use.Value).
		WithBinaryVersion(r.opts.BinaryVersion).
		WithEmulationVersion(r.opts.EmulationVersion).
		WithInstances(r.opts.Instance)
	if i := r.entry(f, use); i >= 0 && slices.Contains(f.Status.Uses[i].Instances, r.opts.Instance) {
		// A renewal: any time other than the stored one; the server sets its own.
		entry.WithLastReportTime(metav1.Now())
	}
	apply := featuresapply.Feature(f.Name, f.Namespace).
		WithResourceVersion(f.ResourceVersion).
		WithStatus(featuresapply.FeatureStatus().WithUses(entry))
	_, err = r.client.ApplyUses(ctx, f.Name, apply, metav1.ApplyOptions{FieldManager: FieldManager(r.opts.Component, r.opts.Instance), Force: true})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// move takes this instance out of the other entries of its component (another
// value or version), each of which goes when it named only this instance, and
// adds it to the entry of its value and versions, in one update guarded by
// the cached resourceVersion. An instance reports one value at one version,
// and its name elsewhere may have been written by another field manager (by
// an update, or by an earlier release of the reporter), which an apply could
// not remove.
func (r *reporter) move(ctx context.Context, f *featuresv1alpha1.Feature, use Use) error {
	f = f.DeepCopy()
	for i := r.namedElsewhere(f, use); i >= 0; i = r.namedElsewhere(f, use) {
		f.Status.Uses[i].Instances = slices.DeleteFunc(f.Status.Uses[i].Instances, func(s string) bool { return s == r.opts.Instance })
		if len(f.Status.Uses[i].Instances) == 0 {
			f.Status.Uses = slices.Delete(f.Status.Uses, i, i+1)
		}
	}
	switch i := r.entry(f, use); {
	case i < 0:
		f.Status.Uses = append(f.Status.Uses, featuresv1alpha1.FeatureUse{
			Component: r.opts.Component, Value: use.Value, BinaryVersion: r.opts.BinaryVersion, EmulationVersion: r.opts.EmulationVersion,
			Instances: []string{r.opts.Instance},
		})
	case len(f.Status.Uses[i].Instances) < r.opts.SampleSize && !slices.Contains(f.Status.Uses[i].Instances, r.opts.Instance):
		f.Status.Uses[i].Instances = append(f.Status.Uses[i].Instances, r.opts.Instance)
	}
	_, err := r.client.UpdateUses(ctx, f.Name, f, metav1.UpdateOptions{FieldManager: FieldManager(r.opts.Component, r.opts.Instance)})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// maxFieldManagerLength is the longest field manager name kube-apiserver accepts.
const maxFieldManagerLength = 128

// FieldManager is the field manager of one instance's uses:
// "component/instance", for example "kubelet/node-1", so that each instance
// owns its own entries and its own name in a shared entry's instances. A name
// too long for a field manager is replaced by a hash of it.
func FieldManager(component, instance string) string {
	name := component + "/" + instance
	if len(name) <= maxFieldManagerLength {
		return name
	}
	sum := sha256.Sum256([]byte(instance))
	return component + "/" + hex.EncodeToString(sum[:16])
}
