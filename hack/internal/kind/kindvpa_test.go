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
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsfake "k8s.io/metrics/pkg/client/clientset/versioned/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// vpaTree is the materialised VPA tree (make vpa), or the test is skipped.
func vpaTree(t *testing.T) string {
	t.Helper()
	tree := filepath.Join("..", "..", "..", "_output", "autoscaler", "vertical-pod-autoscaler")
	if _, err := os.Stat(filepath.Join(tree, "deploy", vpaRBACManifest)); err != nil {
		t.Skip("no VPA tree (make vpa)")
	}
	return tree
}

var testVPAImages = images.VPAImages{
	"recommender":          "registry.k8s.io/autoscaling/vpa-recommender:1.8.1-carry.000000000001",
	"updater":              "registry.k8s.io/autoscaling/vpa-updater:1.8.1-carry.000000000002",
	"admission-controller": "registry.k8s.io/autoscaling/vpa-admission-controller:1.8.1-carry.000000000003",
}

const testMetricsServerImage = "registry.k8s.io/metrics-server/metrics-server:v0.9.0-carry.000000000004"

func testMetricsServerObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := metricsServerObjects(testMetricsServerImage)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func typedDeployment(t *testing.T, u *unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// renderedDeployments are the Deployments of the objects, by name.
func renderedDeployments(t *testing.T, objs []*unstructured.Unstructured) map[string]*appsv1.Deployment {
	t.Helper()
	out := map[string]*appsv1.Deployment{}
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			out[o.GetName()] = typedDeployment(t, o)
		}
	}
	return out
}

// The tree's deploy/ is applied whole, its two new CRDs included, and its
// three Deployments run the images built here, never pulled, with the gate
// as asked and the recommender's flags; everything else of theirs stays.
func TestRenderVPARunsTheBuiltImagesWithTheGate(t *testing.T) {
	tree := vpaTree(t)
	for _, on := range []bool{true, false} {
		extra := []string{"--recommender-interval=15s", "--node-scope-min-history=1m"}
		m, err := renderVPA(KindVPA{Tree: tree, RecommenderArgs: extra, NodeScope: on}, testVPAImages)
		if err != nil {
			t.Fatal(err)
		}
		var crds []string
		for _, crd := range m.crds {
			crds = append(crds, crd.GetName())
		}
		for _, want := range []string{"verticalpodautoscalers", "verticalpodautoscalercheckpoints", "verticalpodautoscalerslices", "verticalpodautoscalercheckpointslices"} {
			if !slices.Contains(crds, want+".autoscaling.k8s.io") {
				t.Errorf("no CRD %s.autoscaling.k8s.io among %v", want, crds)
			}
		}
		var accounts []string
		for _, o := range m.rbac {
			if o.GetKind() == "ServiceAccount" {
				accounts = append(accounts, o.GetNamespace()+"/"+o.GetName())
			}
		}
		deployments := renderedDeployments(t, m.workloads)
		for _, c := range images.VPAComponents {
			d := deployments[vpaDeployment(c)]
			if d == nil {
				t.Fatalf("no Deployment %s", vpaDeployment(c))
			}
			if !slices.Contains(accounts, "kube-system/"+d.Spec.Template.Spec.ServiceAccountName) {
				t.Errorf("%s runs as %s, which deploy/vpa-rbac.yaml does not create (%v)", d.Name, d.Spec.Template.Spec.ServiceAccountName, accounts)
			}
			ctr := d.Spec.Template.Spec.Containers[0]
			if ctr.Image != testVPAImages[c] || ctr.ImagePullPolicy != corev1.PullNever {
				t.Errorf("%s runs %s (pull %s), want %s, never pulled", d.Name, ctr.Image, ctr.ImagePullPolicy, testVPAImages[c])
			}
			gate := fmt.Sprintf("--feature-gates=%s=%t", VPAGate, on)
			if !slices.Contains(ctr.Args, gate) {
				t.Errorf("%s has flags %v, want %s", d.Name, ctr.Args, gate)
			}
			hasExtra := len(ctr.Args) >= len(extra) && slices.Equal(ctr.Args[len(ctr.Args)-len(extra):], extra)
			if hasExtra != (c == "recommender") {
				t.Errorf("%s has flags %v: the recommender's flags %v belong to it alone", d.Name, ctr.Args, extra)
			}
		}
		// deploy/'s own flags stay.
		if args := deployments["vpa-admission-controller"].Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--reload-cert") {
			t.Errorf("the admission controller lost deploy/'s --reload-cert: %v", args)
		}
		var service bool
		for _, o := range m.workloads {
			service = service || (o.GetKind() == "Service" && o.GetName() == vpaWebhookService && o.GetNamespace() == metav1.NamespaceSystem)
		}
		if !service {
			t.Errorf("no Service kube-system/%s for the webhook", vpaWebhookService)
		}
	}
}

