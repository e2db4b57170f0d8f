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
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// VPAGate is the series' feature gate of the VPA's three components: per-node
// recommendations for DaemonSets (docs/vpa-node-scope.md).
const VPAGate = "DaemonSetNodeScope"

const (
	// vpaFieldManager owns what KindDeployVPA applies and KindSetVPAGate changes.
	vpaFieldManager = "kube-carry-vpa"
	// The admission controller's TLS secret, as pkg/admission-controller/gencerts.sh
	// names it and deploy/admission-controller-deployment.yaml mounts it, and the
	// Service name the webhook is registered under (its --webhook-service).
	vpaTLSSecret      = "vpa-tls-certs"
	vpaWebhookService = "vpa-webhook"
	// vpaWebhookConfig is the MutatingWebhookConfiguration the admission
	// controller registers itself (webhookConfigName in its config.go).
	vpaWebhookConfig = "vpa-webhook-config"
	// vpaWaitTimeout bounds the wait for the components after an apply or a gate
	// change: the images are on the nodes by then, metrics-server has node
	// metrics after two scrapes, the admission controller registers its webhook
	// 10 s after it starts.
	vpaWaitTimeout = 5 * time.Minute
)

// The keys of the admission controller's TLS secret that it reads, the files of
// its defaults (--client-ca-file, --tls-cert-file, --tls-private-key:
// /etc/tls-certs/*.pem, the secret's mount). gencerts.sh also stores the CA's
// key, caKey.pem; the secret here leaves it out: nothing in the cluster signs
// with it, and any reader of kube-system's secrets could mint serving
// certificates with it.
const (
	vpaCACertKey     = "caCert.pem"
	vpaServerCertKey = "serverCert.pem"
	vpaServerKeyKey  = "serverKey.pem"
)

// vpaWebhookHost is the name the API server checks the webhook's serving
// certificate against: the Service it is registered under, in the namespace of
// the admission controller.
const vpaWebhookHost = vpaWebhookService + "." + metav1.NamespaceSystem + ".svc"

// The files of the VPA tree's deploy/ that KindDeployVPA applies: the CRDs
// (with the series' VerticalPodAutoscalerSlice and
// VerticalPodAutoscalerCheckpointSlice), the RBAC, the three Deployments and
// the admission controller's Service.
const (
	vpaCRDManifest  = "vpa-v1-crd-gen.yaml"
	vpaRBACManifest = "vpa-rbac.yaml"
)

var vpaWorkloadManifests = []string{"recommender-deployment.yaml", "updater-deployment.yaml", "admission-controller-deployment.yaml", "admission-controller-service.yaml"}

// The resources of the VPA's API that ReadVPAHistory reads.
var (
	VPAResource                = schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1", Resource: "verticalpodautoscalers"}
	VPASliceResource           = schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1alpha1", Resource: "verticalpodautoscalerslices"}
	VPACheckpointSliceResource = schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1alpha1", Resource: "verticalpodautoscalercheckpointslices"}
)

