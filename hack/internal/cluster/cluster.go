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

// Package cluster runs a single-node cluster of the patched binaries on this machine:
// a local image registry, etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd and a kubelet, all on loopback, with state, logs and
// certificates under one folder. An opt-in second node (Cluster.Nodes = 2) adds a
// second kubelet with a containerd of its own on the same machine. Its process
// handling (Daemon), certificates (PKI) and node configurations also serve the
// packages kind, nodee2e and apiserver.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kube-carry/kube-carry/hack/internal/images"
	"github.com/kube-carry/kube-carry/hack/internal/series"
)

// Addresses of the cluster's servers: loopback only.
const (
	RegistryAddr  = "127.0.0.1:5000"
	etcdClient    = "127.0.0.1:2379"
	etcdPeer      = "127.0.0.1:2380"
	apiserverAddr = "127.0.0.1:6443"
	kcmAddr       = "127.0.0.1:10257"
	schedulerAddr = "127.0.0.1:10259"
	// The pod network: a bridge of this cluster's own on this machine.
	bridgeName  = "carry0"
	podSubnet   = "10.88.0.0/24"
	ServiceCIDR = "10.96.0.0/24"
)

// FeatureGates returns the gates the cluster turns on in every component, as kind
// does: every gate the series adds (series gates), on. A component left with a gate
// off shows as a dangling use of that Feature (docs/feature-api.md).
func FeatureGates(root string) ([]string, error) {
	gates, err := series.Repo{Root: root}.Gates(series.Kubernetes)
	if err != nil {
		return nil, err
	}
	for i, g := range gates {
		gates[i] = g + "=true"
	}
	return gates, nil
}

// RuntimeConfig enables the alpha APIs this project adds.
var RuntimeConfig = []string{"features.k8s.io/v1alpha1=true"}

// Packages are the Debian packages the cluster runs on, by the command each provides.
var Packages = map[string]string{
	"containerd":          "containerd",
	"runc":                "runc",
	"etcd":                "etcd-server",
	"docker-registry":     "docker-registry",
	"busybox":             "busybox-static",
	"ip":                  "iproute2",
	"iptables":            "iptables",
	"conntrack":           "conntrack",
	"gcc":                 "gcc",
	"/usr/lib/cni/bridge": "containernetworking-plugins",
}

// Cluster is the local cluster rooted at Dir.
type Cluster struct {
	Dir     string // _output/cluster
	Bin     string // the patched binaries (_output/bin)
	Tree    string // the kubernetes tree, for the images built from it
	Timeout time.Duration
	Log     io.Writer
	// Nodes is how many nodes Up starts: 1 (the default) or 2 (a second kubelet
	// on this machine, see Node).
	Nodes int
	base  string   // the repository root, for relative paths in messages
	gates []string // FeatureGates, read by Preflight
}

// New describes the cluster of a repository checkout.
func New(root string, log io.Writer) *Cluster {
	return &Cluster{
		Dir:     filepath.Join(root, "_output", "cluster"),
		Bin:     filepath.Join(root, "_output", "bin"),
		Tree:    filepath.Join(root, "_output", "kubernetes"),
		Timeout: 2 * time.Minute,
		Log:     log,
		Nodes:   1,
		base:    root,
	}
}

func (c *Cluster) Logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

func (c *Cluster) Rel(p string) string {
	if r, err := filepath.Rel(c.base, p); err == nil {
		return r
	}
	return p
}

// Tool is a binary of this project's tools (_output/tools).
func (c *Cluster) Tool(name string) string { return filepath.Join(c.base, "_output", "tools", name) }

func (c *Cluster) Path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// Kubeconfig is the administrator's kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.Path("admin.kubeconfig") }

// NodeName is the machine's host name when it resolves to loopback (so that the
// apiserver reaches the kubelet on loopback), "localhost" otherwise.
func NodeName() string {
	h, err := os.Hostname()
	if err == nil {
		h = strings.ToLower(h)
		if addrs, err := net.LookupHost(h); err == nil && len(addrs) > 0 {
			loop := true
			for _, a := range addrs {
				if ip := net.ParseIP(a); ip == nil || !ip.IsLoopback() {
					loop = false
				}
			}
			if loop {
				return h
			}
		}
	}
	return "localhost"
}

