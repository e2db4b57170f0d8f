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

package upgradelane

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	corev1 "k8s.io/api/core/v1"
)

// The burst serves its own image ID, not the workloads': an ID the kubelet
// pulls no longer counts as preloaded under the workloads' names
// (kubernetes/kubernetes#138175), and their pods with pull policy Never then
// fail wherever a drain moves them, as the lane's step e1 did on 2026-12-07.
func TestBurstServesAnImageIDOfItsOwn(t *testing.T) {
	workloads, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	var served v1.Image
	burst := PullBurst{Image: workloads, Serve: func(_ context.Context, _ string, imgs map[string]v1.Image, _ func(string)) error {
		served = imgs[burstPath]
		return errors.New("no registry in this test")
	}}
	if _, _, err := burst.Run(context.Background(), []string{"w1"}); err == nil || !strings.Contains(err.Error(), "no registry in this test") {
		t.Fatalf("Run: %v, want the registry's error", err)
	}
	if served == nil {
		t.Fatalf("the burst served no image at %s", burstPath)
	}
	want, err := workloads.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	got, err := served.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got == want {
		t.Errorf("the burst serves image ID %s, the workloads' own", got)
	}
	wantLayers, err := workloads.Layers()
	if err != nil {
		t.Fatal(err)
	}
	gotLayers, err := served.Layers()
	if err != nil || len(gotLayers) != len(wantLayers) {
		t.Fatalf("the burst's image has %d layers (%v), want the workloads' %d", len(gotLayers), err, len(wantLayers))
	}
	for i := range wantLayers {
		w, err := wantLayers[i].Digest()
		if err != nil {
			t.Fatal(err)
		}
		g, err := gotLayers[i].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if g != w {
			t.Errorf("layer %d is %s, want the workloads' %s: only the config differs", i, g, w)
		}
	}
}

// Every worker gets its own aliases, which no node pulled before (the run is
// in the tag), and each alias is wanted by Copies pods on that worker at once:
// the pulls the gate must make once.
func TestBurstPodsShareAnAliasOnlyOnOneWorker(t *testing.T) {
	pods, aliases := burstPods("172.18.0.1:5002", []string{"w1", "w2"}, 2, 3, 42)
	if len(pods) != 12 || len(aliases) != 4 {
		t.Fatalf("%d pods and %d aliases, want 12 and 4", len(pods), len(aliases))
	}
	byAlias := map[string]map[string]int{}
	for _, p := range pods {
		image := p.Spec.Containers[0].Image
		alias, ok := strings.CutPrefix(image, "172.18.0.1:5002/")
		if !ok || !strings.HasPrefix(alias, burstPath+"--42-") {
			t.Errorf("pod %s pulls %s, want an alias of %s of run 42 from the registry", p.Name, image, burstPath)
		}
		if p.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("pod %s: pull policy %s", p.Name, p.Spec.Containers[0].ImagePullPolicy)
		}
		if byAlias[alias] == nil {
			byAlias[alias] = map[string]int{}
		}
		byAlias[alias][p.Spec.NodeSelector[corev1.LabelHostname]]++
	}
	for _, a := range aliases {
		if len(byAlias[a]) != 1 {
			t.Errorf("alias %s is pulled on %v, want one worker", a, byAlias[a])
		}
		for _, n := range byAlias[a] {
			if n != 3 {
				t.Errorf("alias %s: %d pods, want 3", a, n)
			}
		}
	}
}

func TestMetricValue(t *testing.T) {
	text := "# HELP kubelet_image_pull_queue_pulls_avoided_total [ALPHA] pulls not made\n" +
		"# TYPE kubelet_image_pull_queue_pulls_avoided_total counter\n" +
		"kubelet_image_pull_queue_pulls_avoided_total_other 9\n" +
		"kubelet_image_pull_queue_pulls_avoided_total 4\n"
	if v, err := metricValue(text, burstMetric); err != nil || v != 4 {
		t.Errorf("got %v, %v; want 4", v, err)
	}
	if v, err := metricValue("", burstMetric); err != nil || v != 0 {
		t.Errorf("a counter never incremented: got %v, %v; want 0", v, err)
	}
}

// A burst whose pods did not all run says so, not how long they took.
func TestBurstResultSaysWhenPodsDidNotRun(t *testing.T) {
	done := burstResult{Pods: 6, Images: 2, Running: 41 * time.Second, Once: 2, Queued: 4, Avoided: []string{"w1 2", "w2 2"}}
	if got := done.String(); !strings.Contains(got, "all running 41s after their creation") || !strings.Contains(got, "2 of the 2 images pulled once") {
		t.Errorf("burst that ran: %q", got)
	}
	timedOut := burstResult{Pods: 6, Images: 2, Pending: 3}
	if got := timedOut.String(); strings.Contains(got, "all running") || !strings.Contains(got, "3 not running when the wait ended") {
		t.Errorf("burst that timed out: %q", got)
	}
}
