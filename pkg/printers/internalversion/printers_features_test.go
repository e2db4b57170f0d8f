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

package internalversion

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/kubernetes/pkg/printers"
	"k8s.io/utils/ptr"
)

func TestPrintFeature(t *testing.T) {
	created := metav1.Time{Time: time.Now().Add(-3 * time.Hour)}
	tests := []struct {
		name    string
		feature featuresapi.Feature
		wide    bool
		want    []interface{}
	}{
		{
			name: "transitional, components disagree",
			feature: featuresapi.Feature{
				ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", CreationTimestamp: created},
				Status: featuresapi.FeatureStatus{
					Default:         ptr.To(false),
					ConfiguredValue: ptr.To(true),
					Stage:           featuresapi.FeatureStageAlpha,
					State:           featuresapi.FeatureStateTurningOn,
					Tasks:           []featuresapi.FeatureTask{{Name: "WaitForUses"}, {Name: "Other"}},
					Conditions: []metav1.Condition{
						{Type: featuresapi.FeatureConditionUpgradeSafe, Status: metav1.ConditionFalse, Reason: "TransitionInProgress"},
						{Type: featuresapi.FeatureConditionDowngradeSafe, Status: metav1.ConditionTrue, Reason: "Safe"},
					},
					Uses: []featuresapi.FeatureUse{
						{Component: "kubelet", Value: true},
						{Component: "kube-apiserver", Value: true},
						{Component: "kubelet", Value: false},
					},
				},
			},
			wide: true,
			want: []interface{}{"balloonpod", "TurningOn", "Off", "On", "kube-apiserver=On,kubelet=Off/On", "Unsafe/Safe", "3h", "Alpha", "WaitForUses,Other"},
		},
		{
			name: "not yet announced",
			feature: featuresapi.Feature{
				ObjectMeta: metav1.ObjectMeta{Name: "newfeature", CreationTimestamp: created},
			},
			want: []interface{}{"newfeature", "<unknown>", "<unknown>", "<unknown>", "<none>", "<unknown>/<unknown>", "3h"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := printFeature(&tc.feature, printers.GenerateOptions{Wide: tc.wide})
			if err != nil {
				t.Fatal(err)
			}
			if got := rows[0].Cells; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("cells = %#v, want %#v", got, tc.want)
			}
		})
	}

	list := &featuresapi.FeatureList{Items: []featuresapi.Feature{tests[0].feature, tests[1].feature}}
	rows, err := printFeatureList(list, printers.GenerateOptions{})
	if err != nil || len(rows) != 2 {
		t.Fatalf("printFeatureList = %d rows, %v; want 2 rows", len(rows), err)
	}
}
