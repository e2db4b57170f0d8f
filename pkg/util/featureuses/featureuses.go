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

// Package featureuses starts the reporting of feature uses (KEP-3920) in
// Kubernetes' own components.
package featureuses

import (
	"context"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/feature/reporting"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
)

// Start reports, while ctx lasts and when FeatureLifecycle is on, the
// features the component checked through the process's default feature gate
// to the Feature objects in kube-system, as component and instance. It
// returns at once.
//
// The reporting layer holds no state of its own (the gate records the
// features it is asked about from the start), so creating it over the default
// gate here reports every check made since the process started, flag parsing
// included.
func Start(ctx context.Context, client kubernetes.Interface, component, instance string) {
	start(ctx, client, Options(component, instance))
}

// StartAPIServer is Start for kube-apiserver, which reports every feature it
// knows, checked or not: the server flow compares the kube-apiservers'
// configured values.
func StartAPIServer(ctx context.Context, client kubernetes.Interface, identity string) {
	opts := Options("kube-apiserver", identity)
	opts.AllFeatures = true
	start(ctx, client, opts)
}

// leased are the components whose instances each renew a lease that
// kube-apiserver reads (a kubelet its node lease, kube-apiserver its
// identity lease): the server flow prunes their names when the lease goes, so
// their entries need no renewal of their own. Renewing them would cost a
// write a renew interval for every feature kube-apiserver reports (all of
// them), each sent to every kubelet's watch.
var leased = map[string]bool{"kubelet": true, "kube-apiserver": true}

// kubeletInstances is how many kubelets the reports' delays are shaped for:
// twice the 5,000 nodes of upstream's scalability thresholds. The other
// components run a few instances, for which the delays stay uniform.
const kubeletInstances = 10_000

// Options are the reporting options of an instance of the component: those of
// kube-system, without renewal for the components that hold leases.
func Options(component, instance string) reporting.Options {
	opts := reporting.DefaultOptions(metav1.NamespaceSystem, component, instance)
	if leased[component] {
		opts.RenewInterval = 0
	}
	if component == "kubelet" {
		opts.MaxInstances = kubeletInstances
	}
	return opts
}

func start(ctx context.Context, client kubernetes.Interface, opts reporting.Options) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) {
		return
	}
	reporting.NewGate(utilfeature.DefaultMutableFeatureGate).Start(ctx, client, opts)
}

// StartOnHost is Start with this host's name as the instance, for components
// that have no other name: kube-controller-manager and kube-scheduler.
func StartOnHost(ctx context.Context, client kubernetes.Interface, component string) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) {
		return
	}
	hostname, err := os.Hostname()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Not reporting feature uses: no host name to report them as", "component", component)
		return
	}
	Start(ctx, client, component, hostname)
}
