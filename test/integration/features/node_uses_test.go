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
	"os"
	"path/filepath"
	"strings"
	"testing"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/integration/framework"
)

// TestNodeReportsOnlyItsOwnUses runs the node authorizer and the
// NodeRestriction admission plugin: a kubelet may add itself to the uses of a
// Feature and nothing else.
func TestNodeReportsOnlyItsOwnUses(t *testing.T) {
	ctx := context.Background()
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join([]string{
		`admin-token,admin,uid1,"system:masters"`,
		`node1-token,system:node:node1,uid2,"system:nodes"`,
	}, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, []string{
		"--endpoint-reconciler-type=none",
		"--feature-gates=FeatureLifecycle=true",
		"--runtime-config=features.k8s.io/v1alpha1=true",
		"--authorization-mode=Node,RBAC",
		"--token-auth-file=" + tokenFile,
		"--enable-admission-plugins=NodeRestriction",
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	}, framework.SharedEtcd())
	t.Cleanup(server.TearDownFn)
	client := func(token string) clientset.Interface {
		config := restclient.AnonymousClientConfig(server.ClientConfig)
		config.BearerToken = token
		return clientset.NewForConfigOrDie(config)
	}
	admin := client("admin-token").FeaturesV1alpha1().Features(thirdPartyNamespace)
	node1 := client("node1-token").FeaturesV1alpha1().Features(thirdPartyNamespace)

	if _, err := admin.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "BalloonPod"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	f, err := node1.Get(ctx, "balloonpod", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a node must read features: %v", err)
	}
	own := f.DeepCopy()
	own.Status.Uses = []featuresv1alpha1.FeatureUse{{Component: "kubelet", Value: true, Instances: []string{"node1"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: metav1.Now()}}
	if f, err = node1.UpdateUses(ctx, own.Name, own, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a node must report its own use: %v", err)
	}

	for name, mutate := range map[string]func(*featuresv1alpha1.Feature){
		"another node's use": func(f *featuresv1alpha1.Feature) {
			f.Status.Uses = append(f.Status.Uses, featuresv1alpha1.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"node2"}, BinaryVersion: "1.36", EmulationVersion: "1.36"})
		},
		"another component's use": func(f *featuresv1alpha1.Feature) {
			f.Status.Uses = append(f.Status.Uses, featuresv1alpha1.FeatureUse{Component: "kube-scheduler", Value: true, Instances: []string{"node1"}, BinaryVersion: "1.36", EmulationVersion: "1.36"})
		},
		"removing a use": func(f *featuresv1alpha1.Feature) { f.Status.Uses = nil },
	} {
		t.Run(name, func(t *testing.T) {
			forged := f.DeepCopy()
			mutate(forged)
			_, err := node1.UpdateUses(ctx, forged.Name, forged, metav1.UpdateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `node "node1"`) {
				t.Errorf("want Forbidden naming the node, got %v", err)
			}
		})
	}

	for name, call := range map[string]func() error{
		"status": func() error { _, err := node1.UpdateStatus(ctx, f, metav1.UpdateOptions{}); return err },
		"create": func() error {
			_, err := node1.Create(ctx, &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Other"}}, metav1.CreateOptions{})
			return err
		},
		"delete": func() error { return node1.Delete(ctx, "balloonpod", metav1.DeleteOptions{}) },
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); !apierrors.IsForbidden(err) {
				t.Errorf("want Forbidden, got %v", err)
			}
		})
	}

	got, err := admin.Get(ctx, "balloonpod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Uses) != 1 || got.Status.Uses[0].Component != "kubelet" || strings.Join(got.Status.Uses[0].Instances, ",") != "node1" {
		t.Errorf("uses after the refused writes: %+v", got.Status.Uses)
	}
}
