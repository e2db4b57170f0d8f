//go:build vpaapiserver

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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"sigs.k8s.io/yaml"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/nodescope"
)

// requestCounter counts the requests of a client by verb and resource, the
// bytes of their bodies and the time until their responses.
type requestCounter struct {
	mu       sync.Mutex
	requests map[string]int
	bytes    map[string]int
	latency  map[string]time.Duration
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		key := requestKey(req)
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		c.requests[key]++
		if req.ContentLength > 0 {
			c.bytes[key] += int(req.ContentLength)
		}
		c.latency[key] += time.Since(start)
		c.mu.Unlock()
		return resp, err
	})
}

func (c *requestCounter) reset() (map[string]int, map[string]int, map[string]time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	requests, bytes, latency := c.requests, c.bytes, c.latency
	c.requests, c.bytes, c.latency = map[string]int{}, map[string]int{}, map[string]time.Duration{}
	return requests, bytes, latency
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requestKey is "verb resource[/subresource]" of a request to a namespaced
// resource, e.g. "update verticalpodautoscalerslices".
func requestKey(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	resource := req.URL.Path
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			resource = parts[i+2]
			if i+4 < len(parts) {
				resource += "/" + parts[i+4]
			}
			break
		}
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[req.Method]
	if req.Method == http.MethodGet {
		verb = "get"
		if req.URL.Query().Get("watch") == "true" {
			verb = "watch"
		} else if len(parts)%2 == 0 {
			verb = "list"
		}
	}
	return verb + " " + resource
}

// installCRDs creates the CRDs of deploy/vpa-v1-crd-gen.yaml and waits until
// they are served.
func installCRDs(t *testing.T, cfg *rest.Config) {
	raw, err := os.ReadFile("../../../deploy/vpa-v1-crd-gen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Create(context.TODO(), obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	vpaClient := vpa_clientset.NewForConfigOrDie(cfg)
	if err := wait.PollUntilContextTimeout(context.TODO(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err1 := vpaClient.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(ctx, metav1.ListOptions{})
		_, err2 := vpaClient.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(ctx, metav1.ListOptions{})
		_, err3 := vpaClient.AutoscalingV1().VerticalPodAutoscalers("default").List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil && err3 == nil, nil
	}); err != nil {
		t.Fatalf("the CRDs are not served: %v", err)
	}
}

// TestNodeScopeWritesOnAPIServer measures, against the kube-apiserver of the
// kubeconfig $VPA_APISERVER_KUBECONFIG (with etcd; nothing else runs there),
// what the recommender writes and what a watcher of the slices (the admission
// controller and the updater have one each) receives per loop while the
// recommendations move: the nodes of addMovingNodes ($VPA_APISERVER_NODES,
// default 1000), a new minute of samples before every loop, without
// hysteresis and with the default threshold, after 70 minutes and 24 hours of
// history. The client runs at the VPA's default 50 QPS and burst 100. The
// model is the recommender's own, in this process; only the API objects are
// on the server.
func TestNodeScopeWritesOnAPIServer(t *testing.T) {
	kubeconfig := os.Getenv("VPA_APISERVER_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("VPA_APISERVER_KUBECONFIG is not set")
	}
	featuregatetesting.SetFeatureGateDuringTest(t, features.MutableFeatureGate, features.DaemonSetNodeScope, true)
	nodes := 1000
	if n, err := strconv.Atoi(os.Getenv("VPA_APISERVER_NODES")); err == nil {
		nodes = n
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	installCRDs(t, cfg)
	counter := &requestCounter{}
	counter.reset()
	cfg.Wrap(counter.wrap)
	client := vpa_clientset.NewForConfigOrDie(cfg)
	const loops = 10

	for _, history := range []time.Duration{70 * time.Minute, 24 * time.Hour} {
		for _, threshold := range []float64{0, model.DefaultNodeRewriteThreshold} {
			t.Run(fmt.Sprintf("history=%v/threshold=%g", history, threshold), func(t *testing.T) {
				ctx := context.TODO()
				// A VPA of its own (a new UID), without the slices of the previous run.
				for _, err := range []error{
					client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
					client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
					client.AutoscalingV1().VerticalPodAutoscalerCheckpoints("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
					client.AutoscalingV1().VerticalPodAutoscalers("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
				} {
					if err != nil {
						t.Fatal(err)
					}
				}
				f := &nodeScopeFixture{}
				created, err := client.AutoscalingV1().VerticalPodAutoscalers("default").Create(ctx, &vpa_types.VerticalPodAutoscaler{
					ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
					Spec: vpa_types.VerticalPodAutoscalerSpec{
						TargetRef: &autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent"},
						Scope:     vpa_types.ScopeNode,
					},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				f.apiVPA = created
				f.startWith(t, client)
				f.r.nodeScope.Writer.(*nodescope.Writer).RewriteThreshold = threshold
				rnd := rand.New(rand.NewSource(1))
				names := f.addMovingNodes(t, rnd, nodes, history)

				// Until every node is checkpointed, as in BenchmarkRecommenderLoop.
				first := time.Now()
				for i := 0; i < 20 && (i == 0 || f.checkpointedNodes(t) < nodes); i++ {
					f.r.UpdateVPAs()
					f.r.MaintainCheckpoints(ctx)
				}
				t.Logf("MEASURED first loops until all checkpointed: %v", time.Since(first))

				list, err := client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				watcher, err := vpa_clientset.NewForConfigOrDie(rest.CopyConfig(cfg)).AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
				if err != nil {
					t.Fatal(err)
				}
				defer watcher.Stop()
				var mu sync.Mutex
				events, eventBytes := 0, 0
				go func() {
					for e := range watcher.ResultChan() {
						raw, _ := json.Marshal(e.Object)
						mu.Lock()
						events++
						eventBytes += len(raw)
						mu.Unlock()
					}
				}()

				counter.reset()
				var busy time.Duration
				at := time.Now()
				for range loops {
					at = at.Add(time.Minute)
					f.feedMovingNodes(t, rnd, names, at)
					start := time.Now()
					f.r.UpdateVPAs()
					loopCtx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Minute))
					f.r.MaintainCheckpoints(loopCtx)
					cancel()
					busy += time.Since(start)
				}
				time.Sleep(2 * time.Second) // the last events
				requests, sent, latency := counter.reset()
				mu.Lock()
				defer mu.Unlock()
				var parts []string
				for key, n := range requests {
					parts = append(parts, fmt.Sprintf("%s: %.1f requests %.0f B %v", key, float64(n)/loops, float64(sent[key])/loops, latency[key]/loops))
				}
				sort.Strings(parts)
				t.Logf("MEASURED nodes=%d history=%v threshold=%g, per loop: loop %v; %s; watch of the slices: %.1f events %.0f B",
					nodes, history, threshold, busy/loops, strings.Join(parts, "; "), float64(events)/loops, float64(eventBytes)/loops)
			})
		}
	}
}