var (
	crdResource        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServiceResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// metricsServerName names metrics-server's ServiceAccount, Deployment and
// Service; metricsServerAPIService is the APIService it serves.
const (
	metricsServerName       = "metrics-server"
	metricsServerAPIService = "v1beta1.metrics.k8s.io"
)

// KindVPA is what KindDeployVPA runs in the kind cluster.
type KindVPA struct {
	// Tree is the patched VPA module: _output/autoscaler/vertical-pod-autoscaler
	// (make vpa), its deploy/ and its programs.
	Tree string
	// RecommenderArgs are flags the recommender gets after deploy/'s, such as a
	// short --recommender-interval or --node-scope-min-history.
	RecommenderArgs []string
	// NodeScope turns DaemonSetNodeScope on in the three components.
	NodeScope bool
}

// vpaDeployment is the Deployment of a VPA component in deploy/, named as its
// service account.
func vpaDeployment(component string) string { return "vpa-" + component }

// KindDeployVPA runs the patched VPA's recommender, updater and admission
// controller and metrics-server in the kind cluster, as Deployments in
// kube-system: it builds their images and loads them into every node, applies
// the CRDs, the RBAC, the Deployments and the webhook's Service of the tree's
// deploy/ (their images replaced by these, never pulled, the gate set), the
// admission controller's TLS secret and metrics-server's objects, and waits
// until the four Deployments are available, metrics.k8s.io serves the metrics
// of every Ready node and the admission controller has registered its webhook
// with the secret's CA. Applying again changes only what differs (server-side
// apply); the Deployments roll out when their program, flags or gate changed.
func (k *Kind) KindDeployVPA(ctx context.Context, vpa KindVPA) error {
	work := k.kindPath("vpa")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	k.c.Logf("%-24s building the VPA's images from %s and metrics-server %s", "kind cluster "+k.KindClusterName(), vpa.Tree, images.MetricsServerVersion)
	refs, set, err := images.VPA(ctx, vpa.Tree, work)
	if err != nil {
		return err
	}
	metricsServer, img, err := images.MetricsServer(ctx, work)
	if err != nil {
		return err
	}
	set[metricsServer] = img
	if err := k.LoadImages(ctx, work, set); err != nil {
		return err
	}
	m, err := renderVPA(vpa, refs)
	if err != nil {
		return err
	}
	secret, err := vpaTLSSecretObject(k.kindPath("vpa", "pki"))
	if err != nil {
		return err
	}
	c, err := k.vpaClients()
	if err != nil {
		return err
	}
	mapper, err := discoveryMapper(c.kube)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, c.dynamic, mapper, m.crds...); err != nil {
		return err
	}
	if err := waitCRDsEstablished(ctx, c.dynamic, m.crds, time.Minute); err != nil {
		return err
	}
	metricsServerObjs, err := metricsServerObjects(metricsServer)
	if err != nil {
		return err
	}
	rest := slices.Concat(m.rbac, []*unstructured.Unstructured{secret}, metricsServerObjs, m.workloads)
	if err := applyObjects(ctx, c.dynamic, mapper, rest...); err != nil {
		return err
	}
	k.c.Logf("%-24s VPA applied (%s=%t), waiting for its components and metrics-server", "kind cluster "+k.KindClusterName(), VPAGate, vpa.NodeScope)
	return c.wait(ctx, vpaWaitTimeout)
}

// KindSetVPAGate sets DaemonSetNodeScope in the --feature-gates of the three
// VPA components that KindDeployVPA deployed, keeping their other flags, and
// waits as KindDeployVPA does: the Deployments rolled out, the admission
// controller's webhook registered anew by its new pod.
func (k *Kind) KindSetVPAGate(ctx context.Context, on bool) error {
	c, err := k.vpaClients()
	if err != nil {
		return err
	}
	if err := setVPAGate(ctx, c.kube, on); err != nil {
		return err
	}
	k.c.Logf("%-24s VPA components with %s=%t, waiting for their rollout", "kind cluster "+k.KindClusterName(), VPAGate, on)
	return c.wait(ctx, vpaWaitTimeout)
}

// vpaManifestsRendered are the objects of deploy/ that KindDeployVPA applies, in
// the order it applies them.
type vpaManifestsRendered struct {
	crds, rbac, workloads []*unstructured.Unstructured
}

