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

package featurelifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	clientset "k8s.io/client-go/kubernetes"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
	"k8s.io/kubernetes/test/integration/framework"
)

func TestMain(m *testing.M) {
	framework.EtcdMain(m.Run)
}

const (
	// renewPeriod is the identity lease renew period of the test servers: the
	// server flow rechecks every Feature at that period and takes a server
	// that missed three renewals for gone.
	renewPeriod = time.Second
	// usesWait is WaitForUses' wait in the tests.
	usesWait = 2 * time.Second
	// stepWait bounds each step the tests wait for. A step takes seconds on
	// an idle machine; under make test the tests share 2 cores with builds
	// and clusters, where a transition under two leaders took over a minute
	// (2026-11-29). The bound is for a step that never comes, not a speed
	// target.
	stepWait = 3 * time.Minute
)

// fastLifecycle shortens the server flow's periods for the test.
func fastLifecycle(t *testing.T) {
	renew, wait, maxWait := controlplaneapiserver.IdentityLeaseRenewIntervalPeriod, featurelifecycle.UsesWaitPeriod, featurelifecycle.UsesMaxWaitPeriod
	controlplaneapiserver.IdentityLeaseRenewIntervalPeriod, featurelifecycle.UsesWaitPeriod, featurelifecycle.UsesMaxWaitPeriod = renewPeriod, usesWait, usesWait
	t.Cleanup(func() {
		controlplaneapiserver.IdentityLeaseRenewIntervalPeriod, featurelifecycle.UsesWaitPeriod, featurelifecycle.UsesMaxWaitPeriod = renew, wait, maxWait
	})
}

// startAPIServer starts a kube-apiserver with the Feature API on the given
// etcd, under host name host, which its identity is derived from.
func startAPIServer(t *testing.T, host string, etcd *storagebackend.Config) *kubeapiservertesting.TestServer {
	t.Helper()
	genericapiserver.SetHostnameFuncForTests(host)
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, []string{
		"--endpoint-reconciler-type=none",
		"--runtime-config=features.k8s.io/v1alpha1=true",
		"--disable-admission-plugins=ServiceAccount",
	}, etcd)
	return server
}

func featureClientFor(server *kubeapiservertesting.TestServer) clientsetFeatures {
	return clientset.NewForConfigOrDie(server.ClientConfig).FeaturesV1alpha1().Features(metav1.NamespaceSystem)
}

type clientsetFeatures interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*featuresv1alpha1.Feature, error)
	List(ctx context.Context, opts metav1.ListOptions) (*featuresv1alpha1.FeatureList, error)
}

// waitFor polls the Feature until done says so, and fails the test with the
// last Feature seen after timeout.
func waitFor(t *testing.T, client clientsetFeatures, name string, timeout time.Duration, what string, done func(*featuresv1alpha1.Feature) bool) *featuresv1alpha1.Feature {
	t.Helper()
	var last *featuresv1alpha1.Feature
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		f, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = f
		return done(f), nil
	})
	if err != nil {
		t.Fatalf("%s: %s not reached after %v: %v; last seen:\n%s", name, what, timeout, err, dump(last))
	}
	return last
}

func dump(f *featuresv1alpha1.Feature) string {
	if f == nil {
		return "<none>"
	}
	return fmt.Sprintf("state %s, tasks %+v, conditions %+v, uses %+v", f.Status.State, f.Status.Tasks, f.Status.Conditions, f.Status.Uses)
}