// No container that KindDeployVPA runs is pulled from anywhere: each runs an
// image built here and loaded into the nodes.
func TestNothingIsPulledFromOutside(t *testing.T) {
	tree := vpaTree(t)
	m, err := renderVPA(KindVPA{Tree: tree, NodeScope: true}, testVPAImages)
	if err != nil {
		t.Fatal(err)
	}
	built := append(slices.Collect(maps.Values(testVPAImages)), testMetricsServerImage)
	var seen int
	for _, o := range slices.Concat(m.workloads, testMetricsServerObjects(t)) {
		if o.GetKind() != "Deployment" {
			continue
		}
		spec := typedDeployment(t, o).Spec.Template.Spec
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			seen++
			if c.ImagePullPolicy != corev1.PullNever || !slices.Contains(built, c.Image) {
				t.Errorf("Deployment %s, container %s: image %s, pull policy %s; want one built here, never pulled", o.GetName(), c.Name, c.Image, c.ImagePullPolicy)
			}
		}
	}
	if seen != 4 {
		t.Errorf("%d containers, want the three components and metrics-server", seen)
	}
}

// The gate flag keeps the other gates a Deployment sets, in kubeadm's order.
func TestSetGateArgKeepsTheOtherGates(t *testing.T) {
	for _, tc := range []struct {
		args []string
		on   bool
		want []string
	}{
		{nil, true, []string{"--feature-gates=DaemonSetNodeScope=true"}},
		{[]string{"--v=4"}, false, []string{"--v=4", "--feature-gates=DaemonSetNodeScope=false"}},
		{[]string{"--feature-gates=InPlace=true,DaemonSetNodeScope=true", "--v=4"}, false, []string{"--feature-gates=DaemonSetNodeScope=false,InPlace=true", "--v=4"}},
	} {
		got, err := setGateArg(tc.args, tc.on)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("setGateArg(%q, %t) = %q, %v; want %q", tc.args, tc.on, got, err, tc.want)
		}
	}
	if _, err := setGateArg([]string{"--feature-gates=InPlace"}, true); err == nil {
		t.Error("a gate without a value was accepted")
	}
}

