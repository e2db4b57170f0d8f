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

package routines

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// checkpointSamples returns the number of samples in the checkpoint of
// container agent of each node in the VPA's checkpoint slices.
func (f *nodeScopeFixture) checkpointSamples(t *testing.T) map[string]int {
	t.Helper()
	list, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]int{}
	for _, s := range list.Items {
		for _, n := range s.Nodes {
			for _, c := range n.Containers {
				if c.ContainerName == "agent" {
					samples[n.NodeName] = c.Checkpoint.TotalSamplesCount
				}
			}
		}
	}
	return samples
}

// TestNodeHistoryBelongsToTheMachine: a new machine that gets the name of a
// deleted node (as cloud node names often are reused) starts without history,
// while the recommender runs and over a restart.
func TestNodeHistoryBelongsToTheMachine(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	nodes := fakeNodes{uids: map[string]types.UID{"worker-1": "machine-a", "worker-2": "machine-b"}}
	f.r.nodeScope.Nodes = nodes
	f.addNamedPod(t, "agent-1", "worker-1")
	f.feedPod(t, "agent-1", 2, 2e9, 2*time.Hour)
	f.addNamedPod(t, "agent-2", "worker-2")
	f.feedPod(t, "agent-2", 0.1, 1e8, 2*time.Hour)
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
	if recs := f.slices(t); len(recs) != 2 {
		t.Fatalf("recommendations for %v, want worker-1 and worker-2", recs)
	}

	// worker-1 is another machine now, with a new pod of ten minutes of usage.
	nodes.uids["worker-1"] = "machine-c"
	f.cluster.DeletePod(model.PodID{Namespace: "default", PodName: "agent-1"})
	f.addNamedPod(t, "agent-3", "worker-1")
	f.feedPod(t, "agent-3", 0.5, 5e8, 10*time.Minute)
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
	recs := f.slices(t)
	if rec, found := recs["worker-1"]; found {
		cpu := targetOf(rec, "agent", corev1.ResourceCPU)
		t.Errorf("the new machine worker-1, with ten minutes of history of its own, has a recommendation (cpu target %s)", cpu.String())
	}
	if _, found := recs["worker-2"]; !found {
		t.Errorf("worker-2 lost its recommendation")
	}
	if n := f.checkpointSamples(t)["worker-1"]; n != 11 {
		t.Errorf("the checkpoint of worker-1 holds %d samples, want only the new machine's (11)", n)
	}

	// While the recommender restarts, worker-2 becomes another machine too:
	// the old machine's checkpoint is not its history.
	nodes.uids["worker-2"] = "machine-d"
	f.start(t)
	f.r.nodeScope.Nodes = nodes
	f.addNamedPod(t, "agent-3", "worker-1")
	f.feedPod(t, "agent-3", 0.5, 5e8, 5*time.Minute)
	f.addNamedPod(t, "agent-4", "worker-2")
	f.feedPod(t, "agent-4", 0.1, 1e8, 5*time.Minute)
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
	if rec, found := f.slices(t)["worker-2"]; found {
		cpu := targetOf(rec, "agent", corev1.ResourceCPU)
		t.Errorf("after the restart, the new machine worker-2 has a recommendation (cpu target %s)", cpu.String())
	}
	if n := f.checkpointSamples(t)["worker-2"]; n != 6 {
		t.Errorf("after the restart the checkpoint of worker-2 holds %d samples, want only the new machine's (6)", n)
	}
}

// TestNodeCheckpointsWithoutUIDNotLoaded: a checkpoint entry without node UID
// is no machine's history (no released version wrote such entries): after a
// restart it is not loaded, and the node's checkpoint is written again with
// its UID and only its new samples.
func TestNodeCheckpointsWithoutUIDNotLoaded(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	usage := map[string][2]float64{"a": {2, 2e9}}
	f := newNodeScopeFixture(t, vpa_types.ScopeNode, nil)
	f.checkpointHistory(t, usage)

	client := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default")
	list, err := client.List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for i := range s.Nodes {
			s.Nodes[i].NodeUID = ""
		}
		if _, err := client.Update(context.TODO(), &s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	f.restart(t, usage)
	f.r.UpdateVPAs()
	f.r.maintainNodeCheckpoints(context.TODO())
	if after := f.slices(t); len(after) != 0 {
		t.Errorf("recommendations for %v after the restart, want none: five minutes of history", after)
	}
	if n := f.checkpointSamples(t)["a"]; n != 6 {
		t.Errorf("the checkpoint of a holds %d samples, want only those since the restart (6)", n)
	}
	list, err = client.List(context.TODO(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, n := range s.Nodes {
			if n.NodeUID != types.UID("uid-"+n.NodeName) {
				t.Errorf("checkpoint of node %s with UID %q, want uid-%s", n.NodeName, n.NodeUID, n.NodeName)
			}
		}
	}
}
