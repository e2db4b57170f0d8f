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

package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"sigs.k8s.io/yaml"
)

// statusList is what status prints with -o json or yaml.
type statusList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []nodeStatus `json:"items"`
}

// statusRows parses the status table into its columns.
func statusRows(t *testing.T, out string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows [][]string
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) < 7 {
			t.Fatalf("short status line %q", line)
		}
		rows = append(rows, append(fields[:6:6], strings.Join(fields[6:], " ")))
	}
	return rows
}

func statusCluster() []runtime.Object {
	actuated := newBalloon("balloon-a", "node-a", "1", "4Gi")
	finished := newBalloon("balloon-a-old", "node-a", "2", "2Gi")
	finished.Status.Phase = v1.PodSucceeded

	labelOnly := newBalloon("label-only", "node-b", "2", "2Gi")
	labelOnly.Spec.PriorityClassName = scheduling.SystemNodeCritical
	classOnly := newBalloon("class-only", "node-b", "2", "2Gi")
	classOnly.Labels = nil
	otherNamespace := newBalloon("other-namespace", "node-b", "2", "2Gi")
	otherNamespace.Namespace = "default"

	deferred := newBalloon("balloon-c", "node-c", "1", "4Gi")
	deferred.Spec.Containers[0].Resources.Requests = resources("3", "8Gi")
	deferred.Generation = 2
	refuse(v1.PodReasonDeferred, deferredMessage)(deferred)

	unanswered := newBalloon("balloon-d", "node-d", "1", "4Gi")
	unanswered.Spec.Containers[0].Resources.Requests = resources("2", "4Gi")

	notStarted := newBalloon("balloon-e", "node-e", "1m", "1Mi")
	notStarted.Status = v1.PodStatus{Phase: v1.PodPending}

	unscheduled := newBalloon("balloon-f", "", "1m", "1Mi")
	unscheduled.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{{
		Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: 1 node(s) didn't match Pod's required features",
	}}}
	forNode(unscheduled, "node-f")

	deleted := newBalloon("balloon-g-old", "node-g", "1", "4Gi")
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	deleted.Finalizers = []string{"example.com/keep"}
	successor := newBalloon("balloon-g", "", "1", "4Gi")
	successor.Status = v1.PodStatus{Phase: v1.PodPending}
	forNode(successor, "node-g")

	// The node shrank under its balloon: nothing is left, not a negative size.
	shrunk := newBalloon("balloon-h", "node-h", "2", "4Gi")

	closed := newNode("node-c", "8", "32Gi")
	closed.Spec.Taints = []v1.Taint{{Key: "other", Effect: v1.TaintEffectNoExecute}, {Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule}}

	return []runtime.Object{
		recordedSizesConfigMap(map[string]string{
			"node-a": "cpu=1,memory=4Gi,uid=node-a-uid",
			// An earlier node's of that name: not node-b's.
			"node-b": "cpu=1,memory=4Gi,uid=earlier-uid",
			"node-c": "cpu=3,memory=8Gi,uid=node-c-uid",
			"node-d": "cpu=2",
		}),
		newNode("node-a", "4", "16Gi"), actuated, finished,
		newNode("node-h", "1", "2Gi"), shrunk,
		newNode("node-f", "4", "16Gi"), unscheduled,
		newNode("node-g", "4", "16Gi"), deleted, successor,
		newNode("node-b", "4", "16Gi"), labelOnly, classOnly, otherNamespace,
		closed, deferred,
		newNode("node-d", "4", "16Gi"), unanswered,
		newNode("node-e", "3920m", "16265376Ki"), notStarted,
	}
}

