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

package balloon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	"k8s.io/kubernetes/test/utils/ktesting"
)

const (
	// resizer is the resize agent's identity in the addon's RBAC and policy.
	resizer = "system:serviceaccount:kube-system:node-balloon-resizer"
	// resizers is the group of the other resizers, people included.
	resizers = "node-balloon-resizers"
)

// TestResizerMayResizeOnlyBalloons applies the addon's RBAC and
// ValidatingAdmissionPolicy as shipped, and acts as the resize agent: it may resize
// a balloon, and neither another pod in kube-system nor anything outside it.
func TestResizerMayResizeOnlyBalloons(t *testing.T) {
	server, cs := startAPIServer(t, true, "--authorization-mode=RBAC")
	tCtx := ktesting.Init(t)
	for _, file := range []string{"balloon-resizer-rbac.yaml", "balloon-resizer-policy.yaml"} {
		applyAddon(tCtx, t, cs, filepath.Join("..", "..", "..", "cluster", "addons", "node-balloon", file))
	}
	balloon := createPod(t, cs, podConfig{name: "balloon", namespace: metav1.NamespaceSystem, balloonLabel: true, priorityClassName: scheduling.SystemNodeBalloon, cpu: "100m", memory: "100Mi"})
	other := createPod(t, cs, podConfig{name: "coredns-like", namespace: metav1.NamespaceSystem, priorityClassName: scheduling.SystemClusterCritical, cpu: "100m", memory: "100Mi"})
	elsewhere := createPod(t, cs, podConfig{name: "workload", namespace: metav1.NamespaceDefault, cpu: "100m", memory: "100Mi"})

	config := restclient.CopyConfig(server.ClientConfig)
	config.Impersonate = restclient.ImpersonationConfig{UserName: resizer, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	agent := clientset.NewForConfigOrDie(config)
	resize := func(pod *v1.Pod, cpu string, dryRun ...string) error {
		pod = pod.DeepCopy()
		pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
		_, err := agent.CoreV1().Pods(pod.Namespace).UpdateResize(tCtx, pod.Name, pod, metav1.UpdateOptions{DryRun: dryRun})
		return err
	}

	patchLabels := func(pod *v1.Pod, dryRun ...string) error {
		_, err := agent.CoreV1().Pods(pod.Namespace).Patch(tCtx, pod.Name, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"team":"x"}}}`), metav1.PatchOptions{DryRun: dryRun})
		return err
	}

	// Each of the addon's policies takes effect once kube-apiserver has loaded it
	// (they load one by one); until then, ask with dry runs, which admission sees too.
	forbiddenOnceLoaded := func(what string, try func(dryRun ...string) error) error {
		t.Helper()
		var err error
		if pollErr := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
			err = try(metav1.DryRunAll)
			return err != nil, nil
		}); pollErr != nil {
			t.Fatalf("the agent %s: %v", what, err)
		}
		return err
	}
	err := forbiddenOnceLoaded("resized "+other.Namespace+"/"+other.Name, func(dryRun ...string) error { return resize(other, "200m", dryRun...) })
	expectError(t, err, metav1.StatusReasonForbidden, "the node-balloon-resizer may resize only balloon pods")
	expectError(t, resize(other, "200m"), metav1.StatusReasonForbidden, "the node-balloon-resizer may resize only balloon pods")
	if err := forbiddenOnceLoaded("changed a balloon other than through pods/resize", func(dryRun ...string) error { return patchLabels(balloon, dryRun...) }); !apierrors.IsForbidden(err) {
		t.Errorf("the agent changed a balloon other than through pods/resize: %v", err)
	}

	if err := resize(balloon, "300m"); err != nil {
		t.Errorf("the agent could not resize the balloon: %v", err)
	}
	err = resize(elsewhere, "300m")
	if !apierrors.IsForbidden(err) {
		t.Errorf("the agent resized a pod outside kube-system: %v", err)
	}
	if err := patchLabels(balloon); !apierrors.IsForbidden(err) {
		t.Errorf("the agent changed a balloon other than through pods/resize: %v", err)
	}
}

// applyAddon creates every object of an addon manifest.
func applyAddon(ctx context.Context, t *testing.T, cs clientset.Interface, path string) {
	t.Helper()
	for _, obj := range readAddon(t, path) {
		if err := create(ctx, cs, obj); err != nil {
			t.Fatalf("%s: create %T: %v", path, obj, err)
		}
	}
}

// readAddon decodes every object of an addon manifest.
func readAddon(t *testing.T, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objects []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objects = append(objects, obj)
	}
}

func create(ctx context.Context, cs clientset.Interface, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *v1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *v1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.Role:
		_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
	default:
		return errors.New("no client for this kind")
	}
	return err
}
