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
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// kindNetwork is the Docker network kind puts every cluster's nodes on.
const kindNetwork = "kind"

// KindSlowRegistry serves the image pull gate's e2e tests on the kind cluster as
// SlowRegistry does on the local cluster: the e2e busybox image that
// KindLoadE2EImages built, on port 5001 of the kind network's gateway, the one
// address both the nodes and e2e.test on this machine reach (KindRegistry).
// ready gets the address once the nodes can pull; KindSlowRegistry serves until
// ctx ends.
func (k *Kind) KindSlowRegistry(ctx context.Context, ready func(addr string)) error {
	busybox := images.Names{Registry: "registry.k8s.io"}.Busybox()
	archive := archivePath(k.kindPath("e2e-images"), busybox)
	tag, err := name.NewTag(busybox)
	if err != nil {
		return err
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		return fmt.Errorf("the e2e busybox image, built by make kind-e2e (cluster kind-e2e-images): %w", err)
	}
	// The image under its path without upstream's registry, which the tests replace
	// by the slow registry's address.
	_, path, _ := strings.Cut(busybox, "/")
	return k.KindRegistry(ctx, "5001", map[string]v1.Image{path: img}, ready)
}

// KindRegistry serves imgs (by path, name:tag) from go-containerregistry's
// in-memory registry behind SlowRegistry, whose delay makes pulls overlap, on
// port of the kind network's gateway. Each node's containerd is told to pull
// from it over plain HTTP (a hosts.toml in /etc/containerd/certs.d, which
// containerd reads on every pull). ready gets the address once the nodes can
// pull; KindRegistry serves until ctx ends.
func (k *Kind) KindRegistry(ctx context.Context, port string, imgs map[string]v1.Image, ready func(addr string)) error {
	gateway, err := k.kindGateway(ctx)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(gateway, port)
	backend, stop, err := inMemoryRegistry(ctx, imgs)
	if err != nil {
		return err
	}
	defer stop()

	if err := k.trustKindRegistry(ctx, addr); err != nil {
		return err
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the slow registry listens on the kind network's gateway: %w", err)
	}
	ready(addr)
	return (&cluster.SlowRegistry{Upstream: backend, Delay: cluster.SlowRegistryDelay}).Serve(ctx, listener)
}

// inMemoryRegistry serves imgs (by path, name:tag) from go-containerregistry's
// in-memory registry on a loopback port, until stop.
func inMemoryRegistry(ctx context.Context, imgs map[string]v1.Image) (addr string, stop func() error, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	for _, path := range slices.Sorted(maps.Keys(imgs)) {
		ref, err := name.ParseReference(l.Addr().String()+"/"+path, name.Insecure)
		if err == nil {
			err = remote.Write(ref, imgs[path], remote.WithContext(ctx))
		}
		if err != nil {
			srv.Close()
			return "", nil, fmt.Errorf("push %s to the in-memory registry: %w", path, err)
		}
	}
	return l.Addr().String(), srv.Close, nil
}

// kindGateway is the IPv4 gateway of the kind network: this machine's address on it.
func (k *Kind) kindGateway(ctx context.Context) (string, error) {
	out, err := k.docker(ctx, "network", "inspect", kindNetwork, "--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}").Output()
	if err != nil {
		return "", fmt.Errorf("docker network inspect %s (is the kind cluster up? make kind-up): %w", kindNetwork, err)
	}
	return ipv4Gateway(string(out))
}

// ipv4Gateway picks the IPv4 address out of the network's gateways.
func ipv4Gateway(gateways string) (string, error) {
	for _, g := range strings.Fields(gateways) {
		if ip, err := netip.ParseAddr(g); err == nil && ip.Is4() {
			return g, nil
		}
	}
	return "", fmt.Errorf("the %s network has no IPv4 gateway (gateways: %q)", kindNetwork, strings.TrimSpace(gateways))
}

// trustKindRegistry tells every node's containerd to pull from the plain-HTTP
// registry at addr.
func (k *Kind) trustKindRegistry(ctx context.Context, addr string) error {
	out, err := k.kindOutput(ctx, "get", "nodes", "--name", k.KindClusterName())
	if err != nil {
		return err
	}
	dir := filepath.Join("/etc/containerd/certs.d", addr)
	for _, Node := range strings.Fields(out) {
		cmd := k.docker(ctx, "exec", "-i", Node, "sh", "-c", fmt.Sprintf("mkdir -p %s && cat > %s/hosts.toml", dir, dir))
		cmd.Stdin = strings.NewReader(registryHosts(addr))
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("write %s/hosts.toml on node %s: %w: %s", dir, Node, err, b)
		}
	}
	return nil
}

// registryHosts is containerd's hosts.toml for a plain-HTTP registry.
func registryHosts(addr string) string {
	return fmt.Sprintf("[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+addr)
}
