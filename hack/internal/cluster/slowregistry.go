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
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// SlowRegistryAddr serves the local registry's images slowly: every manifest
// request waits SlowRegistryDelay. Image pull tests use it to hold pulls long
// enough to queue and deduplicate them deterministically.
const (
	SlowRegistryAddr  = "127.0.0.1:5001"
	SlowRegistryDelay = 3 * time.Second
	// heldSuffix ends the tags whose manifest requests wait until released.
	heldSuffix = "-held"
)

// manifestPath matches /v2/<name>/manifests/<reference>; repoPath any /v2/<name>/(manifests|blobs)/... .
var (
	manifestPath = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)
	repoPath     = regexp.MustCompile(`^(/v2/.+)--[^/]*(/(?:manifests|blobs)/.*)$`)
)

// SlowRegistry is a reverse proxy to a registry that delays manifest requests and
// serves "<tag>--<anything>" as "<tag>" and a repository "<name>--<anything>" as
// "<name>", so that a test can pull an image under a name the node has never seen
// (a new repository: the kubelet keeps what credentials pulled an image by
// repository). GET /carry/requests/<name>:<tag> tells how many manifest requests a
// tag received. A tag "<tag>--<anything>-held" is also held after the delay
// until GET /carry/release/<name>:<tag>, so that a test decides when a pull
// ends.
type SlowRegistry struct {
	Upstream string
	Delay    time.Duration

	mu       sync.Mutex
	requests map[string]int
	held     map[string]chan struct{}
}

// hold returns the channel that release closes for ref.
func (s *SlowRegistry) hold(ref string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldLocked(ref)
}

// release lets the manifest requests of ref, held or to come, go on.
func (s *SlowRegistry) release(ref string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.heldLocked(ref)
	select {
	case <-c:
	default:
		close(c)
	}
}

func (s *SlowRegistry) heldLocked(ref string) chan struct{} {
	if s.held == nil {
		s.held = map[string]chan struct{}{}
	}
	c, ok := s.held[ref]
	if !ok {
		c = make(chan struct{})
		s.held[ref] = c
	}
	return c
}

func (s *SlowRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ref, ok := strings.CutPrefix(r.URL.Path, "/carry/requests/"); ok {
		s.mu.Lock()
		n := s.requests[ref]
		s.mu.Unlock()
		fmt.Fprintf(w, "%d\n", n)
		return
	}
	if ref, ok := strings.CutPrefix(r.URL.Path, "/carry/release/"); ok {
		s.release(ref)
		return
	}
	if m := manifestPath.FindStringSubmatch(r.URL.Path); m != nil {
		ref := m[1] + ":" + m[2]
		s.mu.Lock()
		if s.requests == nil {
			s.requests = map[string]int{}
		}
		s.requests[ref]++
		s.mu.Unlock()
		var released <-chan struct{}
		if strings.Contains(m[2], "--") && strings.HasSuffix(m[2], heldSuffix) {
			released = s.hold(ref)
		}
		select {
		case <-time.After(s.Delay):
		case <-r.Context().Done():
			return
		}
		if released != nil {
			select {
			case <-released:
			case <-r.Context().Done():
				return
			}
		}
		if tag, _, ok := strings.Cut(m[2], "--"); ok {
			r.URL.Path = "/v2/" + m[1] + "/manifests/" + tag
		}
	}
	if m := repoPath.FindStringSubmatch(r.URL.Path); m != nil {
		r.URL.Path = m[1] + m[2]
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: s.Upstream})
	proxy.ServeHTTP(w, r)
}

// Serve runs the proxy on l until ctx ends.
func (s *SlowRegistry) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ListenAndServe runs the proxy on addr until ctx ends.
func (s *SlowRegistry) ListenAndServe(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, l)
}
