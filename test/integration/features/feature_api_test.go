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

package features

import (
	"context"
	"strings"
	"testing"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/integration/framework"
	"k8s.io/utils/ptr"
)

// thirdPartyNamespace holds the Features of these tests: kube-apiserver's
// server flow owns the status of those in kube-system and would rewrite it.
const thirdPartyNamespace = metav1.NamespaceDefault

func startAPIServer(t *testing.T, flags ...string) clientset.Interface {
	t.Helper()
	return clientset.NewForConfigOrDie(startAPIServerConfig(t, flags...))
}

// startAPIServerConfig returns the client config of kube-apiserver's loopback identity.
func startAPIServerConfig(t *testing.T, flags ...string) *restclient.Config {
	t.Helper()
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, append([]string{"--endpoint-reconciler-type=none"}, flags...), framework.SharedEtcd())
	t.Cleanup(server.TearDownFn)
	return server.ClientConfig
}

func TestFeatureAPINeedsGateAndRuntimeConfig(t *testing.T) {
	for name, flags := range map[string][]string{
		"gate off":           {"--runtime-config=features.k8s.io/v1alpha1=true"},
		"runtime config off": {"--feature-gates=FeatureLifecycle=true"},
	} {
		t.Run(name, func(t *testing.T) {
			client := startAPIServer(t, flags...)
			_, err := client.FeaturesV1alpha1().Features(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("want the API not served (NotFound), got %v", err)
			}
		})
	}
}

func TestFeatureSubresources(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t, "--feature-gates=FeatureLifecycle=true", "--runtime-config=features.k8s.io/v1alpha1=true")
	features := client.FeaturesV1alpha1().Features(thirdPartyNamespace)

	created, err := features.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "BalloonPod"},
		Status:     featuresv1alpha1.FeatureStatus{State: featuresv1alpha1.FeatureStateOn},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.State != "" {
		t.Errorf("create must not write the status, got state %q", created.Status.State)
	}

	_, err = features.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloon-pod"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "BalloonPod"},
	}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `must be the feature name in lower case, "balloonpod"`) {
		t.Errorf("want a clear Invalid error for a name that is not the feature's, got %v", err)
	}

	// kube-apiserver writes the state through status; uses sent along are dropped.
	status := created.DeepCopy()
	status.Status = featuresv1alpha1.FeatureStatus{
		Default:         ptr.To(false),
		ConfiguredValue: ptr.To(true),
		Stage:           featuresv1alpha1.FeatureStageAlpha,
		State:           featuresv1alpha1.FeatureStateTurningOn,
		Tasks:           []featuresv1alpha1.FeatureTask{{Name: "WaitForUses"}},
		Uses:            []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: false, Instances: []string{"forged"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}},
	}
	updated, err := features.UpdateStatus(ctx, status, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Status.State != featuresv1alpha1.FeatureStateTurningOn || len(updated.Status.Tasks) != 1 {
		t.Errorf("status update not written: %+v", updated.Status)
	}
	if len(updated.Status.Uses) != 0 {
		t.Errorf("the status subresource wrote uses: %+v", updated.Status.Uses)
	}

	// Components write their uses through the uses subresource; a state sent along is dropped.
	uses := updated.DeepCopy()
	uses.Status.State = featuresv1alpha1.FeatureStateOff
	uses.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}}
	updated, err = features.UpdateUses(ctx, uses.Name, uses, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(updated.Status.Uses) != 1 || updated.Status.Uses[0].Instances[0] != "node-1" {
		t.Errorf("uses not written: %+v", updated.Status.Uses)
	}
	if updated.Status.State != featuresv1alpha1.FeatureStateTurningOn {
		t.Errorf("the uses subresource wrote the state: %q", updated.Status.State)
	}

	// A malformed use is rejected with a clear error and loses nothing.
	bad := updated.DeepCopy()
	bad.Status.Uses = append(bad.Status.Uses, bad.Status.Uses[0])
	if _, err := features.UpdateUses(ctx, bad.Name, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.uses[1]: Duplicate value") {
		t.Errorf("want Invalid with the duplicate entry named, got %v", err)
	}
	got, err := features.Get(ctx, "balloonpod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Uses) != 1 {
		t.Errorf("a rejected update changed the uses: %+v", got.Status.Uses)
	}
}

