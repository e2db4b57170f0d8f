/*
Copyright 2026 The Kubernetes Authors.

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
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
)

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkRecommenderLoop measures one recommender loop (UpdateVPAs: the VPA's
// status and, with scope node, the per-node slices) for one DaemonSet VPA with
// two containers and 70 minutes of one-per-minute samples on every node, with
// upstream's single scope and with scope node. It reports the heap the cluster
// state holds, the largest object written (JSON bytes) and the writes of the
// first loop; the timed loops are the steady state (recommendations unchanged).
func BenchmarkRecommenderLoop(b *testing.B) {
	featuregatetesting.SetFeatureGateDuringTest(b, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	for _, nodes := range []int{100, 1000, 5000} {
		for _, scope := range []vpa_types.VerticalPodAutoscalerScope{"", vpa_types.ScopeNode} {
			name := "single"
			if scope != "" {
				name = "node"
			}
			b.Run(fmt.Sprintf("%s/nodes=%d", name, nodes), func(b *testing.B) {
				before := heapInUse()
				f := newNodeScopeFixture(b, scope, nil)
				for i := range nodes {
					node := fmt.Sprintf("node-%05d", i)
					f.addPod(b, node)
					f.feed(b, node, 0.1+float64(i%50)/10, 1e8*float64(1+i%20), 70*time.Minute)
				}
				heap := heapInUse() - before

				start := time.Now()
				f.r.UpdateVPAs()
				first := time.Since(start)
				client := f.r.nodeScope.Writer.(*nodescope.Writer).Client
				slices, err := client.VerticalPodAutoscalerSlices("default").List(context.TODO(), metav1.ListOptions{})
				if err != nil {
					b.Fatal(err)
				}
				vpa, err := f.r.vpaClient.VerticalPodAutoscalers("default").Get(context.TODO(), "agent", metav1.GetOptions{})
				if err != nil {
					b.Fatal(err)
				}
				largest, _ := json.Marshal(vpa)
				covered := 0
				for i := range slices.Items {
					covered += len(slices.Items[i].Nodes)
					if raw, _ := json.Marshal(&slices.Items[i]); len(raw) > len(largest) {
						largest = raw
					}
				}
				if scope != "" && covered != nodes {
					b.Fatalf("slices cover %d nodes, want %d", covered, nodes)
				}

				b.ResetTimer()
				for range b.N {
					f.r.UpdateVPAs()
				}
				b.StopTimer()
				b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(len(largest)), "largest-object-B")
				b.ReportMetric(float64(len(slices.Items)), "slices")
				b.ReportMetric(first.Seconds()*1000, "first-loop-ms")
			})
		}
	}
}
