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
	"fmt"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

// componentOfUser is the component whose uses each core identity reports in
// kube-system. Nodes report as the kubelet, checked further by the
// NodeRestriction admission plugin.
var componentOfUser = map[string]string{
	user.KubeControllerManager: "kube-controller-manager",
	user.KubeScheduler:         "kube-scheduler",
}

const (
	kubeletComponent   = "kubelet"
	apiServerComponent = "kube-apiserver"
)

// ownUsesOnly lets each identity change only the uses of its own component in
// kube-system: a controller manager cannot speak for kube-apiserver, a node for
// the scheduler. kube-apiserver itself (its loopback identity) may change any
// entry: it reports its own, and its server flow clears stale ones. Third
// parties' namespaces are governed by RBAC alone.
func ownUsesOnly(ctx context.Context, obj, old *featuresapi.Feature) error {
	if obj.Namespace != metav1.NamespaceSystem {
		return nil
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if ok && u.GetName() == user.APIServerUser {
		return nil
	}
	own := ""
	if ok {
		own = componentOfUser[u.GetName()]
		if strings.HasPrefix(u.GetName(), "system:node:") {
			own = kubeletComponent
		}
	}
	for _, component := range changedComponents(obj.Status.Uses, old.Status.Uses) {
		if component == own {
			continue
		}
		name := "this user"
		if ok {
			name = fmt.Sprintf("user %q", u.GetName())
		}
		return apierrors.NewForbidden(featuresapi.Resource("features/uses"), obj.Name,
			fmt.Errorf("%s may not change the uses of component %q in %s: each component reports its own", name, component, metav1.NamespaceSystem))
	}
	return nil
}

// changedComponents returns the components whose entries differ between the
// two lists (added, removed or changed), in the order they are found.
func changedComponents(uses, old []featuresapi.FeatureUse) []string {
	var changed []string
	add := func(component string) {
		if !slices.Contains(changed, component) {
			changed = append(changed, component)
		}
	}
	find := func(list []featuresapi.FeatureUse, u featuresapi.FeatureUse) int {
		return slices.IndexFunc(list, func(l featuresapi.FeatureUse) bool { return featuresapi.SameUse(l, u) })
	}
	for _, u := range uses {
		if i := find(old, u); i < 0 || !apiequality.Semantic.DeepEqual(old[i], u) {
			add(u.Component)
		}
	}
	for _, o := range old {
		if find(uses, o) < 0 {
			add(o.Component)
		}
	}
	return changed
}
