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
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	featuresapply "k8s.io/client-go/applyconfigurations/features/v1alpha1"
	"k8s.io/client-go/discovery"
	featuresinformers "k8s.io/client-go/informers/features/v1alpha1"
	"k8s.io/client-go/kubernetes"
	featuresclient "k8s.io/client-go/kubernetes/typed/features/v1alpha1"
	featureslisters "k8s.io/client-go/listers/features/v1alpha1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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
	// MaxDelay bounds the random delay before a report. A reporter that finds
	// the entry written when its delay ends does not write, so that a thousand
	// instances that agree cause a handful of writes, not a thousand.
	MaxDelay time.Duration
	// SampleSize is how many instances an entry names at most; the first ones
	// to report add themselves.
	SampleSize int
	// CheckInterval is how often the reporter looks for features checked for
	// the first time and for uses missing from the cache.
	CheckInterval time.Duration
	// Resync is the informer's resync period.
	Resync time.Duration
	// AllFeatures reports every feature the gate knows, checked or not.
	// kube-apiserver does: its values are its configuration, which the server
	// flow compares across kube-apiservers.
	AllFeatures bool
}

// DefaultOptions returns the options of a component's reporting.
func DefaultOptions(namespace, component, instance string) Options {
	return Options{Namespace: namespace, Component: component, Instance: instance, MaxDelay: 30 * time.Second, SampleSize: 3, CheckInterval: 10 * time.Second, Resync: 10 * time.Minute}
}

// Start reports the component's uses until ctx is done. It never blocks the
// component: it returns at once, and while the API is unreachable it retries
// with back-off, holding nothing but the gate's set of checked features.
func (g *Gate) Start(ctx context.Context, client kubernetes.Interface, opts Options) {
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
	// changes is signalled when a Feature changes in the cache.
	changes chan struct{}
	// sleep waits for d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration)
}

func newReporter(g *Gate, client featuresclient.FeatureInterface, lister featureslisters.FeatureLister, opts Options) *reporter {
	return &reporter{gate: g, client: client, lister: lister, opts: opts, changes: make(chan struct{}, 1), sleep: sleepContext}
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
// uses that are still missing.
func (r *reporter) reportOnce(ctx context.Context) error {
	if len(r.missing()) == 0 {
		return nil
	}
	if r.opts.MaxDelay > 0 {
		r.sleep(ctx, rand.N(r.opts.MaxDelay))
	}
	var errs []error
	for _, use := range r.missing() {
		if err := r.write(ctx, use); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// missing returns the uses the Feature objects in the cache lack.
func (r *reporter) missing() []Use {
	var missing []Use
	uses := r.gate.Uses
	if r.opts.AllFeatures {
		uses = r.gate.AllUses
	}
	for _, use := range uses() {
		f, err := r.lister.Features(r.opts.Namespace).Get(objectName(use))
		if err != nil {
			// Not announced (yet): kube-apiserver creates the Features it knows.
			continue
		}
		if r.needsReport(f, use) {
			missing = append(missing, use)
		}
	}
	return missing
}

func objectName(use Use) string { return strings.ToLower(string(use.Feature)) }

func (r *reporter) entry(f *featuresv1alpha1.Feature, use Use) int {
	return slices.IndexFunc(f.Status.Uses, func(u featuresv1alpha1.FeatureUse) bool {
		return u.Component == r.opts.Component && u.Value == use.Value
	})
}

// needsReport tells whether the Feature lacks this instance's use: no entry for
// the value, or a sample with room that does not name it, or this instance named
// under the other value (it ran with that value before).
func (r *reporter) needsReport(f *featuresv1alpha1.Feature, use Use) bool {
	if r.namedUnderOtherValue(f, use) >= 0 {
		return true
	}
	i := r.entry(f, use)
	if i < 0 {
		return true
	}
	instances := f.Status.Uses[i].Instances
	return len(instances) < r.opts.SampleSize && !slices.Contains(instances, r.opts.Instance)
}

// namedUnderOtherValue returns the index of the entry of the other value that
// names this instance, or -1.
func (r *reporter) namedUnderOtherValue(f *featuresv1alpha1.Feature, use Use) int {
	return slices.IndexFunc(f.Status.Uses, func(u featuresv1alpha1.FeatureUse) bool {
		return u.Component == r.opts.Component && u.Value != use.Value && slices.Contains(u.Instances, r.opts.Instance)
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
	if r.namedUnderOtherValue(f, use) >= 0 {
		return r.move(ctx, f, use)
	}
	apply := featuresapply.Feature(f.Name, f.Namespace).
		WithResourceVersion(f.ResourceVersion).
		WithStatus(featuresapply.FeatureStatus().WithUses(featuresapply.FeatureUse().
			WithComponent(r.opts.Component).
			WithValue(use.Value).
			WithInstances(r.opts.Instance)))
	_, err = r.client.ApplyUses(ctx, f.Name, apply, metav1.ApplyOptions{FieldManager: FieldManager(r.opts.Component, r.opts.Instance), Force: true})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// move takes this instance out of the other value's entry, which goes when it
// named only this instance, and adds it to the entry of its value, in one
// update guarded by the cached resourceVersion. An instance reports one value,
// and its name under the other may have been written by another field manager
// (by an update, or by an earlier release of the reporter), which an apply
// could not remove.
func (r *reporter) move(ctx context.Context, f *featuresv1alpha1.Feature, use Use) error {
	f = f.DeepCopy()
	if i := r.namedUnderOtherValue(f, use); i >= 0 {
		f.Status.Uses[i].Instances = slices.DeleteFunc(f.Status.Uses[i].Instances, func(s string) bool { return s == r.opts.Instance })
		if len(f.Status.Uses[i].Instances) == 0 {
			f.Status.Uses = slices.Delete(f.Status.Uses, i, i+1)
		}
	}
	switch i := r.entry(f, use); {
	case i < 0:
		f.Status.Uses = append(f.Status.Uses, featuresv1alpha1.FeatureUse{
			Component: r.opts.Component, Value: use.Value, Instances: []string{r.opts.Instance}, FirstReportTime: metav1.Now(),
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
