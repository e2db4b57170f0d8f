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
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The ports of the lone API server: none of the local cluster's (6443, 2379,
// 2380) nor TestFeatureAPIProcesses' (16443 to 16445, 23791, 23792), so that
// it runs beside either.
const (
	LoneAPIServerAddr = "127.0.0.1:26443"
	loneEtcdClient    = "127.0.0.1:23811"
	loneEtcdPeer      = "127.0.0.1:23812"
	// loneEtcdQuota is etcd's backend quota: the VPA's measurements rewrite
	// checkpoint slices of 512 KiB for an hour, more than the default 2 GiB
	// holds before the server's compaction frees it.
	loneEtcdQuota = "8589934592"
)

// LoneAPIServer is etcd and a kube-apiserver of the patched binary, and
// nothing else (no controllers, no nodes), on ports of their own, with state,
// logs and certificates under Dir: for tests that measure what a client does
// to a real API server (the VPA's TestNodeScopeWritesOnAPIServer,
// docs/vpa-node-scope.md).
type LoneAPIServer struct{ c *Cluster }

// NewLoneAPIServer describes the lone API server of a repository checkout,
// in _output/apiserver.
func NewLoneAPIServer(root string, log io.Writer) *LoneAPIServer {
	c := New(root, log)
	c.Dir = filepath.Join(root, "_output", "apiserver")
	return &LoneAPIServer{c: c}
}

// Kubeconfig is the administrator's (system:masters) kubeconfig.
func (a *LoneAPIServer) Kubeconfig() string { return a.c.Kubeconfig() }

// Up starts etcd, with an empty store unless it runs already, and the
// kube-apiserver, and waits until the server is ready.
func (a *LoneAPIServer) Up(ctx context.Context) error {
	c := a.c
	apiserver := filepath.Join(c.Bin, "kube-apiserver")
	if _, err := os.Stat(apiserver); err != nil {
		return fmt.Errorf("%s is not built: run 'make' first", c.rel(apiserver))
	}
	if err := InstallPackages(c.Log, map[string]string{"etcd": Packages["etcd"]}); err != nil {
		return err
	}
	if _, ok := c.running("etcd"); !ok {
		// Every measurement starts from an empty store.
		if err := os.RemoveAll(c.path("etcd")); err != nil {
			return err
		}
	}
	for _, d := range []string{"run", "logs", "pki", "etcd"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	p := &pki{dir: c.path("pki")}
	if err := p.ensureCA(); err != nil {
		return err
	}
	if err := p.leaf("apiserver", "kube-apiserver", nil, x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return err
	}
	if err := p.leaf("admin", "kube-carry-admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	if err := p.kubeconfig(c.Kubeconfig(), "https://"+LoneAPIServerAddr, "admin"); err != nil {
		return err
	}
	etcd := etcdDaemon(c.path("etcd"), loneEtcdClient, loneEtcdPeer)
	etcd.args = append(etcd.args, "--quota-backend-bytes", loneEtcdQuota)
	_, port, _ := net.SplitHostPort(LoneAPIServerAddr)
	for _, d := range []daemon{etcd, {
		name: "kube-apiserver", port: LoneAPIServerAddr,
		args: []string{apiserver,
			"--bind-address=127.0.0.1", "--secure-port=" + port, "--advertise-address=127.0.0.1",
			"--etcd-servers=http://" + loneEtcdClient,
			"--client-ca-file=" + p.path("ca.crt"),
			"--tls-cert-file=" + p.path("apiserver.crt"), "--tls-private-key-file=" + p.path("apiserver.key"),
			"--service-account-key-file=" + p.path("sa.key"), "--service-account-signing-key-file=" + p.path("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-cluster-ip-range=" + serviceCIDR,
			// As the integration tests' server: no controller manager
			// creates service accounts, and no node gets an endpoint.
			"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount",
			"--endpoint-reconciler-type=none",
		},
		healthy: c.apiReady,
	}} {
		if err := c.start(ctx, d); err != nil {
			return err
		}
	}
	c.logf("\nthe API server is up:\n  export KUBECONFIG=%s\nstop it with '%s apiserver-down'", c.Kubeconfig(), c.rel(c.tool("cluster")))
	return nil
}

// Down stops the kube-apiserver and etcd and removes etcd's store; the
// certificates and logs stay.
func (a *LoneAPIServer) Down() error {
	c := a.c
	err := errors.Join(c.stop("kube-apiserver", 30*time.Second), c.stop("etcd", 15*time.Second))
	if err != nil {
		return err
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if pid, ok := c.running(name); ok {
			return fmt.Errorf("%s still runs (pid %d)", name, pid)
		}
	}
	return os.RemoveAll(c.path("etcd"))
}
