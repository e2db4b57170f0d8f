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
	"reflect"
	"testing"
)

// A round trip keeps the VPA's history on the nodes it had, whatever the
// values: a node lost from the recommendations or the checkpoints is named.
func TestCheckVPANamesTheNodesARoundTripLost(t *testing.T) {
	want := VPANodes{Recommended: []string{"cp", "w1", "w2"}, Checkpointed: []string{"cp", "w1", "w2"}}
	for name, tc := range map[string]struct {
		got  VPANodes
		want []string
	}{
		"kept": {got: want},
		"a recommendation lost": {
			got:  VPANodes{Recommended: []string{"cp", "w1"}, Checkpointed: []string{"cp", "w1", "w2"}},
			want: []string{"the VPA's per-node recommendations are on cp, w1, want cp, w1, w2"},
		},
		"every checkpoint lost": {
			got:  VPANodes{Recommended: []string{"cp", "w1", "w2"}},
			want: []string{"the VPA's per-node checkpoints are on no node, want cp, w1, w2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := CheckVPA(tc.got, want); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Step b's VPA is node-scoped on the lane's DaemonSet and moves no running
// pod (the workloads' check).
func TestTheLanesVPAMovesNoRunningPod(t *testing.T) {
	spec := nodeScopedVPA().Object["spec"].(map[string]any)
	if spec["scope"] != "Node" || spec["targetRef"].(map[string]any)["kind"] != "DaemonSet" {
		t.Errorf("spec %v: want scope Node on a DaemonSet", spec)
	}
	if mode := spec["updatePolicy"].(map[string]any)["updateMode"]; mode != "Initial" {
		t.Errorf("update mode %v: the updater would evict or resize the DaemonSet's pods", mode)
	}
}
