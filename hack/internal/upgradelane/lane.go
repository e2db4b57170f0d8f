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

package upgradelane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-carry/kube-carry/hack/internal/images"
	"github.com/kube-carry/kube-carry/hack/internal/kind"
)

// Lane is make kind-upgrade's run on the kind cluster of a release side
// (kind.NewReleaseKind): the workloads deployed, a prober running through every
// step, and after each step the workloads and the Feature API compared with
// what the step must leave.
type Lane struct {
	Kind *kind.Kind
	// Fork and Pristine are the server release tarballs of the fork and of
	// pristine upstream at the pinned release, each with the tree it was built
	// from (its kubeadm's etcd and CoreDNS).
	Fork, Pristine Release
	// ForkBin holds the fork's kubectl and kubectl-balloon, which step b and
	// the balloons' round trips run as a user does.
	ForkBin string
	// LeaveOn breaks step c on purpose: the gate named is left on, which
	// the step's checks must find; the lane stops after that step.
	LeaveOn string
	// VPATree is the patched VPA's tree, whose three components step b runs
	// in the cluster.
	VPATree string
	// Series are the series' settings (build/kind/cluster.yaml): its gates
	// and the Feature API's runtime-config.
	Series kind.ClusterSettings
	Log    io.Writer

	features dynamic.Interface
}

// Release is a server release tarball and the tree it was built from.
type Release struct{ Tarball, Tree string }

func (l *Lane) logf(format string, args ...any) { fmt.Fprintf(l.Log, format+"\n", args...) }

// step is one step of the lane: what it runs, the nodes it drains, and what
// it must leave the Feature API in.
type step struct {
	name    string
	run     func(context.Context) error
	drained []string
	// binaries says that the step replaces the binaries: versions are mixed
	// while it runs, and no Feature may start a transition.
	binaries bool
	// transitions are the Features whose transition the step starts.
	transitions []string
	features    func() FeatureExpectation
	// balloons are the balloons' sizes by node the step must leave.
	balloons func() map[string]string
	// vpa are the nodes of the VPA's per-node history the step must leave;
	// nil before the VPA exists.
	vpa func() *VPANodes
	// check finds what else the step left wrong (the pull burst's problems).
	check func() []string
}

