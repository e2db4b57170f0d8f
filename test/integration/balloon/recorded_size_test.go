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

package balloon

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/test/integration/authutil"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// TestResizerMayOnlyTaintPendingAndRecordSizes applies the addon as shipped and
// acts as the resize agent: it may add and remove the balloon-pending taint and
// record sizes in the node-balloon-sizes ConfigMap, and change nothing else of a
// node or of another ConfigMap. The server serves the node's podPreemptionPolicy
// (KEP-5836), which decides whether resizes on the node may preempt.
func TestResizerMayOnlyTaintPendingAndRecordSizes(t *testing.T) {
	server, cs := startAPIServer(t, true, "--authorization-mode=RBAC", "--feature-gates=InPlacePodVerticalScalingSchedulerPreemption=true")
	tCtx := ktesting.Init(t)
	for _, file := range []string{"balloon-resizer-rbac.yaml", "balloon-resizer-policy.yaml", "balloon-sizes.yaml"} {
		applyAddon(tCtx, t, cs, filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon", file))
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "a"}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}}},
	}
	if _, err := cs.CoreV1().Nodes().Create(tCtx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(tCtx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer sees the addon's bindings through an informer: until
	// it has them, RBAC refuses what the policies are to refuse. The group's
	// subjects are in the same bindings as the service account.
	configMaps := schema.GroupResource{Resource: "configmaps"}
	authutil.WaitForNamedAuthorizationUpdate(t, tCtx, cs.AuthorizationV1(), resizer, "", "update", "node-a", schema.GroupResource{Resource: "nodes"}, true)
	authutil.WaitForNamedAuthorizationUpdate(t, tCtx, cs.AuthorizationV1(), resizer, metav1.NamespaceSystem, "patch", "node-balloon-sizes", configMaps, true)

	// The agent in the cluster, and a person or agent outside it in the
	// resizers' group: the same rules.
	for _, who := range []restclient.ImpersonationConfig{
		{UserName: resizer, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
		{UserName: "alice", Groups: []string{resizers, "system:authenticated"}},
	} {
		t.Run(who.UserName, func(t *testing.T) {
			config := restclient.CopyConfig(server.ClientConfig)
			config.Impersonate = who
			agent := clientset.NewForConfigOrDie(config)
			update := func(mutate func(*v1.Node), dryRun ...string) error {
				node, err := agent.CoreV1().Nodes().Get(tCtx, "node-a", metav1.GetOptions{})
				if err != nil {
					return err
				}
				mutate(node)
				_, err = agent.CoreV1().Nodes().Update(tCtx, node, metav1.UpdateOptions{DryRun: dryRun})
				return err
			}
			pending := v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule}
			addTaint := func(taint v1.Taint) func(*v1.Node) {
				return func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) }
			}
			const onlyTheTaint = "the node-balloon-resizer may only add or remove the taint node.kubernetes.io/balloon-pending:NoSchedule"
			const nothingElse = "the node-balloon-resizer may change nothing of a node but the taint node.kubernetes.io/balloon-pending"

			// The policy takes effect once kube-apiserver has loaded it; until then, ask
			// with dry runs, which admission sees too.
			var err error
			if pollErr := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
				err = update(func(n *v1.Node) { n.Spec.Taints = nil }, metav1.DryRunAll)
				return err != nil, nil
			}); pollErr != nil {
				t.Fatalf("the agent removed another taint: %v", err)
			}
			expectError(t, err, metav1.StatusReasonForbidden, onlyTheTaint)

			if err := update(addTaint(pending)); err != nil {
				t.Errorf("the agent could not add the balloon-pending taint: %v", err)
			}
			if err := update(func(n *v1.Node) { n.Spec.Taints = n.Spec.Taints[:1] }); err != nil {
				t.Errorf("the agent could not remove the balloon-pending taint: %v", err)
			}
			expectError(t, update(addTaint(v1.Taint{Key: "dedicated", Value: "web", Effect: v1.TaintEffectNoExecute})), metav1.StatusReasonForbidden, onlyTheTaint)
			expectError(t, update(addTaint(v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoExecute})), metav1.StatusReasonForbidden, onlyTheTaint)
			expectError(t, update(func(n *v1.Node) { n.Labels["zone"] = "b" }), metav1.StatusReasonForbidden, nothingElse)
			expectError(t, update(func(n *v1.Node) { n.Spec.Unschedulable = true }), metav1.StatusReasonForbidden, nothingElse)
			// The garbage collector would delete a node owned by a deleted object.
			expectError(t, update(func(n *v1.Node) {
				n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "d2d2"}}
			}), metav1.StatusReasonForbidden, nothingElse)
			expectError(t, update(func(n *v1.Node) { n.Finalizers = []string{"example.com/never"} }), metav1.StatusReasonForbidden, nothingElse)
			expectError(t, update(func(n *v1.Node) {
				n.Spec.PodPreemptionPolicy = &v1.NodePodPreemptionPolicy{DisableResizePreemption: []string{"example.com/autoscaler"}}
			}), metav1.StatusReasonForbidden, nothingElse)

			record := []byte(`{"data":{"node-a":"cpu=2,memory=4Gi,uid=a1a1"}}`)
			if _, err := agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "node-balloon-sizes", types.MergePatchType, record, metav1.PatchOptions{}); err != nil {
				t.Errorf("the agent could not record a size: %v", err)
			}
			if _, err := agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "other", types.MergePatchType, record, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("the agent wrote another ConfigMap: %v", err)
			}
			// A zero request would make a balloon BestEffort.
			err = refusedOnceLoaded(tCtx, t, func(dryRun ...string) error {
				_, err := agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "node-balloon-sizes", types.MergePatchType, []byte(`{"data":{"node-z":"cpu=0,memory=4Gi,uid=a1a1"}}`), metav1.PatchOptions{DryRun: dryRun})
				return err
			})
			expectError(t, err, metav1.StatusReasonInvalid, "a recorded balloon size must be cpu=Q,memory=Q,uid=UID with positive quantities; not the one of node-z")
			// Without the Node's UID a node registered later under the name
			// could not tell the entry from its own.
			_, err = agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "node-balloon-sizes", types.MergePatchType, []byte(`{"data":{"node-y":"cpu=1,memory=4Gi"}}`), metav1.PatchOptions{})
			expectError(t, err, metav1.StatusReasonInvalid, "a recorded balloon size must be cpu=Q,memory=Q,uid=UID with positive quantities; not the one of node-y")

		})
	}

	// Whoever else may write ConfigMaps in kube-system (an edit RoleBinding
	// there, a controller with cluster-wide rights) may not write the sizes.
	// (The edit ClusterRole is aggregated by kube-controller-manager, which does
	// not run here: a Role with its ConfigMap rights stands in.)
	if _, err := cs.RbacV1().Roles(metav1.NamespaceSystem).Create(tCtx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-editor"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "patch", "update", "delete", "deletecollection"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(metav1.NamespaceSystem).Create(tCtx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bob-edits"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-editor"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	authutil.WaitForNamedAuthorizationUpdate(t, tCtx, cs.AuthorizationV1(), "bob", metav1.NamespaceSystem, "patch", "node-balloon-sizes", configMaps, true)
	config := restclient.CopyConfig(server.ClientConfig)
	config.Impersonate = restclient.ImpersonationConfig{UserName: "bob", Groups: []string{"system:authenticated"}}
	editor := clientset.NewForConfigOrDie(config).CoreV1().ConfigMaps(metav1.NamespaceSystem)
	const onlyResizers = "only a node-balloon-resizer may write the recorded balloon sizes"
	err := refusedOnceLoaded(tCtx, t, func(dryRun ...string) error {
		_, err := editor.Patch(tCtx, "node-balloon-sizes", types.MergePatchType, []byte(`{"data":{"node-a":"cpu=1m,memory=1Mi,uid=a1a1"}}`), metav1.PatchOptions{DryRun: dryRun})
		return err
	})
	expectError(t, err, metav1.StatusReasonForbidden, onlyResizers)
	expectError(t, editor.Delete(tCtx, "node-balloon-sizes", metav1.DeleteOptions{}), metav1.StatusReasonForbidden, onlyResizers)
	// A deletecollection is admitted object by object, with no name in the request.
	err = editor.DeleteCollection(tCtx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=node-balloon-sizes"})
	expectError(t, err, metav1.StatusReasonForbidden, onlyResizers)
	if _, err := editor.Get(tCtx, "node-balloon-sizes", metav1.GetOptions{}); err != nil {
		t.Errorf("the recorded sizes must survive a deletecollection: %v", err)
	}
	if _, err := editor.Patch(tCtx, "other", types.MergePatchType, []byte(`{"data":{"k":"v"}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the editor could not write another ConfigMap: %v", err)
	}
}

// daemonSetBalloon is a balloon as the DaemonSet controller creates it for a
// node: unbound, pinned to the node by its required node affinity.
func daemonSetBalloon(name, nodeName string) *v1.Pod {
	pod := podConfig{name: name, namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon, cpu: "1m", memory: "1Mi"}.pod()
	pod.Spec.Containers[0].Name = "balloon"
	pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: []string{nodeName}}},
		}}},
	}}
	return pod
}

// TestBalloonsAreCreatedAtTheirRecordedSize applies the addon's
// MutatingAdmissionPolicy as shipped: a balloon created for a node with a
// recorded size starts at that size, whether the DaemonSet pins it to the node
// or it names the node itself; every balloon gets the protection finalizer,
// which only the resize agent may remove; other pods are left alone.
func TestBalloonsAreCreatedAtTheirRecordedSize(t *testing.T) {
	server, cs := startAPIServer(t, true, "--authorization-mode=RBAC")
	tCtx := ktesting.Init(t)
	applyAddon(tCtx, t, cs, filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon", "balloon-sizes.yaml"))
	// A record that does not parse, written before the policy that refuses it.
	record := []byte(`{"data":{"node-a":"cpu=1500m,memory=3Gi,uid=a1a1","node-bad":"cpu=lots,memory=3Gi,uid=b2b2"}}`)
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "node-balloon-sizes", types.MergePatchType, record, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"balloon-resizer-rbac.yaml", "balloon-resizer-policy.yaml", "balloon-size-policy.yaml"} {
		applyAddon(tCtx, t, cs, filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon", file))
	}
	pods := cs.CoreV1().Pods(metav1.NamespaceSystem)
	const finalizer = "kubernetes.io/balloon-protection"

	// The policy takes effect once kube-apiserver has loaded it; until then, ask
	// with dry runs, which admission sees too.
	var created *v1.Pod
	if err := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = pods.Create(ctx, daemonSetBalloon("probe", "node-a"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(created.Finalizers) > 0, nil
	}); err != nil {
		t.Fatalf("the policy never mutated a balloon: %v (last: %+v)", err, created)
	}

	onNode := daemonSetBalloon("bound", "")
	onNode.Spec.Affinity = nil
	onNode.Spec.NodeName = "node-a"
	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		wantRequest v1.ResourceList
	}{
		{"pinned to a node with a recorded size", daemonSetBalloon("pinned", "node-a"), v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("3Gi")}},
		{"bound to a node with a recorded size", onNode, v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("3Gi")}},
		{"a node without a recorded size", daemonSetBalloon("unsized", "node-b"), v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m"), v1.ResourceMemory: resource.MustParse("1Mi")}},
		{"a record that does not parse", daemonSetBalloon("bad-record", "node-bad"), v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m"), v1.ResourceMemory: resource.MustParse("1Mi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := pods.Create(tCtx, tc.pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := pod.Spec.Containers[0].Resources.Requests; !apiequality.Semantic.DeepEqual(got, tc.wantRequest) {
				t.Errorf("requests %v, want %v", got, tc.wantRequest)
			}
			if !slices.Contains(pod.Finalizers, finalizer) {
				t.Errorf("finalizers %v, want %s", pod.Finalizers, finalizer)
			}
		})
	}

	other := createPod(t, cs, podConfig{name: "coredns-like", namespace: metav1.NamespaceSystem, priorityClassName: scheduling.SystemClusterCritical, cpu: "100m", memory: "100Mi"})
	if len(other.Finalizers) != 0 || other.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("the policy changed a pod that is no balloon: finalizers %v, requests %v", other.Finalizers, other.Spec.Containers[0].Resources.Requests)
	}

	// The resize agent may remove the protection finalizer of a balloon, and
	// change nothing else of a pod.
	config := restclient.CopyConfig(server.ClientConfig)
	config.Impersonate = restclient.ImpersonationConfig{UserName: resizer, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	agent := clientset.NewForConfigOrDie(config).CoreV1().Pods(metav1.NamespaceSystem)
	const onlyTheFinalizer = "the node-balloon-resizer may change nothing of a pod but remove the finalizer kubernetes.io/balloon-protection of a deleted balloon"
	relabel := []byte(`{"metadata":{"labels":{"extra":"x"}}}`)
	_, err := agent.Patch(tCtx, "pinned", types.MergePatchType, relabel, metav1.PatchOptions{})
	expectError(t, err, metav1.StatusReasonForbidden, onlyTheFinalizer)
	release := []byte(`[{"op":"test","path":"/metadata/finalizers","value":["` + finalizer + `"]},{"op":"replace","path":"/metadata/finalizers","value":[]}]`)
	// A balloon that is not being deleted keeps its finalizer: without it, a
	// later deletion would free its capacity before its node is closed.
	_, err = agent.Patch(tCtx, "pinned", types.JSONPatchType, release, metav1.PatchOptions{})
	expectError(t, err, metav1.StatusReasonForbidden, onlyTheFinalizer)
	other.Finalizers = []string{"example.com/keep"}
	if other, err = cs.CoreV1().Pods(metav1.NamespaceSystem).Update(tCtx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = agent.Patch(tCtx, other.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers/0"}]`), metav1.PatchOptions{})
	expectError(t, err, metav1.StatusReasonForbidden, onlyTheFinalizer)
	if err := cs.CoreV1().Pods(metav1.NamespaceSystem).Delete(tCtx, "pinned", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	owned := []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"other","uid":"d2d2"}]}}`)
	_, err = agent.Patch(tCtx, "pinned", types.MergePatchType, owned, metav1.PatchOptions{})
	expectError(t, err, metav1.StatusReasonForbidden, onlyTheFinalizer)
	if _, err := agent.Patch(tCtx, "pinned", types.JSONPatchType, release, metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent could not remove the deleted balloon's finalizer: %v", err)
	}
}

// refusedOnceLoaded returns try's error once it fails: a policy takes effect
// once kube-apiserver has loaded it (they load one by one), and until then a
// dry run, which admission sees too, asks without writing. It fails the test if
// try never fails.
func refusedOnceLoaded(ctx context.Context, t *testing.T, try func(dryRun ...string) error) error {
	t.Helper()
	var err error
	if pollErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		err = try(metav1.DryRunAll)
		return err != nil, nil
	}); pollErr != nil {
		t.Fatalf("never refused: %v", pollErr)
	}
	return err
}
