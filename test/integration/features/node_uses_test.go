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
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/util/feature/reporting"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-base/featuregate"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/integration/framework"
	"k8s.io/utils/ptr"
)

// TestNodeReportsOnlyItsOwnUses runs the node authorizer and the
// NodeRestriction admission plugin: a kubelet may add itself to the uses of a
// Feature in kube-system and nothing else.
// startNodeAPIServer starts a kube-apiserver with the Feature API, Node,RBAC
// authorization and NodeRestriction, and returns clients by token: admin-token
// (system:masters) and node1-token (system:node:node1).
func startNodeAPIServer(t *testing.T) func(token string) clientset.Interface {
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
	return client
}

func TestNodeReportsOnlyItsOwnUses(t *testing.T) {
	ctx := context.Background()
	client := startNodeAPIServer(t)
	admin := client("admin-token").FeaturesV1alpha1().Features(metav1.NamespaceSystem)
	node1 := client("node1-token").FeaturesV1alpha1().Features(metav1.NamespaceSystem)

	// kube-apiserver's server flow announces the Feature; the test creates it
	// too, in case it is first.
	if _, err := admin.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "balloonpod"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "BalloonPod"},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The server flow writes the Feature too: each write starts from the
	// object as it is now, and is tried again after a conflict.
	updateUses := func(mutate func(*featuresv1alpha1.Feature)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			f, err := node1.Get(ctx, "balloonpod", metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(f)
			_, err = node1.UpdateUses(ctx, f.Name, f, metav1.UpdateOptions{})
			return err
		})
	}
	// NodeRestriction checks the versions a node reports against its Node.
	if _, err := client("admin-token").CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.3"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	own := featuresv1alpha1.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"node1"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: ptr.To(metav1.Now())}
	var err error
	// The plugin's informer sees the Node within a moment.
	if pollErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = updateUses(func(f *featuresv1alpha1.Feature) { f.Status.Uses = append(f.Status.Uses, own) })
		return err == nil || !strings.Contains(err.Error(), "cannot check the versions"), nil
	}); pollErr != nil || err != nil {
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
		// An entry naming nobody counts as a use of its value and would hold a
		// transition for as long as the node re-adds it.
		"a use naming nobody": func(f *featuresv1alpha1.Feature) {
			f.Status.Uses = append(f.Status.Uses, featuresv1alpha1.FeatureUse{Component: "kubelet", Value: false, BinaryVersion: "1.36", EmulationVersion: "1.36"})
		},
		"its own use left naming nobody": func(f *featuresv1alpha1.Feature) {
			for i := range f.Status.Uses {
				if f.Status.Uses[i].Component == "kubelet" {
					f.Status.Uses[i].Instances = nil
				}
			}
		},
		// Its Node says v1.36.3: it cannot move itself to versions it invents.
		"itself moved to an invented version": func(f *featuresv1alpha1.Feature) {
			for i := range f.Status.Uses {
				if f.Status.Uses[i].Component == "kubelet" {
					f.Status.Uses[i].BinaryVersion, f.Status.Uses[i].EmulationVersion = "1.40", "1.40"
				}
			}
		},
		"a second use of its own": func(f *featuresv1alpha1.Feature) {
			f.Status.Uses = append(f.Status.Uses, featuresv1alpha1.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"node1"}, BinaryVersion: "1.37", EmulationVersion: "1.37"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := updateUses(mutate)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `node "node1"`) {
				t.Errorf("want Forbidden naming the node, got %v", err)
			}
		})
	}

	f, err := node1.Get(ctx, "balloonpod", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a node must read the Features in kube-system: %v", err)
	}
	elsewhere := client("node1-token").FeaturesV1alpha1().Features(thirdPartyNamespace)
	for name, call := range map[string]func() error{
		"status": func() error { _, err := node1.UpdateStatus(ctx, f, metav1.UpdateOptions{}); return err },
		"create": func() error {
			_, err := node1.Create(ctx, &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: featuresv1alpha1.FeatureSpec{FeatureName: "Other"}}, metav1.CreateOptions{})
			return err
		},
		"delete": func() error { return node1.Delete(ctx, "balloonpod", metav1.DeleteOptions{}) },
		// Kubelets report only Kubernetes' own features, in kube-system.
		"list in another namespace": func() error { _, err := elsewhere.List(ctx, metav1.ListOptions{}); return err },
		"uses in another namespace": func() error {
			_, err := elsewhere.UpdateUses(ctx, "balloonpod", &featuresv1alpha1.Feature{ObjectMeta: metav1.ObjectMeta{Name: "balloonpod"}}, metav1.UpdateOptions{})
			return err
		},
		"list in every namespace": func() error {
			_, err := client("node1-token").FeaturesV1alpha1().Features(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			return err
		},
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
	var kubelet []featuresv1alpha1.FeatureUse
	for _, use := range got.Status.Uses {
		if use.Component == "kubelet" {
			kubelet = append(kubelet, use)
		}
	}
	if len(kubelet) != 1 || strings.Join(kubelet[0].Instances, ",") != "node1" || !kubelet[0].Value {
		t.Errorf("kubelet uses after the refused writes: %+v", kubelet)
	}
}

