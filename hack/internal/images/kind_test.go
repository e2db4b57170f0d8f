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

	etcdTag := strings.TrimPrefix(KindEtcd, "registry.k8s.io/etcd:")
	mustSay(filepath.Join(root, etcdModuleDir, "go.mod"), etcdPackage+" v"+strings.TrimSuffix(etcdTag, "-0"))
	coreDNSTag := strings.TrimPrefix(KindCoreDNS, "registry.k8s.io/coredns/coredns:")
	if coreDNSVersion != coreDNSTag {
		t.Errorf("CoreDNS is built at %s but named %s", coreDNSVersion, KindCoreDNS)
	}

	constants := filepath.Join(root, "_output", "kubernetes", "cmd", "kubeadm", "app", "constants", "constants.go")
	if _, err := os.Stat(constants); err != nil {
		t.Skip("no tree (make tree)")
	}
	mustSay(constants, `DefaultEtcdVersion = "`+etcdTag+`"`, `CoreDNSVersion = "`+coreDNSTag+`"`)
}
