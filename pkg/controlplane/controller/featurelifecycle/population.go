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
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
)

// Components whose instances report their uses, as they name themselves.
const (
	kubeAPIServerComponent         = "kube-apiserver"
	kubeControllerManagerComponent = "kube-controller-manager"
	kubeSchedulerComponent         = "kube-scheduler"
	kubeletComponent               = "kubelet"
)

// expected are the live instances of a component that report their uses, by
// the names they report under.
type expected struct {
	names sets.Set[string]
	// atLeast is true when only some of the instances are visible: of
	// kube-controller-manager and kube-scheduler only the leader holds a lease,
	// while every instance reports.
	atLeast bool
}

// population returns the live instances of each component, from the leases
// that already exist: a node's lease in kube-node-lease for its kubelet, the
// identity leases for kube-apiservers (live, as leadership counts them), and
// the leader election leases of kube-controller-manager and kube-scheduler in
// kube-system, whose holder identity starts with the host name they report
// under. A lease is live while this server saw it renewed within its duration.
func population(ctx context.Context, client kubernetes.Interface, ages *localAges, now time.Time, liveAPIServers []string) (map[string]expected, error) {
	pop := map[string]expected{
		kubeAPIServerComponent: {names: sets.New(liveAPIServers...)},
	}
	// From the watch cache: one list per run of a waiting task, once a
	// recheck period, and only during a transition.
	nodeLeases, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing the node leases: %w", err)
	}
	kubelets := sets.New[string]()
	for i := range nodeLeases.Items {
		if leaseLive(&nodeLeases.Items[i], ages, now) {
			kubelets.Insert(nodeLeases.Items[i].Name)
		}
	}
	pop[kubeletComponent] = expected{names: kubelets}
	for _, component := range []string{kubeControllerManagerComponent, kubeSchedulerComponent} {
		lease, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, component, metav1.GetOptions{ResourceVersion: "0"})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getting the leader election lease of %s: %w", component, err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || !leaseLive(lease, ages, now) {
			continue
		}
		host, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		pop[component] = expected{names: sets.New(host), atLeast: true}
	}
	return pop, nil
}

// leaseLive says whether this server saw the lease renewed within its duration
// before now.
func leaseLive(lease *coordinationv1.Lease, ages *localAges, now time.Time) bool {
	duration := 40 * time.Second // the kubelet's default
	if lease.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return renewedWithin(lease, ages, now, duration)
}

// componentCoverage is how many of a component's live instances are named in
// the Feature's uses.
type componentCoverage struct {
	component          string
	reported, expected int
	atLeast            bool
}

// covered says whether the component's reports are as many as they would be
// if every live instance had reported: an entry samples at most sample
// instances, and an instance whose value's sample is full does not write, so
// more than sample of them cannot be told apart from a full sample.
func (c componentCoverage) covered(sample int) bool {
	return c.reported >= min(c.expected, sample)
}

func (c componentCoverage) String() string {
	if c.atLeast {
		return fmt.Sprintf("%s %d of at least %d", c.component, c.reported, c.expected)
	}
	return fmt.Sprintf("%s %d of %d", c.component, c.reported, c.expected)
}

// coverage returns, for each component that has live instances, how many of
// them the uses name, sorted by component. An
// instance named that the population does not know (a node whose lease
// expired) does not count, but for the components only partly visible.
func coverage(f *featuresv1alpha1.Feature, pop map[string]expected) []componentCoverage {
	named := map[string]sets.Set[string]{}
	for _, use := range f.Status.Uses {
		if named[use.Component] == nil {
			named[use.Component] = sets.New[string]()
		}
		named[use.Component].Insert(use.Instances...)
	}
	var out []componentCoverage
	for component, exp := range pop {
		if exp.names.Len() == 0 {
			continue
		}
		c := componentCoverage{component: component, expected: exp.names.Len(), atLeast: exp.atLeast}
		if exp.atLeast {
			c.reported = named[component].Len()
		} else {
			c.reported = named[component].Intersection(exp.names).Len()
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b componentCoverage) int { return strings.Compare(a.component, b.component) })
	return out
}
