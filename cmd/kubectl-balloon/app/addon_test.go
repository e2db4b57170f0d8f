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

package app

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// The addon's agent Deployment runs reconcile in a loop, as the account that
// the resizer roles and policies name, and runs on closed nodes too.
func TestAddonRunsTheAgent(t *testing.T) {
	var deployment appsv1.Deployment
	readAddon(t, "balloon-resizer-deployment.yaml", &deployment)
	spec := deployment.Spec.Template.Spec
	if spec.ServiceAccountName != "node-balloon-resizer" || deployment.Namespace != "kube-system" {
		t.Errorf("runs as %s/%s, want kube-system/node-balloon-resizer, the subject of the resizer roles and policies", deployment.Namespace, spec.ServiceAccountName)
	}
	closed := v1.Taint{Key: v1.TaintNodeBalloonPending, Effect: v1.TaintEffectNoSchedule}
	if !slices.ContainsFunc(spec.Tolerations, func(t v1.Toleration) bool { return t.ToleratesTaint(klog.Background(), &closed, false) }) {
		t.Error("the agent must tolerate the balloon-pending taint: it is what opens closed nodes")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	args := spec.Containers[0].Args
	cmd := newCmdBalloon(deps{})
	sub, rest, err := cmd.Find(args)
	if err != nil || sub.Name() != "reconcile" {
		t.Fatalf("args %q run %v (%v), want reconcile", args, sub.Name(), err)
	}
	if err := sub.ParseFlags(rest); err != nil {
		t.Fatalf("args %q: %v", args, err)
	}
	if interval, _ := sub.Flags().GetDuration("interval"); interval <= 0 {
		t.Errorf("args %q: reconcile must loop (--interval), got %v", args, interval)
	}
}

// The addon's balloons start at the least size, which the kubelet admits
// without a usage check (kubetypes.UnsizedBalloonMemory): at a node's start
// nothing is observed yet.
func TestAddonBalloonsStartUnsized(t *testing.T) {
	var daemonSet appsv1.DaemonSet
	readAddon(t, "balloon-daemonset.yaml", &daemonSet)
	containers := daemonSet.Spec.Template.Spec.Containers
	if len(containers) != 1 || containers[0].Name != balloonContainerName {
		t.Fatalf("want the one container %q, got %v", balloonContainerName, containers)
	}
	if requests := containers[0].Resources.Requests; !equalResources(requests, minBalloon) {
		t.Errorf("the template requests %v, want the least balloon %v", requests, minBalloon)
	}
}

// readAddon decodes one of the node-balloon addon's manifests, strictly.
func readAddon(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatal(err)
	}
}