// The TLS secret holds, under the names the admission controller reads by
// default from where deploy/ mounts the secret (and gencerts.sh names them),
// a serving certificate for the webhook's Service that chains to the CA it
// registers the webhook with; a second call gives the same secret.
func TestVPATLSSecretIsWhatTheAdmissionControllerReads(t *testing.T) {
	tree := vpaTree(t)
	dir := t.TempDir()
	obj, err := vpaTLSSecretObject(dir)
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &secret); err != nil {
		t.Fatal(err)
	}
	if secret.Name != vpaTLSSecret || secret.Namespace != metav1.NamespaceSystem {
		t.Errorf("secret %s/%s, want kube-system/%s", secret.Namespace, secret.Name, vpaTLSSecret)
	}

	// What the admission controller reads: its default files, under the
	// mount of the secret in deploy/'s Deployment.
	config, err := os.ReadFile(filepath.Join(tree, "pkg", "admission-controller", "config", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := renderVPA(KindVPA{Tree: tree}, testVPAImages)
	if err != nil {
		t.Fatal(err)
	}
	spec := renderedDeployments(t, m.workloads)["vpa-admission-controller"].Spec.Template.Spec
	mounts := map[string]string{} // mount path -> secret
	for _, v := range spec.Volumes {
		for _, vm := range spec.Containers[0].VolumeMounts {
			if vm.Name == v.Name && v.Secret != nil {
				mounts[vm.MountPath] = v.Secret.SecretName
			}
		}
	}
	reads := map[string]string{} // flag -> default file
	for _, flag := range []string{"ClientCaFile", "TlsCertFile", "TlsPrivateKey"} {
		m := regexp.MustCompile(`(?m)^\s*` + flag + `:\s*"([^"]+)"`).FindSubmatch(config)
		if m == nil {
			t.Fatalf("the admission controller's config.go has no default %s", flag)
		}
		file := string(m[1])
		reads[flag] = file
		if mounts[path.Dir(file)] != vpaTLSSecret {
			t.Errorf("%s defaults to %s, where deploy/ mounts no secret %s (mounts %v)", flag, file, vpaTLSSecret, mounts)
		}
		if secret.Data[path.Base(file)] == nil {
			t.Errorf("%s defaults to %s: the secret has no %s (keys %v)", flag, file, path.Base(file), slices.Sorted(maps.Keys(secret.Data)))
		}
	}
	gencerts, err := os.ReadFile(filepath.Join(tree, "pkg", "admission-controller", "gencerts.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for key := range secret.Data {
		if !strings.Contains(string(gencerts), "--from-file=${TMP_DIR}/"+key) {
			t.Errorf("the secret's %s is not a key gencerts.sh makes", key)
		}
	}

	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(secret.Data[path.Base(reads["ClientCaFile"])]) {
		t.Fatal("the CA is no PEM certificate")
	}
	pair, err := tls.X509KeyPair(secret.Data[path.Base(reads["TlsCertFile"])], secret.Data[path.Base(reads["TlsPrivateKey"])])
	if err != nil {
		t.Fatalf("serving certificate and key: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	// The name the API server dials: the Service of deploy/, in its namespace.
	var host string
	for _, o := range m.workloads {
		if o.GetKind() == "Service" {
			host = o.GetName() + "." + o.GetNamespace() + ".svc"
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: time.Now().Add(24 * time.Hour)}); err != nil {
		t.Errorf("the serving certificate does not serve %s under the CA: %v", host, err)
	}

	again, err := vpaTLSSecretObject(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Object, obj.Object) {
		t.Error("a second call made another secret: applying again would replace the admission controller's certificates")
	}
}

// metrics-server serves node metrics of kind's kubelets: their self-signed
// certificates accepted, reached at the InternalIP, a resolution its own
// validation allows, and its Service, APIService and RBAC wired to it.
func TestMetricsServerObjects(t *testing.T) {
	objs := testMetricsServerObjects(t)
	byKind := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
	}
	d := typedDeployment(t, byKind["Deployment"][0])
	ctr := d.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--kubelet-insecure-tls", "--kubelet-preferred-address-types=InternalIP", "--cert-dir=/tmp"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("metrics-server's flags %v lack %s", ctr.Args, want)
		}
	}
	var resolution time.Duration
	for _, a := range ctr.Args {
		if v, ok := strings.CutPrefix(a, "--metric-resolution="); ok {
			var err error
			if resolution, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Its validation: at least 10 s, and nine tenths of it above the kubelet
	// request timeout (10 s by default).
	if resolution < 10*time.Second || resolution*9/10 < 10*time.Second || resolution > 30*time.Second {
		t.Errorf("--metric-resolution=%v: metrics-server refuses it, or it is not short", resolution)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.EmptyDir != nil }) ||
		!slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" }) {
		t.Error("--cert-dir=/tmp is no writable volume, and the root file system is read-only")
	}

	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKind["Service"][0].Object, &svc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Template.Labels) ||
		!slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == svc.Spec.Ports[0].TargetPort.StrVal }) {
		t.Errorf("the Service (selector %v, target port %v) does not reach the pods (%v, ports %v)", svc.Spec.Selector, svc.Spec.Ports[0].TargetPort, d.Spec.Template.Labels, ctr.Ports)
	}
	var api apiregistrationv1.APIService
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKind["APIService"][0].Object, &api); err != nil {
		t.Fatal(err)
	}
	if api.Name != "v1beta1.metrics.k8s.io" || api.Spec.Service == nil || api.Spec.Service.Name != svc.Name || api.Spec.Service.Namespace != svc.Namespace {
		t.Errorf("APIService %s for %+v, want v1beta1.metrics.k8s.io for Service %s/%s", api.Name, api.Spec.Service, svc.Namespace, svc.Name)
	}
	// Every binding binds the pods' service account, which exists.
	sa := byKind["ServiceAccount"][0]
	if sa.GetName() != d.Spec.Template.Spec.ServiceAccountName || sa.GetNamespace() != d.Namespace {
		t.Errorf("service account %s/%s, the pods run as %s", sa.GetNamespace(), sa.GetName(), d.Spec.Template.Spec.ServiceAccountName)
	}
	roles := map[string]bool{}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range byKind[kind] {
			var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			roles[b.RoleRef.Name] = true
			if len(b.Subjects) != 1 || b.Subjects[0].Name != sa.GetName() || b.Subjects[0].Namespace != sa.GetNamespace() {
				t.Errorf("%s %s binds %v", kind, o.GetName(), b.Subjects)
			}
		}
	}
	for _, want := range []string{"system:metrics-server", "system:auth-delegator", "extension-apiserver-authentication-reader"} {
		if !roles[want] {
			t.Errorf("metrics-server is not bound to %s", want)
		}
	}
}