func TestFeatureTable(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t, "--feature-gates=FeatureLifecycle=true", "--runtime-config=features.k8s.io/v1alpha1=true")
	features := client.FeaturesV1alpha1().Features(thirdPartyNamespace)
	f, err := features.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "BalloonPod"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Status = featuresv1alpha1.FeatureStatus{Default: ptr.To(false), ConfiguredValue: ptr.To(true), State: featuresv1alpha1.FeatureStateOn}
	if _, err := features.UpdateStatus(ctx, f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	table := &metav1.Table{}
	err = client.FeaturesV1alpha1().RESTClient().Get().Namespace(thirdPartyNamespace).Resource("features").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(table)
	if err != nil {
		t.Fatal(err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			columns = append(columns, c.Name)
		}
	}
	if got, want := strings.Join(columns, ","), "Name,State,Default,Configured,Uses,Upgrade/Downgrade,Age"; got != want {
		t.Errorf("columns = %s, want %s", got, want)
	}
	if len(table.Rows) != 1 || table.Rows[0].Cells[1] != "On" || table.Rows[0].Cells[3] != "On" {
		t.Errorf("rows = %+v", table.Rows)
	}
}

// Only kube-apiserver writes the status of its Features: a cluster admin, who
// may do anything RBAC governs, is refused; third parties' namespaces are theirs.
func TestOnlyKubeAPIServerWritesTheStatusOfItsFeatures(t *testing.T) {
	ctx := context.Background()
	config := startAPIServerConfig(t, "--feature-gates=FeatureLifecycle=true", "--runtime-config=features.k8s.io/v1alpha1=true")
	adminConfig := restclient.CopyConfig(config)
	adminConfig.Impersonate = restclient.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}
	admin := clientset.NewForConfigOrDie(adminConfig)
	for _, namespace := range []string{metav1.NamespaceSystem, thirdPartyNamespace} {
		// The example.com gate is no gate of kube-apiserver, so its server flow leaves it alone.
		f, err := admin.FeaturesV1alpha1().Features(namespace).Create(ctx, &featuresv1alpha1.Feature{
			ObjectMeta: metav1.ObjectMeta{Name: "drainwidgets"},
			Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "DrainWidgets"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.Status = featuresv1alpha1.FeatureStatus{Default: ptr.To(false), ConfiguredValue: ptr.To(true), State: featuresv1alpha1.FeatureStateOn}
		_, err = admin.FeaturesV1alpha1().Features(namespace).UpdateStatus(ctx, f, metav1.UpdateOptions{})
		switch {
		case namespace == metav1.NamespaceSystem && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "feature lifecycle controller only")):
			t.Errorf("%s: an admin wrote the status of a Feature, want Forbidden naming who writes it: %v", namespace, err)
		case namespace != metav1.NamespaceSystem && err != nil:
			t.Errorf("%s: a third party's status write failed: %v", namespace, err)
		}
	}
}

// Features have many writers: an update must name the resourceVersion it read,
// or it would drop the others' writes.
func TestFeatureUpdatesAreConditional(t *testing.T) {
	ctx := context.Background()
	client := startAPIServer(t, "--feature-gates=FeatureLifecycle=true", "--runtime-config=features.k8s.io/v1alpha1=true")
	features := client.FeaturesV1alpha1().Features(thirdPartyNamespace)
	f, err := features.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "drainwidgets"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "DrainWidgets"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blind := f.DeepCopy()
	blind.ResourceVersion = ""
	blind.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}}
	if _, err := features.UpdateUses(ctx, blind.Name, blind, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "resourceVersion") {
		t.Errorf("uses update without a resourceVersion: want Invalid naming it, got %v", err)
	}
	blind.Labels = map[string]string{"a": "b"}
	if _, err := features.Update(ctx, blind, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "resourceVersion") {
		t.Errorf("update without a resourceVersion: want Invalid naming it, got %v", err)
	}
}
