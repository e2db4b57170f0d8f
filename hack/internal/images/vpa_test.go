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
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// fileOf reads one file of an image's flattened file system.
func fileOf(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the image has no %s", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == path {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}

// vpaLikeTree writes a Go module of the VPA's path, version file and three
// main packages that print the commit their build was stamped with, in a
// git checkout of one commit.
func vpaLikeTree(t *testing.T) (tree, commit string) {
	t.Helper()
	tree = t.TempDir()
	files := map[string]string{
		"go.mod":            "module " + vpaModule + "\n\ngo 1.24\n",
		"common/version.go": "package common\n\nvar gitCommit = \"\"\n\n// versionCore is the version of VPA.\nconst versionCore = \"1.8.1\"\n\nfunc Commit() string { return gitCommit }\n",
	}
	for _, c := range VPAComponents {
		files["pkg/"+c+"/main.go"] = "package main\n\nimport (\n\t\"fmt\"\n\n\t\"" + vpaModule + "/common\"\n)\n\nfunc main() { fmt.Println(\"" + c + "\", common.Commit()) }\n"
	}
	for name, content := range files {
		path := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", tree, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "tree")
	return tree, git("rev-parse", "HEAD")
}

// Each component's image is the tree's program, static, at /COMPONENT as its
// entrypoint, run as nobody, stamped with the tree's commit (-dirty with
// changes), under a name that is not upstream's and that changes exactly when
// the program does.
func TestVPAImagesAreTheTreesStaticPrograms(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	tree, commit := vpaLikeTree(t)
	refs, set, err := VPA(t.Context(), tree, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != len(VPAComponents) || len(set) != len(VPAComponents) {
		t.Fatalf("images %v for components %v", refs, VPAComponents)
	}
	for _, c := range VPAComponents {
		ref := refs[c]
		if !regexp.MustCompile(`^registry\.k8s\.io/autoscaling/vpa-` + c + `:1\.8\.1-carry\.[0-9a-f]{12}$`).MatchString(ref) {
			t.Errorf("%s: image %q, want registry.k8s.io/autoscaling/vpa-%s:1.8.1-carry.DIGEST", c, ref, c)
		}
		img := set[ref]
		if img == nil {
			t.Fatalf("%s: no image under %s", c, ref)
		}
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(ref, "."+digest.Hex[:12]) {
			t.Errorf("%s: %s does not name its digest %s", c, ref, digest)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/"+c || cfg.Config.User != "65534:65534" {
			t.Errorf("%s: entrypoint %q as user %q, want /%s as 65534:65534", c, got, cfg.Config.User, c)
		}
		program := fileOf(t, img, c)
		f, err := elf.NewFile(bytes.NewReader(program))
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: dynamically linked (has an interpreter), want static (CGO off)", c)
			}
		}
		if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
			bin := filepath.Join(t.TempDir(), c)
			if err := os.WriteFile(bin, program, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin).Output()
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if got, want := strings.TrimSpace(string(out)), c+" "+commit; got != want {
				t.Errorf("%s says %q, want %q (the tree's commit in its version)", c, got, want)
			}
		}
	}

	// The same tree again: the same names, so a second deploy rolls nothing out.
	again, _, err := VPA(t.Context(), tree, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range VPAComponents {
		if again[c] != refs[c] {
			t.Errorf("%s: rebuilt as %s, first %s: the builds are not reproducible", c, again[c], refs[c])
		}
	}

	// A change in the tree: -dirty, and new names.
	path := filepath.Join(tree, "pkg", "recommender", "main.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(src, []byte("\nvar _ = 1\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	dirty, set, err := VPA(t.Context(), tree, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if dirty["recommender"] == refs["recommender"] {
		t.Errorf("the recommender of a changed tree has the old name %s", refs["recommender"])
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		bin := filepath.Join(t.TempDir(), "updater")
		if err := os.WriteFile(bin, fileOf(t, set[dirty["updater"]], "updater"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(string(out)), "updater "+commit+"-dirty"; got != want {
			t.Errorf("the updater of a changed tree says %q, want %q", got, want)
		}
	}
}

// metrics-server is the version hack/vpa.sh pins, built without cgo, its
// program alone at /metrics-server as upstream's Dockerfile places it, under a
// name that is not upstream's release's.
func TestMetricsServerIsThePinnedVersion(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "vpa.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nMETRICS_SERVER_VERSION=" + MetricsServerVersion + "\n"; !strings.Contains(string(script), want) {
		t.Errorf("hack/vpa.sh no longer pins metrics-server %s", MetricsServerVersion)
	}
	if metricsServerProgram.CGO || metricsServerProgram.Version != MetricsServerVersion || metricsServerProgram.ModuleDir != "" {
		t.Errorf("metrics-server is built as %+v, want %s from the module proxy without cgo", metricsServerProgram, MetricsServerVersion)
	}
	// The version variable its Makefile stamps, where its module is in the cache.
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), "go", "pkg", "mod")
	}
	if makefile, err := os.ReadFile(filepath.Join(cache, "sigs.k8s.io", "metrics-server@"+MetricsServerVersion, "Makefile")); err == nil {
		pkg := regexp.MustCompile(`(?m)^PKG:=(\S+)$`).FindSubmatch(makefile)
		if pkg == nil || !strings.Contains(string(makefile), "-X $(PKG)/version.gitVersion=") {
			t.Fatal("metrics-server's Makefile no longer stamps $(PKG)/version.gitVersion")
		}
		if want := "-X " + string(pkg[1]) + "/version.gitVersion=" + MetricsServerVersion; metricsServerProgram.Ldflags != want {
			t.Errorf("metrics-server is built with %q, want %q", metricsServerProgram.Ldflags, want)
		}
	}
	img, err := metricsServerImage([]byte("program"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/metrics-server" || cfg.Config.User != "65534:65534" {
		t.Errorf("entrypoint %q as user %q, want /metrics-server as 65534:65534", got, cfg.Config.User)
	}
	if got := fileOf(t, img, "metrics-server"); string(got) != "program" {
		t.Errorf("/metrics-server is %q", got)
	}
	ref, err := carryTag("registry.k8s.io/metrics-server/metrics-server", MetricsServerVersion, img)
	if err != nil {
		t.Fatal(err)
	}
	if ref == "registry.k8s.io/metrics-server/metrics-server:"+MetricsServerVersion || !strings.Contains(ref, ":"+MetricsServerVersion+"-carry.") {
		t.Errorf("metrics-server is named %s, want %s-carry.DIGEST", ref, MetricsServerVersion)
	}
}

// The version in the images' names is the one the tree's common/version.go
// declares, as the VPA tree has it.
func TestVPAVersionOfTheTree(t *testing.T) {
	tree := filepath.Join("..", "..", "..", "_output", "autoscaler", "vertical-pod-autoscaler")
	if _, err := os.Stat(filepath.Join(tree, "common", "version.go")); err != nil {
		t.Skip("no VPA tree (make vpa)")
	}
	v, err := vpaVersion(tree)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(v) {
		t.Errorf("the tree's VPA version is %q", v)
	}
}
