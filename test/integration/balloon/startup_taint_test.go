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
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// TestSizedNodesRegisterClosed applies the addon's startup taint policy as
// shipped and registers nodes as their kubelets do (their own identity, the
// Node authorizer and NodeRestriction): a node whose name has a recorded size
// registers with the balloon-pending taint, next to the taints its kubelet
// asks for; a node without a record, or with the smallest balloon's, registers
// open.
func TestSizedNodesRegisterClosed(t *testing.T) {
	server, cs := startAPIServer(t, true, "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction")
	tCtx := ktesting.Init(t)
	addon := filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon")
	applyAddon(tCtx, t, cs, filepath.Join(addon, "balloon-sizes.yaml"))
	records := []byte(`{"data":{"node-sized":"cpu=1500m,memory=3Gi,uid=earlier","node-again":"cpu=1500m,memory=3Gi,uid=earlier","node-unsized":"cpu=1m,memory=1Mi,uid=earlier"}}`)
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Patch(tCtx, "node-balloon-sizes", types.MergePatchType, records, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	applyAddon(tCtx, t, cs, filepath.Join(addon, "balloon-startup-taint-policy.yaml"))

	kubelet := func(nodeName string) clientset.Interface {
		config := restclient.CopyConfig(server.ClientConfig)
		config.Impersonate = restclient.ImpersonationConfig{UserName: "system:node:" + nodeName, Groups: []string{"system:nodes", "system:authenticated"}}
		return clientset.NewForConfigOrDie(config)
	}
	register := func(ctx context.Context, nodeName string, taints []v1.Taint, dryRun ...string) (*v1.Node, error) {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: v1.NodeSpec{Taints: taints}}
		return kubelet(nodeName).CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{DryRun: dryRun})
	}
	// The policy takes effect once kube-apiserver has loaded it; a dry run,
	// which admission sees too, asks without registering.
	if err := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		node, err := register(ctx, "node-sized", nil, metav1.DryRunAll)
		return err == nil && hasBalloonPendingTaint(node), nil
	}); err != nil {
		t.Fatalf("the policy never tainted a sized node: %v", err)
	}

	pending := v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule}
	dedicated := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name, node   string
		registerWith []v1.Taint
		want         []v1.Taint
	}{
		{"a sized node", "node-sized", nil, []v1.Taint{pending}},
		{"a sized node with taints of its own", "node-again", []v1.Taint{dedicated}, []v1.Taint{dedicated, pending}},
		{"a node without a record", "node-new", []v1.Taint{dedicated}, []v1.Taint{dedicated}},
		{"a node made unsized", "node-unsized", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, err := register(tCtx, tc.node, tc.registerWith)
			if err != nil {
				t.Fatalf("registering: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(node.Spec.Taints, tc.want) {
				t.Errorf("registered with taints %v, want %v", node.Spec.Taints, tc.want)
			}
		})
	}

	// A kubelet that registers with the taint itself gets it once.
	if err := cs.CoreV1().Nodes().Delete(tCtx, "node-sized", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := register(tCtx, "node-sized", []v1.Taint{pending})
	if err != nil {
		t.Fatalf("registering with the taint: %v", err)
	}
	if !apiequality.Semantic.DeepEqual(node.Spec.Taints, []v1.Taint{pending}) {
		t.Errorf("registered with taints %v, want %v", node.Spec.Taints, []v1.Taint{pending})
	}
}

func hasBalloonPendingTaint(node *v1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == v1.TaintNodeBalloonPending })
}