// renderVPA reads deploy/'s manifests from the tree and renders the
// Deployments: each component's container runs its image (refs), never
// pulled, with the gate set; the recommender's with vpa.RecommenderArgs too.
func renderVPA(vpa KindVPA, refs images.VPAImages) (vpaManifestsRendered, error) {
	deploy := filepath.Join(vpa.Tree, "deploy")
	var m vpaManifestsRendered
	var err error
	if m.crds, err = readManifests(filepath.Join(deploy, vpaCRDManifest)); err != nil {
		return m, err
	}
	if m.rbac, err = readManifests(filepath.Join(deploy, vpaRBACManifest)); err != nil {
		return m, err
	}
	rendered := map[string]bool{}
	for _, file := range vpaWorkloadManifests {
		objs, err := readManifests(filepath.Join(deploy, file))
		if err != nil {
			return m, err
		}
		for _, obj := range objs {
			if obj.GetKind() == "Deployment" {
				component, ok := strings.CutPrefix(obj.GetName(), "vpa-")
				if !ok || refs[component] == "" {
					return m, fmt.Errorf("%s: Deployment %s is of no VPA component this project builds (%v)", file, obj.GetName(), images.VPAComponents)
				}
				var extra []string
				if component == "recommender" {
					extra = vpa.RecommenderArgs
				}
				if obj, err = renderVPAComponent(obj, component, refs[component], vpa.NodeScope, extra); err != nil {
					return m, fmt.Errorf("%s: %w", file, err)
				}
				rendered[component] = true
			}
			m.workloads = append(m.workloads, obj)
		}
	}
	for _, component := range images.VPAComponents {
		if !rendered[component] {
			return m, fmt.Errorf("%s has no Deployment %s", deploy, vpaDeployment(component))
		}
	}
	return m, nil
}

// renderVPAComponent sets the image, the pull policy and the gate (and extra
// flags) of the component's container in its Deployment.
func renderVPAComponent(obj *unstructured.Unstructured, component, image string, gate bool, extra []string) (*unstructured.Unstructured, error) {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
		return nil, fmt.Errorf("Deployment %s: %w", obj.GetName(), err)
	}
	spec := &d.Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == component })
	if i < 0 || len(spec.Containers)+len(spec.InitContainers) != 1 {
		return nil, fmt.Errorf("Deployment %s: want its one container %s", d.Name, component)
	}
	args, err := setGateArg(spec.Containers[i].Args, gate)
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: %w", d.Name, err)
	}
	spec.Containers[i].Image = image
	// The image is on every node (LoadImages) and exists nowhere else.
	spec.Containers[i].ImagePullPolicy = corev1.PullNever
	spec.Containers[i].Args = append(args, extra...)
	return toApplyObject(&d, appsv1.SchemeGroupVersion.WithKind("Deployment"))
}

// setGateArg sets DaemonSetNodeScope in the --feature-gates flag of args,
// keeping the flag's other gates, or adds the flag.
func setGateArg(args []string, on bool) ([]string, error) {
	args = slices.Clone(args)
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--feature-gates=") })
	old := ""
	if i >= 0 {
		old = strings.TrimPrefix(args[i], "--feature-gates=")
	}
	value, err := mergeGates(old, map[string]bool{VPAGate: on}, nil)
	if err != nil {
		return nil, err
	}
	if i < 0 {
		return append(args, "--feature-gates="+value), nil
	}
	args[i] = "--feature-gates=" + value
	return args, nil
}

// readManifests decodes the objects of a YAML file of several documents.
func readManifests(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(raw.Raw) == 0 {
			continue // an empty document
		}
		// As the API's JSON: integers stay integers, which typed objects need.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("%s: a %s without a name", path, u.GetKind())
		}
		objs = append(objs, u)
	}
}

// toApplyObject is a typed object as a server-side apply body: its kind set,
// without the status and the empty creationTimestamps (its own, its pod
// template's) that conversion adds, which the apply would otherwise claim.
func toApplyObject(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return u, nil
}

// vpaTLSSecretObject is the admission controller's TLS secret: a CA and a
// serving certificate for the webhook's Service, made once in dir and reused,
// so that applying again changes nothing.
func vpaTLSSecretObject(dir string) (*unstructured.Unstructured, error) {
	pki := &cluster.PKI{Dir: dir}
	if err := pki.EnsureCA(); err != nil {
		return nil, err
	}
	if err := pki.Leaf("vpa-webhook", vpaWebhookHost, nil, x509.ExtKeyUsageServerAuth, []string{vpaWebhookHost, vpaWebhookHost + ".cluster.local"}, nil); err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for key, file := range map[string]string{vpaCACertKey: "ca.crt", vpaServerCertKey: "vpa-webhook.crt", vpaServerKeyKey: "vpa-webhook.key"} {
		b, err := os.ReadFile(pki.Path(file))
		if err != nil {
			return nil, err
		}
		data[key] = b
	}
	return toApplyObject(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: vpaTLSSecret, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}, corev1.SchemeGroupVersion.WithKind("Secret"))
}

