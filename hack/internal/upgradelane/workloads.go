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

// Package upgradelane is make kind-upgrade's lane (issue 38): workloads that must
// survive an upgrade, a rollback and an upgrade again of a kind cluster, and
// the checks that say whether they did.
package upgradelane

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	// Namespace holds the lane's workloads.
	Namespace = "upgrade-lane"
	// WebNodePort is the Service's node port, which the prober reaches on every
	// node's address.
	WebNodePort = 31080
	// markerPath is the file the StatefulSet writes once to its volume and
	// serves: the same content after every step is the data intact.
	markerPath = "/data/marker"
)

// Workloads are the lane's objects: a Deployment behind a Service with a
// PodDisruptionBudget, a StatefulSet writing to a PersistentVolume, a
// DaemonSet and a Job in progress, all of busybox (the image is loaded into
// the nodes, nothing is pulled).
type Workloads struct {
	Client  kubernetes.Interface
	Busybox string // the busybox image's name
}

func (w Workloads) container(name string, command ...string) corev1.Container {
	return corev1.Container{Name: name, Image: w.Busybox, ImagePullPolicy: corev1.PullNever, Command: command}
}

// Deploy creates the workloads; those that exist are left as they are.
func (w Workloads) Deploy(ctx context.Context) error {
	labels := func(app string) map[string]string { return map[string]string{"app": app} }
	web := w.container("web", "sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec busybox httpd -f -p 8080 -h /www")
	web.Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	web.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 2}
	data := w.container("data", "sh", "-c",
		"[ -s "+markerPath+" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > "+markerPath+"; exec busybox httpd -f -p 8080 -h /data")
	data.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	objects := []func() error{
		func() error {
			_, err := w.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := w.Client.AppsV1().Deployments(Namespace).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "web"},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](3),
					Selector: &metav1.LabelSelector{MatchLabels: labels("web")},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels("web")},
						Spec: corev1.PodSpec{
							Containers: []corev1.Container{web},
							// One a node, so that a drain takes one at a time.
							TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels("web")}}},
						},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			// A Service of a taken node port is refused as invalid before as
			// existing.
			if _, err := w.Client.CoreV1().Services(Namespace).Get(ctx, "web", metav1.GetOptions{}); err == nil {
				return nil
			}
			_, err := w.Client.CoreV1().Services(Namespace).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "web"},
				Spec: corev1.ServiceSpec{
					Type: corev1.ServiceTypeNodePort, Selector: labels("web"),
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: WebNodePort}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := w.Client.PolicyV1().PodDisruptionBudgets(Namespace).Create(ctx, &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Name: "web"},
				Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels("web")}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := w.Client.AppsV1().StatefulSets(Namespace).Create(ctx, &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: appsv1.StatefulSetSpec{
					Replicas: ptr.To[int32](1), ServiceName: "data",
					Selector: &metav1.LabelSelector{MatchLabels: labels("data")},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels("data")},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{data}},
					},
					VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
						ObjectMeta: metav1.ObjectMeta{Name: "data"},
						Spec: corev1.PersistentVolumeClaimSpec{
							AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
							Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
						},
					}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := w.Client.AppsV1().DaemonSets(Namespace).Create(ctx, &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "agent"},
				Spec: appsv1.DaemonSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: labels("agent")},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels("agent")},
						Spec: corev1.PodSpec{
							Containers:  []corev1.Container{w.container("agent", "sleep", "2147483647")},
							Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := w.Client.BatchV1().Jobs(Namespace).Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: "long"},
				Spec: batchv1.JobSpec{
					// A drain evicts its pod: it runs again elsewhere.
					BackoffLimit: ptr.To[int32](6),
					Template: corev1.PodTemplateSpec{
						Spec: corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Containers:    []corev1.Container{w.container("long", "sleep", "86400")},
						},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objects {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// PodState is what the lane remembers of a workload pod between steps.
type PodState struct {
	UID      string
	Node     string
	Restarts int32
}

// State is the workloads as one step left them.
type State struct {
	Pods    map[string]PodState // by pod name
	Objects []string            // kind/name of every workload object
	Marker  string              // what the StatefulSet's volume holds
}

// Snapshot reads the workloads' state.
func (w Workloads) Snapshot(ctx context.Context) (State, error) {
	s := State{Pods: map[string]PodState{}}
	pods, err := w.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ps := PodState{UID: string(p.UID), Node: p.Spec.NodeName}
		for _, c := range p.Status.ContainerStatuses {
			ps.Restarts += c.RestartCount
		}
		s.Pods[p.Name] = ps
	}
	for kind, list := range map[string]func() ([]string, error){
		"Deployment":            names(ctx, w.Client.AppsV1().Deployments(Namespace).List),
		"StatefulSet":           names(ctx, w.Client.AppsV1().StatefulSets(Namespace).List),
		"DaemonSet":             names(ctx, w.Client.AppsV1().DaemonSets(Namespace).List),
		"Job":                   names(ctx, w.Client.BatchV1().Jobs(Namespace).List),
		"Service":               names(ctx, w.Client.CoreV1().Services(Namespace).List),
		"PodDisruptionBudget":   names(ctx, w.Client.PolicyV1().PodDisruptionBudgets(Namespace).List),
		"PersistentVolumeClaim": names(ctx, w.Client.CoreV1().PersistentVolumeClaims(Namespace).List),
	} {
		got, err := list()
		if err != nil {
			return s, fmt.Errorf("listing %s: %w", kind, err)
		}
		for _, n := range got {
			s.Objects = append(s.Objects, kind+"/"+n)
		}
	}
	sort.Strings(s.Objects)
	marker, err := w.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", Namespace, "pods", "data-0:8080", "proxy", "marker").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("reading the StatefulSet's marker: %w", err)
	}
	s.Marker = string(marker)
	return s, nil
}

// names adapts a typed List to the names of what it lists.
func names[L runtime.Object](ctx context.Context, list func(context.Context, metav1.ListOptions) (L, error)) func() ([]string, error) {
	return func() ([]string, error) {
		l, err := list(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, item := range items {
			o, err := meta.Accessor(item)
			if err != nil {
				return nil, err
			}
			out = append(out, o.GetName())
		}
		return out, nil
	}
}

// Compare says what went wrong for the workloads between two states: an
// object gone, the volume's data changed, a pod replaced other than by a drain
// of its node (drained names the nodes the step drained), and a pod that
// restarted, drained node or not (a drain leaves a DaemonSet's pods).
func Compare(before, after State, drained []string) []string {
	var problems []string
	for _, o := range before.Objects {
		if !slices.Contains(after.Objects, o) {
			problems = append(problems, o+" is gone")
		}
	}
	if before.Marker != after.Marker {
		problems = append(problems, fmt.Sprintf("the StatefulSet's data changed: %q, then %q", before.Marker, after.Marker))
	}
	for _, name := range slices.Sorted(maps.Keys(before.Pods)) {
		b := before.Pods[name]
		a, ok := after.Pods[name]
		switch {
		case slices.Contains(drained, b.Node) && (!ok || a.UID != b.UID):
			// Evicted by the drain; a pod the drain leaves (a DaemonSet's) must
			// not restart.
		case !ok:
			problems = append(problems, fmt.Sprintf("pod %s on %s is gone, and its node was not drained", name, b.Node))
		case a.UID != b.UID:
			problems = append(problems, fmt.Sprintf("pod %s on %s was replaced, and its node was not drained", name, b.Node))
		case a.Restarts != b.Restarts:
			problems = append(problems, fmt.Sprintf("pod %s on %s restarted %d times", name, b.Node, a.Restarts-b.Restarts))
		}
	}
	return problems
}