// Run deploys the workloads and runs the lane's steps, each checked; it
// returns every problem a step found, each named by its step.
func (l *Lane) Run(ctx context.Context) error {
	if l.LeaveOn != "" && !slices.Contains(l.seriesGates(), l.LeaveOn) {
		return fmt.Errorf("the gate to leave on in step c, %q, is none of the series' gates that step turns off: %v", l.LeaveOn, l.seriesGates())
	}
	client, err := l.Kind.KindClient()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kind.KindKubeconfig())
	if err != nil {
		return err
	}
	if l.features, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	busybox, err := images.Busybox("/bin/busybox")
	if err != nil {
		return err
	}
	name := images.Names{Registry: "registry.k8s.io"}.Busybox()
	work := l.Kind.KindPath("upgrade-lane")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if err := l.Kind.LoadImages(ctx, work, images.Set{name: busybox}); err != nil {
		return err
	}
	w := Workloads{Client: client, Busybox: name}
	if err := w.Deploy(ctx); err != nil {
		return err
	}
	if err := waitWorkloads(ctx, client); err != nil {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var addrs, all, workers []string
	for _, n := range nodes.Items {
		all = append(all, n.Name)
		if _, ok := n.Labels[controlPlaneLabel]; !ok {
			workers = append(workers, n.Name)
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				addrs = append(addrs, a.Address)
			}
		}
	}
	prober, err := NewProber(addrs, 100*time.Millisecond)
	if err != nil {
		return err
	}
	probing, stop := context.WithCancel(ctx)
	defer stop()
	go prober.Run(probing)

	var problems []string
	resizerCfg := rest.CopyConfig(cfg)
	resizerCfg.Impersonate = rest.ImpersonationConfig{UserName: laneUser, Groups: []string{"node-balloon-resizers"}}
	resizer, err := kubernetes.NewForConfig(resizerCfg)
	if err != nil {
		return err
	}
	balloons := &Balloons{
		Client:  client,
		Resizer: resizer,
		Kubectl: func(ctx context.Context, args ...string) error { return l.run(ctx, "kubectl", args...) },
		Plugin: func(ctx context.Context, args ...string) error {
			return l.run(ctx, "kubectl-balloon", append(args, ResizerFlags...)...)
		},
		Addon: filepath.Join(l.Fork.Tree, "cluster", "addons", "node-balloon"),
		Saved: filepath.Join(work, "node-balloon-sizes.json"),
	}
	// No records of an earlier run's cluster are restored.
	if err := os.Remove(balloons.Saved); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	burst := PullBurst{Client: client, Serve: l.Kind.KindRegistry, Image: busybox, Images: 3, Copies: 3}
	for _, s := range l.steps(all, workers, balloons, burst) {
		found, err := l.runStep(ctx, client, balloons, w, prober, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		for _, p := range found {
			problems = append(problems, s.name+": "+p)
		}
		// The broken step's own checks must fail the run; nothing is added.
		if l.LeaveOn != "" && s.name == brokenStep {
			l.logf("== %s was broken on purpose (%s left on): the lane stops after it", s.name, l.LeaveOn)
			break
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// steps are the lane's steps after the workloads are deployed (issue 38):
// (a) upgrade to the fork with the series' gates and API; (c) the features
// rolled back as the KEPs' rollback sections say, the gates whose Features
// the server flow turns off first, then FeatureLifecycle, which stops the
// flow; (d) on again in the opposite order; (e) the binaries rolled back to
// pristine upstream at the same release, without the series' settings, then
// forward to the fork again.
func (l *Lane) steps(all, workers []string, balloons *Balloons, burst PullBurst) []step {
	features := l.seriesGates()
	set := func(on bool, gates ...string) map[string]bool {
		m := map[string]bool{}
		for _, g := range gates {
			m[g] = on
		}
		return m
	}
	states := func(on bool, gates ...string) map[string]string {
		m := map[string]string{}
		for _, g := range gates {
			m[g] = map[bool]string{true: "On", false: "Off"}[on]
		}
		return m
	}
	var kept Features
	// sized are the balloons' sizes after step b, which every round trip
	// must bring back; none is the cluster without balloons.
	var sized map[string]string
	none := func() map[string]string { return map[string]string{} }
	same := func() map[string]string { return sized }
	// history is the VPA's per-node history after step b: with the VPA's gate
	// off (step c) the slices stay as they were, and every later step keeps
	// them on the same nodes.
	var history VPANodes
	sameHistory := func() *VPANodes { return &history }
	var burstProblems []string
	return []step{{
		name:     "upgrade to the fork",
		run:      func(ctx context.Context) error { return l.Kind.KindUpgrade(ctx, l.Fork.Tarball, l.Fork.Tree, l.Series) },
		drained:  all,
		binaries: true,
		features: func() FeatureExpectation {
			return FeatureExpectation{Served: true, Settled: true, States: states(true, append(features, lifecycleGate)...)}
		},
		balloons: none,
	}, {
		name: "use the features",
		run: func(ctx context.Context) error {
			if err := l.Kind.KindLoadBalloonAgent(ctx, l.Fork.Tree); err != nil {
				return err
			}
			if err := balloons.On(ctx); err != nil {
				return err
			}
			if err := balloons.Size(ctx, workers, balloonHold); err != nil {
				return err
			}
			var err error
			if sized, err = balloons.Sizes(ctx); err != nil {
				return err
			}
			l.logf("   balloons sized on %v: %v", workers, sized)
			if err := l.Kind.KindDeployVPA(ctx, kind.KindVPA{Tree: l.VPATree, RecommenderArgs: vpaRecommenderArgs, NodeScope: true}); err != nil {
				return err
			}
			if history, err = useVPA(ctx, l.features, all); err != nil {
				return err
			}
			l.logf("   the node-scoped VPA: %s", history)
			var report string
			if report, burstProblems, err = burst.Run(ctx, workers); err != nil {
				return err
			}
			l.logf("   the pull burst: %s", report)
			return nil
		},
		features: func() FeatureExpectation {
			return FeatureExpectation{Served: true, Settled: true, States: states(true, append(features, lifecycleGate)...)}
		},
		balloons: same,
		vpa:      sameHistory,
		check:    func() []string { return burstProblems },
	}, {
		name: brokenStep,
		run: func(ctx context.Context) error {
			if err := balloons.Off(ctx); err != nil {
				return err
			}
			if err := l.Kind.KindSetVPAGate(ctx, false); err != nil {
				return err
			}
			rolled := slices.DeleteFunc(slices.Clone(features), func(g string) bool { return g == l.LeaveOn })
			if err := l.Kind.KindSetGates(ctx, set(false, rolled...)); err != nil {
				return err
			}
			if err := l.Kind.KindWaitFeatures(ctx, set(false, rolled...), featuresSettle); err != nil {
				return err
			}
			var err error
			if kept, err = ReadFeatures(ctx, l.features); err != nil {
				return err
			}
			return l.Kind.KindSetGates(ctx, set(false, lifecycleGate))
		},
		transitions: lower(features),
		// FeatureLifecycle off stops the flow and the API's storage: the
		// Features stay in etcd as the flow last wrote them.
		features: func() FeatureExpectation { return FeatureExpectation{} },
		balloons: none,
		vpa:      sameHistory,
	}, {
		name: "turn the features on again",
		run: func(ctx context.Context) error {
			if err := l.Kind.KindSetGates(ctx, set(true, lifecycleGate)); err != nil {
				return err
			}
			if err := l.Kind.KindSetGates(ctx, set(true, features...)); err != nil {
				return err
			}
			if err := l.Kind.KindWaitFeatures(ctx, set(true, append(features, lifecycleGate)...), featuresSettle); err != nil {
				return err
			}
			if err := balloons.On(ctx); err != nil {
				return err
			}
			return l.Kind.KindSetVPAGate(ctx, true)
		},
		transitions: lower(features),
		features: func() FeatureExpectation {
			return FeatureExpectation{Served: true, Settled: true, States: states(true, append(features, lifecycleGate)...), Kept: kept}
		},
		balloons: same,
		vpa:      sameHistory,
	}, {
		name: "roll back to pristine",
		run: func(ctx context.Context) error {
			var err error
			if kept, err = ReadFeatures(ctx, l.features); err != nil {
				return err
			}
			// The KEP's downgrade: no balloon runs on a kubelet without the feature.
			if err := balloons.Off(ctx); err != nil {
				return err
			}
			return l.Kind.KindUpgrade(ctx, l.Pristine.Tarball, l.Pristine.Tree, l.Series.Removed())
		},
		drained:  all,
		binaries: true,
		features: func() FeatureExpectation { return FeatureExpectation{} },
		balloons: none,
		vpa:      sameHistory,
	}, {
		name: "forward to the fork again",
		run: func(ctx context.Context) error {
			if err := l.Kind.KindUpgrade(ctx, l.Fork.Tarball, l.Fork.Tree, l.Series); err != nil {
				return err
			}
			return balloons.On(ctx)
		},
		drained:  all,
		binaries: true,
		features: func() FeatureExpectation {
			return FeatureExpectation{Served: true, Settled: true, States: states(true, append(features, lifecycleGate)...), Kept: kept}
		},
		balloons: same,
		vpa:      sameHistory,
	}}
}

// brokenStep is the step LeaveOn breaks.
const brokenStep = "roll back the features"

// featuresSettle bounds a transition of the series' Features on the cluster:
// WaitForUses waits up to the server flow's UsesMaxWaitPeriod (16 min) for a
// component that started while the API was not served, as every component has
// in step d, and step c took 9 min 32 s with none.
const featuresSettle = 20 * time.Minute

// lifecycleGate runs the server flow: rolled back last, turned on first.
const lifecycleGate = "FeatureLifecycle"

// controlPlaneLabel tells the control planes from the workers, which step b
// sizes and makes the pull burst on.
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// balloonHold is what the balloons of step b hold on each worker: a quarter of
// its 2 cores and a gibibyte.
var balloonHold = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}

// run runs one of the fork's programs of ForkBin on the lane's cluster.
func (l *Lane) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(l.ForkBin, program), append([]string{"--kubeconfig", l.Kind.KindKubeconfig()}, args...)...)
	cmd.Stdout, cmd.Stderr = l.Log, l.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", program, strings.Join(args, " "), err)
	}
	return nil
}

