//go:build smoke

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

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// The case the pull gate exists for (#125050): abandonedPulls pods of large
// images take every one of the node's pull slots (maxParallelImagePulls is 3 on
// the local cluster) on a registry link of burstBandwidth bytes per second that
// all pulls share, and are deleted once their pulls are under way; a new pod of a
// small image is created at the same moment.
const (
	abandonedPulls     = 3
	abandonedMiB       = 150
	abandonedRepo      = "/carry/deleted-pods"
	abandonedSmallMiB  = 1
	abandonedUnderWay  = 16 << 20 // bytes each pull has fetched on average before the deletion
	abandonedQuietness = 2 * time.Second
)

// BenchmarkImagePullAfterDeletedPods measures on the local cluster's real
// containerd the time from deleting pods whose pulls hold every slot until a new
// pod of another image runs, and the bytes the registry sends after the deletion
// (until it has sent nothing for abandonedQuietness), with upstream's parallel
// puller (KubeletImagePullGate off) and the gate with each abandonedImagePullPolicy.
// Every run pulls images the node has never seen (a partial download would
// otherwise resume).
//
//	go test -tags smoke -run '^$' -bench ImagePullAfterDeletedPods -benchtime 3x ./hack/internal/cluster
func BenchmarkImagePullAfterDeletedPods(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c, cs, pause := upForPullBenchmark(ctx, b)

	variant := 0
	for _, kubelet := range []struct {
		name   string
		gate   bool
		policy string
	}{{"gate=false", false, ""}, {"gate=true/policy=Cancel", true, "Cancel"}, {"gate=true/policy=Detach", true, "Detach"}} {
		b.Run(kubelet.name, func(b *testing.B) {
			restartKubeletWithPullGate(ctx, b, c, kubelet.gate, kubelet.policy)
			registry := startThrottledRegistry(ctx, b, true)
			var seconds, after float64
			for i := range b.N {
				b.StopTimer()
				variant++
				tags, ids := pushAbandonImages(ctx, b, pause, variant)
				registry.reset()
				took, fetched := runDeletedPods(ctx, b, cs, registry, tags)
				removeImages(ctx, b, c, abandonedRepo, ids)
				b.Logf("run %d: the new pod ran %.2f s after the deletion; %.1f MiB fetched after it", i+1, took.Seconds(), float64(fetched)/(1<<20))
				seconds += took.Seconds()
				after += float64(fetched) / (1 << 20)
			}
			b.ReportMetric(seconds/float64(b.N), "s-until-new-pod-runs")
			b.ReportMetric(after/float64(b.N), "MiB-after-deletion")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// pushAbandonImages pushes abandonedPulls large images and one small one, new
// for the variant, and returns their tags (the small one last) and image ids.
func pushAbandonImages(ctx context.Context, b *testing.B, pause v1.Image, variant int) ([]string, []string) {
	b.Helper()
	set := images.Set{}
	var tags, ids []string
	for i := range abandonedPulls + 1 {
		mib, tag := abandonedMiB, fmt.Sprintf("large-%d-%d", variant, i)
		if i == abandonedPulls {
			mib, tag = abandonedSmallMiB, fmt.Sprintf("small-%d", variant)
		}
		img, err := images.SyntheticVariant(pause, mib, 1000*variant+i)
		if err != nil {
			b.Fatal(err)
		}
		id, err := img.ConfigName()
		if err != nil {
			b.Fatal(err)
		}
		set[RegistryAddr+abandonedRepo+":"+tag] = img
		tags = append(tags, tag)
		ids = append(ids, id.String())
	}
	if err := set.Push(ctx); err != nil {
		b.Fatal(err)
	}
	return tags, ids
}

// runDeletedPods creates a pod of each large image, waits until their pulls
// reached the registry and fetched abandonedUnderWay bytes each on average,
// deletes them and creates the pod of the small image (the last tag) at once. It
// returns the time from the deletion until the new pod runs and the bytes the
// registry sent from the deletion until it went quiet; it deletes the new pod.
func runDeletedPods(ctx context.Context, b *testing.B, cs kubernetes.Interface, registry *throttledRegistry, tags []string) (time.Duration, int64) {
	b.Helper()
	pods := cs.CoreV1().Pods(metav1.NamespaceDefault)
	pod := func(name, tag string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
			Spec: corev1.PodSpec{
				NodeName:                      NodeName(),
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{
					Name:            "pod",
					Image:           registry.addr + abandonedRepo + ":" + tag,
					ImagePullPolicy: corev1.PullIfNotPresent,
				}},
			},
		}
	}
	var large []*corev1.Pod
	for i, tag := range tags[:abandonedPulls] {
		p := pod(fmt.Sprintf("deleted-%d", i), tag)
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		large = append(large, p)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return registry.pulls() == abandonedPulls && registry.blobBytes.Load() >= abandonedPulls*abandonedUnderWay, nil
	}); err != nil {
		b.Fatalf("the large pulls did not get under way: %d registry pulls, %d bytes: %v", registry.pulls(), registry.blobBytes.Load(), err)
	}

	b.StartTimer()
	start, before := time.Now(), registry.blobBytes.Load()
	for _, p := range large {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	small := pod("new", tags[abandonedPulls])
	if _, err := pods.Create(ctx, small, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		p, err := pods.Get(ctx, small.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}); err != nil {
		b.Fatalf("the new pod does not run: %v", err)
	}
	took := time.Since(start)
	b.StopTimer()

	last := registry.blobBytes.Load()
	lastChange := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		if n := registry.blobBytes.Load(); n != last {
			last, lastChange = n, time.Now()
		}
		return time.Since(lastChange) >= abandonedQuietness, nil
	}); err != nil {
		b.Fatalf("the registry does not go quiet: %v", err)
	}
	for _, p := range append(large, small) {
		deletePod(b, cs, p)
	}
	return took, last - before
}
