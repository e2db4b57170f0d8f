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

package logic

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.uber.org/mock/gomock"
	"golang.org/x/time/rate"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/resource/pod/recommendation"
	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	controllerfetcher "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/target/controller_fetcher"
	target_mock "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/target/mock"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/priority"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/restriction"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/utils"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/limitrange"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/nodescope"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/test"
	vpa_api_util "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// A node-scoped VPA of the DaemonSet agent on two nodes: the DaemonSet-wide
// recommendation is 300m (bounds 300m), node busy's 2 and node quiet's 50m
// (bounds equal to the targets), so that a pod at one of the three values is
// outside the bounds of each other.
const (
	nsWide  = "300m"
	nsBusy  = "2"
	nsQuiet = "50m"
)

func nsRec(cpu string) *vpa_types.RecommendedPodResources {
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	return &vpa_types.RecommendedPodResources{ContainerRecommendations: []vpa_types.RecommendedContainerResources{{
		ContainerName: "agent", Target: r, LowerBound: r, UpperBound: r, UncappedTarget: r,
	}}}
}

var nsDaemonSet = metav1.TypeMeta{Kind: "DaemonSet", APIVersion: "apps/v1"}

func nsVPA(mode vpa_types.UpdateMode) *vpa_types.VerticalPodAutoscaler {
	return &vpa_types.VerticalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "agent-uid"},
		Spec: vpa_types.VerticalPodAutoscalerSpec{
			TargetRef:    &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent"},
			Scope:        vpa_types.ScopeNode,
			UpdatePolicy: &vpa_types.PodUpdatePolicy{UpdateMode: &mode},
		},
		Status: vpa_types.VerticalPodAutoscalerStatus{Recommendation: nsRec(nsWide)},
	}
}

// nsNodes holds the nodes busy and quiet, of UIDs uid-busy and uid-quiet.
func nsNodes(t *testing.T) listersv1.NodeLister {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"busy", "quiet"} {
		if err := indexer.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}); err != nil {
			t.Fatal(err)
		}
	}
	return listersv1.NewNodeLister(indexer)
}

// nsLookup holds the VPA's slice as the recommender wrote it at written.
func nsLookup(t *testing.T, clk *clocktesting.FakeClock, written time.Time) *nodescope.Lookup {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodescope.Indexers())
	if err := indexer.Add(&vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1", Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: vpa_types.SchemeGroupVersion.String(), Kind: "VerticalPodAutoscaler", Name: "agent", UID: "agent-uid", Controller: ptr.To(true),
		}}},
		VPAName:    "agent",
		UpdateTime: metav1.NewTime(written),
		Nodes: []vpa_alpha.NodeRecommendation{
			{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *nsRec(nsBusy)},
			{NodeName: "quiet", NodeUID: "uid-quiet", Recommendation: *nsRec(nsQuiet)},
		},
	}); err != nil {
		t.Fatal(err)
	}
	return &nodescope.Lookup{Indexer: indexer, Nodes: nsNodes(t), Clock: clk}
}

// nsPod is the DaemonSet's pod on the node, as the DaemonSet controller
// creates it (pinned by node affinity, template request 100m), bound.
func nsPod(node string) *corev1.Pod {
	ds := metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid"}
	pod := test.Pod().WithName("agent-"+node).WithUID(types.UID("agent-"+node)).
		AddContainer(test.Container().WithName("agent").WithCPURequest(resource.MustParse("100m")).Get()).
		WithCreator(&ds, &nsDaemonSet).WithLabels(map[string]string{"app": "agent"}).Get()
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}},
		}}},
	}}}
	return pod
}

// admit gives the pod the CPU request that the processor of an admission
// controller gives it (through its recommendation provider), and binds it.
func admit(t *testing.T, processor vpa_api_util.RecommendationProcessor, vpa *vpa_types.VerticalPodAutoscaler, pod *corev1.Pod) string {
	t.Helper()
	resources, _, err := recommendation.NewProvider(limitrange.NewNoopLimitsCalculator(), processor).GetContainersResourcesForPod(pod, vpa)
	if err != nil || len(resources) != 1 {
		t.Fatalf("admission: resources %v, err %v", resources, err)
	}
	cpu := resources[0].Requests[corev1.ResourceCPU]
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = cpu
	pod.Spec.NodeName = pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
	return cpu.String()
}

