package cluster

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
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
	for name, cfg := range map[string]string{"containerd": containerdConfig(c), "kubelet": kubeletConfig(c), "cni": cniConfig(c.path("cni", "ipam"))} {
		for _, line := range strings.Split(cfg, "\n") {
			if strings.Contains(line, "/") && strings.Contains(line, `"/`) && !strings.Contains(line, "/srv/repo/_output/cluster") &&
				!strings.Contains(line, "/usr/lib/cni") && !strings.Contains(line, "http://") {
				t.Errorf("%s config writes outside the cluster folder: %s", name, line)
			}
		}
	}
	if !strings.Contains(containerdConfig(c), "restrict_oom_score_adj = true") {
		t.Errorf("containerd must not lower oom_score_adj on sandboxed machines")
	}
	if !strings.Contains(kubeletConfig(c), "address: 127.0.0.1") {
		t.Errorf("the kubelet must serve on loopback only")
	}
}

func TestRunningIgnoresStaleAndReusedPids(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	os.MkdirAll(filepath.Join(c.Dir, "run"), 0o755)
	if _, ok := c.running("x"); ok {
		t.Error("no pid file, yet running")
	}
	// Our own pid with a wrong start time is a reused pid, not the daemon.
	os.WriteFile(c.pidFile("x"), []byte(strings.Join([]string{strconv.Itoa(os.Getpid()), "1"}, " ")), 0o644)
	if _, ok := c.running("x"); ok {
		t.Error("a pid with another start time counts as running")
	}
	st, _ := startTime(os.Getpid())
	os.WriteFile(c.pidFile("x"), []byte(strconv.Itoa(os.Getpid())+" "+st), 0o644)
	if pid, ok := c.running("x"); !ok || pid != os.Getpid() {
		t.Error("the recorded process is not seen as running")
	}
}

func TestPortFreeNamesTheBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = portFree(l.Addr().String())
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()+" is in use") {
		t.Errorf("portFree: %v", err)
	}
}

// TestKindConfigEnablesTheClusterFeatures keeps build/kind/cluster.yaml in step with
// what the local cluster turns on.
func TestKindConfigEnablesTheClusterFeatures(t *testing.T) {
	data, err := os.ReadFile("../../../build/kind/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		FeatureGates  map[string]bool   `json:"featureGates"`
		RuntimeConfig map[string]string `json:"runtimeConfig"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, g := range FeatureGates {
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
	if strings.Join(seen, " ") != "/v2/carry/synthetic/manifests/64mib /v2/carry/synthetic/blobs/sha256:abc" {
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
