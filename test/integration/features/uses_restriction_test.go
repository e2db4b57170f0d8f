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

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/integration/framework"
)

// TestFeatureRestrictionAsksTheAuthorizer runs the FeatureRestriction
// admission plugin, on by default, behind the Node and RBAC authorizers: who
// may change the uses of a component is what RBAC says, so a control plane
// whose scheduler runs as another identity binds the bootstrap role to it,
// and a cluster administrator (not in system:masters) can repair uses.
func TestFeatureRestrictionAsksTheAuthorizer(t *testing.T) {
	ctx := context.Background()
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join([]string{
		`admin-token,admin,uid1,"system:masters"`,
		`scheduler-token,my-scheduler,uid2`,
		`repair-token,repairer,uid3`,
	}, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, []string{
		"--endpoint-reconciler-type=none",
		"--feature-gates=FeatureLifecycle=true",
		"--runtime-config=features.k8s.io/v1alpha1=true",
		"--authorization-mode=Node,RBAC",
		"--token-auth-file=" + tokenFile,
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	}, framework.SharedEtcd())
	t.Cleanup(server.TearDownFn)
	client := func(token string) clientset.Interface {
		config := restclient.AnonymousClientConfig(server.ClientConfig)
		config.BearerToken = token
		return clientset.NewForConfigOrDie(config)
	}
	admin := client("admin-token")
	// The example.com gate is no gate of kube-apiserver, so its server flow leaves it alone.
	if _, err := admin.FeaturesV1alpha1().Features(metav1.NamespaceSystem).Create(ctx, &featuresv1alpha1.Feature{
		ObjectMeta: metav1.ObjectMeta{Name: "drainwidgets"},
		Spec:       featuresv1alpha1.FeatureSpec{FeatureName: "DrainWidgets"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	updateUses := func(c clientset.Interface, mutate func(*featuresv1alpha1.Feature)) error {
		features := c.FeaturesV1alpha1().Features(metav1.NamespaceSystem)
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			f, err := features.Get(ctx, "drainwidgets", metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(f)
			_, err = features.UpdateUses(ctx, f.Name, f, metav1.UpdateOptions{})
			return err
		})
	}
	use := func(component, instance string) featuresv1alpha1.FeatureUse {
		return featuresv1alpha1.FeatureUse{Component: component, Value: true, Instances: []string{instance}, BinaryVersion: "1.37", EmulationVersion: "1.37"}
	}
	addUse := func(u featuresv1alpha1.FeatureUse) func(*featuresv1alpha1.Feature) {
		return func(f *featuresv1alpha1.Feature) { f.Status.Uses = append(f.Status.Uses, u) }
	}
	if err := updateUses(admin, addUse(use("kube-apiserver", "apiserver-a"))); err != nil {
		t.Fatal(err)
	}

	// Both may update features/uses, and neither may report for a component yet.
	for _, user := range []string{"my-scheduler", "repairer"} {
		if _, err := admin.RbacV1().RoleBindings(metav1.NamespaceSystem).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "uses-writer-" + user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "uses-writer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().Roles(metav1.NamespaceSystem).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "uses-writer"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get"}, APIGroups: []string{"features.k8s.io"}, Resources: []string{"features"}},
			{Verbs: []string{"get", "update"}, APIGroups: []string{"features.k8s.io"}, Resources: []string{"features/uses"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheduler := client("scheduler-token")
	// RBAC's cache catches up with the new role within a moment.
	var err error
	if pollErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = updateUses(scheduler, addUse(use("kube-scheduler", "scheduler-1")))
		return err != nil && !strings.Contains(err.Error(), "cannot get resource"), nil
	}); pollErr != nil {
		t.Fatalf("waiting for RBAC: %v", err)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `user "my-scheduler" may not change the uses of component "kube-scheduler"`) {
		t.Fatalf("a user without report on components/kube-scheduler wrote its uses, want Forbidden naming the user and component: %v", err)
	}

	// The control plane's scheduler runs as my-scheduler: bind the bootstrap role to it.
	if _, err := admin.RbacV1().RoleBindings(metav1.NamespaceSystem).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "my-scheduler-reports"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "system::feature-uses-reporter:kube-scheduler"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "my-scheduler"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pollErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = updateUses(scheduler, addUse(use("kube-scheduler", "scheduler-1")))
		return err == nil, nil
	}); pollErr != nil {
		t.Fatalf("my-scheduler, bound to the scheduler's reporter role, must report the scheduler's uses: %v", err)
	}
	if err := updateUses(scheduler, addUse(use("kube-controller-manager", "scheduler-1"))); !apierrors.IsForbidden(err) {
		t.Errorf("my-scheduler wrote the controller manager's uses, want Forbidden: %v", err)
	}

	// A cluster administrator repairs the uses: a ClusterRoleBinding to cluster-admin, no system:masters.
	if err := updateUses(client("repair-token"), func(f *featuresv1alpha1.Feature) { f.Status.Uses = nil }); !apierrors.IsForbidden(err) {
		t.Fatalf("repairer removed every use before it was a cluster administrator, want Forbidden: %v", err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "repairer-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "repairer"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pollErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = updateUses(client("repair-token"), func(f *featuresv1alpha1.Feature) {
			f.Status.Uses = slices.DeleteFunc(f.Status.Uses, func(u featuresv1alpha1.FeatureUse) bool { return u.Component == "kube-scheduler" })
		})
		return err == nil, nil
	}); pollErr != nil {
		t.Fatalf("a cluster administrator must repair uses: %v", err)
	}
	f, err := admin.FeaturesV1alpha1().Features(metav1.NamespaceSystem).Get(ctx, "drainwidgets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Status.Uses) != 1 || f.Status.Uses[0].Component != "kube-apiserver" {
		t.Errorf("want only kube-apiserver's use left after the repair, got %+v", f.Status.Uses)
	}
}