// runUpdater runs one loop of the updater with the processor over the pods
// and returns the pods it evicted and those it resized in place.
func runUpdater(t *testing.T, processor vpa_api_util.RecommendationProcessor, vpa *vpa_types.VerticalPodAutoscaler, pods []*corev1.Pod) (evicted, resized []string) {
	t.Helper()
	ctrl := gomock.NewController(t)
	eviction := &test.PodsEvictionRestrictionMock{}
	inplace := &test.PodsInPlaceRestrictionMock{}
	for _, pod := range pods {
		eviction.On("CanEvict", pod).Return(true)
		eviction.On("Evict", pod, nil).Return(nil).Run(func(args mock.Arguments) { evicted = append(evicted, args.Get(0).(*corev1.Pod).Name) })
		inplace.On("CanInPlaceUpdate", pod).Return(utils.InPlaceApproved)
		inplace.On("InPlaceUpdate", pod, nil).Return(nil).Run(func(args mock.Arguments) { resized = append(resized, args.Get(0).(*corev1.Pod).Name) })
	}
	vpaLister := &test.VerticalPodAutoscalerListerMock{}
	vpaLister.On("List").Return([]*vpa_types.VerticalPodAutoscaler{vpa}, nil).Once()
	podLister := &test.PodListerMock{}
	podLister.On("List").Return(pods, nil)
	selectorFetcher := target_mock.NewMockVpaTargetSelectorFetcher(ctrl)
	selectorFetcher.EXPECT().Fetch(gomock.Eq(vpa)).AnyTimes().Return(parseLabelSelector("app = agent"), nil)
	u := &updater{
		vpaLister:               vpaLister,
		podLister:               podLister,
		restrictionFactory:      &restriction.FakePodsRestrictionFactory{Eviction: eviction, InPlace: inplace},
		evictionRateLimiter:     rate.NewLimiter(rate.Inf, 0),
		inPlaceRateLimiter:      rate.NewLimiter(rate.Inf, 0),
		evictionAdmission:       priority.NewDefaultPodEvictionAdmission(),
		recommendationProcessor: processor,
		selectorFetcher:         selectorFetcher,
		controllerFetcher:       controllerfetcher.FakeControllerFetcher{},
		priorityProcessor:       priority.NewProcessor(),
		infeasibleAttempts:      map[types.UID]*vpa_types.RecommendedPodResources{},
		// The updater's defaults.
		defaultUpdateThreshold:     0.1,
		podLifetimeUpdateThreshold: 12 * time.Hour,
		evictAfterOOMThreshold:     10 * time.Minute,
	}
	u.RunOnce(context.Background())
	return evicted, resized
}

// components are an admission controller and an updater, each with the
// DaemonSetNodeScope gate on or off, and the leases through which those
// with the gate see each other.
type components struct {
	admission, updater vpa_api_util.RecommendationProcessor
	// the handshakes of those with the gate; nil: the gate off or not running
	admissionH, updaterH *nodescope.Handshake
	// whether the admission controller runs (and renews its status lease)
	admissionDown bool
	client        *fake.Clientset
	clock         *clocktesting.FakeClock
	lookup        *nodescope.Lookup
}

// newComponents starts them and lets them sync for a minute.
func newComponents(t *testing.T, clk *clocktesting.FakeClock, lookup *nodescope.Lookup, admissionOn, updaterOn bool) *components {
	capping := vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator())
	c := &components{admission: capping, updater: capping, client: fake.NewClientset(), clock: clk, lookup: lookup}
	if updaterOn {
		c.startUpdater("updater")
	}
	if admissionOn {
		c.startAdmission("admission")
	}
	c.sync(t)
	for i := 0; i < 5; i++ {
		clk.Step(nodescope.LeaseSyncInterval)
		c.sync(t)
	}
	return c
}