// The flags metrics-server gets are flags of the pinned release, where its
// module is in the module cache.
func TestMetricsServerKnowsItsFlags(t *testing.T) {
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), "go", "pkg", "mod")
	}
	src := filepath.Join(cache, "sigs.k8s.io", "metrics-server@"+images.MetricsServerVersion, "cmd", "metrics-server", "app", "options")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("metrics-server %s is not in the module cache", images.MetricsServerVersion)
	}
	var code []byte
	for _, f := range []string{"options.go", "kubelet_client.go"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		code = append(code, data...)
	}
	for _, arg := range metricsServerArgs {
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if name == "cert-dir" || name == "secure-port" {
			continue // k8s.io/apiserver's serving flags
		}
		if !strings.Contains(string(code), `"`+name+`"`) {
			t.Errorf("metrics-server %s has no flag --%s", images.MetricsServerVersion, name)
		}
	}
}

// Objects are applied server-side by one field manager that takes over
// conflicting fields, each at its resource, in its namespace when it has one.
func TestApplyObjectsAppliesServerSide(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(appsv1.SchemeGroupVersion.WithKind("Deployment"), meta.RESTScopeNamespace)
	mapper.Add(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), meta.RESTScopeRoot)
	client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	var applied []string
	client.PrependReactor("patch", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		p := action.(clienttesting.PatchActionImpl)
		opts := p.GetPatchOptions()
		if p.GetPatchType() != types.ApplyPatchType || opts.FieldManager != vpaFieldManager || !ptr.Deref(opts.Force, false) {
			t.Errorf("%s %s: patch %s by %q (force %v), want a forced apply by %s", p.GetResource().Resource, p.GetName(), p.GetPatchType(), opts.FieldManager, opts.Force, vpaFieldManager)
		}
		applied = append(applied, p.GetResource().Resource+" "+p.GetNamespace()+"/"+p.GetName())
		return true, &unstructured.Unstructured{}, nil
	})
	role := testMetricsServerObjects(t)[1]
	deployment := testMetricsServerObjects(t)[5]
	if role.GetKind() != "ClusterRole" || deployment.GetKind() != "Deployment" {
		t.Fatalf("metricsServerObjects' order changed: %s, %s", role.GetKind(), deployment.GetKind())
	}
	if err := applyObjects(t.Context(), client, mapper, role, deployment); err != nil {
		t.Fatal(err)
	}
	if want := []string{"clusterroles /system:metrics-server", "deployments kube-system/metrics-server"}; !slices.Equal(applied, want) {
		t.Errorf("applied %v, want %v", applied, want)
	}
	deployment.SetNamespace("")
	if err := applyObjects(t.Context(), client, mapper, deployment); err == nil || !strings.Contains(err.Error(), "no namespace") {
		t.Errorf("a namespaced object without namespace: %v", err)
	}
}

