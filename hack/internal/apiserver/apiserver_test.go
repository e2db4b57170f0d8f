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

package apiserver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
)

// TestLoneAPIServer starts the lone API server in a folder of its own, writes
// and reads an object through its kubeconfig, stops it, and starts it again
// with an empty store. go test -tags smoke -run TestLoneAPIServer ./hack/internal/apiserver
func TestLoneAPIServer(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	a := NewLoneAPIServer(root, t.Output())
	a.c.Dir = t.TempDir()
	if err := cluster.PortFree(LoneAPIServerAddr); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := a.Down(); err != nil {
			t.Error(err)
		}
	})
	client := func() kubernetes.Interface {
		cfg, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	for run := 1; run <= 2; run++ {
		if err := a.Up(ctx); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lone", Namespace: metav1.NamespaceDefault}}
		// The second run's store is empty: the first run's object is gone.
		if _, err := client().CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if err := a.Down(); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"kube-apiserver", "etcd"} {
			if pid, ok := a.c.Running(name); ok {
				t.Errorf("run %d: %s still runs (pid %d)", run, name, pid)
			}
		}
		for _, addr := range []string{LoneAPIServerAddr, loneEtcdClient} {
			if err := cluster.PortFree(addr); err != nil {
				t.Errorf("run %d: %v", run, err)
			}
		}
		if _, err := os.Stat(a.c.Path("etcd")); !os.IsNotExist(err) {
			t.Errorf("run %d: etcd's store is left: %v", run, err)
		}
	}
}