// seriesGates are the series' gates other than FeatureLifecycle, sorted.
func (l *Lane) seriesGates() []string {
	var gates []string
	for _, g := range slices.Sorted(maps.Keys(l.Series.Gates)) {
		if g != lifecycleGate {
			gates = append(gates, g)
		}
	}
	return gates
}

func lower(gates []string) []string {
	out := make([]string, len(gates))
	for i, g := range gates {
		out[i] = strings.ToLower(g)
	}
	return out
}

// runStep runs a step and returns what its checks found: the workloads
// compared with before the step, the prober's requests during it, the
// Features' states and conditions, and the transitions the flow started.
func (l *Lane) runStep(ctx context.Context, client kubernetes.Interface, balloons *Balloons, w Workloads, prober *Prober, s step) ([]string, error) {
	before, err := w.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	prober.Step(s.name)
	start := time.Now()
	l.logf("== %s", s.name)
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	if err := waitWorkloads(ctx, client); err != nil {
		return nil, err
	}
	after, err := w.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	counts := prober.Counts(s.name)
	found := append(Compare(before, after, s.drained), counts.problems()...)
	want := s.features()
	// The flow settles what the step changed within a few recheck periods;
	// what is still wrong after them is a problem of the step.
	var features Features
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		features, err = ReadFeatures(ctx, l.features)
		return err == nil && len(CheckFeatures(features, want)) == 0, nil
	}); err != nil && !wait.Interrupted(err) {
		return nil, err
	}
	if features, err = ReadFeatures(ctx, l.features); err != nil {
		return nil, err
	}
	found = append(found, CheckFeatures(features, want)...)
	started, err := TransitionsStarted(ctx, client, start)
	if err != nil {
		return nil, err
	}
	found = append(found, checkTransitions(started, s.transitions)...)
	sizes, err := balloons.Sizes(ctx)
	if err != nil {
		return nil, err
	}
	found = append(found, CheckBalloons(sizes, s.balloons())...)
	if s.vpa != nil {
		nodes, err := readVPANodes(ctx, l.features)
		if err != nil {
			return nil, err
		}
		found = append(found, CheckVPA(nodes, *s.vpa())...)
	}
	if s.check != nil {
		found = append(found, s.check()...)
	}
	l.logf("== %s: %v, %d requests to the Service, %d failed; %d Features, transitions started %v; %d problems", s.name, time.Since(start).Round(time.Second), counts.Sent, counts.Failed, len(features), started, len(found))
	for _, p := range found {
		l.logf("   %s", p)
	}
	return found, nil
}

