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

// Package apiserver runs the lone API server: etcd and a kube-apiserver of the
// patched binary and nothing else, with the local cluster's process handling and
// certificates (package cluster), for tests that measure what a client does to a
// real API server.
package apiserver

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

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
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
type LoneAPIServer struct{ c *cluster.Cluster }

// NewLoneAPIServer describes the lone API server of a repository checkout,
// in _output/apiserver.
func NewLoneAPIServer(root string, log io.Writer) *LoneAPIServer {
	c := cluster.New(root, log)
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
		return fmt.Errorf("%s is not built: run 'make' first", c.Rel(apiserver))
	}
	if err := cluster.InstallPackages(c.Log, map[string]string{"etcd": cluster.Packages["etcd"]}); err != nil {
		return err
	}
	if _, ok := c.Running("etcd"); !ok {
		// Every measurement starts from an empty store.
		if err := os.RemoveAll(c.Path("etcd")); err != nil {
			return err
		}
	}
	for _, d := range []string{"run", "logs", "pki", "etcd"} {
		if err := os.MkdirAll(c.Path(d), 0o755); err != nil {
			return err
		}
	}
	p := &cluster.PKI{Dir: c.Path("pki")}
	if err := p.EnsureCA(); err != nil {
		return err
	}
	if err := p.Leaf("apiserver", "kube-apiserver", nil, x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return err
	}
	if err := p.Leaf("admin", "kube-carry-admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := p.ServiceAccountKey(); err != nil {
		return err
	}
	if err := p.Kubeconfig(c.Kubeconfig(), "https://"+LoneAPIServerAddr, "admin"); err != nil {
		return err
	}
	etcd := cluster.EtcdDaemon(c.Path("etcd"), loneEtcdClient, loneEtcdPeer)
	etcd.Args = append(etcd.Args, "--quota-backend-bytes", loneEtcdQuota)
	_, port, _ := net.SplitHostPort(LoneAPIServerAddr)
	for _, d := range []cluster.Daemon{etcd, {
		Name: "kube-apiserver", Port: LoneAPIServerAddr,
		Args: []string{apiserver,
			"--bind-address=127.0.0.1", "--secure-port=" + port, "--advertise-address=127.0.0.1",
			"--etcd-servers=http://" + loneEtcdClient,
			"--client-ca-file=" + p.Path("ca.crt"),
			"--tls-cert-file=" + p.Path("apiserver.crt"), "--tls-private-key-file=" + p.Path("apiserver.key"),
			"--service-account-key-file=" + p.Path("sa.key"), "--service-account-signing-key-file=" + p.Path("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-cluster-ip-range=" + cluster.ServiceCIDR,
			// As the integration tests' server: no controller manager
			// creates service accounts, and no node gets an endpoint.
			"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount",
			"--endpoint-reconciler-type=none",
		},
		Healthy: c.APIReady,
	}} {
		if err := c.Start(ctx, d); err != nil {
			return err
		}
	}
	c.Logf("\nthe API server is up:\n  export KUBECONFIG=%s\nstop it with '%s apiserver-down'", c.Kubeconfig(), c.Rel(c.Tool("cluster")))
	return nil
}

// Down stops the kube-apiserver and etcd and removes etcd's store; the
// certificates and logs stay.
func (a *LoneAPIServer) Down() error {
	c := a.c
	err := errors.Join(c.Stop("kube-apiserver", 30*time.Second), c.Stop("etcd", 15*time.Second))
	if err != nil {
		return err
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if pid, ok := c.Running(name); ok {
			return fmt.Errorf("%s still runs (pid %d)", name, pid)
		}
	}
	return os.RemoveAll(c.Path("etcd"))
}
