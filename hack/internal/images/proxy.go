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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
)

// RegistryProxy is an HTTPS proxy that answers, for the registries of the images in
// a Set, with those images, and refuses every other destination. Clients that honour
// HTTPS_PROXY and trust its certificate authority (CACert) pull the images under
// their real names; that is how `kind build node-image`, which pulls what the node
// image needs inside its build container and passes the proxy variables to it, runs
// offline (docs/kind.md). The authority's key exists only in this process.
type RegistryProxy struct {
	caPEM  []byte
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey

	// prefixes maps a registry host to the repository prefix of its images in the
	// loopback registry that holds them all.
	prefixes map[string]string
	local    *http.Server
	localURL *url.URL
	proxy    *http.Server
	listener net.Listener
	inner    *http.Server
	tunnels  *chanListener

	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
	missing map[string]bool
	refused map[string]bool
}

// StartRegistryProxy serves set through a proxy listening on addr (host:port; port 0
// picks a free one).
func StartRegistryProxy(ctx context.Context, set Set, addr string) (*RegistryProxy, error) {
	p := &RegistryProxy{
		prefixes: map[string]string{},
		leaves:   map[string]*tls.Certificate{},
		missing:  map[string]bool{},
		refused:  map[string]bool{},
	}
	if err := p.newCA(); err != nil {
		return nil, err
	}
	quiet := log.New(io.Discard, "", 0)

	// The images, in a registry on loopback under REGISTRY/REPOSITORY.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.local = &http.Server{Handler: registry.New(registry.Logger(quiet)), ErrorLog: quiet}
	go p.local.Serve(ln)
	p.localURL = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	local := Set{}
	for ref, img := range set {
		r, err := name.ParseReference(ref)
		if err != nil {
			p.Close()
			return nil, err
		}
		host := r.Context().RegistryStr()
		p.prefixes[host] = host
		if host == name.DefaultRegistry {
			// Docker Hub, which containerd reaches under another name.
			p.prefixes["registry-1.docker.io"] = host
		}
		local[ln.Addr().String()+"/"+host+"/"+r.Context().RepositoryStr()+":"+r.Identifier()] = img
	}
	if err := local.Push(ctx); err != nil {
		p.Close()
		return nil, err
	}

	// The proxy: CONNECT to a registry of the set goes to a TLS server of this
	// process, with a certificate for that host from the authority.
	if p.listener, err = net.Listen("tcp", addr); err != nil {
		p.Close()
		return nil, err
	}
	p.tunnels = &chanListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: p.listener.Addr()}
	p.inner = &http.Server{Handler: p.forwarder(), ErrorLog: quiet}
	go p.inner.Serve(tls.NewListener(p.tunnels, &tls.Config{GetCertificate: p.leaf}))
	p.proxy = &http.Server{Handler: http.HandlerFunc(p.connect), ErrorLog: quiet}
	go p.proxy.Serve(p.listener)
	return p, nil
}

// URL is the proxy's address, for HTTPS_PROXY.
func (p *RegistryProxy) URL() string { return "http://" + p.listener.Addr().String() }

// CACert is the PEM certificate of the authority the proxy's certificates chain to.
func (p *RegistryProxy) CACert() []byte { return p.caPEM }

// Missing are the images clients asked for that the set does not hold, and the
// destinations the proxy refused, sorted.
func (p *RegistryProxy) Missing() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for m := range p.missing {
		out = append(out, m)
	}
	for h := range p.refused {
		out = append(out, "anything from "+h+" (not a registry of images built here)")
	}
	sort.Strings(out)
	return out
}

// Close stops the proxy and the registry behind it.
func (p *RegistryProxy) Close() {
	if p.proxy != nil {
		p.proxy.Close()
	}
	if p.inner != nil {
		p.inner.Close()
	}
	if p.local != nil {
		p.local.Close()
	}
}

func (p *RegistryProxy) connect(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Hostname()
	if r.Method != http.MethodConnect {
		http.Error(w, "this proxy only tunnels HTTPS (CONNECT) to the registries of images built here", http.StatusMethodNotAllowed)
		return
	}
	if _, ok := p.prefixes[host]; !ok {
		p.mu.Lock()
		p.refused[host] = true
		p.mu.Unlock()
		http.Error(w, host+" is not a registry of images built here", http.StatusForbidden)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if buf.Reader.Buffered() > 0 {
		conn.Close() // a client that sends before the tunnel exists
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	if !p.tunnels.hand(conn) {
		conn.Close()
	}
}

// forwarder sends the requests that arrive through a tunnel to the loopback
// registry, under the prefix of the host they were sent to, and notes the manifests
// it does not have.
func (p *RegistryProxy) forwarder() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			host, _, err := net.SplitHostPort(r.In.Host)
			if err != nil {
				host = r.In.Host
			}
			r.SetURL(p.localURL)
			if rest, ok := strings.CutPrefix(r.In.URL.Path, "/v2/"); ok && rest != "" {
				r.Out.URL.Path = "/v2/" + p.prefixes[host] + "/" + rest
			}
			r.Out.URL.RawPath = ""
			r.Out.Host = p.localURL.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			path := resp.Request.URL.Path
			if resp.StatusCode == http.StatusNotFound && strings.Contains(path, "/manifests/") {
				repo, ref, _ := strings.Cut(strings.TrimPrefix(path, "/v2/"), "/manifests/")
				p.mu.Lock()
				p.missing[repo+":"+ref] = true
				p.mu.Unlock()
			}
			return nil
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
}

func (p *RegistryProxy) newCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kube-carry image build proxy (key in memory only)"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	p.caKey = key
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

// leaf is a certificate for the registry host a client names, issued once per host.
func (p *RegistryProxy) leaf(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	host := hello.ServerName
	if _, ok := p.prefixes[host]; !ok {
		return nil, fmt.Errorf("no certificate for %q", host)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.leaves[host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(len(p.leaves) + 2)),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    p.caCert.NotBefore,
		NotAfter:     p.caCert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	p.leaves[host] = c
	return c, nil
}

// chanListener hands the tunnelled connections to the TLS server.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

// hand passes a connection to the server; false once it has stopped.
func (l *chanListener) hand(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