// vpaCluster is a fake cluster in which the VPA and metrics-server run, as
// KindDeployVPA leaves it: every Deployment rolled out, the webhook registered
// by the running admission controller with the secret's CA, metrics of both
// nodes.
func vpaCluster(t *testing.T) (*fake.Clientset, *metricsfake.Clientset, *unstructured.Unstructured) {
	t.Helper()
	started := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	var objs []runtime.Object
	for _, name := range append([]string{metricsServerName}, vpaDeployments()...) {
		labels := map[string]string{"app": name}
		args := []string{"--v=4", "--feature-gates=DaemonSetNodeScope=true"}
		if name == metricsServerName {
			args = metricsServerArgs
		}
		objs = append(objs, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Generation: 2},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: strings.TrimPrefix(name, "vpa-"), Args: args,
				}}}},
			},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1},
		}, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-abc", Namespace: metav1.NamespaceSystem, Labels: labels},
			Spec:       corev1.PodSpec{NodeName: "worker"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name: strings.TrimPrefix(name, "vpa-"), Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			}}},
		})
	}
	secretObj, err := vpaTLSSecretObject(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(secretObj.Object, &secret); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &secret, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: vpaWebhookConfig, CreationTimestamp: metav1.NewTime(started.Add(11 * time.Second))},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "vpa.k8s.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: metav1.NamespaceSystem, Name: vpaWebhookService},
			CABundle: secret.Data[vpaCACertKey],
		}}},
	})
	for _, node := range []string{"control-plane", "worker"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		}})
	}
	nodeMetrics := &metricsv1beta1.NodeMetricsList{Items: []metricsv1beta1.NodeMetrics{
		{ObjectMeta: metav1.ObjectMeta{Name: "control-plane"}}, {ObjectMeta: metav1.ObjectMeta{Name: "worker"}},
	}}
	metrics := metricsfake.NewSimpleClientset()
	metrics.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nodeMetrics.DeepCopy(), nil
	})
	return fake.NewClientset(objs...), metrics, secretObj
}

// Nothing is missing where everything runs; what is not running is named,
// with its pods' state.
func TestMissingNamesWhatIsNotRunning(t *testing.T) {
	kube, metrics, _ := vpaCluster(t)
	c := vpaClients{kube: kube, metrics: metrics, dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}
	if got := c.missing(t.Context()); len(got) != 0 {
		t.Fatalf("missing %q where everything runs", got)
	}
	ctx := t.Context()
	ns := metav1.NamespaceSystem

	// The recommender crash-loops.
	d, _ := kube.AppsV1().Deployments(ns).Get(ctx, "vpa-recommender", metav1.GetOptions{})
	d.Status.AvailableReplicas = 0
	kube.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	p, _ := kube.CoreV1().Pods(ns).Get(ctx, "vpa-recommender-abc", metav1.GetOptions{})
	p.Status.ContainerStatuses[0] = corev1.ContainerStatus{
		Name: "recommender", RestartCount: 3,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 255}},
	}
	kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	// The admission controller started again after it registered the webhook.
	p, _ = kube.CoreV1().Pods(ns).Get(ctx, "vpa-admission-controller-abc", metav1.GetOptions{})
	p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC))
	kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	// A worker without metrics.
	kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker2"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
	}}, metav1.CreateOptions{})
	// A NotReady node is not waited for.
	kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker3"}}, metav1.CreateOptions{})

	got := c.missing(ctx)
	want := []*regexp.Regexp{
		regexp.MustCompile(`^Deployment kube-system/vpa-recommender: 0 of 1 updated replicas available; pod vpa-recommender-abc Running on node "worker"; container recommender ready=false restarts=3, waiting: CrashLoopBackOff: back-off 40s, last terminated: Error, exit code 255, its last run's log: "fake logs"$`),
		regexp.MustCompile(`^MutatingWebhookConfiguration vpa-webhook-config: registered at 2026-12-01T10:00:11Z, before the admission controller started at 2026-12-01T11:00:00Z$`),
		regexp.MustCompile(`^node metrics: metrics.k8s.io has none of nodes worker2$`),
	}
	if len(got) != len(want) {
		t.Fatalf("missing:\n%s\nwant %d items", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !want[i].MatchString(got[i]) {
			t.Errorf("missing[%d] = %q, want %v", i, got[i], want[i])
		}
	}

	// A webhook of another CA (a secret made anew, not yet reloaded).
	kube2, metrics2, _ := vpaCluster(t)
	hook, _ := kube2.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, vpaWebhookConfig, metav1.GetOptions{})
	hook.Webhooks[0].ClientConfig.CABundle = []byte("another CA")
	kube2.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, hook, metav1.UpdateOptions{})
	if got := (vpaClients{kube: kube2, metrics: metrics2}).missing(ctx); len(got) != 1 || !strings.Contains(got[0], "caBundle is not the CA of secret kube-system/vpa-tls-certs") {
		t.Errorf("a webhook with another CA: missing %q", got)
	}
	// No webhook at all.
	kube2.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, vpaWebhookConfig, metav1.DeleteOptions{})
	if got := (vpaClients{kube: kube2, metrics: metrics2}).missing(ctx); len(got) != 1 || !strings.Contains(got[0], "not found") {
		t.Errorf("no webhook: missing %q", got)
	}
}