// metricsServerArgs are metrics-server's flags: upstream's manifest's
// (manifests/base/deployment.yaml of v0.9.0), but kind's kubelets serve
// self-signed certificates, and are reached at their node's InternalIP, the
// address on kind's network. --metric-resolution is 15 s, as upstream's
// manifest sets it, not the program's default of 60 s: node metrics come after
// two scrapes (a CPU rate needs two), so about 30 s after start, and a
// recommender with a short --recommender-interval gets a new sample in each
// loop; it is the least round value that the default --kubelet-request-timeout
// (10 s, at most nine tenths of the resolution) allows.
var metricsServerArgs = []string{
	"--cert-dir=/tmp",
	"--secure-port=10250",
	"--kubelet-insecure-tls",
	"--kubelet-preferred-address-types=InternalIP",
	"--kubelet-use-node-status-port",
	"--metric-resolution=15s",
}

// metricsServerObjects are metrics-server's ServiceAccount, RBAC, Deployment,
// Service and APIService, as upstream's manifests of v0.9.0 (manifests/base)
// but for the image and the flags, and without the aggregated reader role,
// which gives users of the view, edit and admin roles access to the metrics:
// the VPA has its own (system:metrics-reader in deploy/vpa-rbac.yaml).
func metricsServerObjects(image string) ([]*unstructured.Unstructured, error) {
	const name = metricsServerName
	ns := metav1.NamespaceSystem
	podLabels := map[string]string{"k8s-app": name}
	objectMeta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels}
	}
	sa := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	nonRoot := &corev1.SecurityContext{
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](1000),
		AllowPrivilegeEscalation: ptr.To(false),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	probe := func(path string, initialDelay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
			InitialDelaySeconds: initialDelay, PeriodSeconds: 10, FailureThreshold: 3,
		}
	}
	objs := []struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{
		{&corev1.ServiceAccount{ObjectMeta: objectMeta(name, ns)}, corev1.SchemeGroupVersion.WithKind("ServiceAccount")},
		{&rbacv1.ClusterRole{ObjectMeta: objectMeta("system:"+name, ""), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		}}, rbacv1.SchemeGroupVersion.WithKind("ClusterRole")},
		{&rbacv1.ClusterRoleBinding{ObjectMeta: objectMeta("system:"+name, ""), Subjects: sa,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:" + name}}, rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")},
		{&rbacv1.ClusterRoleBinding{ObjectMeta: objectMeta(name+":system:auth-delegator", ""), Subjects: sa,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"}}, rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")},
		{&rbacv1.RoleBinding{ObjectMeta: objectMeta(name+"-auth-reader", ns), Subjects: sa,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}}, rbacv1.SchemeGroupVersion.WithKind("RoleBinding")},
		{&appsv1.Deployment{ObjectMeta: objectMeta(name, ns), Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: podLabels},
			Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					PriorityClassName:  "system-cluster-critical",
					NodeSelector:       map[string]string{corev1.LabelOSStable: "linux"},
					// Its self-signed serving certificate goes to --cert-dir.
					Volumes: []corev1.Volume{{Name: "tmp-dir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					Containers: []corev1.Container{{
						Name:            name,
						Image:           image,
						ImagePullPolicy: corev1.PullNever,
						Args:            metricsServerArgs,
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("200Mi"),
						}},
						Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: 10250, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe:  probe("/readyz", 20),
						LivenessProbe:   probe("/livez", 0),
						SecurityContext: nonRoot,
						VolumeMounts:    []corev1.VolumeMount{{Name: "tmp-dir", MountPath: "/tmp"}},
					}},
				},
			},
		}}, appsv1.SchemeGroupVersion.WithKind("Deployment")},
		{&corev1.Service{ObjectMeta: objectMeta(name, ns), Spec: corev1.ServiceSpec{
			Selector: podLabels,
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("https"), AppProtocol: ptr.To("https")}},
		}}, corev1.SchemeGroupVersion.WithKind("Service")},
		{&apiregistrationv1.APIService{ObjectMeta: objectMeta(metricsServerAPIService, ""), Spec: apiregistrationv1.APIServiceSpec{
			Service:               &apiregistrationv1.ServiceReference{Name: name, Namespace: ns},
			Group:                 "metrics.k8s.io",
			Version:               "v1beta1",
			InsecureSkipTLSVerify: true,
			GroupPriorityMinimum:  100,
			VersionPriority:       100,
		}}, apiregistrationv1.SchemeGroupVersion.WithKind("APIService")},
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		u, err := toApplyObject(o.obj, o.gvk)
		if err != nil {
			return nil, fmt.Errorf("metrics-server's %s: %w", o.gvk.Kind, err)
		}
		out[i] = u
	}
	return out, nil
}