// startUpdater starts an updater process with the gate.
func (c *components) startUpdater(id string) {
	c.updaterH = nodescope.NewHandshake(c.client.CoordinationV1(), "kube-system", nodescope.Updater, id, "vpa-admission-controller", c.clock)
	c.updater = &nodescope.RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()),
		Lookup: c.lookup, Role: nodescope.Updater, Handshake: c.updaterH}
}

// startAdmission starts an admission controller process with the gate.
func (c *components) startAdmission(id string) {
	c.admissionH = nodescope.NewHandshake(c.client.CoordinationV1(), "kube-system", nodescope.AdmissionController, id, "", c.clock)
	c.admission = &nodescope.RecommendationProcessor{Inner: vpa_api_util.NewCappingRecommendationProcessor(limitrange.NewNoopLimitsCalculator()),
		Lookup: c.lookup, Role: nodescope.AdmissionController, Handshake: c.admissionH}
}

// sync runs one round of the components' lease syncs, as their background
// loops do every LeaseSyncInterval, and of the admission controller's status
// lease, which it renews whatever its gate (upstream's status updater, which
// a starting admission controller begins after its node scope handshake).
func (c *components) sync(t *testing.T) {
	t.Helper()
	if c.admissionH != nil {
		if err := c.admissionH.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !c.admissionDown {
		leases := c.client.CoordinationV1().Leases("kube-system")
		now := metav1.NewMicroTime(c.clock.Now())
		status, err := leases.Get(context.Background(), "vpa-admission-controller", metav1.GetOptions{})
		if err != nil {
			_, err = leases.Create(context.Background(), &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "vpa-admission-controller", Namespace: "kube-system"},
				Spec:       coordinationv1.LeaseSpec{RenewTime: &now},
			}, metav1.CreateOptions{})
		} else {
			status.Spec.RenewTime = &now
			_, err = leases.Update(context.Background(), status, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if c.updaterH != nil {
		if err := c.updaterH.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNodeScopeSkew: for every combination of the DaemonSetNodeScope gate in
// the recommender (its slices fresh, or written an hour ago and not since),
// the admission controller and the updater, a pod admitted now is neither
// evicted nor resized by the updater's next loop: no eviction loop. Before,
// an updater with the gate on evicted the pods that an admission controller
// without it had given the DaemonSet-wide value (outside their node's
// bounds), and an updater without it those that an admission controller
// with it had given their node's value (outside the DaemonSet-wide bounds),
// every loop.
func TestNodeScopeSkew(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.InPlace, true)
	for _, tc := range []struct {
		recommender, admission, updater bool
		// what the admission controller gives the pods on busy and quiet
		wantBusy, wantQuiet string
	}{
		{true, true, true, nsBusy, nsQuiet},
		{true, true, false, nsWide, nsWide},
		{true, false, true, nsWide, nsWide},
		{true, false, false, nsWide, nsWide},
		{false, true, true, nsBusy, nsQuiet},
		{false, true, false, nsWide, nsWide},
		{false, false, true, nsWide, nsWide},
		{false, false, false, nsWide, nsWide},
	} {
		for _, mode := range []vpa_types.UpdateMode{vpa_types.UpdateModeRecreate, vpa_types.UpdateModeInPlaceOrRecreate} {
			name := fmt.Sprintf("recommender %s, admission controller %s, updater %s, %s", onOff(tc.recommender), onOff(tc.admission), onOff(tc.updater), mode)
			t.Run(name, func(t *testing.T) {
				clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
				written := clk.Now()
				if !tc.recommender {
					written = written.Add(-time.Hour)
				}
				c := newComponents(t, clk, nsLookup(t, clk, written), tc.admission, tc.updater)
				vpa := nsVPA(mode)
				busy, quiet := nsPod("busy"), nsPod("quiet")
				if got := admit(t, c.admission, vpa, busy); got != tc.wantBusy {
					t.Errorf("admitted on busy with cpu %s, want %s", got, tc.wantBusy)
				}
				if got := admit(t, c.admission, vpa, quiet); got != tc.wantQuiet {
					t.Errorf("admitted on quiet with cpu %s, want %s", got, tc.wantQuiet)
				}
				for loop := 0; loop < 2; loop++ {
					evicted, resized := runUpdater(t, c.updater, vpa, []*corev1.Pod{busy, quiet})
					if len(evicted) > 0 || len(resized) > 0 {
						t.Errorf("loop %d: the updater evicted %v and resized %v the pods just admitted, want none", loop, evicted, resized)
					}
					clk.Step(nodescope.LeaseSyncInterval)
					c.sync(t)
				}
			})
		}
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// TestNodeScopeOutageMovesNothing: the recommender stops writing (down,
// OOM-killed, its writes failing) for longer than the updater's staleness
// bound. The pods keep their node's value: the updater neither evicts nor
// resizes them, and a pod created meanwhile gets its node's last value.
// Before, the updater moved both pods to the DaemonSet-wide value once the
// slice was stale, and the admission controller gave new pods that value.
func TestNodeScopeOutageMovesNothing(t *testing.T) {
	const staleAfter = 5 * time.Minute
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.InPlace, true)
	for _, mode := range []vpa_types.UpdateMode{vpa_types.UpdateModeRecreate, vpa_types.UpdateModeInPlaceOrRecreate} {
		t.Run(string(mode), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			lookup := nsLookup(t, clk, clk.Now())
			// A bound of 5 minutes (--node-scope-stale-after), so that the
			// outage below is short in syncs; the default's is TestStaleSlices'.
			lookup.StaleAfter = staleAfter
			c := newComponents(t, clk, lookup, true, true)
			vpa := nsVPA(mode)
			busy, quiet := nsPod("busy"), nsPod("quiet")
			admit(t, c.admission, vpa, busy)
			admit(t, c.admission, vpa, quiet)
			// A pod whose request is not its node's value: the updater acts
			// on it while the slice is fresh, so the checks below are not
			// passed by an updater that does nothing.
			moved := nsPod("busy")
			admit(t, c.admission, vpa, moved)
			moved.Name, moved.UID = "agent-busy-moved", "agent-busy-moved"
			moved.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
			evicted, resized := runUpdater(t, c.updater, vpa, []*corev1.Pod{busy, quiet, moved})
			if acted := append(evicted, resized...); len(acted) != 1 || acted[0] != moved.Name {
				t.Fatalf("fresh slice: evicted %v, resized %v; want only %s", evicted, resized, moved.Name)
			}

			// The recommender is down: the slice is not written again. The
			// admission controller and the updater keep syncing their leases.
			written := lookup.Clock.Now()
			for age := clk.Now().Sub(written); age <= 2*staleAfter; age += nodescope.LeaseSyncInterval {
				clk.SetTime(written.Add(age))
				c.sync(t)
				if age%time.Minute != 0 {
					continue
				}
				evicted, resized := runUpdater(t, c.updater, vpa, []*corev1.Pod{busy, quiet})
				if len(evicted) > 0 || len(resized) > 0 {
					t.Errorf("recommender down for %v: evicted %v, resized %v; want none", age, evicted, resized)
				}
			}
			if !clk.Now().After(written.Add(staleAfter)) {
				t.Fatalf("clock at %v, not past the bound %v", clk.Now(), written.Add(staleAfter))
			}
			evicted, resized = runUpdater(t, c.updater, vpa, []*corev1.Pod{moved})
			if len(evicted) > 0 || len(resized) > 0 {
				t.Errorf("recommender down: the pod outside its node's stale bounds was evicted %v, resized %v; want left alone", evicted, resized)
			}
			if got := admit(t, c.admission, vpa, nsPod("busy")); got != nsBusy {
				t.Errorf("recommender down: a new pod on busy gets cpu %s, want its node's last %s", got, nsBusy)
			}
		})
	}
}

// TestNodeScopeRestartsMoveNothing: the handshake itself moves no pod when
// the updater or the admission controller restarts. While the updater is
// down for two minutes the admission controller stops renewing its lease
// (and gives new pods the DaemonSet-wide value); the restarted updater
// leaves the pods alone until it is settled and the admission controller's
// renewed lease is two intervals old, then acts on per-node bounds. While
// the admission controller is down for a minute its node scope lease
// expires and its status lease is not renewed: the updater leaves the pods
// alone. (The DaemonSet-wide bounds exclude both pods' values: an updater
// that took the expired lease as "off" would move them.)
func TestNodeScopeRestartsMoveNothing(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	lookup := nsLookup(t, clk, clk.Now())
	c := newComponents(t, clk, lookup, true, true)
	vpa := nsVPA(vpa_types.UpdateModeRecreate)
	busy, quiet := nsPod("busy"), nsPod("quiet")
	admit(t, c.admission, vpa, busy)
	admit(t, c.admission, vpa, quiet)
	// step moves on by a sync interval: the running components sync, then
	// the updater, if it runs, runs a loop.
	step := func(what string) {
		t.Helper()
		clk.Step(nodescope.LeaseSyncInterval)
		// The slice stays fresh: the recommender runs.
		if err := lookup.Indexer.Update(freshSlice(t, lookup, clk.Now())); err != nil {
			t.Fatal(err)
		}
		c.sync(t)
		if c.updaterH == nil {
			return
		}
		evicted, resized := runUpdater(t, c.updater, vpa, []*corev1.Pod{busy, quiet})
		if len(evicted) > 0 || len(resized) > 0 {
			t.Errorf("%s, at %v: evicted %v, resized %v; want none", what, clk.Now().Format(time.TimeOnly), evicted, resized)
		}
	}
	c.updaterH = nil
	for i := 0; i < 12; i++ {
		step("the updater is down")
	}
	if got := admit(t, c.admission, vpa, nsPod("busy")); got != nsWide {
		t.Errorf("the updater is down: a new pod gets cpu %s, want the DaemonSet-wide %s", got, nsWide)
	}
	c.startUpdater("updater-2")
	for i := 0; i < 12; i++ {
		step("the updater restarted")
	}
	moved := nsPod("busy")
	admit(t, c.admission, vpa, moved)
	moved.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	if evicted, _ := runUpdater(t, c.updater, vpa, []*corev1.Pod{moved}); len(evicted) != 1 {
		t.Errorf("the updater restarted two minutes ago: a pod outside its node's bounds is not evicted (%v)", evicted)
	}

	c.admissionH, c.admissionDown = nil, true
	for i := 0; i < 6; i++ {
		step("the admission controller is down")
	}
	c.startAdmission("admission-2")
	c.admissionDown = false
	for i := 0; i < 6; i++ {
		step("the admission controller restarted")
	}
	if got := admit(t, c.admission, vpa, nsPod("busy")); got != nsBusy {
		t.Errorf("the admission controller restarted a minute ago: a new pod gets cpu %s, want its node's %s", got, nsBusy)
	}
}

// freshSlice is the lookup's slice as the recommender rewrites it at now.
func freshSlice(t *testing.T, lookup *nodescope.Lookup, now time.Time) *vpa_alpha.VerticalPodAutoscalerSlice {
	t.Helper()
	obj, ok, err := lookup.Indexer.GetByKey("default/agent-1")
	if err != nil || !ok {
		t.Fatalf("slice: %v %v", ok, err)
	}
	s := obj.(*vpa_alpha.VerticalPodAutoscalerSlice).DeepCopy()
	s.UpdateTime = metav1.NewTime(now)
	return s
}

// TestNodeScopeUpdaterActsOnTheNodesRange: the updater compares a node-scoped
// DaemonSet's pod with its own node's range, not the DaemonSet-wide one: a pod
// at the DaemonSet-wide value on a node whose range is above it is evicted
// (Recreate) or resized (InPlaceOrRecreate), a pod at its node's value is left
// alone, although the DaemonSet-wide range would move both the other way.
func TestNodeScopeUpdaterActsOnTheNodesRange(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.InPlace, true)
	for _, tc := range []struct {
		mode                  vpa_types.UpdateMode
		wantEvicted, wantSize []string
	}{
		{mode: vpa_types.UpdateModeRecreate, wantEvicted: []string{"agent-busy"}},
		{mode: vpa_types.UpdateModeInPlaceOrRecreate, wantSize: []string{"agent-busy"}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			c := newComponents(t, clk, nsLookup(t, clk, clk.Now()), true, true)
			busy, quiet := nsPod("busy"), nsPod("quiet")
			for pod, cpu := range map[*corev1.Pod]string{busy: nsWide, quiet: nsQuiet} {
				pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
				pod.Spec.NodeName = pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
			}
			evicted, resized := runUpdater(t, c.updater, nsVPA(tc.mode), []*corev1.Pod{busy, quiet})
			if fmt.Sprint(evicted) != fmt.Sprint(tc.wantEvicted) || fmt.Sprint(resized) != fmt.Sprint(tc.wantSize) {
				t.Errorf("evicted %v and resized %v, want evicted %v and resized %v", evicted, resized, tc.wantEvicted, tc.wantSize)
			}
		})
	}
}

// TestNodeScopeNewNodeOfAGroupStartsOnce: the first pod on a new node of a
// grouped VPA is admitted with its group's value, and in Recreate mode the
// updater leaves it alone, before and after the recommender writes the node's
// own entry (its group's value: the node has no history yet). Before, the pod
// was admitted with the DaemonSet-wide value and evicted once its node had an
// entry: a second start of every new node's agent.
func TestNodeScopeNewNodeOfAGroupStartsOnce(t *testing.T) {
	const group = "1"
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"busy", "new"} {
		if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"pool": "p"}}}); err != nil {
			t.Fatal(err)
		}
	}
	slice := &vpa_alpha.VerticalPodAutoscalerSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1", Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: vpa_types.SchemeGroupVersion.String(), Kind: "VerticalPodAutoscaler", Name: "agent", UID: "agent-uid", Controller: ptr.To(true),
		}}},
		VPAName:    "agent",
		UpdateTime: metav1.NewTime(clk.Now()),
		Nodes:      []vpa_alpha.NodeRecommendation{{NodeName: "busy", NodeUID: "uid-busy", Recommendation: *nsRec(nsBusy)}},
		Groups:     []vpa_alpha.GroupRecommendation{{LabelValue: "p", Recommendation: *nsRec(group)}},
	}
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodescope.Indexers())
	if err := slices.Add(slice); err != nil {
		t.Fatal(err)
	}
	c := newComponents(t, clk, &nodescope.Lookup{Indexer: slices, Nodes: listersv1.NewNodeLister(nodes), Clock: clk}, true, true)
	vpa := nsVPA(vpa_types.UpdateModeRecreate)
	vpa.Spec.NodeScope = &vpa_types.NodeScopePolicy{GroupLabel: "pool"}
	first := nsPod("new")
	if got := admit(t, c.admission, vpa, first); got != group {
		t.Fatalf("the new node's first pod admitted with cpu %s, want its group's %s", got, group)
	}
	check := func(when string) {
		t.Helper()
		if evicted, resized := runUpdater(t, c.updater, vpa, []*corev1.Pod{first}); len(evicted)+len(resized) > 0 {
			t.Errorf("%s: the updater evicted %v and resized %v, want neither", when, evicted, resized)
		}
	}
	check("before the node's entry")
	slice = slice.DeepCopy()
	slice.Nodes = append(slice.Nodes, vpa_alpha.NodeRecommendation{NodeName: "new", NodeUID: "uid-new", Recommendation: *nsRec(group)})
	if err := slices.Update(slice); err != nil {
		t.Fatal(err)
	}
	check("after the node's entry")
}