// A kubelet that restarts with another value, whose sample is full already,
// leaves its old entry through the real admission chain: seen on the upgrade
// lane, where NodeRestriction refused the worker's move and its old entry
// held the Feature's transition for ever.
func TestKubeletMovesToAFullSample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := startNodeAPIServer(t)
	admin := client("admin-token")
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.3"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Live node leases: the server flow prunes the names of kubelets without one.
	for _, node := range []string{"node1", "node2", "node3", "node4"} {
		if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const feature = "KubeCarryMoveTest"
	features := admin.FeaturesV1alpha1().Features(metav1.NamespaceSystem)
	if _, err := features.Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(feature)},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: feature},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// node1 ran with the feature on; three others run it off, a full sample.
	kubeletUse := func(value bool, instances ...string) featuresv1alpha1.FeatureUse {
		return featuresv1alpha1.FeatureUse{Component: "kubelet", Value: value, Instances: instances, BinaryVersion: "1.36", EmulationVersion: "1.36"}
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		f, err := features.Get(ctx, strings.ToLower(feature), metav1.GetOptions{})
		if err != nil {
			return err
		}
		f.Status.Uses = append(f.Status.Uses, kubeletUse(true, "node1"), kubeletUse(false, "node2", "node3", "node4"))
		_, err = features.UpdateUses(ctx, f.Name, f, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// node1's kubelet starts again with the feature off.
	gate := featuregate.NewVersionedFeatureGate(version.MustParse("1.36"))
	if err := gate.AddVersioned(map[featuregate.Feature]featuregate.VersionedSpecs{
		feature: {{Version: version.MustParse("1.36"), Default: false, PreRelease: featuregate.Alpha}},
	}); err != nil {
		t.Fatal(err)
	}
	reporter := reporting.NewGate(gate)
	reporter.Enabled(feature)
	opts := reporting.DefaultOptions(metav1.NamespaceSystem, "kubelet", "node1")
	opts.BinaryVersion, opts.EmulationVersion = "1.36", "1.36"
	opts.MaxDelay, opts.CheckInterval = 0, 100*time.Millisecond
	reporter.Start(ctx, client("node1-token"), opts)

	// node1's lease is live, so the server flow keeps its name: the old entry
	// goes by node1's own write only.
	var uses []featuresv1alpha1.FeatureUse
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		f, err := features.Get(ctx, strings.ToLower(feature), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		uses = f.Status.Uses
		return !slices.ContainsFunc(uses, func(u featuresv1alpha1.FeatureUse) bool { return u.Component == "kubelet" && u.Value }), nil
	}); err != nil {
		t.Fatalf("node1's kubelet did not leave its old entry: %v; uses %+v", err, uses)
	}
	for _, u := range uses {
		if u.Component == "kubelet" && !u.Value && strings.Join(u.Instances, ",") != "node2,node3,node4" {
			t.Errorf("the full sample changed: %v", u.Instances)
		}
	}
}
