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

package upgradelane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Prober sends one request at a time to the Service's node port on the nodes'
// addresses, in turn, every Interval, for as long as its context lasts, and
// counts the answers per step. It refuses any address that is not private
// (RFC 1918): it probes this machine's kind network only.
type Prober struct {
	Interval time.Duration
	client   *http.Client

	mu      sync.Mutex
	targets []string
	step    string
	counts  map[string]*Counts
}

// Counts are a step's requests: how many, how many failed, and the first
// failures' errors.
type Counts struct {
	Sent, Failed int
	Errors       []string
}

// problems says what a step's requests show: the PodDisruptionBudget keeps two
// of three web pods serving, so no request may fail; and a step the prober sent
// nothing in was not probed at all.
func (c Counts) problems() []string {
	switch {
	case c.Sent == 0:
		return []string{"the prober sent no request to the Service during the step"}
	case c.Failed > 0:
		return []string{fmt.Sprintf("%d of %d requests to the Service failed: %s", c.Failed, c.Sent, strings.Join(c.Errors, "; "))}
	}
	return nil
}

// maxErrors is how many failures a step keeps the error of.
const maxErrors = 10

// NewProber probes the node port on the addresses.
func NewProber(addrs []string, interval time.Duration) (*Prober, error) {
	p := &Prober{Interval: interval, client: &http.Client{Timeout: 2 * time.Second}, counts: map[string]*Counts{}}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("node address %q: %w", a, err)
		}
		if !ip.IsPrivate() {
			return nil, fmt.Errorf("node address %s is not private: the prober reaches this machine's kind network only", a)
		}
		p.targets = append(p.targets, fmt.Sprintf("http://%s/", netip.AddrPortFrom(ip, WebNodePort)))
	}
	if len(p.targets) == 0 {
		return nil, fmt.Errorf("no node address to probe")
	}
	return p, nil
}

// Step names the step the next requests count for.
func (p *Prober) Step(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step = name
	if p.counts[name] == nil {
		p.counts[name] = &Counts{}
	}
}

// Counts returns a copy of a step's counts.
func (p *Prober) Counts(step string) Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.counts[step]; c != nil {
		return Counts{Sent: c.Sent, Failed: c.Failed, Errors: append([]string(nil), c.Errors...)}
	}
	return Counts{}
}

// Run probes until ctx is done.
func (p *Prober) Run(ctx context.Context) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		target := p.targets[i%len(p.targets)]
		err := p.probe(ctx, target)
		if ctx.Err() != nil {
			return
		}
		p.record(target, err)
	}
}

func (p *Prober) probe(ctx context.Context, target string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

func (p *Prober) record(target string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts[p.step]
	if c == nil {
		c = &Counts{}
		p.counts[p.step] = c
	}
	c.Sent++
	if err != nil {
		c.Failed++
		if len(c.Errors) < maxErrors {
			c.Errors = append(c.Errors, fmt.Sprintf("%s %s: %v", time.Now().UTC().Format(time.TimeOnly), target, err))
		}
	}
}
