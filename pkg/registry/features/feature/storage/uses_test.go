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

package storage

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

func TestEachIdentityChangesOnlyItsOwnUses(t *testing.T) {
	stored := &featuresapi.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: metav1.NamespaceSystem},
		Status: featuresapi.FeatureStatus{Uses: []featuresapi.FeatureUse{
			{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-a"}},
			{Component: "kube-scheduler", Value: true, Instances: []string{"scheduler-1"}},
		}},
	}
	with := func(namespace string, change func(*featuresapi.Feature)) *featuresapi.Feature {
		f := stored.DeepCopy()
		f.Namespace = namespace
		change(f)
		return f
	}
	addScheduler := func(f *featuresapi.Feature) {
		f.Status.Uses[1].Instances = append(f.Status.Uses[1].Instances, "scheduler-2")
	}
	forgeAPIServer := func(f *featuresapi.Feature) { f.Status.Uses[0].Value = false }
	dropAPIServer := func(f *featuresapi.Feature) { f.Status.Uses = f.Status.Uses[1:] }
	addKubelet := func(f *featuresapi.Feature) {
		f.Status.Uses = append(f.Status.Uses, featuresapi.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"node-1"}})
	}
	for _, tc := range []struct {
		name, user string
		obj        *featuresapi.Feature
		forbidden  string
	}{
		{name: "scheduler reports its own", user: user.KubeScheduler, obj: with(metav1.NamespaceSystem, addScheduler)},
		{name: "node reports the kubelet's", user: "system:node:node-1", obj: with(metav1.NamespaceSystem, addKubelet)},
		{name: "controller manager forges kube-apiserver's", user: user.KubeControllerManager, obj: with(metav1.NamespaceSystem, forgeAPIServer), forbidden: `may not change the uses of component "kube-apiserver"`},
		{name: "scheduler removes kube-apiserver's", user: user.KubeScheduler, obj: with(metav1.NamespaceSystem, dropAPIServer), forbidden: `may not change the uses of component "kube-apiserver"`},
		{name: "node changes the scheduler's", user: "system:node:node-1", obj: with(metav1.NamespaceSystem, addScheduler), forbidden: `may not change the uses of component "kube-scheduler"`},
		{name: "admin changes the scheduler's", user: "admin", obj: with(metav1.NamespaceSystem, addScheduler), forbidden: `user "admin" may not change`},
		{name: "kube-apiserver clears any", user: user.APIServerUser, obj: with(metav1.NamespaceSystem, dropAPIServer)},
		{name: "third party's namespace", user: "admin", obj: with("widgets", forgeAPIServer)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: tc.user})
			old := stored.DeepCopy()
			old.Namespace = tc.obj.Namespace
			err := ownUsesOnly(ctx, tc.obj, old)
			switch {
			case tc.forbidden == "" && err != nil:
				t.Errorf("want allowed, got %v", err)
			case tc.forbidden != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbidden)):
				t.Errorf("want Forbidden containing %q, got %v", tc.forbidden, err)
			}
		})
	}
}
