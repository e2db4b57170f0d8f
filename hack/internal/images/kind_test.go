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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-carry/kube-carry/hack/internal/series"
)

// TestKindNamesMatchKindAndTheTree keeps the names of the node image's images in
// step with kind's module (go.mod's version), the tree's kubeadm and the versions
// the programs are built at.
func TestKindNamesMatchKindAndTheTree(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	kind, err := series.GoSource{Root: root}.ModuleDir("sigs.k8s.io/kind", "")
	if err != nil {
		t.Fatal(err)
	}
	mustSay := func(file string, wants ...string) {
		t.Helper()
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s no longer says %s", file, want)
			}
		}
	}
	mustSay(filepath.Join(kind, "pkg/build/nodeimage/const_cni.go"), `kindnetdImage = "`+KindKindnetd+`"`)
	mustSay(filepath.Join(kind, "pkg/build/nodeimage/const_storage.go"),
		`storageProvisionerImage = "`+KindLocalPathProvisioner+`"`, `storageHelperImage = "`+KindLocalPathHelper+`"`)
	mustSay(filepath.Join(kind, "pkg/cluster/internal/loadbalancer/const.go"), `Image = "`+KindLoadBalancer+`"`)
	mustSay(filepath.Join(kind, "images/base/files/etc/containerd/config.toml"), `sandbox_image = "`+KindPause+`"`)

	// Each etcd module pins the etcd of its minor version.
	for minor, dir := range etcdModuleDirs {
		mustSay(filepath.Join(root, dir, "go.mod"), etcdPackage+" v"+minor+".")
	}

	tree := filepath.Join(root, "_output", "kubernetes")
	if _, err := os.Stat(filepath.Join(tree, "cmd", "kubeadm")); err != nil {
		t.Skip("no tree (make tree)")
	}
	kubeadm, err := ReadKubeadmImages(tree)
	if err != nil {
		t.Fatal(err)
	}
	etcdTag := strings.TrimPrefix(kubeadm.Etcd, "registry.k8s.io/etcd:")
	mustSay(filepath.Join(root, kubeadm.EtcdModuleDir, "go.mod"), etcdPackage+" v"+strings.TrimSuffix(etcdTag, "-0")+" ")
}

// The etcd and CoreDNS of a tree are its kubeadm's, whatever its release.
func TestReadKubeadmImages(t *testing.T) {
	tree := t.TempDir()
	constants := filepath.Join(tree, "cmd", "kubeadm", "app", "constants")
	if err := os.MkdirAll(constants, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(etcd string) {
		src := "package constants\n\nconst (\n\tDefaultEtcdVersion = \"" + etcd + "\"\n\tPauseVersion = \"3.10.1\"\n)\n\nvar (\n\tCoreDNSVersion = \"v1.14.2\"\n)\n"
		if err := os.WriteFile(filepath.Join(constants, "constants.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("3.6.8-0")
	got, err := ReadKubeadmImages(tree)
	if err != nil {
		t.Fatal(err)
	}
	want := KubeadmImages{Etcd: "registry.k8s.io/etcd:3.6.8-0", EtcdModuleDir: "build/kind/etcd-3.6", CoreDNS: "registry.k8s.io/coredns/coredns:v1.14.2", CoreDNSVersion: "v1.14.2", Pause: "registry.k8s.io/pause:3.10.1"}
	if got != want {
		t.Errorf("ReadKubeadmImages = %+v, want %+v", got, want)
	}
	write("3.8.0-0")
	if _, err := ReadKubeadmImages(tree); err == nil || !strings.Contains(err.Error(), "etcd 3.8.0-0") {
		t.Errorf("an etcd no module builds: err = %v", err)
	}
}

// The pod network masquerades pod egress with iptables: the image carries it,
// the extensions its rules load and the links that select its back end.
func TestPodNetworkImageCarriesIptables(t *testing.T) {
	kubectl := filepath.Join(t.TempDir(), "kubectl")
	if err := os.WriteFile(kubectl, []byte("kubectl"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := PodNetworkImage(kubectl)
	if err != nil {
		t.Fatal(err)
	}
	e := entries(t, img)
	for _, want := range []string{
		"usr/local/bin/kubectl", "bin/sh", "usr/sbin/iptables", "usr/sbin/iptables-restore",
		strings.TrimPrefix(XtablesModules, "/") + "/libxt_addrtype.so",
		strings.TrimPrefix(XtablesModules, "/") + "/libxt_MASQUERADE.so",
	} {
		if e[want] == nil {
			t.Errorf("the pod network's image lacks %s", want)
		}
	}
}