// Preflight checks what Up needs and installs the missing Debian packages.
func (c *Cluster) Preflight() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the local cluster runs containerd and a kubelet and needs root")
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if _, err := os.Stat(filepath.Join(c.Bin, b)); err != nil {
			return fmt.Errorf("%s is not built: run 'make' first", filepath.Join(c.Rel(c.Bin), b))
		}
	}
	if _, err := os.Stat(c.Tool("cluster")); err != nil {
		return fmt.Errorf("%s is not built: run 'make cluster-up'", c.Rel(c.Tool("cluster")))
	}
	if c.Nodes < 1 || c.Nodes > 2 {
		return fmt.Errorf("the local cluster runs 1 or 2 nodes, not %d", c.Nodes)
	}
	var err error
	if c.gates, err = FeatureGates(c.base); err != nil {
		return fmt.Errorf("reading the series' feature gates: %w", err)
	}
	for _, n := range c.nodes() {
		if len(n.ContainerdSocket()) > 100 {
			return fmt.Errorf("the containerd socket path %s is longer than a unix socket allows; clone the repository to a shorter path", n.ContainerdSocket())
		}
	}
	return InstallPackages(c.Log, Packages)
}

// InstallPackages installs those of packages (Debian packages by the command or
// absolute path of a file each provides) whose command or file is missing.
func InstallPackages(log io.Writer, packages map[string]string) error {
	var missing []string
	for cmd, pkg := range packages {
		_, err := exec.LookPath(cmd)
		if filepath.IsAbs(cmd) {
			_, err = os.Stat(cmd) // a file, not always a program
		}
		if err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	fmt.Fprintf(log, "installing Debian packages: %s\n", strings.Join(missing, " "))
	update := exec.Command("apt-get", "update", "-qq")
	update.Stdout, update.Stderr = log, log
	if err := update.Run(); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	install := exec.Command("apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
	install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	install.Stdout, install.Stderr = log, log
	if err := install.Run(); err != nil {
		return fmt.Errorf("apt-get install %s: %w", strings.Join(missing, " "), err)
	}
	return nil
}

// Up starts whatever part of the cluster is not running and waits until the node is Ready.
func (c *Cluster) Up(ctx context.Context) error {
	if err := c.Preflight(); err != nil {
		return err
	}
	for _, d := range []string{"run", "logs", "pki", "etc", "registry", "etcd"} {
		if err := os.MkdirAll(c.Path(d), 0o755); err != nil {
			return err
		}
	}
	nodes := c.nodes()
	var names []string
	for _, n := range nodes {
		for _, d := range []string{"run", "etc", "containerd", "kubelet", "cni/net.d", "cni/ipam"} {
			if err := os.MkdirAll(n.path(d), 0o755); err != nil {
				return err
			}
		}
		if n.suffix != "" {
			// The apiserver and metrics-server reach the kubelet by host name.
			if err := ensureResolves(n.Name); err != nil {
				return err
			}
			if err := createCgroupRoot(n.cgroupRoot); err != nil {
				return err
			}
		}
		names = append(names, n.Name)
	}
	if err := c.writePKI(nodes); err != nil {
		return err
	}
	if err := c.writeConfigs(nodes); err != nil {
		return err
	}
	for _, d := range c.daemons(nodes) {
		if err := c.Start(ctx, d); err != nil {
			return err
		}
		if d.Name == "registry" {
			if err := c.pushImages(ctx); err != nil {
				return err
			}
		}
	}
	ready := "node " + names[0] + " is Ready"
	if len(names) > 1 {
		ready = "nodes " + strings.Join(names, " and ") + " are Ready"
	}
	c.Logf("\nthe cluster is up: %s\n  export KUBECONFIG=%s\n  %s get nodes\nstop it with 'make cluster-down'", ready, c.Kubeconfig(), filepath.Join(c.Bin, "kubectl"))
	return nil
}

type leafCert struct {
	name, cn string
	orgs     []string
	usage    x509.ExtKeyUsage
	dns      []string
	ips      []net.IP
}

func (c *Cluster) writePKI(nodes []Node) error {
	p := &PKI{Dir: c.Path("pki")}
	if err := p.EnsureCA(); err != nil {
		return err
	}
	loop := []net.IP{net.ParseIP("127.0.0.1")}
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	leaves := []leafCert{
		{"apiserver", "kube-apiserver", nil, server, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, append(loop, net.ParseIP("10.96.0.1"))},
		{"admin", "kube-carry-admin", []string{"system:masters"}, client, nil, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, client, nil, nil},
		{"controller-manager", "system:kube-controller-manager", nil, client, nil, nil},
		{"scheduler", "system:kube-scheduler", nil, client, nil, nil},
	}
	for _, n := range nodes {
		leaves = append(leaves,
			leafCert{"kubelet" + n.suffix + "-serving", n.Name, nil, server, []string{n.Name, "localhost"}, loop},
			leafCert{"kubelet" + n.suffix, "system:node:" + n.Name, []string{"system:nodes"}, client, nil, nil})
	}
	for _, l := range leaves {
		if err := p.Leaf(l.name, l.cn, l.orgs, l.usage, l.dns, l.ips); err != nil {
			return err
		}
	}
	if err := p.ServiceAccountKey(); err != nil {
		return err
	}
	// The aggregation layer (metrics-server, docs/vpa-node-scope.md): the
	// apiserver proxies to extension apiservers with a client certificate of a
	// front-proxy CA of its own, as kubeadm sets it up.
	fp := &PKI{Dir: c.Path("pki", "front-proxy")}
	if err := fp.EnsureCA(); err != nil {
		return err
	}
	if err := fp.Leaf("front-proxy-client", "front-proxy-client", nil, client, nil, nil); err != nil {
		return err
	}
	apiURL := "https://" + apiserverAddr
	kubeconfigs := map[string]string{"admin": c.Path("admin.kubeconfig"), "controller-manager": c.Path("controller-manager.kubeconfig"), "scheduler": c.Path("scheduler.kubeconfig")}
	for _, n := range nodes {
		kubeconfigs["kubelet"+n.suffix] = n.kubeconfig()
	}
	for name, file := range kubeconfigs {
		if err := p.Kubeconfig(file, apiURL, name); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeConfigs(nodes []Node) error {
	files := map[string]string{
		c.Path("etc", "registry.yml"):     RegistryConfig(c.Path("registry"), RegistryAddr),
		c.Path("etc", "image-repos.yaml"): RepoList(RegistryAddr),
	}
	for _, n := range nodes {
		files[n.path("etc", "containerd.toml")] = containerdConfig(n)
		files[n.path("cni", "net.d", "10-carry.conflist")] = CNIConfig(n)
		files[n.path("etc", "kubelet.yaml")] = kubeletConfig(c, n)
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// daemons are the cluster's processes in start order.
func (c *Cluster) daemons(nodes []Node) []Daemon {
	bin := func(name string) string { return filepath.Join(c.Bin, name) }
	PKI := func(name string) string { return c.Path("pki", name) }
	ds := []Daemon{
		{
			Name: "registry", Port: RegistryAddr,
			Args:    []string{"docker-registry", "serve", c.Path("etc", "registry.yml")},
			Healthy: HTTPOK("http://" + RegistryAddr + "/v2/"),
		},
		{
			Name: "slow-registry", Port: SlowRegistryAddr,
			Args:    []string{c.Tool("cluster"), "slow-registry"},
			Healthy: HTTPOK("http://" + SlowRegistryAddr + "/v2/"),
		},
		EtcdDaemon(c.Path("etcd"), etcdClient, etcdPeer),
		{
			Name: "kube-apiserver", Port: apiserverAddr,
			Args: []string{bin("kube-apiserver"),
				"--bind-address=127.0.0.1", "--secure-port=6443", "--advertise-address=127.0.0.1",
				"--etcd-servers=http://" + etcdClient,
				"--client-ca-file=" + PKI("ca.crt"),
				"--tls-cert-file=" + PKI("apiserver.crt"), "--tls-private-key-file=" + PKI("apiserver.key"),
				"--kubelet-client-certificate=" + PKI("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + PKI("apiserver-kubelet-client.key"),
				"--kubelet-preferred-address-types=Hostname,InternalIP",
				"--service-account-key-file=" + PKI("sa.key"), "--service-account-signing-key-file=" + PKI("sa.key"),
				"--service-account-issuer=https://kubernetes.default.svc",
				"--service-cluster-ip-range=" + ServiceCIDR,
				"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
				// The aggregation layer; without kube-proxy the apiserver routes to
				// the endpoints of an APIService's Service, not its cluster IP.
				"--requestheader-client-ca-file=" + PKI("front-proxy/ca.crt"),
				"--requestheader-allowed-names=front-proxy-client",
				"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
				"--requestheader-extra-headers-prefix=X-Remote-Extra-",
				"--proxy-client-cert-file=" + PKI("front-proxy/front-proxy-client.crt"), "--proxy-client-key-file=" + PKI("front-proxy/front-proxy-client.key"),
				"--enable-aggregator-routing=true",
				"--allow-privileged=true", "--endpoint-reconciler-type=none",
				"--feature-gates=" + strings.Join(c.gates, ","),
				"--runtime-config=" + strings.Join(RuntimeConfig, ","),
			},
			Healthy: c.APIReady,
		},
		{
			Name: "kube-controller-manager", Port: kcmAddr,
			Args: []string{bin("kube-controller-manager"),
				"--kubeconfig=" + c.Path("controller-manager.kubeconfig"),
				"--authentication-kubeconfig=" + c.Path("controller-manager.kubeconfig"),
				"--authorization-kubeconfig=" + c.Path("controller-manager.kubeconfig"),
				"--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
				"--service-account-private-key-file=" + PKI("sa.key"), "--root-ca-file=" + PKI("ca.crt"),
				"--use-service-account-credentials=true",
				"--cluster-signing-cert-file=" + PKI("ca.crt"), "--cluster-signing-key-file=" + PKI("ca.key"),
				"--feature-gates=" + strings.Join(c.gates, ","),
			},
			Healthy: httpsOK("https://" + kcmAddr + "/healthz"),
		},
		{
			Name: "kube-scheduler", Port: schedulerAddr,
			Args: []string{bin("kube-scheduler"),
				"--kubeconfig=" + c.Path("scheduler.kubeconfig"),
				"--authentication-kubeconfig=" + c.Path("scheduler.kubeconfig"),
				"--authorization-kubeconfig=" + c.Path("scheduler.kubeconfig"),
				"--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
				"--feature-gates=" + strings.Join(c.gates, ","),
			},
			Healthy: httpsOK("https://" + schedulerAddr + "/healthz"),
		},
	}
	for _, n := range nodes {
		ds = append(ds,
			Daemon{
				Name:    "containerd" + n.suffix,
				Args:    []string{"containerd", "--config", n.path("etc", "containerd.toml")},
				Healthy: ContainerdReady(n),
			},
			Daemon{
				Name: "kubelet" + n.suffix, Port: n.kubeletAddr(),
				Args: []string{bin("kubelet"),
					"--config=" + n.path("etc", "kubelet.yaml"),
					"--kubeconfig=" + n.kubeconfig(),
					"--root-dir=" + n.path("kubelet"),
					"--cert-dir=" + n.path("kubelet", "pki"),
					"--hostname-override=" + n.Name,
				},
				// The node's status can come before the kubelet's server
				// listens, and tests talk to that server next.
				Healthy: allHealthy(c.nodeReady(n.Name), listening(n.kubeletAddr())),
			})
	}
	return ds
}

// EtcdDaemon is a single-member etcd keeping its data in dir, serving clients
// on client and its peer on peer (host:port, plain HTTP).
func EtcdDaemon(dir, client, peer string) Daemon {
	return Daemon{
		Name: "etcd", Port: client,
		Args: []string{"etcd", "--name", "carry", "--data-dir", dir,
			"--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
			"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
			"--initial-cluster", "carry=http://" + peer, "--listen-metrics-urls", "",
		},
		Healthy: HTTPOK("http://" + client + "/health"),
	}
}

// allHealthy is healthy when each of checks is, in order.
func allHealthy(checks ...func(context.Context, time.Time) error) func(context.Context, time.Time) error {
	return func(ctx context.Context, started time.Time) error {
		for _, check := range checks {
			if err := check(ctx, started); err != nil {
				return err
			}
		}
		return nil
	}
}

// listening checks that addr accepts TCP connections.
func listening(addr string) func(context.Context, time.Time) error {
	return func(ctx context.Context, _ time.Time) error {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

// HTTPOK checks a plain-HTTP health endpoint.
func HTTPOK(url string) func(context.Context, time.Time) error { return getOK(http.DefaultClient, url) }

// httpsOK checks a health endpoint of a component that serves a self-signed certificate.
func httpsOK(url string) func(context.Context, time.Time) error {
	return getOK(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, url)
}

func getOK(client *http.Client, url string) func(context.Context, time.Time) error {
	return func(ctx context.Context, _ time.Time) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// manifestExists asks the local registry for an OCI image manifest.
func manifestExists(ctx context.Context, name, tag string) bool {
	return ManifestIn(ctx, RegistryAddr, name, tag)
}

func ManifestIn(ctx context.Context, registry, name, tag string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+registry+"/v2/"+name+"/manifests/"+tag, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Client is a clientset for the administrator.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (c *Cluster) APIReady(ctx context.Context, _ time.Time) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// ContainerdReady checks that the node's containerd serves the CRI, with the
// call the kubelet's start makes (Version): containerd answers on its socket
// before its CRI plugin has initialized, and a kubelet started then exits
// ("server is not initialized yet").
func ContainerdReady(n Node) func(context.Context, time.Time) error {
	return func(ctx context.Context, _ time.Time) error {
		conn, err := grpc.NewClient("unix://"+n.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}
}

// nodeReady waits for a Ready condition that a kubelet started at started has
// posted, not one left in etcd by an earlier run.
func (c *Cluster) nodeReady(Node string) func(context.Context, time.Time) error {
	return func(ctx context.Context, started time.Time) error {
		cs, err := c.Client()
		if err != nil {
			return err
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.LastHeartbeatTime.Time.Before(started.Truncate(time.Second)) {
					return fmt.Errorf("node %s has no status from the new kubelet yet", Node)
				}
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s is not Ready: %s", Node, cond.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", Node)
	}
}

// syntheticSizes are the sizes in MiB of the synthetic images the cluster's
// registry holds for pull benchmarks.
var syntheticSizes = []int{1, 16, 64}

// pushImages builds the cluster's images and pushes them to the local registry,
// unless it holds every one of them under the tag the tree asks for now: the
// registry's storage outlives the cluster, and a new upstream release changes
// tags.
func (c *Cluster) pushImages(ctx context.Context) error {
	if standardImagesIn(ctx, RegistryAddr) {
		return nil
	}
	c.Logf("%-24s building pause, busybox and synthetic images", "images")
	return c.buildAndPush(ctx, func(work string, n images.Names) (images.Set, error) {
		return images.Standard(c.Tree, work, n, syntheticSizes)
	})
}

// standardImagesIn reports whether the registry holds a manifest for every
// image of images.Standard, under the tag the tree asks for.
func standardImagesIn(ctx context.Context, registry string) bool {
	n := images.Names{Registry: registry}
	refs := []string{n.Pause(), n.Busybox()}
	for _, mib := range syntheticSizes {
		refs = append(refs, n.Synthetic(mib))
	}
	for _, ref := range refs {
		name, tag, _ := strings.Cut(strings.TrimPrefix(ref, registry+"/"), ":")
		if !ManifestIn(ctx, registry, name, tag) {
			return false
		}
	}
	return true
}

// PushE2EImages builds the images of upstream's e2e tests that the cluster itself
// does not need (agnhost) and pushes them to the running cluster's registry.
func (c *Cluster) PushE2EImages(ctx context.Context) error {
	if manifestExists(ctx, "e2e-test-images/agnhost", images.AgnhostTag) {
		return nil
	}
	c.Logf("%-24s building agnhost", "images")
	return c.buildAndPush(ctx, func(work string, n images.Names) (images.Set, error) {
		return images.E2E(c.Tree, work, n)
	})
}

func (c *Cluster) buildAndPush(ctx context.Context, build func(work string, n images.Names) (images.Set, error)) error {
	work, err := os.MkdirTemp("", "kube-carry-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	set, err := build(work, images.Names{Registry: RegistryAddr})
	if err != nil {
		return err
	}
	if err := set.Push(ctx); err != nil {
		return err
	}
	c.Logf("%-24s pushed %d images to %s", "images", len(set), RegistryAddr)
	return nil
}
