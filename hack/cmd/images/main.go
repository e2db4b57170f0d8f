// Command images builds container images without a Docker engine.
//
//	images release-tarball OUT   kubernetes-server-linux-amd64.tar.gz from _output/bin, for kind
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
	if len(os.Args) != 3 || os.Args[1] != "release-tarball" {
		fmt.Fprintln(os.Stderr, "usage: images release-tarball OUT")
		os.Exit(2)
	}
	if err := releaseTarball(os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func releaseTarball(out string) error {
	bin := filepath.Join("_output", "bin")
	version, err := os.ReadFile(filepath.Join(bin, "VERSION"))
	if err != nil {
		return fmt.Errorf("no build version (%w): run hack/build.sh", err)
	}
	extras, err := images.HostFiles(kubeProxyTools, []string{"/usr/lib/x86_64-linux-gnu/xtables"})
	if err != nil {
		return fmt.Errorf("kube-proxy's tools (apt-get install iptables conntrack nftables): %w", err)
	}
	if err := images.ServerTarball(out, bin, strings.TrimSpace(string(version)), extras); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return nil
}
