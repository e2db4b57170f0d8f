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
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

func TestNodeNameResolvesToLoopback(t *testing.T) {
	name := NodeName()
	addrs, err := net.LookupHost(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if !net.ParseIP(a).IsLoopback() {
			t.Errorf("node name %s resolves to %s: the apiserver would reach the kubelet off loopback", name, a)
		}
	}
}

func TestRepoListPointsTheSmokeRegistriesAtTheLocalOne(t *testing.T) {
	var list map[string]string
	if err := yaml.Unmarshal([]byte(RepoList("127.0.0.1:5000")), &list); err != nil {
		t.Fatal(err)
	}
	if list["promoterE2eRegistry"] != "127.0.0.1:5000/e2e-test-images" || list["gcRegistry"] != "127.0.0.1:5000" {
		t.Errorf("repo list: %v", list)
	}
}

func TestConfigsStayInTheClusterFolder(t *testing.T) {
	c := New("/srv/repo", nil)
	for _, n := range c.AllNodes() {
		for name, cfg := range map[string]string{"containerd": containerdConfig(n), "kubelet": kubeletConfig(c, n), "cni": CNIConfig(n)} {
			for _, line := range strings.Split(cfg, "\n") {
				if strings.Contains(line, "/") && strings.Contains(line, `"/`) && !strings.Contains(line, "/srv/repo/_output/cluster") &&
					!strings.Contains(line, "/usr/lib/cni") && !strings.Contains(line, "http://") {
					t.Errorf("%s config of node %s writes outside the cluster folder: %s", name, n.Name, line)
				}
			}
		}
		if !strings.Contains(containerdConfig(n), "restrict_oom_score_adj = true") {
			t.Errorf("containerd must not lower oom_score_adj on sandboxed machines")
		}
		if !strings.Contains(kubeletConfig(c, n), "address: 127.0.0.1") {
			t.Errorf("the kubelet must serve on loopback only")
		}
	}
}

// TestSecondNodeHasItsOwnEverything: the second node shares nothing with the
// first that a kubelet or containerd would claim (docs/local-cluster.md).
func TestSecondNodeHasItsOwnEverything(t *testing.T) {
	c := New("/srv/repo", nil)
	if len(c.nodes()) != 1 {
		t.Errorf("the default cluster has %d nodes, want 1", len(c.nodes()))
	}
	c.Nodes = 2
	nodes := c.nodes()
	if len(nodes) != 2 {
		t.Fatalf("Nodes = 2 starts %d nodes", len(nodes))
	}
	a, b := nodes[0], nodes[1]
	for what, pair := range map[string][2]string{
		"name":              {a.Name, b.Name},
		"dir":               {a.Dir, b.Dir},
		"kubelet port":      {a.kubeletAddr(), b.kubeletAddr()},
		"healthz port":      {a.healthzAddr(), b.healthzAddr()},
		"containerd socket": {a.ContainerdSocket(), b.ContainerdSocket()},
		"bridge":            {a.Bridge, b.Bridge},
		"subnet":            {a.Subnet, b.Subnet},
		"cgroupRoot":        {a.cgroupRoot, b.cgroupRoot},
		"kubeconfig":        {a.kubeconfig(), b.kubeconfig()},
	} {
		if pair[0] == pair[1] {
			t.Errorf("both nodes have the %s %q", what, pair[0])
		}
	}
	if a.kubeletAddr() != "127.0.0.1:10250" || a.ContainerdSocket() != "/srv/repo/_output/cluster/run/containerd.sock" || a.cgroupRoot != "" {
		t.Errorf("the first node moved: %+v", a)
	}
	_, an, _ := net.ParseCIDR(a.Subnet)
	_, bn, _ := net.ParseCIDR(b.Subnet)
	if an.Contains(bn.IP) || bn.Contains(an.IP) {
		t.Errorf("pod subnets %s and %s overlap", a.Subnet, b.Subnet)
	}
	kb := kubeletConfig(c, b)
	for _, want := range []string{"port: 10350\n", "healthzPort: 10348\n", "readOnlyPort: 0\n", "cgroupRoot: /kube-carry-node2\n",
		"podLogsDirectory: /srv/repo/_output/cluster/node2/pod-logs\n", "unix:///srv/repo/_output/cluster/node2/run/containerd.sock\n", "pki/kubelet-node2-serving.crt\n"} {
		if !strings.Contains(kb, want) {
			t.Errorf("the second kubelet's config lacks %q:\n%s", want, kb)
		}
	}
	cb := containerdConfig(b)
	for _, want := range []string{`root = "/srv/repo/_output/cluster/node2/containerd/root"`, `address = "/srv/repo/_output/cluster/node2/run/containerd.sock"`,
		`Root = "/srv/repo/_output/cluster/node2/containerd/runc"`, `conf_dir = "/srv/repo/_output/cluster/node2/cni/net.d"`} {
		if !strings.Contains(cb, want) {
			t.Errorf("the second containerd's config lacks %q", want)
		}
	}
	if nb := CNIConfig(b); !strings.Contains(nb, `"bridge": "carry1"`) || !strings.Contains(nb, `"10.88.1.0/24"`) {
		t.Errorf("the second node's CNI config: %s", nb)
	}
	if strings.Contains(containerdConfig(a), "Root =") || strings.Contains(kubeletConfig(c, a), "cgroupRoot") {
		t.Errorf("the first node's configs changed")
	}
}

func TestHostsEntryIsAddedOnceAndRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	orig := "127.0.0.1 localhost\n::1 ip6-localhost" // no final newline
	os.WriteFile(path, []byte(orig), 0o644)
	for i := 0; i < 2; i++ {
		if err := addHostsEntry(path, "vm-2"); err != nil {
			t.Fatal(err)
		}
	}
	if got := hostsEntries(path); len(got) != 1 || !strings.HasPrefix(got[0], "127.0.0.1 vm-2 #") {
		t.Errorf("entries after adding twice: %q", got)
	}
	if err := removeHostsEntries(path); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if string(data) != orig+"\n" || len(hostsEntries(path)) != 0 {
		t.Errorf("after removal: %q", data)
	}
}

func TestCgroupRootIsCreatedInEveryHierarchyAndRemoved(t *testing.T) {
	base := t.TempDir()
	defer func(old string) { cgroupBase = old }(cgroupBase)
	cgroupBase = base
	for _, h := range []string{"cpu", "memory", "cpuset"} {
		os.MkdirAll(filepath.Join(base, h), 0o755)
		os.WriteFile(filepath.Join(base, h, "cgroup.procs"), nil, 0o644)
	}
	os.MkdirAll(filepath.Join(base, "not-a-hierarchy"), 0o755)
	if err := createCgroupRoot("/kube-carry-node2"); err != nil {
		t.Fatal(err)
	}
	if got := cgroupLeftovers("/kube-carry-node2"); len(got) != 3 {
		t.Errorf("cgroup root in %v, want cpu, memory and cpuset", got)
	}
	os.MkdirAll(filepath.Join(base, "cpu", "kube-carry-node2", "kubepods", "besteffort"), 0o755)
	if err := RemoveCgroupRoot("/kube-carry-node2"); err != nil {
		t.Fatal(err)
	}
	if got := cgroupLeftovers("/kube-carry-node2"); len(got) != 0 {
		t.Errorf("left after removal: %v", got)
	}
	if cgroupDirs("") != nil {
		t.Errorf("the first node (default cgroupRoot) has cgroup dirs of its own")
	}
}

func TestRunningIgnoresStaleAndReusedPids(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	os.MkdirAll(filepath.Join(c.Dir, "run"), 0o755)
	if _, ok := c.Running("x"); ok {
		t.Error("no pid file, yet running")
	}
	// Our own pid with a wrong start time is a reused pid, not the daemon.
	os.WriteFile(c.pidFile("x"), []byte(strings.Join([]string{strconv.Itoa(os.Getpid()), "1"}, " ")), 0o644)
	if _, ok := c.Running("x"); ok {
		t.Error("a pid with another start time counts as running")
	}
	st, _ := startTime(os.Getpid())
	os.WriteFile(c.pidFile("x"), []byte(strconv.Itoa(os.Getpid())+" "+st), 0o644)
	if pid, ok := c.Running("x"); !ok || pid != os.Getpid() {
		t.Error("the recorded process is not seen as running")
	}
}

func TestPortFreeNamesTheBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = PortFree(l.Addr().String())
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()+" is in use") {
		t.Errorf("portFree: %v", err)
	}
}

// TestKindConfigEnablesTheClusterFeatures keeps the kind configs of build/kind in
// step with what the local cluster turns on, and with their node images: the
// project's has no kindnetd; one that kind builds on its own base image
// (cluster-kindnetd.yaml) has, and needs the default CNI on.
func TestKindConfigEnablesTheClusterFeatures(t *testing.T) {
	for f, kindnetd := range map[string]bool{"cluster.yaml": false, "cluster-ha.yaml": false, "cluster-kindnetd.yaml": true} {
		t.Run(f, func(t *testing.T) { testKindConfig(t, "../../../build/kind/"+f, kindnetd) })
	}
}

func testKindConfig(t *testing.T, file string, kindnetd bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		FeatureGates  map[string]bool   `json:"featureGates"`
		RuntimeConfig map[string]string `json:"runtimeConfig"`
		Networking    struct {
			DisableDefaultCNI bool `json:"disableDefaultCNI"`
		} `json:"networking"`
		KubeadmConfigPatches []string `json:"kubeadmConfigPatches"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	// kubeadm's API calls outlast kube-apiserver's start on a loaded machine.
	timeouts := map[string]string{}
	for _, p := range cfg.KubeadmConfigPatches {
		var patch struct {
			Kind     string `json:"kind"`
			Timeouts struct {
				KubernetesAPICall string `json:"kubernetesAPICall"`
			} `json:"timeouts"`
		}
		if err := yaml.Unmarshal([]byte(p), &patch); err != nil {
			t.Fatal(err)
		}
		timeouts[patch.Kind] = patch.Timeouts.KubernetesAPICall
	}
	for _, kind := range []string{"InitConfiguration", "JoinConfiguration"} {
		if d, err := time.ParseDuration(timeouts[kind]); err != nil || d < 5*time.Minute {
			t.Errorf("kind config: %s timeouts.kubernetesAPICall %q, want at least 5m", kind, timeouts[kind])
		}
	}
	switch {
	case !kindnetd && !cfg.Networking.DisableDefaultCNI:
		t.Error("networking.disableDefaultCNI is not set: kindnetd's stand-in would fail every node")
	case kindnetd && cfg.Networking.DisableDefaultCNI:
		t.Error("networking.disableDefaultCNI is set: kind's base image brings kindnetd, and the cluster would have no pod network")
	}
	gates, err := FeatureGates("../../..")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, g := range gates {
		name, value, _ := strings.Cut(g, "=")
		want[name] = value == "true"
	}
	if len(want) != len(cfg.FeatureGates) {
		t.Errorf("kind feature gates %v, want %v", cfg.FeatureGates, want)
	}
	for name, on := range want {
		if got, ok := cfg.FeatureGates[name]; !ok || got != on {
			t.Errorf("kind config: feature gate %s = %v, want %v", name, got, on)
		}
	}
	for _, rc := range RuntimeConfig {
		gv, value, _ := strings.Cut(rc, "=")
		if cfg.RuntimeConfig[gv] != value {
			t.Errorf("kind config: runtimeConfig %s = %q, want %q", gv, cfg.RuntimeConfig[gv], value)
		}
	}
}

func TestSlowRegistryDelaysManifestsAndAliasesTags(t *testing.T) {
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.Path)
	}))
	defer upstream.Close()
	s := &SlowRegistry{Upstream: strings.TrimPrefix(upstream.URL, "http://"), Delay: 50 * time.Millisecond}
	proxy := httptest.NewServer(s)
	defer proxy.Close()

	start := time.Now()
	resp, err := http.Head(proxy.URL + "/v2/carry/synthetic/manifests/64mib--run1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if time.Since(start) < 50*time.Millisecond {
		t.Errorf("a manifest request came back after %v, want at least the delay", time.Since(start))
	}
	http.Get(proxy.URL + "/v2/carry/synthetic/blobs/sha256:abc")
	// A repository of its own: its manifests and blobs are the original's.
	http.Head(proxy.URL + "/v2/carry/synthetic--run2/manifests/64mib--run2")
	http.Get(proxy.URL + "/v2/carry/synthetic--run2/blobs/sha256:abc")
	if strings.Join(seen, " ") != "/v2/carry/synthetic/manifests/64mib /v2/carry/synthetic/blobs/sha256:abc /v2/carry/synthetic/manifests/64mib /v2/carry/synthetic/blobs/sha256:abc" {
		t.Errorf("upstream saw %v", seen)
	}
	resp, err = http.Get(proxy.URL + "/carry/requests/carry/synthetic:64mib--run1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "1" {
		t.Errorf("requests for the tag: %q", body)
	}
}

// A tag ending with "-held" reaches the registry only once released: the pull gate's
// e2e test ends the pulls that hold the slots when it chooses.
func TestSlowRegistryHoldsUntilReleased(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
	}))
	defer upstream.Close()
	proxy := httptest.NewServer(&SlowRegistry{Upstream: strings.TrimPrefix(upstream.URL, "http://")})
	defer proxy.Close()
	get := func(path string) string {
		resp, err := http.Get(proxy.URL + path)
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		get("/v2/carry/synthetic/manifests/64mib--1-held")
	}()
	for get("/carry/requests/carry/synthetic:64mib--1-held") != "1" {
		runtime.Gosched()
	}
	// A tag that is not held passes the held one.
	get("/v2/carry/synthetic/manifests/64mib--run1")
	mu.Lock()
	if strings.Join(seen, " ") != "/v2/carry/synthetic/manifests/64mib" {
		t.Errorf("before the release upstream saw %v, want only the tag not held", seen)
	}
	mu.Unlock()
	get("/carry/release/carry/synthetic:64mib--1-held")
	<-done
	get("/carry/release/carry/synthetic:64mib--1-held") // a second release is harmless
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Errorf("after the release upstream saw %v, want both", seen)
	}
}

// A package named by a file it provides (a header, not a program) counts as
// installed when the file exists: nothing is installed then.
func TestInstallPackagesChecksFilesByPath(t *testing.T) {
	header := filepath.Join(t.TempDir(), "seccomp.h")
	if err := os.WriteFile(header, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := InstallPackages(&log, map[string]string{header: "libseccomp-dev", "sh": "dash"}); err != nil {
		t.Fatal(err)
	}
	if log.Len() != 0 {
		t.Errorf("installed packages for files that exist: %s", log.String())
	}
}

// The registry's storage outlives clusters: one filled before a move to a new
// upstream release holds the images under the tags the old tree asked for,
// and the cluster's images must be pushed again under the new ones.
func TestImagesArePushedAgainWhenATagChanges(t *testing.T) {
	held := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !held[r.URL.Path] {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	registry := strings.TrimPrefix(srv.URL, "http://")
	held["/v2/pause/manifests/"+images.PauseTag] = true
	held["/v2/e2e-test-images/busybox/manifests/"+images.BusyboxTag] = true
	for _, mib := range syntheticSizes {
		held["/v2/carry/synthetic/manifests/"+strconv.Itoa(mib)+"mib"] = true
	}
	ctx := context.Background()
	if !standardImagesIn(ctx, registry) {
		t.Fatalf("a registry holding every image at the tree's tags: not all in")
	}
	delete(held, "/v2/e2e-test-images/busybox/manifests/"+images.BusyboxTag)
	held["/v2/e2e-test-images/busybox/manifests/1.36.1-1"] = true // an older tree's
	if standardImagesIn(ctx, registry) {
		t.Errorf("a registry holding busybox only under an older tag: all in, so busybox %s is never pushed", images.BusyboxTag)
	}
}