// vpaClients are the clients of the kind cluster that KindDeployVPA and
// KindSetVPAGate use.
type vpaClients struct {
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	metrics metricsclient.Interface
}

func (k *Kind) vpaClients() (vpaClients, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", k.KindKubeconfig())
	if err != nil {
		return vpaClients{}, err
	}
	var c vpaClients
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return vpaClients{}, err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return vpaClients{}, err
	}
	if c.metrics, err = metricsclient.NewForConfig(cfg); err != nil {
		return vpaClients{}, err
	}
	return c, nil
}

// discoveryMapper maps the kinds of the manifests to the API's resources.
// Groups whose discovery fails (an aggregated API that is down) are left out.
func discoveryMapper(kube kubernetes.Interface) (meta.RESTMapper, error) {
	groups, err := restmapper.GetAPIGroupResources(kube.Discovery())
	if err != nil {
		return nil, fmt.Errorf("API discovery: %w", err)
	}
	return restmapper.NewDiscoveryRESTMapper(groups), nil
}

// applyObjects applies the objects in order, server-side, taking over fields
// that another manager set (kubectl, an earlier tool).
func applyObjects(ctx context.Context, client dynamic.Interface, mapper meta.RESTMapper, objs ...*unstructured.Unstructured) error {
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		var r dynamic.ResourceInterface = client.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				return fmt.Errorf("%s %s has no namespace", gvk.Kind, obj.GetName())
			}
			r = client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: vpaFieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	return nil
}

