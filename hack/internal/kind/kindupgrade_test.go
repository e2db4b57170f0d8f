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
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/images"
)

func writeTarball(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestUnpackReleaseReadsItsVersionAndStaysInItsFolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.tar.gz")
	writeTarball(t, path, map[string]string{
		"kubernetes/version":              "v1.37.2-carry.7+b07373f55496\n",
		"kubernetes/server/bin/kubeadm":   "kubeadm",
		"../escape":                       "outside",
		"kubernetes/../../escape-as-well": "outside",
	})
	work := filepath.Join(dir, "work")
	r, err := unpackRelease(path, work)
	if err != nil {
		t.Fatal(err)
	}
	if r.version != "v1.37.2-carry.7+b07373f55496" || r.imageTag() != "v1.37.2-carry.7_b07373f55496" {
		t.Errorf("version %q, image tag %q", r.version, r.imageTag())
	}
	if data, err := os.ReadFile(filepath.Join(r.dir, "kubeadm")); err != nil || string(data) != "kubeadm" {
		t.Errorf("kubeadm = %q, %v", data, err)
	}
	for _, outside := range []string{filepath.Join(dir, "escape"), filepath.Join(dir, "escape-as-well")} {
		if _, err := os.Stat(outside); err == nil {
			t.Errorf("%s was written outside the work folder", outside)
		}
	}

	writeTarball(t, path, map[string]string{"kubernetes/server/bin/kubeadm": "kubeadm"})
	if _, err := unpackRelease(path, filepath.Join(dir, "work2")); err == nil || !strings.Contains(err.Error(), "kubernetes/version") {
		t.Errorf("a tarball without its version: err = %v", err)
	}
}

// The upgrade takes the project's release, a pre-release in semver's terms,
// with no one there to confirm it.
func TestUpgradeConfigurationAllowsTheProjectsRelease(t *testing.T) {
	var cfg struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Apply      struct {
			KubernetesVersion         string   `json:"kubernetesVersion"`
			AllowExperimentalUpgrades bool     `json:"allowExperimentalUpgrades"`
			ForceUpgrade              bool     `json:"forceUpgrade"`
			IgnorePreflightErrors     []string `json:"ignorePreflightErrors"`
		} `json:"apply"`
		Node struct {
			IgnorePreflightErrors []string `json:"ignorePreflightErrors"`
		} `json:"node"`
	}
	if err := yaml.UnmarshalStrict([]byte(upgradeConfiguration("v1.37.2-carry.7+b07373f55496")), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.APIVersion != "kubeadm.k8s.io/v1beta4" || cfg.Kind != "UpgradeConfiguration" ||
		cfg.Apply.KubernetesVersion != "v1.37.2-carry.7+b07373f55496" || !cfg.Apply.AllowExperimentalUpgrades || !cfg.Apply.ForceUpgrade ||
		!slices.Equal(cfg.Apply.IgnorePreflightErrors, []string{"SystemVerification"}) || !slices.Equal(cfg.Node.IgnorePreflightErrors, []string{"SystemVerification"}) {
		t.Errorf("UpgradeConfiguration = %+v", cfg)
	}
}

func TestEtcdReplacedComparesTheManifestsImage(t *testing.T) {
	manifest := []byte("spec:\n  containers:\n  - command:\n    - etcd\n    image: registry.k8s.io/etcd:3.6.8-0\n    name: etcd\n")
	release := func(etcd string) images.Set {
		return images.Set{"registry.k8s.io/kube-apiserver:v1.37.2": nil, etcd: nil, "registry.k8s.io/pause:3.10.2": nil}
	}
	for _, tc := range []struct {
		name     string
		set      images.Set
		replaced bool
	}{
		{"a newer etcd", release("registry.k8s.io/etcd:3.7.0-0"), true},
		{"the same etcd", release("registry.k8s.io/etcd:3.6.8-0"), false},
		// A tag that only starts like the manifest's is another image.
		{"a tag the manifest's is a prefix of", release("registry.k8s.io/etcd:3.6.8-0-rc"), true},
		{"no etcd in the release", images.Set{"registry.k8s.io/kube-apiserver:v1.37.2": nil}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, replaced := etcdReplaced(manifest, tc.set); replaced != tc.replaced {
				t.Errorf("etcdReplaced = %v, want %v", replaced, tc.replaced)
			}
		})
	}
}
