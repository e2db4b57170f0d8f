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

package kind

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// CheckPodEgress proves that the pod network masquerades pod egress: a pod
// fetches a page from a server this process runs on the kind network's gateway,
// this machine's address on the nodes' bridge, which has no route to the pod
// CIDRs: the request gets an answer only if it left the node with the node's
// address, and the server checks that it did. On a user's machine the same
// makes the internet reachable from pods, the engine masquerading the nodes'
// addresses only.
func (k *Kind) CheckPodEgress(ctx context.Context) error {
	gateway, err := k.kindGateway(ctx)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(gateway, "0"))
	if err != nil {
		return fmt.Errorf("listening on the kind network's gateway: %w", err)
	}
	from := make(chan string, 1)
	server := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case from <- r.RemoteAddr:
			default:
			}
			fmt.Fprintln(w, "egress")
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = server.Serve(ln) }()
	defer server.Close()

	client, err := k.KindClient()
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/"
	pod, err := runEgressPod(ctx, client, ln.Addr().String())
	if err != nil {
		return err
	}
	var remote string
	select {
	case remote = <-from:
	default:
		return fmt.Errorf("pod egress: the pod on %s got an answer from %s that this server did not send", pod.Spec.NodeName, url)
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return err
	}
	node, err := client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var addrs []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			addrs = append(addrs, a.Address)
		}
	}
	if !slices.Contains(addrs, host) {
		return fmt.Errorf("pod egress: %s saw the request of a pod on %s from %s, not from the node's address %v", url, node.Name, host, addrs)
	}
	k.c.Logf("%-24s a pod on %s reached %s from the node's address %s", "pod egress", node.Name, url, host)
	return nil
}

// runEgressPod runs a pod of the pod network's image (loaded on every node)
// that fetches the page at addr, until it ends; it fails with the pod's log
// when the fetch did. busybox's nc, not its wget: the static wget of Debian's
// busybox crashes (SIGSEGV) in its name lookup, even of an address.
func runEgressPod(ctx context.Context, client kubernetes.Interface, addr string) (*corev1.Pod, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pods := client.CoreV1().Pods(metav1.NamespaceDefault)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kind-pod-egress-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "wget",
				Image:           images.PodNetwork,
				ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", `out=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 20 "$0" "$1" 2>&1); echo "$out"; echo "$out" | grep -q '^egress$'`,
					host, port},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod egress: %w", err)
	}
	defer func() {
		_ = pods.Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{})
	}()
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod egress: pod %s did not end (phase %s): %w", pod.Name, pod.Status.Phase, err)
	}
	if pod.Status.Phase == corev1.PodFailed {
		log, _ := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return nil, fmt.Errorf("pod egress: a pod on %s could not fetch a page from %s (the pod network does not masquerade what pods send outside it): %q",
			pod.Spec.NodeName, addr, strings.TrimSpace(string(log)))
	}
	return pod, nil
}