// waitCRDsEstablished waits until the API serves each CRD, so that the
// components find their kinds when they start.
func waitCRDsEstablished(ctx context.Context, client dynamic.Interface, crds []*unstructured.Unstructured, timeout time.Duration) error {
	pending := map[string]bool{}
	for _, crd := range crds {
		pending[crd.GetName()] = true
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for name := range pending {
			crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conditions {
				if c, _ := c.(map[string]any); c["type"] == "Established" && c["status"] == "True" {
					delete(pending, name)
				}
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("CRDs not established within %v: %v: %w", timeout, slices.Sorted(maps.Keys(pending)), err)
	}
	return nil
}

// setVPAGate sets the gate in the container of each VPA component's
// Deployment, a rollout where it changes.
func setVPAGate(ctx context.Context, kube kubernetes.Interface, on bool) error {
	for _, component := range images.VPAComponents {
		name := vpaDeployment(component)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := kube.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			containers := d.Spec.Template.Spec.Containers
			i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == component })
			if i < 0 {
				return fmt.Errorf("Deployment kube-system/%s has no container %s", name, component)
			}
			args, err := setGateArg(containers[i].Args, on)
			if err != nil {
				return fmt.Errorf("Deployment kube-system/%s: %w", name, err)
			}
			if slices.Equal(args, containers[i].Args) {
				return nil
			}
			containers[i].Args = args
			_, err = kube.AppsV1().Deployments(metav1.NamespaceSystem).Update(ctx, d, metav1.UpdateOptions{FieldManager: vpaFieldManager})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// wait waits until nothing is missing (c.missing); on timeout it says what is.
func (c vpaClients) wait(ctx context.Context, timeout time.Duration) error {
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		missing = c.missing(ctx)
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the VPA is not running within %v:\n  %s", timeout, strings.Join(missing, "\n  "))
	}
	return nil
}

// missing says what of the VPA is not running yet: each Deployment not rolled
// out (with its pods' state), the webhook the admission controller registers
// (by its running pod, with the CA of the TLS secret), and node metrics.
func (c vpaClients) missing(ctx context.Context) []string {
	var missing []string
	for _, name := range append([]string{metricsServerName}, vpaDeployments()...) {
		if m := c.deploymentMissing(ctx, name); m != "" {
			missing = append(missing, m)
		}
	}
	if m := c.webhookMissing(ctx); m != "" {
		missing = append(missing, m)
	}
	if m := c.nodeMetricsMissing(ctx); m != "" {
		missing = append(missing, m)
	}
	return missing
}

// vpaDeployments are the Deployments of the VPA's components.
func vpaDeployments() []string {
	out := make([]string, len(images.VPAComponents))
	for i, c := range images.VPAComponents {
		out[i] = vpaDeployment(c)
	}
	return out
}

// deploymentMissing says how the Deployment is not rolled out and available, as
// kubectl rollout status judges it, with the state of its pods; "" when it is.
func (c vpaClients) deploymentMissing(ctx context.Context, name string) string {
	d, err := c.kube.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("Deployment kube-system/%s: %v", name, err)
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	var why string
	switch s := d.Status; {
	case s.ObservedGeneration < d.Generation:
		why = "its controller has not seen its last change"
	case s.UpdatedReplicas < want:
		why = fmt.Sprintf("%d of %d replicas updated", s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		why = fmt.Sprintf("%d old replicas not terminated", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas:
		why = fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas)
	default:
		return ""
	}
	pods, err := c.podsOf(ctx, d)
	if err != nil {
		return fmt.Sprintf("Deployment kube-system/%s: %s; its pods: %v", name, why, err)
	}
	return fmt.Sprintf("Deployment kube-system/%s: %s; %s", name, why, c.podStates(ctx, pods))
}

// deploymentPods are the pods of the Deployment's selector.
func (c vpaClients) deploymentPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	d, err := c.kube.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return c.podsOf(ctx, d)
}

func (c vpaClients) podsOf(ctx context.Context, d *appsv1.Deployment) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: %w", d.Name, err)
	}
	pods, err := c.kube.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// podStates describes pods: phase, node, why they are not scheduled, and each
