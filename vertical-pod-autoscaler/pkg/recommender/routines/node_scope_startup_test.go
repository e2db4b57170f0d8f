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

package routines

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	kube_fake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	core "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// TestNewNodeScopeChecksAccess: with the gate on, the recommender does not
// start without either CRD or without list and watch of either kind, with an
// error that names what is missing, where it logged errors in every loop and
// its informers retried for ever.
func TestNewNodeScopeChecksAccess(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	group := "autoscaling.k8s.io"
	for _, tc := range []struct {
		name      string
		namespace string
		verb      string
		resource  string
		err       error
		wantErr   []string // substrings of the error; none: no error
	}{
		{name: "no slice CRD", verb: "list", resource: "verticalpodautoscalerslices",
			err:     apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: "verticalpodautoscalerslices"}, ""),
			wantErr: []string{"does not serve verticalpodautoscalerslices.autoscaling.k8s.io", "CustomResourceDefinition"}},
		{name: "no checkpoint slice CRD", verb: "list", resource: "verticalpodautoscalercheckpointslices",
			err:     apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: "verticalpodautoscalercheckpointslices"}, ""),
			wantErr: []string{"does not serve verticalpodautoscalercheckpointslices.autoscaling.k8s.io"}},
		{name: "no watch of checkpoint slices in the namespace", namespace: "ns", verb: "watch", resource: "verticalpodautoscalercheckpointslices",
			err:     apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: "verticalpodautoscalercheckpointslices"}, "", nil),
			wantErr: []string{"may not watch verticalpodautoscalercheckpointslices.autoscaling.k8s.io in namespace ns", "deploy/vpa-rbac.yaml"}},
		{name: "access", namespace: "ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := vpa_fake.NewSimpleClientset() //nolint:staticcheck // as the other tests of this package
			if tc.verb == "watch" {
				client.PrependWatchReactor(tc.resource, func(core.Action) (bool, watch.Interface, error) { return true, nil, tc.err })
			} else if tc.verb != "" {
				client.PrependReactor(tc.verb, tc.resource, func(core.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			}
			stopCh := make(chan struct{})
			defer close(stopCh)
			factory := informers.NewSharedInformerFactory(kube_fake.NewClientset(), 0)
			scope, err := NewNodeScope(client.AutoscalingV1alpha1(), &rest.Config{Host: "http://127.0.0.1:0"}, factory.Core().V1().Pods().Lister(), factory, tc.namespace,
				model.DefaultMinNodeHistory, model.DefaultNodeCheckpointsTimeout, model.DefaultNodeCheckpointRefresh, model.DefaultNodeRewriteThreshold, logic.Confidence{}, stopCh)
			if len(tc.wantErr) == 0 {
				if err != nil || scope.Writer == nil || scope.Cleaner == nil {
					t.Errorf("NewNodeScope: %+v, %v; want a writer and a cleaner", scope, err)
				}
				return
			}
			if err == nil {
				t.Fatal("NewNodeScope: no error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
