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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// upForTest brings the local cluster up for a test or benchmark that needs its
// ports, and down again at its end.
func upForTest(ctx context.Context, tb testing.TB) (*Cluster, kubernetes.Interface) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("the local cluster needs root")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		tb.Fatal(err)
	}
	c := New(root, testWriter{tb})
	if _, ok := c.Running("kube-apiserver"); ok {
		tb.Skip("a local cluster is running already (make cluster-down first); the test needs its ports")
	}
	if err := c.emptyEtcd(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Down(context.Background()); err != nil {
			tb.Errorf("cluster down: %v", err)
		}
	})
	if err := c.Up(ctx); err != nil {
		tb.Fatalf("cluster up: %v", err)
	}
	cs, err := c.Client()
	if err != nil {
		tb.Fatal(err)
	}
	return c, cs
}

// TestSmoke brings the local cluster up, runs one pod from the local registry,
// checks that a balloon keeps its size across a kubelet restart and the node's
// re-registration, and brings the cluster down again, leaving nothing behind.
// make test runs it (as root, after building the binaries):
// go test -tags smoke ./hack/internal/cluster.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, cs := upForTest(ctx, t)

	Node, err := cs.CoreV1().Nodes().Get(ctx, NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := version.ParseSemantic(Node.Status.NodeInfo.KubeletVersion)
	if err != nil || !strings.HasPrefix(v.PreRelease(), "carry.") {
		t.Errorf("kubelet version %q: want valid semver v1.X.Y-carry.N+COMMIT (%v)", Node.Status.NodeInfo.KubeletVersion, err)
	}

	// The default service account appears shortly after the namespace's first use.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no default service account: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    "busybox",
				Image:   images.Names{Registry: RegistryAddr}.Busybox(),
				Command: []string{"sh", "-c", "echo smoke-ok; sleep 600"},
			}},
		},
	}
	pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		p, _ := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		t.Fatalf("pod %s is not Running: %v\n%+v", pod.Name, err, p.Status)
	}
	logs, err := cs.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "smoke-ok") {
		t.Errorf("pod logs %q, %v", logs, err)
	}

	checkBalloonAcrossKubeletRestart(ctx, t, c, cs)
	checkBalloonAcrossReregistration(ctx, t, c, cs)
	deletePod(t, cs, pod)

	if err := c.Down(ctx); err != nil {
		t.Fatalf("cluster down: %v", err)
	}
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("left behind after down: %v", left)
	}
}