// checkTransitions says where the transitions the flow started differ from
// those the step asked for: none at all while binaries are replaced and
// versions are mixed.
func checkTransitions(started, want []string) []string {
	var problems []string
	for _, name := range started {
		if !slices.Contains(want, name) {
			problems = append(problems, "the server flow started a transition of "+name)
		}
	}
	for _, name := range want {
		if !slices.Contains(started, name) {
			problems = append(problems, "no transition of "+name+" was started")
		}
	}
	return problems
}

// waitWorkloads waits until every workload runs: the Deployment and the
// StatefulSet with all replicas ready, the DaemonSet on every node, the Job
// with a pod running.
func waitWorkloads(ctx context.Context, client kubernetes.Interface) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := client.AppsV1().Deployments(Namespace).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		s, err := client.AppsV1().StatefulSets(Namespace).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ds, err := client.AppsV1().DaemonSets(Namespace).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		j, err := client.BatchV1().Jobs(Namespace).Get(ctx, "long", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		switch {
		case d.Status.ReadyReplicas != *d.Spec.Replicas || d.Status.UpdatedReplicas != *d.Spec.Replicas:
			last = fmt.Sprintf("Deployment web: %d of %d ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
		case s.Status.ReadyReplicas != *s.Spec.Replicas:
			last = fmt.Sprintf("StatefulSet data: %d of %d ready", s.Status.ReadyReplicas, *s.Spec.Replicas)
		case ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled:
			last = fmt.Sprintf("DaemonSet agent: %d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		case j.Status.Ready == nil || *j.Status.Ready != 1:
			last = "Job long: no pod ready"
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the workloads did not all run within 5m (%s): %w", last, err)
	}
	return nil
}
