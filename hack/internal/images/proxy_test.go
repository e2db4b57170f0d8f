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

package images

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A client that trusts the proxy's authority pulls the images under their real
// names, Docker Hub's included under the host containerd uses; other images and
// other hosts are refused and reported.
func TestRegistryProxyServesTheSetUnderRealNames(t *testing.T) {
	ctx := context.Background()
	a, err := Synthetic(mustImage(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Synthetic(mustImage(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	set := Set{"registry.k8s.io/etcd:3.6.8-0": a, "docker.io/kindest/kindnetd:v1": b}
	p, err := StartRegistryProxy(ctx, set, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CACert()) {
		t.Fatal("the CA certificate is not PEM")
	}
	proxyURL, _ := url.Parse(p.URL())
	transport := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}

	for ref, want := range map[string]v1.Image{
		"registry.k8s.io/etcd:3.6.8-0":             a,
		"registry-1.docker.io/kindest/kindnetd:v1": b,
		"docker.io/kindest/kindnetd:v1":            b,
	} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(r, remote.WithTransport(transport), remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		gd, _ := got.Digest()
		wd, _ := want.Digest()
		if gd != wd {
			t.Errorf("%s: digest %s, want %s", ref, gd, wd)
		}
	}

	if _, err := remote.Image(name.MustParseReference("registry.k8s.io/coredns/coredns:v1.14.2"), remote.WithTransport(transport)); err == nil {
		t.Error("an image not in the set was served")
	}
	if _, err := remote.Image(name.MustParseReference("quay.io/other/image:v1"), remote.WithTransport(transport)); err == nil {
		t.Error("a registry not in the set was reached")
	}
	// The proxy's authority is trusted by nobody else: a client without it fails.
	plain := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	if _, err := remote.Image(name.MustParseReference("registry.k8s.io/etcd:3.6.8-0"), remote.WithTransport(plain)); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a client that does not trust the proxy's authority: %v, want an unknown authority", err)
	}

	want := []string{"anything from quay.io (not a registry of images built here)", "registry.k8s.io/coredns/coredns:v1.14.2"}
	if got := p.Missing(); !reflect.DeepEqual(got, want) {
		t.Errorf("Missing() = %q, want %q", got, want)
	}
}

func mustImage(t *testing.T) v1.Image {
	t.Helper()
	l, err := Layer([]File{{Path: "pause", Mode: 0o755, Data: []byte("not a program")}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(nil, v1.Config{Entrypoint: []string{"/pause"}}, l)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
