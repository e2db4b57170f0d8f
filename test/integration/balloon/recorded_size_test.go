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
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// TestResizerMayOnlyTaintPendingAndRecordSizes applies the addon as shipped and
// acts as the resize agent: it may add and remove the balloon-pending taint and
// record sizes in the node-balloon-sizes ConfigMap, and change nothing else of a
// node or of another ConfigMap.
func TestResizerMayOnlyTaintPendingAndRecordSizes(t *testing.T) {
	server, cs := startAPIServer(t, true, "--authorization-mode=RBAC")
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

	config := restclient.CopyConfig(server.ClientConfig)
	config.Impersonate = restclient.ImpersonationConfig{UserName: resizer, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
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

	record := []byte(`{"data":{"node-a":"cpu=2,memory=4Gi"}}`)
	if _, err := agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "node-balloon-sizes", types.MergePatchType, record, metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent could not record a size: %v", err)
	}
	if _, err := agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "other", types.MergePatchType, record, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent wrote another ConfigMap: %v", err)
	}
}
