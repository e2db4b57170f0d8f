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
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// entries reads the flattened file system of an image.
func entries(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = h
	}
}

func TestLayerIsReproducibleWithParentsModesAndLinks(t *testing.T) {
	files := []File{{Path: "usr/bin/tool", Mode: 0o755, Data: []byte("x")}, {Path: "bin/sh", Link: "busybox"}}
	a, err := Layer(files)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Layer([]File{files[1], files[0]})
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("the same files give different layers: %s %s", da, db)
	}
	img, err := Image(nil, v1.Config{Entrypoint: []string{"/usr/bin/tool"}}, a)
	if err != nil {
		t.Fatal(err)
	}
	e := entries(t, img)
	if h := e["usr/bin/tool"]; h == nil || h.Mode != 0o755 {
		t.Errorf("usr/bin/tool: %+v", h)
	}
	if h := e["usr"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("parent directory usr missing: %+v", h)
	}
	if h := e["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("bin/sh: %+v", h)
	}
	cf, _ := img.ConfigFile()
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.Entrypoint[0] != "/usr/bin/tool" {
		t.Errorf("config: %+v", cf)
	}
}

func TestSyntheticImagesHaveTheirSizeAndAreDeterministic(t *testing.T) {
	base, _ := Image(nil, v1.Config{})
	a, err := Synthetic(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Synthetic(base, 2)
	c, _ := Synthetic(base, 3)
	variant0, _ := SyntheticVariant(base, 2, 0)
	variant1, _ := SyntheticVariant(base, 2, 1)
	da, _ := a.Digest()
	db, _ := b.Digest()
	dc, _ := c.Digest()
	d0, _ := variant0.Digest()
	d1, _ := variant1.Digest()
	if da != db || da == dc || d0 != da || d1 == da {
		t.Errorf("digests: 2 MiB %s %s, 3 MiB %s, 2 MiB variants 0 %s and 1 %s", da, db, dc, d0, d1)
	}
	// Variants whose names share their first 32 bytes are other images too.
	long1, _ := SyntheticVariant(base, 2, 10000)
	long2, _ := SyntheticVariant(base, 2, 10001)
	dl1, _ := long1.Digest()
	dl2, _ := long2.Digest()
	if dl1 == dl2 {
		t.Errorf("2 MiB variants 10000 and 10001 are the same image %s", dl1)
	}
	layers, _ := a.Layers()
	size, _ := layers[len(layers)-1].Size()
	if size < 2<<20 {
		t.Errorf("a 2 MiB synthetic layer is %d bytes compressed: the data must not compress", size)
	}
}

func TestBusyboxHasAShell(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox-static is not installed")
	}
	img, err := Busybox("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	e := entries(t, img)
	if h := e["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink {
		t.Errorf("bin/sh: %+v", h)
	}
	if h := e["tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("tmp: %+v", h)
	}
	// As busybox's own image: every applet in /bin (the Sysctls Conformance spec runs
	// /bin/sysctl), and still at busybox's own path.
	for _, applet := range []string{"bin/sysctl", "sbin/sysctl", "bin/env", "usr/bin/env"} {
		if h := e[applet]; h == nil || h.Typeflag != tar.TypeSymlink {
			t.Errorf("%s: %+v", applet, h)
		}
	}
}

// TestTagsMatchTheTree keeps the tags in step with the e2e framework of the pinned release.
func TestTagsMatchTheTree(t *testing.T) {
	manifest := filepath.Join("..", "..", "..", "_output", "kubernetes", "test", "utils", "image", "manifest.go")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Skip("no tree (make tree)")
	}
	for _, want := range []string{
		`configs[Pause] = Config{list.GcRegistry, "pause", "` + PauseTag + `"}`,
		`configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "` + BusyboxTag + `"}`,
		`configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "` + AgnhostTag + `"}`,
		`configs[AgnhostPrev] = Config{list.PromoterE2eRegistry, "agnhost", "` + AgnhostPrevTag + `"}`,
		`configs[Kitten] = Config{list.PromoterE2eRegistry, "kitten", "` + KittenTag + `"}`,
		`configs[Nautilus] = Config{list.PromoterE2eRegistry, "nautilus", "` + NautilusTag + `"}`,
		`configs[Nonewprivs] = Config{list.PromoterE2eRegistry, "nonewprivs", "` + NonewprivsTag + `"}`,
		`configs[NonRoot] = Config{list.PromoterE2eRegistry, "nonroot", "` + NonRootTag + `"}`,
		`configs[Nginx] = Config{list.PromoterE2eRegistry, "nginx", "` + NginxTag + `"}`,
		`configs[NginxNew] = Config{list.PromoterE2eRegistry, "nginx", "` + NginxNewTag + `"}`,
		`configs[GlibcDnsTesting] = Config{list.PromoterE2eRegistry, "glibc-dns-testing", "` + GlibcDNSTestingTag + `"}`,
		`configs[APIServer] = Config{list.PromoterE2eRegistry, "sample-apiserver", "` + SampleAPIServerTag + `"}`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s no longer says %s", manifest, want)
		}
	}
}

// The Conformance extras are laid out as their Dockerfiles in the tree lay them out.
func TestConformanceExtrasAsTheirDockerfiles(t *testing.T) {
	tree := filepath.Join("..", "..", "..", "_output", "kubernetes")
	if _, err := os.Stat(filepath.Join(tree, "test", "images", "kitten")); err != nil {
		t.Skip("no tree (make tree)")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no busybox (apt-get install busybox-static)")
	}
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	agnhost, err := Image(busybox, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}})
	if err != nil {
		t.Fatal(err)
	}
	n := Names{Registry: "registry.k8s.io"}
	set, err := ConformanceExtras(t.Context(), tree, t.TempDir(), n, agnhost, busybox)
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 5 {
		t.Errorf("%d images, want 5", len(set))
	}
	if set["registry.k8s.io/e2e-test-images/agnhost:"+AgnhostPrevTag] != agnhost {
		t.Error("AgnhostPrev is not the tree's agnhost")
	}
	for _, name := range []string{"kitten", "nautilus"} {
		img := set["registry.k8s.io/e2e-test-images/"+name+":1.8"]
		if img == nil {
			t.Fatalf("no %s", name)
		}
		e := entries(t, img)
		if e[name+".jpg"] == nil || e["data.json"] == nil {
			t.Errorf("%s: no %s.jpg or data.json", name, name)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(append(cfg.Config.Entrypoint, cfg.Config.Cmd...), " "); got != "/agnhost test-webserver" {
			t.Errorf("%s runs %q", name, got)
		}
	}
	nnp := entries(t, set["registry.k8s.io/e2e-test-images/nonewprivs:"+NonewprivsTag])["usr/local/bin/nnp"]
	if nnp == nil || nnp.Mode&0o4000 == 0 {
		t.Errorf("nonewprivs: nnp is not set-user-ID: %+v", nnp)
	}
	cfg, err := set["registry.k8s.io/e2e-test-images/nonroot:"+NonRootTag].ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "1234" {
		t.Errorf("nonroot runs as %q", cfg.Config.User)
	}
}