// The gate changes in the three components' flags, nothing else does, and a
// Deployment that has it already is not written.
func TestSetVPAGateChangesOnlyTheGate(t *testing.T) {
	kube, _, _ := vpaCluster(t)
	ctx := t.Context()
	if err := setVPAGate(ctx, kube, true); err != nil {
		t.Fatal(err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("the gate as it was: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if err := setVPAGate(ctx, kube, false); err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{metricsServerName}, vpaDeployments()...) {
		d, err := kube.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"--v=4", "--feature-gates=DaemonSetNodeScope=false"}
		if name == metricsServerName {
			want = metricsServerArgs // not a VPA component
		}
		if got := d.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
			t.Errorf("%s: flags %q, want %q", name, got, want)
		}
	}
}

// A VPA and its per-node objects as the recommender writes them
// (pkg/apis/autoscaling.k8s.io/v1alpha1), with the objects of an earlier VPA of
// the same name, not yet collected, and of another VPA.
const vpaHistoryObjects = `
apiVersion: autoscaling.k8s.io/v1
kind: VerticalPodAutoscaler
metadata: {name: agent, namespace: lane, uid: vpa-uid-2}
spec:
  targetRef: {apiVersion: apps/v1, kind: DaemonSet, name: agent}
  scope: Node
---
apiVersion: autoscaling.k8s.io/v1alpha1
kind: VerticalPodAutoscalerSlice
metadata:
  name: agent-x7k2p
  namespace: lane
  labels: {autoscaling.k8s.io/vpa-name: agent}
  ownerReferences:
  - {apiVersion: autoscaling.k8s.io/v1, kind: VerticalPodAutoscaler, name: agent, uid: vpa-uid-2, controller: true}
vpaName: agent
observedGeneration: 1
updateTime: "2026-12-01T10:05:00Z"
nodes:
- nodeName: worker
  nodeUID: node-uid-1
  computedTime: "2026-12-01T10:05:00Z"
  recommendation:
    containerRecommendations:
    - containerName: agent
      target: {cpu: 25m, memory: "262144k"}
      lowerBound: {cpu: 25m, memory: "262144k"}
      upperBound: {cpu: 300m, memory: "262144k"}
      uncappedTarget: {cpu: 25m, memory: "262144k"}
    - containerName: sidecar
      target: {cpu: "0.1", memory: 128Mi}
- nodeName: worker2
  nodeUID: node-uid-2
  recommendation:
    containerRecommendations:
    - containerName: agent
      target: {cpu: 200m, memory: "262144k"}
groups:
- labelValue: linux
  recommendation:
    containerRecommendations:
    - containerName: agent
      target: {cpu: 100m}
---
apiVersion: autoscaling.k8s.io/v1alpha1
kind: VerticalPodAutoscalerSlice
metadata:
  name: agent-m4n8q
  namespace: lane
  labels: {autoscaling.k8s.io/vpa-name: agent}
  ownerReferences:
  - {apiVersion: autoscaling.k8s.io/v1, kind: VerticalPodAutoscaler, name: agent, uid: vpa-uid-2, controller: true}
vpaName: agent
updateTime: "2026-12-01T10:06:00Z"
nodes:
- nodeName: worker2
  nodeUID: node-uid-2
  recommendation:
    containerRecommendations:
    - containerName: agent
      target: {cpu: 250m, memory: "262144k"}
---
apiVersion: autoscaling.k8s.io/v1alpha1
kind: VerticalPodAutoscalerSlice
metadata:
  name: agent-old
  namespace: lane
  labels: {autoscaling.k8s.io/vpa-name: agent}
  ownerReferences:
  - {apiVersion: autoscaling.k8s.io/v1, kind: VerticalPodAutoscaler, name: agent, uid: vpa-uid-1, controller: true}
vpaName: agent
updateTime: "2026-12-01T09:00:00Z"
nodes:
- nodeName: worker3
  recommendation:
    containerRecommendations:
    - containerName: agent
      target: {cpu: 1}
---
apiVersion: autoscaling.k8s.io/v1alpha1
kind: VerticalPodAutoscalerSlice
metadata:
  name: web-abcde
  namespace: lane
  labels: {autoscaling.k8s.io/vpa-name: web}
  ownerReferences:
  - {apiVersion: autoscaling.k8s.io/v1, kind: VerticalPodAutoscaler, name: web, uid: vpa-uid-3, controller: true}
vpaName: web
updateTime: "2026-12-01T10:00:00Z"
nodes:
- nodeName: worker
  recommendation:
    containerRecommendations:
    - containerName: web
      target: {cpu: 1}
---
apiVersion: autoscaling.k8s.io/v1alpha1
kind: VerticalPodAutoscalerCheckpointSlice
metadata:
  name: agent-c9v2b
  namespace: lane
  labels: {autoscaling.k8s.io/vpa-name: agent}
  ownerReferences:
  - {apiVersion: autoscaling.k8s.io/v1, kind: VerticalPodAutoscaler, name: agent, uid: vpa-uid-2, controller: true}
vpaName: agent
nodes:
- nodeName: worker2
  nodeUID: node-uid-2
  containers:
  - containerName: agent
    checkpoint:
      lastUpdateTime: "2026-12-01T10:05:00Z"
      version: v3
      cpuHistogram:
        referenceTimestamp: "2026-12-01T00:00:00Z"
        bucketWeights: {"31": 10000, "32": 5120}
        totalWeight: 6.4
      memoryHistogram:
        referenceTimestamp: "2026-12-02T00:00:00Z"
        bucketWeights: {"20": 10000}
        totalWeight: 1.2
      firstSampleStart: "2026-12-01T09:00:00Z"
      lastSampleStart: "2026-12-01T10:04:00Z"
      totalSamplesCount: 65
- nodeName: worker
  nodeUID: node-uid-1
  containers:
  - containerName: agent
    checkpoint:
      lastUpdateTime: "2026-12-01T10:05:00Z"
      version: v3
      cpuHistogram: {referenceTimestamp: "2026-12-01T00:00:00Z", bucketWeights: {"0": 10000}, totalWeight: 6.4}
      memoryHistogram: {referenceTimestamp: "2026-12-02T00:00:00Z", bucketWeights: {"20": 10000}, totalWeight: 1.2}
      firstSampleStart: "2026-12-01T09:00:00Z"
      lastSampleStart: "2026-12-01T10:04:00Z"
      totalSamplesCount: 65
---
apiVersion: autoscaling.k8s.io/v1alpha1
kind: VerticalPodAutoscalerCheckpointSlice
metadata:
  name: agent-old-c
  namespace: lane
  ownerReferences:
  - {apiVersion: autoscaling.k8s.io/v1, kind: VerticalPodAutoscaler, name: agent, uid: vpa-uid-1, controller: true}
vpaName: agent
nodes:
- nodeName: worker3
  containers: []
`

