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

package featureuses

import (
	"context"
	"testing"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
)

func TestStartFollowsTheGate(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.FeatureLifecycle, enabled)
		for name, start := range map[string]func(context.Context, *fake.Clientset){
			"Start":       func(ctx context.Context, c *fake.Clientset) { Start(ctx, c, "kubelet", "node-1") },
			"StartOnHost": func(ctx context.Context, c *fake.Clientset) { StartOnHost(ctx, c, "kube-scheduler") },
		} {
			ctx, cancel := context.WithCancel(context.Background())
			client := fake.NewClientset()
			start(ctx, client)
			// With the gate on, the reporter's first call is the check
			// that the Feature API is served.
			deadline := time.Now().Add(100 * time.Millisecond)
			if enabled {
				deadline = time.Now().Add(10 * time.Second)
			}
			for len(client.Actions()) == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cancel()
			if got := len(client.Actions()) > 0; got != enabled {
				t.Errorf("%s with FeatureLifecycle=%t: called the API: %t, want %t", name, enabled, got, enabled)
			}
		}
	}
}

// The kubelets are thousands, whose reports' delays must keep the race for an
// entry small; the others are a few, whose delays must not all be long.
func TestOnlyKubeletsShapeTheirDelaysForThousands(t *testing.T) {
	for component, many := range map[string]bool{"kubelet": true, "kube-apiserver": false, "kube-controller-manager": false, "kube-scheduler": false} {
		if got := Options(component, "x").MaxInstances >= 5000; got != many {
			t.Errorf("%s shapes its delays for thousands of instances: %t, want %t", component, got, many)
		}
	}
}

// kube-apiserver reads the liveness of kubelets and kube-apiservers from their
// leases: they do not renew their entries; the others do.
func TestOnlyComponentsWithoutLeasesRenew(t *testing.T) {
	for component, renews := range map[string]bool{"kubelet": false, "kube-apiserver": false, "kube-controller-manager": true, "kube-scheduler": true} {
		if got := Options(component, "x").RenewInterval > 0; got != renews {
			t.Errorf("%s renews its entries: %t, want %t", component, got, renews)
		}
	}
}
