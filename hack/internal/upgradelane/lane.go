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
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-carry/kube-carry/hack/internal/images"
	"github.com/kube-carry/kube-carry/hack/internal/kind"
)

// Lane is make kind-upgrade's run on the kind cluster of a release side
// (kind.NewReleaseKind): the workloads deployed, a prober running through every
// step, and after each step the workloads compared with the state before it.
type Lane struct {
	Kind *kind.Kind
	// Tarball and Tree are the fork's server release tarball and the tree it
	// was built from (its kubeadm's etcd and CoreDNS).
	Tarball, Tree string
	Log           io.Writer
}

func (l *Lane) logf(format string, args ...any) { fmt.Fprintf(l.Log, format+"\n", args...) }

// Run deploys the workloads and runs the lane's steps, each checked; it
// returns every problem a step found.
func (l *Lane) Run(ctx context.Context) error {
	client, err := l.Kind.KindClient()
	if err != nil {
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
	var addrs, all []string
	for _, n := range nodes.Items {
		all = append(all, n.Name)
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

	steps := []struct {
		name    string
		run     func() error
		drained []string
	}{
		{"upgrade to the fork", func() error { return l.Kind.KindUpgrade(ctx, l.Tarball, l.Tree) }, all},
	}
	var problems []string
	for _, step := range steps {
		before, err := w.Snapshot(ctx)
		if err != nil {
			return err
		}
		prober.Step(step.name)
		start := time.Now()
		l.logf("== %s", step.name)
		if err := step.run(); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		if err := waitWorkloads(ctx, client); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		after, err := w.Snapshot(ctx)
		if err != nil {
			return err
		}
		counts := prober.Counts(step.name)
		found := append(Compare(before, after, step.drained), counts.problems()...)
		l.logf("== %s: %v, %d requests to the Service, %d failed; %d problems", step.name, time.Since(start).Round(time.Second), counts.Sent, counts.Failed, len(found))
		for _, p := range found {
			l.logf("   %s", p)
			problems = append(problems, step.name+": "+p)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
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
