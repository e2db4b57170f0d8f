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
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/util/feature/reporting"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2/ktesting"
)

// usesScaleReportersEnv sets the number of simulated kubelets of
// TestUsesReportingAtScale, which runs only when it is set.
const usesScaleReportersEnv = "FEATURE_USES_SCALE_REPORTERS"

// TestUsesReportingAtScale measures what reporting feature uses costs the API
// server with many kubelets: reporters in this process, each with its own
// gate, informer and watch, as the kubelet starts them, against a real
// kube-apiserver. Per phase it logs the writes of status.uses the server
// handled (by verb and code, from apiserver_request_total) and the watch
// events it sent for Features (apiserver_watch_events_total), which every
// reporter's watch receives. Run it with FEATURE_USES_SCALE_REPORTERS=5000;
// docs/feature-api.md has the numbers.
func TestUsesReportingAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(usesScaleReportersEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of reporters to run", usesScaleReportersEnv)
	}
	_, ctx := ktesting.NewTestContext(t)
	// Third-party namespace: no server flow rewrites these Features.
	config := startAPIServerConfig(t,
		"--feature-gates=FeatureLifecycle=true",
		"--runtime-config=features.k8s.io/v1alpha1=true",
		"--max-requests-inflight=10000", "--max-mutating-requests-inflight=5000")
	admin := clientset.NewForConfigOrDie(config)
	features := admin.FeaturesV1alpha1().Features(thirdPartyNamespace)
	// Both features are checked by every reporter; one in fifty runs the
	// shared feature off, as a canary pool would.
	const shared, minority = "ScaleShared", "ScaleOwn"
	for _, name := range []string{shared, minority} {
		if _, err := features.Create(ctx, &featuresv1alpha1.Feature{
			ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(name)},
			Spec:       featuresv1alpha1.FeatureSpec{FeatureName: name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Shorter than the default, 10 minutes, so that the test sees renewals;
	// what a renewal costs does not depend on it.
	const renewInterval = 2 * time.Minute
	start := func(ctx context.Context, i int, client clientset.Interface, sharedOn bool) {
		gate := featuregate.NewVersionedFeatureGate(version.MustParse("1.36"))
		if err := gate.AddVersioned(map[featuregate.Feature]featuregate.VersionedSpecs{
			shared:   {{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta}},
			minority: {{Version: version.MustParse("1.36"), Default: false, PreRelease: featuregate.Alpha}},
		}); err != nil {
			t.Fatal(err)
		}
		if !sharedOn {
			if err := gate.Set(shared + "=false"); err != nil {
				t.Fatal(err)
			}
		}
		g := reporting.NewGate(gate)
		g.Enabled(shared)
		g.Enabled(minority)
		opts := reporting.DefaultOptions(thirdPartyNamespace, "kubelet", fmt.Sprintf("node-%d", i))
		// One renewal of every entry within the idle phase.
		opts.RenewInterval = renewInterval
		g.Start(ctx, client, opts)
	}
	// A client per 50 reporters, each with its own connection: a kubelet has
	// its own, and one connection carries a limited number of streams.
	reporterCtx := make([]context.CancelFunc, n)
	clients := make([]clientset.Interface, n)
	var client clientset.Interface
	for i := range n {
		if i%50 == 0 {
			c := restclient.CopyConfig(config)
			c.QPS, c.Burst = -1, 0
			dialer := &net.Dialer{}
			c.Dial = dialer.DialContext
			client = clientset.NewForConfigOrDie(c)
		}
		rctx, cancel := context.WithCancel(ctx)
		reporterCtx[i], clients[i] = cancel, client
		t.Cleanup(cancel)
		start(rctx, i, client, i%50 != 0)
	}

	metrics := func() map[string]float64 {
		body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		sc := bufio.NewScanner(strings.NewReader(string(body)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			name, labels, value := parseSample(line)
			switch {
			case name == "apiserver_request_total" && labels["resource"] == "features" && labels["subresource"] == "uses":
				m["writes "+labels["verb"]+" "+labels["code"]] += value
			case name == "apiserver_watch_events_total" && labels["group"] == "features.k8s.io":
				m["watch events"] += value
			case name == "apiserver_watch_events_sizes_sum" && labels["group"] == "features.k8s.io":
				m["watch event bytes"] += value
			}
		}
		return m
	}
	// One more watcher sees each stored write once.
	w, err := features.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var stored atomic.Int64
	go func() {
		for range w.ResultChan() {
			stored.Add(1)
		}
	}()
	// phase logs what the server did while do ran and for settle after.
	phase := func(name string, settle time.Duration, do func()) {
		storedBefore := stored.Load()
		before := metrics()
		began := time.Now()
		do()
		time.Sleep(settle)
		after := metrics()
		parts := []string{fmt.Sprintf("stored writes: %d", stored.Load()-storedBefore)}
		for k, v := range after {
			if d := v - before[k]; d != 0 {
				parts = append(parts, fmt.Sprintf("%s: %.0f", k, d))
			}
		}
		slices.Sort(parts[1:])
		t.Logf("%d reporters, %s (%v): %s", n, name, time.Since(began).Round(time.Second), strings.Join(parts, ", "))
	}
	sampled := func(name string) map[string]int {
		f, err := features.Get(ctx, strings.ToLower(name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, use := range f.Status.Uses {
			counts[fmt.Sprintf("%s=%t", use.Component, use.Value)] = len(use.Instances)
		}
		return counts
	}
	full := func(name string, want map[string]int) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			got := sampled(name)
			for k, v := range want {
				if got[k] != v {
					return false, nil
				}
			}
			return true, nil
		}
	}
	// Reporters wait up to 30 s, and check every 10 s.
	const settle = 45 * time.Second
	phase("start", settle, func() {
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, full(shared, map[string]int{"kubelet=true": 3, "kubelet=false": 3})); err != nil {
			t.Fatalf("the sample of %s never filled: %v", shared, sampled(shared))
		}
	})
	phase(fmt.Sprintf("idle, a renew interval (%v)", renewInterval), renewInterval+settle, func() {})
	phase("all uses of one Feature cleared", settle, func() {
		f, err := features.Get(ctx, strings.ToLower(shared), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.Status.Uses = nil
		if _, err := features.UpdateUses(ctx, f.Name, f, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	phase("a sampled kubelet restarted with the other value", settle, func() {
		f, err := features.Get(ctx, strings.ToLower(shared), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		for _, use := range f.Status.Uses {
			if use.Value && len(use.Instances) > 0 {
				name = use.Instances[0]
			}
		}
		i, err := strconv.Atoi(strings.TrimPrefix(name, "node-"))
		if err != nil {
			t.Fatalf("no kubelet is sampled on: %v", f.Status.Uses)
		}
		reporterCtx[i]()
		start(ctx, i, clients[i], false)
		if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
			f, err := features.Get(ctx, f.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, use := range f.Status.Uses {
				if use.Value && slices.Contains(use.Instances, name) {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Fatalf("%s never left the sample of the value it no longer runs", name)
		}
	})
	t.Logf("%d reporters, final uses of %s: %v", n, shared, sampled(shared))
}

// parseSample splits a line of the text exposition format into name, labels
// and value; other lines give an empty name.
func parseSample(line string) (string, map[string]string, float64) {
	if strings.HasPrefix(line, "#") {
		return "", nil, 0
	}
	space := strings.LastIndexByte(line, ' ')
	if space < 0 {
		return "", nil, 0
	}
	value, err := strconv.ParseFloat(line[space+1:], 64)
	if err != nil {
		return "", nil, 0
	}
	head := line[:space]
	name, rest, hasLabels := strings.Cut(head, "{")
	labels := map[string]string{}
	if hasLabels {
		for _, pair := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			k, v, _ := strings.Cut(pair, "=")
			labels[k] = strings.Trim(v, `"`)
		}
	}
	return name, labels, value
}