func vpaHistoryFixture(t *testing.T) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, doc := range strings.Split(vpaHistoryObjects, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	return objs
}

// The history of a VPA is its own slices' entries by node and container, the
// newer slice's for a node in two, and its checkpoint slices' nodes; another
// VPA's and an earlier VPA of the same name's are not in it.
func TestReadVPAHistory(t *testing.T) {
	objs := vpaHistoryFixture(t)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		VPAResource:                "VerticalPodAutoscalerList",
		VPASliceResource:           "VerticalPodAutoscalerSliceList",
		VPACheckpointSliceResource: "VerticalPodAutoscalerCheckpointSliceList",
	}, objs...)
	got, err := ReadVPAHistory(t.Context(), client, "lane", "agent")
	if err != nil {
		t.Fatal(err)
	}
	want := VPAHistory{
		Targets: map[string]map[string]map[string]string{
			"worker": {
				"agent":   {"cpu": "25m", "memory": "262144k"},
				"sidecar": {"cpu": "100m", "memory": "128Mi"},
			},
			"worker2": {"agent": {"cpu": "250m", "memory": "262144k"}},
		},
		Checkpointed: []string{"worker", "worker2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("history\n%+v\nwant\n%+v", got, want)
	}
	again, err := ReadVPAHistory(t.Context(), client, "lane", "agent")
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("a second read: %+v, %v; want it equal to the first", again, err)
	}
	if _, err := ReadVPAHistory(t.Context(), client, "lane", "gone"); err == nil {
		t.Error("the history of a VPA that does not exist")
	}
}

