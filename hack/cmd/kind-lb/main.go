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

// Command kind-lb stands in for envoy in the load balancer of kind's clusters with
// several control-plane nodes, where envoy (C++, not packaged by Debian) cannot be
// built offline (docs/kind.md). kind starts `envoy -c BOOTSTRAP` in its load
// balancer container and writes the listeners and clusters into the files the
// bootstrap names (envoy's file-based dynamic configuration). kind-lb reads the same
// files, as kind writes them: TCP listeners that forward to a cluster's endpoints
// round robin, among those whose HTTPS /healthz answers 200 (envoy's health check in
// kind's configuration), or among all of them while fewer than half are healthy
// (envoy's panic threshold). It rereads the files every second.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

func main() {
	config := flag.String("c", "", "envoy's bootstrap configuration (kind's dynamic_resources)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *config, time.Second, 2*time.Second); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// bootstrap is the part of envoy's bootstrap configuration kind writes.
type bootstrap struct {
	DynamicResources struct {
		CDS struct {
			PathConfigSource struct{ Path string } `json:"path_config_source"`
		} `json:"cds_config"`
		LDS struct {
			PathConfigSource struct{ Path string } `json:"path_config_source"`
		} `json:"lds_config"`
	} `json:"dynamic_resources"`
}

type socketAddress struct {
	SocketAddress struct {
		Address   string `json:"address"`
		PortValue int    `json:"port_value"`
	} `json:"socket_address"`
}

func (a socketAddress) String() string {
	return net.JoinHostPort(a.SocketAddress.Address, strconv.Itoa(a.SocketAddress.PortValue))
}

// listeners and clusters are the parts of kind's LDS and CDS files kind-lb uses.
type listeners struct {
	Resources []struct {
		Address      socketAddress `json:"address"`
		FilterChains []struct {
			Filters []struct {
				TypedConfig struct {
					Cluster string `json:"cluster"`
				} `json:"typed_config"`
			} `json:"filters"`
		} `json:"filter_chains"`
	} `json:"resources"`
}

type clusters struct {
	Resources []struct {
		Name           string `json:"name"`
		LoadAssignment struct {
			Endpoints []struct {
				LBEndpoints []struct {
					Endpoint struct {
						Address socketAddress `json:"address"`
					} `json:"endpoint"`
				} `json:"lb_endpoints"`
			} `json:"endpoints"`
		} `json:"load_assignment"`
	} `json:"resources"`
}

// routes maps each listening address to the endpoints of its cluster.
func readRoutes(ldsPath, cdsPath string) (map[string][]string, error) {
	var l listeners
	var c clusters
	if err := readYAML(ldsPath, &l); err != nil {
		return nil, err
	}
	if err := readYAML(cdsPath, &c); err != nil {
		return nil, err
	}
	endpoints := map[string][]string{}
	for _, cl := range c.Resources {
		for _, e := range cl.LoadAssignment.Endpoints {
			for _, lb := range e.LBEndpoints {
				endpoints[cl.Name] = append(endpoints[cl.Name], lb.Endpoint.Address.String())
			}
		}
	}
	routes := map[string][]string{}
	for _, r := range l.Resources {
		for _, fc := range r.FilterChains {
			for _, f := range fc.Filters {
				if name := f.TypedConfig.Cluster; name != "" {
					routes[r.Address.String()] = endpoints[name]
				}
			}
		}
	}
	return routes, nil
}

func readYAML(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// run serves the configuration of the bootstrap file until ctx ends.
func run(ctx context.Context, bootstrapPath string, reread, healthEvery time.Duration) error {
	var b bootstrap
	if err := readYAML(bootstrapPath, &b); err != nil {
		return err
	}
	lds, cds := b.DynamicResources.LDS.PathConfigSource.Path, b.DynamicResources.CDS.PathConfigSource.Path
	if lds == "" || cds == "" {
		return fmt.Errorf("%s names no listener and cluster files (dynamic_resources)", bootstrapPath)
	}
	h := newHealth(healthEvery)
	served := map[string]*frontend{}
	for {
		routes, err := readRoutes(lds, cds)
		if err != nil {
			log.Print(err)
		}
		for addr, f := range served {
			if _, ok := routes[addr]; !ok || err != nil {
				f.ln.Close()
				delete(served, addr)
			}
		}
		for addr, backends := range routes {
			f, ok := served[addr]
			if !ok {
				ln, lerr := net.Listen("tcp", addr)
				if lerr != nil {
					log.Print(lerr)
					continue
				}
				log.Printf("listening on %s", addr)
				f = &frontend{ln: ln, health: h}
				served[addr] = f
				go f.serve()
			}
			f.setBackends(backends)
			h.watch(ctx, backends)
		}
		select {
		case <-ctx.Done():
			for _, f := range served {
				f.ln.Close()
			}
			return ctx.Err()
		case <-time.After(reread):
		}
	}
}

// frontend forwards the connections of one listener.
type frontend struct {
	ln     net.Listener
	health *health
	mu     sync.Mutex
	ends   []string
	next   int
}

func (f *frontend) setBackends(b []string) {
	f.mu.Lock()
	f.ends = b
	f.mu.Unlock()
}

// pick is the next backend round robin among the healthy ones, or among all while
// fewer than half are healthy.
func (f *frontend) pick() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var healthy []string
	for _, b := range f.ends {
		if f.health.ok(b) {
			healthy = append(healthy, b)
		}
	}
	pool := healthy
	if 2*len(healthy) < len(f.ends) {
		pool = f.ends
	}
	if len(pool) == 0 {
		return ""
	}
	f.next++
	return pool[f.next%len(pool)]
}

func (f *frontend) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.forward(c)
	}
}

func (f *frontend) forward(c net.Conn) {
	defer c.Close()
	backend := f.pick()
	if backend == "" {
		return
	}
	b, err := net.DialTimeout("tcp", backend, 250*time.Millisecond) // envoy's connect_timeout in kind's config
	if err != nil {
		log.Printf("connecting to %s: %v", backend, err)
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(b, c); closeWrite(b); done <- struct{}{} }()
	go func() { io.Copy(c, b); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// health checks each backend's HTTPS /healthz, as kind configures envoy: healthy
// after one success, unhealthy after two failures, certificates not verified.
type health struct {
	every   time.Duration
	client  *http.Client
	mu      sync.Mutex
	state   map[string]bool
	fails   map[string]int
	watched map[string]bool
}

func newHealth(every time.Duration) *health {
	return &health{
		every: every,
		client: &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // envoy: trust_chain_verification ACCEPT_UNTRUSTED
		}},
		state: map[string]bool{}, fails: map[string]int{}, watched: map[string]bool{},
	}
}

func (h *health) ok(b string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state[b]
}

func (h *health) watch(ctx context.Context, backends []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range backends {
		if !h.watched[b] {
			h.watched[b] = true
			go h.check(ctx, b)
		}
	}
}

func (h *health) check(ctx context.Context, b string) {
	for {
		ok := false
		if resp, err := h.client.Get("https://" + b + "/healthz"); err == nil {
			ok = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
		h.mu.Lock()
		was := h.state[b]
		if ok {
			h.fails[b] = 0
			h.state[b] = true
		} else if h.fails[b]++; h.fails[b] >= 2 {
			h.state[b] = false
		}
		if h.state[b] != was {
			log.Printf("%s healthy: %v", b, h.state[b])
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.every):
		}
	}
}
