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

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The files as kind v0.33.0 writes them for two control-plane nodes
// (pkg/cluster/internal/loadbalancer: DynamicFilesystemConfigTemplate,
// ProxyLDSConfigTemplate, ProxyCDSConfigTemplate), with this test's addresses.
const (
	bootstrapFile = `
node:
  cluster: kind
  id: kind-external-load-balancer

dynamic_resources:
  cds_config:
    resource_api_version: V3
    path_config_source:
      path: %s
  lds_config:
    resource_api_version: V3
    path_config_source:
      path: %s

admin:
  access_log_path: /dev/stdout
  address:
    socket_address:
      address: 0.0.0.0
      port_value: 10000
`
	ldsFile = `
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: listener_apiserver
  address:
    socket_address:
      address: "127.0.0.1"
      port_value: %s
  filter_chains:
  - filters:
    - name: envoy.filters.network.tcp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: ingress_tcp
        cluster: kube_apiservers
`
	cdsFile = `
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: kube_apiservers
  connect_timeout: 0.25s
  type: STRICT_DNS
  lb_policy: ROUND_ROBIN
  dns_lookup_family: V4_PREFERRED
  health_checks:
  - timeout: 3s
    interval: 2s
    http_health_check:
      path: /healthz
  load_assignment:
    cluster_name: kube_apiservers
    endpoints:
    - lb_endpoints:
      - endpoint:
          address:
            socket_address:
              address: %s
              port_value: %s
      - endpoint:
          address:
            socket_address:
              address: %s
              port_value: %s
`
)

// backend is an HTTPS server that names itself and whose /healthz can fail.
type backend struct {
	*httptest.Server
	healthy atomic.Bool
}

func newBackend(name string) *backend {
	b := &backend{}
	b.healthy.Store(true)
	b.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && !b.healthy.Load() {
			http.Error(w, "not ready", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, name)
	}))
	return b
}

func TestForwardsToHealthyAPIServersAsKindConfiguresEnvoy(t *testing.T) {
	a, b := newBackend("a"), newBackend("b")
	defer a.Close()
	defer b.Close()
	b.healthy.Store(false)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lds, cds := filepath.Join(dir, "lds.yaml"), filepath.Join(dir, "cds.yaml")
	bootstrap := write("envoy.yaml", fmt.Sprintf(bootstrapFile, cds, lds))
	write("lds.yaml", fmt.Sprintf(ldsFile, port))
	ah, ap, _ := net.SplitHostPort(a.Listener.Addr().String())
	bh, bp, _ := net.SplitHostPort(b.Listener.Addr().String())
	write("cds.yaml", fmt.Sprintf(cdsFile, ah, ap, bh, bp))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, bootstrap, 20*time.Millisecond, 20*time.Millisecond) }()

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true,
	}}
	who := func() string {
		resp, err := client.Get("https://127.0.0.1:" + port + "/")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// seen asks n times and returns which backends answered.
	seen := func(n int) string {
		got := map[string]bool{}
		for i := 0; i < n; i++ {
			got[who()] = true
		}
		var names []string
		for _, n := range []string{"a", "b"} {
			if got[n] {
				names = append(names, n)
			}
			delete(got, n)
		}
		for other := range got {
			names = append(names, other)
		}
		return strings.Join(names, ",")
	}
	eventually := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := seen(6)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("answered by %q, want %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	eventually("a") // b fails its health check
	b.healthy.Store(true)
	eventually("a,b") // round robin over both
	a.healthy.Store(false)
	b.healthy.Store(false)
	eventually("a,b") // none healthy: envoy's panic mode balances over all

	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("run: %v", err)
	}
}