// container's readiness, restarts, waiting state and last termination, with
// the last lines of the log of a container that restarted.
func (c vpaClients) podStates(ctx context.Context, pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "no pods"
	}
	var out []string
	for _, p := range pods {
		s := fmt.Sprintf("pod %s %s on node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				s += fmt.Sprintf(", not scheduled: %s: %s", cond.Reason, cond.Message)
			}
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			s += fmt.Sprintf("; container %s ready=%t restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				s += ", waiting: " + withMessage(w.Reason, w.Message)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				s += ", last terminated: " + withMessage(fmt.Sprintf("%s, exit code %d", t.Reason, t.ExitCode), t.Message)
			}
			if cs.RestartCount > 0 {
				s += ", its last run's log: " + c.previousLog(ctx, p.Name, cs.Name)
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func withMessage(reason, message string) string {
	if message == "" {
		return reason
	}
	return reason + ": " + message
}

// previousLog is the end of the log of a container's previous run.
func (c vpaClients) previousLog(ctx context.Context, pod, container string) string {
	raw, err := c.kube.CoreV1().Pods(metav1.NamespaceSystem).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, Previous: true, TailLines: ptr.To[int64](10),
	}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%q", strings.TrimSpace(string(raw)))
}

// webhookMissing says how the admission controller's webhook is not in place
// for its running pod, or "": registered (the admission controller deletes
// and creates it 10 s after it starts, so one registered before its pod
// started is its predecessor's and is about to go), for the Service, with the
// TLS secret's CA.
func (c vpaClients) webhookMissing(ctx context.Context) string {
	const what = "MutatingWebhookConfiguration " + vpaWebhookConfig
	secret, err := c.kube.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, vpaTLSSecret, metav1.GetOptions{})
	if err != nil {
		return what + ": the TLS secret: " + err.Error()
	}
	hook, err := c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, vpaWebhookConfig, metav1.GetOptions{})
	if err != nil {
		return what + ": " + err.Error()
	}
	pods, err := c.deploymentPods(ctx, vpaDeployment("admission-controller"))
	if err != nil {
		return what + ": the admission controller's pods: " + err.Error()
	}
	var started *metav1.Time
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if r := cs.State.Running; r != nil && (started == nil || started.Before(&r.StartedAt)) {
				started = &r.StartedAt
			}
		}
	}
	switch {
	case started == nil:
		return what + ": no admission controller runs"
	case hook.CreationTimestamp.Before(started):
		return fmt.Sprintf("%s: registered at %s, before the admission controller started at %s", what, hook.CreationTimestamp.UTC().Format(time.RFC3339), started.UTC().Format(time.RFC3339))
	}
	for _, w := range hook.Webhooks {
		if s := w.ClientConfig.Service; s == nil || s.Namespace != metav1.NamespaceSystem || s.Name != vpaWebhookService {
			return fmt.Sprintf("%s: webhook %s is not registered for Service kube-system/%s", what, w.Name, vpaWebhookService)
		}
		if !bytes.Equal(w.ClientConfig.CABundle, secret.Data[vpaCACertKey]) {
			return fmt.Sprintf("%s: webhook %s's caBundle is not the CA of secret kube-system/%s", what, w.Name, vpaTLSSecret)
		}
	}
	if len(hook.Webhooks) == 0 {
		return what + ": no webhook"
	}
	return ""
}

