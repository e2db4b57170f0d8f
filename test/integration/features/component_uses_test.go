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
	"time"

	corev1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2/ktesting"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	kubecontrollermanagertesting "k8s.io/kubernetes/cmd/kube-controller-manager/app/testing"
	kubeschedulertesting "k8s.io/kubernetes/cmd/kube-scheduler/app/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/util/featureuses"
	"k8s.io/kubernetes/test/integration/framework"
	"k8s.io/kubernetes/test/utils/kubeconfig"
)

// TestComponentsReportTheirUses runs kube-apiserver, kube-controller-manager
// and kube-scheduler in this process, each with its own credentials and its
// own reporting, plus a kubelet's reporting as the kubelet starts it (with the
// node's credentials): every component adds its use of FeatureLifecycle to
// the Feature, under the authorization it has in a cluster.
func TestComponentsReportTheirUses(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.FeatureLifecycle, true)
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join([]string{
		`admin-token,admin,uid1,"system:masters"`,
		`kcm-token,system:kube-controller-manager,uid2`,
		`scheduler-token,system:kube-scheduler,uid3`,
		`node1-token,system:node:node1,uid4,"system:nodes"`,
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
	config := func(token string) *restclient.Config {
		c := restclient.AnonymousClientConfig(server.ClientConfig)
		c.BearerToken = token
		return c
	}
	kubeconfigFor := func(token string) string {
		path := filepath.Join(dir, token+".kubeconfig")
		if err := clientcmd.WriteToFile(*kubeconfig.CreateKubeConfig(config(token)), path); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// kube-apiserver's server flow announces the Feature; the test creates it
	// too, in case it is first.
	admin := clientset.NewForConfigOrDie(config("admin-token")).FeaturesV1alpha1().Features(metav1.NamespaceSystem)
	if _, err := admin.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "featurelifecycle"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: string(features.FeatureLifecycle)},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	kcm := kubecontrollermanagertesting.StartTestServerOrDie(t, ctx, []string{
		"--kubeconfig=" + kubeconfigFor("kcm-token"),
		"--controllers=",
		"--leader-elect=false",
		"--authentication-skip-lookup=true",
	})
	t.Cleanup(kcm.TearDownFn)
	scheduler := kubeschedulertesting.StartTestServerOrDie(t, ctx, []string{
		"--kubeconfig=" + kubeconfigFor("scheduler-token"),
		"--leader-elect=false",
		"--authentication-skip-lookup=true",
	})
	t.Cleanup(scheduler.TearDownFn)
	kubeletCtx, stopKubelet := context.WithCancel(ctx)
	t.Cleanup(stopKubelet)
	// NodeRestriction checks the versions the kubelet reports against its
	// Node; a build without a version reports the release it is built from.
	if _, err := clientset.NewForConfigOrDie(config("admin-token")).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	featureuses.Start(kubeletCtx, clientset.NewForConfigOrDie(config("node1-token")), "kubelet", "node1")

	var uses []featuresv1alpha1.FeatureUse
	// Each reporter waits up to 30 s before it writes, and once more after a conflict.
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		f, err := admin.Get(ctx, "featurelifecycle", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		uses = f.Status.Uses
		return len(uses) == 4, nil
	})
	if err != nil {
		t.Fatalf("uses after waiting: %+v: %v", uses, err)
	}
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver reports as its identity, the name of its identity lease.
	leases, err := clientset.NewForConfigOrDie(config("admin-token")).CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity=kube-apiserver"})
	if err != nil || len(leases.Items) != 1 {
		t.Fatalf("want the identity lease of the one kube-apiserver, got %v, %v", leases, err)
	}
	want := map[string]string{
		"kube-apiserver":          leases.Items[0].Name,
		"kube-controller-manager": hostname,
		"kube-scheduler":          hostname,
		"kubelet":                 "node1",
	}
	for _, use := range uses {
		if !use.Value || strings.Join(use.Instances, ",") != want[use.Component] || use.FirstReportTime.IsZero() {
			t.Errorf("use %+v, want component %q with value true, instance %q and a report time", use, use.Component, want[use.Component])
		}
	}
}
