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
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// PKI creates the cluster's certificates once and reuses them afterwards.
type PKI struct {
	Dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// EnsureCA loads the cluster CA or creates it.
func (p *PKI) EnsureCA() error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	if c, k, err := p.load("ca"); err == nil {
		p.caCert, p.caKey = c, k
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "kube-carry-ca"}, key)
	if err != nil {
		return err
	}
	p.caCert, p.caKey = c, key
	return p.write("ca", c, key)
}

func (p *PKI) load(name string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := cert.CertsFromFile(p.Path(name + ".crt"))
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.PrivateKeyFromFile(p.Path(name + ".key"))
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s.key is not a signing key", name)
	}
	return certs[0], signer, nil
}

func (p *PKI) write(name string, c *x509.Certificate, key crypto.Signer) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := keyutil.WriteKey(p.Path(name+".key"), keyPEM); err != nil {
		return err
	}
	certPEM, err := cert.EncodeCertificates(c)
	if err != nil {
		return err
	}
	return cert.WriteCert(p.Path(name+".crt"), certPEM)
}

// Leaf creates (once) a certificate signed by the CA.
func (p *PKI) Leaf(name, cn string, orgs []string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
	if _, err := os.Stat(p.Path(name + ".crt")); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	return p.write(name, c, key)
}

// ServiceAccountKey creates the key that signs service account tokens; the
// apiserver reads the public half from the same file.
func (p *PKI) ServiceAccountKey() error {
	if _, err := os.Stat(p.Path("sa.key")); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return keyutil.WriteKey(p.Path("sa.key"), keyPEM)
}

// Kubeconfig writes a kubeconfig that authenticates with the named client certificate.
func (p *PKI) Kubeconfig(path, server, name string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kube-carry"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.Path("ca.crt")}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: p.Path(name + ".crt"), ClientKey: p.Path(name + ".key")}
	cfg.Contexts["kube-carry"] = &clientcmdapi.Context{Cluster: "kube-carry", AuthInfo: name}
	cfg.CurrentContext = "kube-carry"
	return clientcmd.WriteToFile(*cfg, path)
}