func TestStatusAllNodes(t *testing.T) {
	e := newTestEnv(t, statusCluster()...)
	if code := e.run("status"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	want := [][]string{
		{"NODE", "ALLOCATABLE", "BALLOON", "EFFECTIVE", "RECORDED", "TAINT", "PENDING"},
		{"node-a", "cpu=4,memory=16Gi", "cpu=1,memory=4Gi", "cpu=3,memory=12Gi", "cpu=1,memory=4Gi", "-", "-"},
		// Pods with only the label, only the class, or outside kube-system are no balloons.
		{"node-b", "cpu=4,memory=16Gi", "-", "cpu=4,memory=16Gi", "-", "-", "no balloon"},
		// The scheduler counts a pending upsize at its desired size.
		{"node-c", "cpu=8,memory=32Gi", "cpu=1,memory=4Gi", "cpu=5,memory=24Gi", "cpu=3,memory=8Gi", "NoSchedule", "cpu=3,memory=8Gi Deferred: " + deferredMessage},
		{"node-d", "cpu=4,memory=16Gi", "cpu=1,memory=4Gi", "cpu=2,memory=12Gi", "invalid", "-", "cpu=2,memory=4Gi in progress"},
		// Without status the balloon holds its spec requests; memory is rounded down to Mi.
		{"node-e", "cpu=3920m,memory=15884Mi", "cpu=1m,memory=1Mi", "cpu=3919m,memory=15883Mi", "-", "-", "balloon not running yet"},
		// Not bound yet: the DaemonSet created it for node-f.
		{"node-f", "cpu=4,memory=16Gi", "-", "cpu=4,memory=16Gi", "-", "-", "balloon not scheduled yet (Unschedulable: 0/2 nodes are available: 1 node(s) didn't match Pod's required features)"},
		// A balloon being deleted holds nothing for status; its successor is not bound yet.
		{"node-g", "cpu=4,memory=16Gi", "-", "cpu=4,memory=16Gi", "-", "-", "balloon not scheduled yet"},
		{"node-h", "cpu=1,memory=2Gi", "cpu=2,memory=4Gi", "cpu=0,memory=0", "-", "-", "-"},
	}
	if diff := cmp.Diff(want, statusRows(t, e.out.String())); diff != "" {
		t.Errorf("status table (-want +got):\n%s", diff)
	}
	if writes := e.writes(); len(writes) != 0 {
		t.Errorf("status wrote to the cluster: %v", writes)
	}
}

func TestStatusNamedNodes(t *testing.T) {
	e := newTestEnv(t, statusCluster()...)
	if code := e.run("status", "node-c", "node-a"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	rows := statusRows(t, e.out.String())
	var names []string
	for _, row := range rows[1:] {
		names = append(names, row[0])
	}
	if diff := cmp.Diff([]string{"node-c", "node-a"}, names); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestStatusSeveralBalloonsOnANode(t *testing.T) {
	first := newBalloon("balloon-1", "node-a", "1", "1Gi")
	second := newBalloon("balloon-2", "node-a", "500m", "1Gi")
	second.Spec.Containers[0].Resources.Requests = resources("1", "1Gi")
	e := newTestEnv(t, newNode("node-a", "4", "16Gi"), first, second)
	if code := e.run("status"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	want := [][]string{
		{"NODE", "ALLOCATABLE", "BALLOON", "EFFECTIVE", "RECORDED", "TAINT", "PENDING"},
		{"node-a", "cpu=4,memory=16Gi", "cpu=1500m,memory=2Gi", "cpu=2,memory=14Gi", "-", "-", "balloon-2: cpu=1,memory=1Gi in progress"},
	}
	if diff := cmp.Diff(want, statusRows(t, e.out.String())); diff != "" {
		t.Errorf("status table (-want +got):\n%s", diff)
	}
}

func TestStatusUnknownNode(t *testing.T) {
	e := newTestEnv(t, statusCluster()...)
	if code := e.run("status", "node-a", "nope"); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if got, want := e.errOut.String(), "error: node \"nope\" not found\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestStatusWide(t *testing.T) {
	e := newTestEnv(t, statusCluster()...)
	if code := e.run("status", "node-a", "node-b", "-o", "wide"); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
	}
	want := "NODE     ALLOCATABLE         BALLOON            EFFECTIVE           RECORDED           TAINT   BALLOONS    PENDING\n" +
		"node-a   cpu=4,memory=16Gi   cpu=1,memory=4Gi   cpu=3,memory=12Gi   cpu=1,memory=4Gi   -       balloon-a   -\n" +
		"node-b   cpu=4,memory=16Gi   -                  cpu=4,memory=16Gi   -                  -       -           no balloon\n"
	if diff := cmp.Diff(want, e.out.String()); diff != "" {
		t.Errorf("status -o wide (-want +got):\n%s", diff)
	}
}

// -o name and -o jsonpath are kubectl's printers, over one NodeBalloonStatus
// per node named after it.
func TestStatusKubectlPrinters(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{{
		args: []string{"-o", "name"},
		want: "nodeballoonstatus.balloon.kubectl.k8s.io/node-a\nnodeballoonstatus.balloon.kubectl.k8s.io/node-c\n",
	}, {
		args: []string{"-o", `jsonpath={range .items[*]}{.metadata.name} {.recorded.cpu} {.taint.effect}{"\n"}{end}`},
		want: "node-a 1 \nnode-c 3 NoSchedule\n",
	}} {
		t.Run(tc.args[1], func(t *testing.T) {
			e := newTestEnv(t, statusCluster()...)
			if code := e.run(append([]string{"status", "node-a", "node-c"}, tc.args...)...); code != 0 {
				t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
			}
			if got := e.out.String(); got != tc.want {
				t.Errorf("output %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStatusOutputFormats(t *testing.T) {
	typeMeta := metav1.TypeMeta{APIVersion: "balloon.kubectl.k8s.io/v1alpha1", Kind: "NodeBalloonStatus"}
	want := statusList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: []nodeStatus{{
		TypeMeta:    typeMeta,
		Metadata:    statusMetadata{Name: "node-c"},
		Node:        "node-c",
		Allocatable: resources("8", "32Gi"),
		Balloon:     resources("1", "4Gi"),
		Effective:   resources("5", "24Gi"),
		Recorded:    resources("3", "8Gi"),
		Taint:       &v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule},
		Balloons: []balloonStatus{{
			Name:          "balloon-c",
			State:         balloonRunning,
			Held:          resources("1", "4Gi"),
			PendingResize: &pendingResize{Requests: resources("3", "8Gi"), Reason: v1.PodReasonDeferred, Message: deferredMessage},
		}},
	}, {
		TypeMeta:    typeMeta,
		Metadata:    statusMetadata{Name: "node-f"},
		Node:        "node-f",
		Allocatable: resources("4", "16Gi"),
		Effective:   resources("4", "16Gi"),
		Balloons: []balloonStatus{{
			Name:    "balloon-f",
			State:   balloonUnscheduled,
			Message: "not scheduled yet (Unschedulable: 0/2 nodes are available: 1 node(s) didn't match Pod's required features)",
		}},
	}, {
		TypeMeta:    typeMeta,
		Metadata:    statusMetadata{Name: "node-b"},
		Node:        "node-b",
		Allocatable: resources("4", "16Gi"),
		Effective:   resources("4", "16Gi"),
	}}}
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			e := newTestEnv(t, statusCluster()...)
			if code := e.run("status", "node-c", "node-f", "node-b", "-o", format); code != 0 {
				t.Fatalf("exit code %d, stderr %q", code, e.errOut.String())
			}
			data := e.out.Bytes()
			if format == "yaml" {
				var err error
				if data, err = yaml.YAMLToJSONStrict(data); err != nil {
					t.Fatalf("output is not YAML: %v\n%s", err, e.out.String())
				}
			}
			var got statusList
			decoder := json.NewDecoder(strings.NewReader(string(data)))
			decoder.DisallowUnknownFields()
			if err := decoder.Decode(&got); err != nil {
				t.Fatalf("output does not decode: %v\n%s", err, e.out.String())
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusUnknownOutputFormat(t *testing.T) {
	e := newTestEnv(t, statusCluster()...)
	if code := e.run("status", "-o", "table"); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if got, want := e.errOut.String(), "error: unknown output format \"table\": use one of wide, json, yaml, kyaml, name, go-template, go-template-file, template, templatefile, jsonpath, jsonpath-as-json, jsonpath-file, or leave -o out for a table\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}
