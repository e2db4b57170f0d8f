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

package controlplane

import (
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featurereporting "k8s.io/apiserver/pkg/util/feature/reporting"
	"k8s.io/client-go/kubernetes"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle/tasks"
	"k8s.io/kubernetes/pkg/features"
)

// addFeatureLifecycleHook starts KEP-3920's server flow when FeatureLifecycle
// is on and the Feature API is served.
func (c CompletedConfig) addFeatureLifecycleHook(s *Instance, client kubernetes.Interface) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.FeatureLifecycle) ||
		!c.ControlPlane.APIResourceConfigSource.ResourceEnabled(featuresv1alpha1.SchemeGroupVersion.WithResource("features")) {
		return
	}
	registry := featurelifecycle.NewRegistry(featurelifecycle.NewWaitForUses(featurelifecycle.UsesWaitPeriod, featurelifecycle.UsesMaxWaitPeriod))
	tasks.Register(registry)
	controller := featurelifecycle.New(featurelifecycle.Config{
		Namespace:             metav1.NamespaceSystem,
		Identity:              c.ControlPlane.Generic.APIServerID,
		IdentityLeaseSelector: controlplaneapiserver.IdentityLeaseComponentLabelKey + "=" + controlplaneapiserver.KubeAPIServer,
		Gate:                  featurereporting.NewGate(utilfeature.DefaultMutableFeatureGate),
		BinaryVersion:         c.ControlPlane.Generic.EffectiveVersion.BinaryVersion(),
		EmulationVersion:      c.ControlPlane.Generic.EffectiveVersion.EmulationVersion(),
		Tasks:                 registry,
		// A kube-apiserver that missed three renewals no longer leads features.
		Liveness:         3 * controlplaneapiserver.IdentityLeaseRenewIntervalPeriod,
		Recheck:          controlplaneapiserver.IdentityLeaseRenewIntervalPeriod,
		UnknownRetention: featurelifecycle.UnknownRetentionMinorVersions,
		PruneInterval:    featurelifecycle.UsesWaitPeriod,
		UseExpiry:        featurereporting.UseExpiry,
	}, client)
	s.ControlPlane.GenericAPIServer.AddPostStartHookOrDie("start-feature-lifecycle-controller", func(hookContext genericapiserver.PostStartHookContext) error {
		controller.Start(hookContext)
		return nil
	})
	// Leadership rests on the identity lease: the loop stops before the lease
	// goes, and the lease carries the versions that leaders are elected by.
	s.ControlPlane.HoldsIdentityLease(controller.Stop)
	s.ControlPlane.AnnotateIdentityLease(featurelifecycle.BinaryVersionAnnotation, c.ControlPlane.Generic.EffectiveVersion.BinaryVersion().String())
	s.ControlPlane.AnnotateIdentityLease(featurelifecycle.EmulationVersionAnnotation, c.ControlPlane.Generic.EffectiveVersion.EmulationVersion().String())
}
