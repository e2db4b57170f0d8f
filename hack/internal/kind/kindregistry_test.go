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
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
)

// The kind side of the pull gate's tests: the image in the in-memory registry,
// pulled through SlowRegistry under a tag no node has seen, as the e2e tests name it.
func TestKindSlowRegistryServesTheImageUnderAnyAlias(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	backend, stop, err := inMemoryRegistry(ctx, map[string]v1.Image{"e2e-test-images/busybox:1.37.0-1": img})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go (&cluster.SlowRegistry{Upstream: backend}).Serve(ctx, l)

	ref, err := name.ParseReference(l.Addr().String()+"/e2e-test-images/busybox:1.37.0-1--a1b2", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	want, _ := img.Digest()
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Errorf("pulled %v (%v), want %v", got, err, want)
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/carry/requests/e2e-test-images/busybox:1.37.0-1--a1b2")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "1" {
		t.Errorf("manifest requests of the alias: %q, want 1", body)
	}
}

func TestIPv4GatewayOfTheKindNetwork(t *testing.T) {
	for gateways, want := range map[string]string{
		"172.18.0.1 ":                       "172.18.0.1",
		"fc00:f853:ccd:e793::1 172.19.0.1 ": "172.19.0.1",
	} {
		if got, err := ipv4Gateway(gateways); err != nil || got != want {
			t.Errorf("ipv4Gateway(%q) = %q, %v; want %q", gateways, got, err, want)
		}
	}
	if _, err := ipv4Gateway("fc00::1 "); err == nil || !strings.Contains(err.Error(), "no IPv4 gateway") {
		t.Errorf("an IPv6-only network: %v", err)
	}
}

func TestRegistryHostsIsPlainHTTPForPulls(t *testing.T) {
	var hosts struct {
		Host map[string]struct{ Capabilities []string }
	}
	if err := toml.Unmarshal([]byte(registryHosts("172.18.0.1:5001")), &hosts); err != nil {
		t.Fatal(err)
	}
	h, ok := hosts.Host["http://172.18.0.1:5001"]
	if !ok || strings.Join(h.Capabilities, ",") != "pull,resolve" {
		t.Errorf("hosts.toml: %+v", hosts)
	}
}
