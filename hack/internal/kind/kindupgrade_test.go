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
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/yaml"
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

// The stop script sends SIGTERM to the processes of the name it is given, and
// to no other; it fails when there is none.
func TestStopProcessScriptStopsOnlyTheNamedProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	// A name no real process has: the test's host may run kube-apiservers.
	const name = "kc-stop-test"
	named := filepath.Join(t.TempDir(), name)
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(named, b, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(path string) *exec.Cmd {
		cmd := exec.Command(path, "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	target, other := start(named), start(sleep)
	if out, err := exec.Command("sh", "-c", stopProcessScript, "sh", name).CombinedOutput(); err != nil {
		t.Fatalf("stopping %s: %v: %s", name, err, out)
	}
	err = target.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("%s ended with %v, want SIGTERM", name, err)
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the other process was stopped too: %v", err)
	}
	if out, err := exec.Command("sh", "-c", stopProcessScript, "sh", name).CombinedOutput(); err == nil || !strings.Contains(string(out), "no process "+name) {
		t.Errorf("with no %s left: %v, %q; want a failure that says so", name, err, out)
	}
}
