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
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-carry/kube-carry/hack/internal/kind"
)

// Feature is what the lane reads of a Feature in kube-system.
type Feature struct {
	UID   string
	State string
	Tasks []string
	// Conditions are "Status/Reason" by type.
	Conditions map[string]string
}

// Features are the Features of kube-system by name; nil when the API is not
// served (a release without the series).
type Features map[string]Feature

// ReadFeatures lists the Features of kube-system; a server that does not serve
// features.k8s.io gives nil and no error.
func ReadFeatures(ctx context.Context, client dynamic.Interface) (Features, error) {
	list, err := client.Resource(kind.FeaturesResource).Namespace(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the Features: %w", err)
	}
	out := Features{}
	for _, item := range list.Items {
		f := Feature{UID: string(item.GetUID()), Conditions: map[string]string{}}
		f.State, f.Tasks = kind.FeatureProgress(item.Object)
		conditions, _, _ := unstructured.NestedSlice(item.Object, "status", "conditions")
		for _, c := range conditions {
			if cond, ok := c.(map[string]any); ok {
				t, _ := cond["type"].(string)
				status, _ := cond["status"].(string)
				reason, _ := cond["reason"].(string)
				f.Conditions[t] = status + "/" + reason
			}
		}
		out[item.GetName()] = f
	}
	return out, nil
}

// FeatureExpectation is what a step leaves the Feature API in.
type FeatureExpectation struct {
	// Served says whether features.k8s.io is served after the step: not by
	// pristine, nor with FeatureLifecycle off.
	Served bool
	// States are the states the series' Features must have, by gate name.
	States map[string]string
	// Settled says that the server flow runs after the step: no Feature may be
	// left in a transition, and every series Feature is safe to upgrade.
	Settled bool
	// Kept, when set, are the Features that must come back as they were (the
	// same objects, by UID): what etcd kept while the API was not served.
	Kept Features
}

// CheckFeatures says where the Features differ from what the step must leave.
func CheckFeatures(got Features, want FeatureExpectation) []string {
	if !want.Served {
		if got != nil {
			return []string{fmt.Sprintf("features.k8s.io is served (%d Features) where it must not be", len(got))}
		}
		return nil
	}
	if got == nil {
		return []string{"features.k8s.io is not served"}
	}
	var problems []string
	for _, gate := range slices.Sorted(maps.Keys(want.States)) {
		name := strings.ToLower(gate)
		f, ok := got[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("Feature %s is missing", name))
		case f.State != want.States[gate] || len(f.Tasks) > 0:
			problems = append(problems, fmt.Sprintf("Feature %s is %s with tasks %v, want %s", name, f.State, f.Tasks, want.States[gate]))
		case want.Settled && f.Conditions["UpgradeSafe"] != "True/Safe":
			problems = append(problems, fmt.Sprintf("Feature %s: UpgradeSafe %s", name, f.Conditions["UpgradeSafe"]))
		}
	}
	if want.Settled {
		var moving []string
		for _, name := range slices.Sorted(maps.Keys(got)) {
			if s := got[name].State; s == "TurningOn" || s == "TurningOff" {
				moving = append(moving, name+" "+s)
			}
		}
		if len(moving) > 0 {
			problems = append(problems, fmt.Sprintf("%d Features in a transition: %s", len(moving), strings.Join(moving, ", ")))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want.Kept)) {
		if f, ok := got[name]; !ok || f.UID != want.Kept[name].UID {
			problems = append(problems, fmt.Sprintf("Feature %s did not come back as it was kept (uid %s, now %q)", name, want.Kept[name].UID, f.UID))
		}
	}
	return problems
}

// TransitionsStarted returns the Features whose server flow started a
// transition since the time, by the flow's TransitionStarted events.
func TransitionsStarted(ctx context.Context, client kubernetes.Interface, since time.Time) ([]string, error) {
	events, err := client.CoreV1().Events(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "reason=TransitionStarted"})
	if err != nil {
		return nil, fmt.Errorf("listing the TransitionStarted events: %w", err)
	}
	var started []string
	for _, e := range events.Items {
		feature := e.InvolvedObject.Kind == "Feature" || strings.HasPrefix(e.InvolvedObject.APIVersion, kind.FeaturesResource.Group+"/")
		if feature && !eventTime(e).Before(since) && !slices.Contains(started, e.InvolvedObject.Name) {
			started = append(started, e.InvolvedObject.Name)
		}
	}
	slices.Sort(started)
	return started, nil
}

// eventTime is when an event last happened, whichever API wrote it.
func eventTime(e corev1.Event) time.Time {
	t := e.EventTime.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.LastTimestamp.After(t) {
		t = e.LastTimestamp.Time
	}
	return t
}