// The fixture is what the tree's CRDs accept: every field is in their schema,
// every required field is there, so the reader is tested on the API's shape.
func TestVPAHistoryFixtureFitsTheCRDs(t *testing.T) {
	tree := vpaTree(t)
	crds, err := readManifests(filepath.Join(tree, "deploy", vpaCRDManifest))
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]map[string]any{} // apiVersion/kind -> openAPIV3Schema
	for _, crd := range crds {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			v := v.(map[string]any)
			s, _, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema")
			schemas[group+"/"+v["name"].(string)+"/"+kind] = s
		}
	}
	for _, obj := range vpaHistoryFixture(t) {
		u := obj.(*unstructured.Unstructured)
		s := schemas[u.GetAPIVersion()+"/"+u.GetKind()]
		if s == nil {
			t.Fatalf("the tree's CRDs have no %s %s", u.GetAPIVersion(), u.GetKind())
		}
		fitsSchema(t, u.GetKind()+" "+u.GetName(), u.Object, s)
	}
}

// fitsSchema fails where value has a field its OpenAPI schema has not, or
// lacks one it requires; metadata is the API server's.
func fitsSchema(t *testing.T, at string, value any, s map[string]any) {
	t.Helper()
	switch v := value.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		additional, _ := s["additionalProperties"].(map[string]any)
		required, _ := s["required"].([]any)
		for _, r := range required {
			if _, ok := v[r.(string)]; !ok {
				t.Errorf("%s: no %s, which the CRD requires", at, r)
			}
		}
		for key, field := range v {
			switch {
			case key == "metadata" && props["metadata"] != nil:
			case props[key] != nil:
				fitsSchema(t, at+"."+key, field, props[key].(map[string]any))
			case additional != nil:
				fitsSchema(t, at+"."+key, field, additional)
			case s["x-kubernetes-preserve-unknown-fields"] == true:
			default:
				t.Errorf("%s: %s is not in the CRD's schema", at, key)
			}
		}
	case []any:
		items, _ := s["items"].(map[string]any)
		for i, item := range v {
			fitsSchema(t, fmt.Sprintf("%s[%d]", at, i), item, items)
		}
	}
}