// nodeMetricsMissing says which Ready nodes metrics.k8s.io has no metrics of,
// with the APIService's availability when the API fails; "" when it has all.
func (c vpaClients) nodeMetricsMissing(ctx context.Context) string {
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "node metrics: listing the nodes: " + err.Error()
	}
	metrics, err := c.metrics.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("node metrics: %v (APIService %s: %s)", err, metricsServerAPIService, c.apiServiceAvailability(ctx))
	}
	has := map[string]bool{}
	for _, m := range metrics.Items {
		has[m.Name] = true
	}
	var lacking []string
	for _, n := range nodes.Items {
		if nodeReady(&n) && !has[n.Name] {
			lacking = append(lacking, n.Name)
		}
	}
	if len(lacking) > 0 {
		slices.Sort(lacking)
		return fmt.Sprintf("node metrics: metrics.k8s.io has none of nodes %s", strings.Join(lacking, ", "))
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// apiServiceAvailability is the Available condition of metrics-server's APIService.
func (c vpaClients) apiServiceAvailability(ctx context.Context) string {
	svc, err := c.dynamic.Resource(apiServiceResource).Get(ctx, metricsServerAPIService, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	conditions, _, _ := unstructured.NestedSlice(svc.Object, "status", "conditions")
	for _, cond := range conditions {
		if cond, _ := cond.(map[string]any); cond["type"] == "Available" {
			return fmt.Sprintf("Available=%v %v: %v", cond["status"], cond["reason"], cond["message"])
		}
	}
	return "no Available condition"
}

// VPAHistory is what one node-scoped VPA keeps per node: the targets of its
// VerticalPodAutoscalerSlices and the nodes its
// VerticalPodAutoscalerCheckpointSlices hold history of. Two reads are
// compared with reflect.DeepEqual.
type VPAHistory struct {
	// Targets are the target of each node's recommendation, by node and
	// container: resource name to quantity, in canonical form.
	Targets map[string]map[string]map[string]string
	// Checkpointed are the nodes of the checkpoint slices, sorted.
	Checkpointed []string
}

// ReadVPAHistory reads the per-node history of the VPA namespace/name: the
// slices and checkpoint slices that name it (vpaName) and that it owns (an
// ownerReference with its UID: those of an earlier VPA of the same name, not
// yet collected, are not its own, as its readers in the VPA decide). A node
// found in two slices (a move that a recommender restart cut short) has the
// entry of the newer slice (updateTime), as the admission controller and the
// updater read it.
func ReadVPAHistory(ctx context.Context, client dynamic.Interface, namespace, name string) (VPAHistory, error) {
	vpa, err := client.Resource(VPAResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return VPAHistory{}, err
	}
	owned := func(resource schema.GroupVersionResource) ([]unstructured.Unstructured, error) {
		list, err := client.Resource(resource).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("%s of VPA %s/%s: %w", resource.Resource, namespace, name, err)
		}
		var out []unstructured.Unstructured
		for _, item := range list.Items {
			vpaName, _, _ := unstructured.NestedString(item.Object, "vpaName")
			if vpaName == name && slices.ContainsFunc(item.GetOwnerReferences(), func(o metav1.OwnerReference) bool {
				return o.Kind == "VerticalPodAutoscaler" && o.UID == vpa.GetUID()
			}) {
				out = append(out, item)
			}
		}
		return out, nil
	}
	recSlices, err := owned(VPASliceResource)
	if err != nil {
		return VPAHistory{}, err
	}
	h := VPAHistory{Targets: map[string]map[string]map[string]string{}}
	writtenAt := map[string]time.Time{} // the updateTime of the slice each node's entry is from
	for _, s := range recSlices {
		raw, _, _ := unstructured.NestedString(s.Object, "updateTime")
		var updated time.Time
		if raw != "" {
			if updated, err = time.Parse(time.RFC3339, raw); err != nil {
				return VPAHistory{}, fmt.Errorf("slice %s: updateTime: %w", s.GetName(), err)
			}
		}
		nodes, _, err := unstructured.NestedSlice(s.Object, "nodes")
		if err != nil {
			return VPAHistory{}, fmt.Errorf("slice %s: %w", s.GetName(), err)
		}
		for _, n := range nodes {
			entry, _ := n.(map[string]any)
			node, _, _ := unstructured.NestedString(entry, "nodeName")
			if at, seen := writtenAt[node]; seen && !at.Before(updated) {
				continue
			}
			targets, err := containerTargets(entry)
			if err != nil {
				return VPAHistory{}, fmt.Errorf("slice %s, node %s: %w", s.GetName(), node, err)
			}
			h.Targets[node], writtenAt[node] = targets, updated
		}
	}
	checkpointSlices, err := owned(VPACheckpointSliceResource)
	if err != nil {
		return VPAHistory{}, err
	}
	checkpointed := map[string]bool{}
	for _, s := range checkpointSlices {
		nodes, _, err := unstructured.NestedSlice(s.Object, "nodes")
		if err != nil {
			return VPAHistory{}, fmt.Errorf("checkpoint slice %s: %w", s.GetName(), err)
		}
		for _, n := range nodes {
			entry, _ := n.(map[string]any)
			node, _, _ := unstructured.NestedString(entry, "nodeName")
			checkpointed[node] = true
		}
	}
	h.Checkpointed = slices.Sorted(maps.Keys(checkpointed))
	return h, nil
}

// containerTargets reads the targets of a node entry's recommendation, by container.
func containerTargets(entry map[string]any) (map[string]map[string]string, error) {
	recs, _, err := unstructured.NestedSlice(entry, "recommendation", "containerRecommendations")
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, r := range recs {
		rec, _ := r.(map[string]any)
		container, _, _ := unstructured.NestedString(rec, "containerName")
		target, _, err := unstructured.NestedMap(rec, "target")
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", container, err)
		}
		quantities := map[string]string{}
		for res, v := range target {
			q, err := resource.ParseQuantity(fmt.Sprint(v))
			if err != nil {
				return nil, fmt.Errorf("container %s: target %s: %w", container, res, err)
			}
			quantities[res] = q.String()
		}
		out[container] = quantities
	}
	return out, nil
}
