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

// Command images builds container images without a Docker engine.
//
//	images release-tarball OUT [BIN]   kubernetes-server-linux-amd64.tar.gz of the binaries in BIN
//	                                   (default _output/bin), for kind
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

// kubeProxyTools are what kube-proxy runs on a node: iptables (nft and legacy
// back ends), conntrack and nft, with the iptables extension modules.
var kubeProxyTools = []string{
	"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore",
	"iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore",
	"iptables-nft", "iptables-nft-save", "iptables-nft-restore", "conntrack", "nft",
}

func main() {
	if len(os.Args) < 3 || len(os.Args) > 4 || os.Args[1] != "release-tarball" {
		fmt.Fprintln(os.Stderr, "usage: images release-tarball OUT [BIN]")
		os.Exit(2)
	}
	bin := filepath.Join("_output", "bin")
	if len(os.Args) == 4 {
		bin = os.Args[3]
	}
	if err := releaseTarball(os.Args[2], bin); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func releaseTarball(out, bin string) error {
	version, err := os.ReadFile(filepath.Join(bin, "VERSION"))
	if err != nil {
		return fmt.Errorf("no build version (%w): run hack/build.sh", err)
	}
	extras, err := images.HostFiles(kubeProxyTools, []string{images.XtablesModules})
	if err != nil {
		return fmt.Errorf("kube-proxy's tools (apt-get install iptables conntrack nftables): %w", err)
	}
	if err := images.ServerTarball(out, bin, strings.TrimSpace(string(version)), extras); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return nil
}
