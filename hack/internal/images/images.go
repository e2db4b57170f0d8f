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

// Package images builds the container images the local cluster and the e2e tests
// need (pause, busybox, agnhost and synthetic images for pull benchmarks) from
// files on this machine, without a Docker engine.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The tags the e2e framework of Kubernetes v1.36.3 asks for
// (test/utils/image/manifest.go); TestTagsMatchTheTree checks them against the tree.
const (
	PauseTag   = "3.10.2"
	BusyboxTag = "1.37.0-2"
	AgnhostTag = "2.66.1"
	// The images of test/images that Conformance specs start besides those
	// (images.ConformanceExtras).
	AgnhostPrevTag = "2.55"
	KittenTag      = "1.8"
	NautilusTag    = "1.8"
	NonewprivsTag  = "1.4"
	NonRootTag     = "1.5"
)

// epoch is the timestamp of every file and image, so that builds are reproducible.
var epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer.
type File struct {
	Path string // without a leading slash
	Mode int64  // permission bits; 0 means 0644 (0755 for directories)
	Data []byte
	Link string // symlink target, when set
	Dir  bool
}

// Layer makes a reproducible layer from files; parent directories are added as needed.
func Layer(files []File) (v1.Layer, error) {
	entries := map[string]File{}
	for _, f := range files {
		f.Path = strings.Trim(f.Path, "/")
		entries[f.Path] = f
		for d := filepath.Dir(f.Path); d != "."; d = filepath.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true}
			}
		}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := entries[p]
		hdr := &tar.Header{Name: p, ModTime: epoch, Mode: f.Mode, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
			if hdr.Mode == 0 {
				hdr.Mode = 0o755
			}
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
			if hdr.Mode == 0 {
				hdr.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Image stacks layers on base (nil for an empty image) and sets the run configuration.
func Image(base v1.Image, cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	if base == nil {
		base = mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	}
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", v1.Time{Time: epoch}
	if cfg.Env == nil {
		cfg.Env = cf.Config.Env
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// Pause compiles upstream's pause.c (build/pause/linux in the tree) statically.
func Pause(tree, work string) (v1.Image, error) {
	bin := filepath.Join(work, "pause")
	cmd := exec.Command("gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v"+PauseTag+"-carry",
		"-o", bin, filepath.Join(tree, "build/pause/linux/pause.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling pause.c (gcc with static libc is needed: apt-get install gcc libc6-dev): %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	l, err := Layer([]File{{Path: "pause", Mode: 0o755, Data: data}})
	if err != nil {
		return nil, err
	}
	return Image(nil, v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}, l)
}

// Busybox makes a busybox image from a static busybox binary, with every applet linked.
func Busybox(busybox string) (v1.Image, error) {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("busybox (apt-get install busybox-static): %w", err)
	}
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	files := []File{
		{Path: "bin/busybox", Mode: 0o755, Data: data},
		{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		{Path: "etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "root", Dir: true, Mode: 0o700},
		{Path: "var/tmp", Dir: true, Mode: 0o1777},
	}
	// Every applet in /bin, as busybox's own image has them (specs run /bin/sysctl),
	// and at busybox's full path (sbin/, usr/bin/...) too.
	paths := map[string]bool{}
	for _, applet := range strings.Fields(string(out)) {
		paths[applet], paths["bin/"+path.Base(applet)] = true, true
	}
	delete(paths, "bin/busybox")
	for _, applet := range slices.Sorted(maps.Keys(paths)) {
		rel, _ := filepath.Rel(filepath.Dir(applet), "bin/busybox")
		files = append(files, File{Path: applet, Link: rel})
	}
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	return Image(nil, v1.Config{Cmd: []string{"sh"}}, l)
}

// Agnhost builds upstream's agnhost (test/images/agnhost in the tree) on the busybox
// image, laid out as upstream's Dockerfile lays it out.
func Agnhost(tree, work string, busybox v1.Image) (v1.Image, error) {
	bin := filepath.Join(work, "agnhost")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./test/images/agnhost")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building agnhost: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: "agnhost", Mode: 0o755, Data: data},
		{Path: "agnhost-2", Link: "agnhost"},
		{Path: "uploads", Dir: true},
		{Path: "etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
		{Path: "etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
	}
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		d, err := os.ReadFile(filepath.Join(tree, "test/images/agnhost/porter", f))
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: f, Data: d})
	}
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	return Image(busybox, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}, l)
}

// Synthetic is an image of about mib MiB of incompressible data on the pause image, so
// that a pod runs it; the same size always gives the same image.
func Synthetic(pause v1.Image, mib int) (v1.Image, error) { return SyntheticVariant(pause, mib, 0) }

// SyntheticVariant is Synthetic with other data for each variant (0 is Synthetic's),
// for images of one size that share no layer but the pause image's.
func SyntheticVariant(pause v1.Image, mib, variant int) (v1.Image, error) {
	data := make([]byte, mib<<20)
	s := fmt.Sprintf("kube-carry synthetic %d MiB", mib)
	if variant != 0 {
		s += fmt.Sprintf(" #%d", variant)
	}
	// Hashed, not copied: a seed cut to its 32 bytes made variants whose names
	// differ only after them (#1000, #1001) the same image.
	rand.NewChaCha8(sha256.Sum256([]byte(s))).Read(data)
	l, err := Layer([]File{{Path: "data/blob", Data: data}})
	if err != nil {
		return nil, err
	}
	return Image(pause, v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}, l)
}

// Set is a named set of images to push.
type Set map[string]v1.Image

// Push writes every image to its reference; a plain-HTTP registry on loopback is allowed.
func (s Set) Push(ctx context.Context) error {
	refs := make([]string, 0, len(s))
	for r := range s {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		ref, err := name.ParseReference(r, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, s[r], remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("pushing %s: %w", r, err)
		}
	}
	return nil
}

// Names are the references of the standard images in a registry.
type Names struct{ Registry string }

func (n Names) Pause() string   { return n.Registry + "/pause:" + PauseTag }
func (n Names) Busybox() string { return n.E2E("busybox", BusyboxTag) }
func (n Names) Agnhost() string { return n.E2E("agnhost", AgnhostTag) }

// E2E names an image of the e2e test images' repository.
func (n Names) E2E(name, tag string) string {
	return n.Registry + "/e2e-test-images/" + name + ":" + tag
}
func (n Names) Synthetic(mib int) string {
	return fmt.Sprintf("%s/carry/synthetic:%dmib", n.Registry, mib)
}

// Standard builds the images of the local cluster: pause, busybox and one synthetic
// image per size in MiB.
func Standard(tree, work string, n Names, sizes []int) (Set, error) {
	pause, err := Pause(tree, work)
	if err != nil {
		return nil, err
	}
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	set := Set{n.Pause(): pause, n.Busybox(): busybox}
	for _, mib := range sizes {
		if set[n.Synthetic(mib)], err = Synthetic(pause, mib); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// E2E builds the images upstream's e2e tests need beyond the cluster's: agnhost. Its
// build compiles a dependency graph of its own (static, without cgo), so only the
// targets that run e2e tests build it.
func E2E(tree, work string, n Names) (Set, error) {
	busybox, err := Busybox("/bin/busybox")
	if err != nil {
		return nil, err
	}
	agnhost, err := Agnhost(tree, work, busybox)
	if err != nil {
		return nil, err
	}
	return Set{n.Agnhost(): agnhost}, nil
}

// ConformanceExtras builds the images of test/utils/image besides pause, busybox and
// agnhost that Conformance specs start, from the tree's test/images as their
// Dockerfiles lay them out: kitten and nautilus (agnhost serving their picture and
// data), nonewprivs (its program, set-user-ID), nonroot (busybox as user 1234). The
// specs use AgnhostPrev only as an agnhost other than the current one (a rollout from
// one to the other); it is the tree's agnhost under that tag.
func ConformanceExtras(ctx context.Context, tree, work string, n Names, agnhost, busybox v1.Image) (Set, error) {
	set := Set{n.E2E("agnhost", AgnhostPrevTag): agnhost}
	for name, tag := range map[string]string{"kitten": KittenTag, "nautilus": NautilusTag} {
		var files []File
		for _, f := range []string{name + ".jpg", "data.json"} {
			data, err := os.ReadFile(filepath.Join(tree, "test", "images", name, "html", f))
			if err != nil {
				return nil, err
			}
			files = append(files, File{Path: f, Data: data})
		}
		l, err := Layer(files)
		if err != nil {
			return nil, err
		}
		if set[n.E2E(name, tag)], err = Image(agnhost, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}, l); err != nil {
			return nil, err
		}
	}
	nnp, err := GoProgram{Pkg: "./test/images/nonewprivs", ModuleDir: tree}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	l, err := Layer([]File{{Path: "usr/local/bin/nnp", Mode: 0o4755, Data: nnp}})
	if err != nil {
		return nil, err
	}
	if set[n.E2E("nonewprivs", NonewprivsTag)], err = Image(busybox, v1.Config{Cmd: []string{"nnp"}, Env: []string{"PATH=/usr/local/bin:/bin"}}, l); err != nil {
		return nil, err
	}
	if set[n.E2E("nonroot", NonRootTag)], err = Image(busybox, v1.Config{Cmd: []string{"sh"}, User: "1234"}); err != nil {
		return nil, err
	}
	return set, nil
}
