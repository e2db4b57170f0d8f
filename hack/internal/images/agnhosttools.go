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
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// agnhostTools are the programs agnhost's Dockerfile installs on Alpine (bind-tools,
// curl, netcat-openbsd, iproute2, bash) that specs run in agnhost pods, and getent,
// which Alpine's libc carries and the DNS specs' probes run: the Services specs probe
// with `nc -v -z -w 2` and `nc -v -t`, which busybox's nc lacks. Taken from this
// machine's Debian packages with the libraries they load.
var agnhostTools = []string{"nc.openbsd", "curl", "dig", "ip", "bash", "getent"}

// AgnhostPackages are the Debian packages of agnhostTools, by program.
var AgnhostPackages = map[string]string{
	"nc.openbsd": "netcat-openbsd",
	"curl":       "curl",
	"dig":        "bind9-dnsutils",
	"ip":         "iproute2",
	"bash":       "bash",
	"getent":     "libc-bin",
}

// AgnhostWithTools is agnhost with the programs of agnhostTools (nc is OpenBSD's, as
// on Alpine), a shell that looks for them in PATH (agnhostShell) and CoreDNS at
// /coredns, as upstream's image has them.
func AgnhostWithTools(ctx context.Context, work string, agnhost v1.Image) (v1.Image, error) {
	files, err := agnhostToolFiles()
	if err != nil {
		return nil, err
	}
	shell, err := agnhostShell(ctx, work)
	if err != nil {
		return nil, err
	}
	coreDNS, err := GoProgram{Pkg: coreDNSModule, Version: coreDNSVersion}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	l, err := Layer(append(append(files, shell...), File{Path: "coredns", Mode: 0o755, Data: coreDNS}))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(agnhost, l)
	if err != nil {
		return nil, err
	}
	return withAlpinePath(img)
}

// withAlpinePath sets Alpine's PATH, which upstream's agnhost inherits from its
// base: /usr/bin (OpenBSD's nc) before /bin (busybox's), where a shell without
// PATH looks first.
func withAlpinePath(img v1.Image) (v1.Image, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	env := slices.DeleteFunc(slices.Clone(cfg.Config.Env), func(e string) bool { return strings.HasPrefix(e, "PATH=") })
	cfg.Config.Env = append(env, agnhostPath)
	return mutate.Config(img, cfg.Config)
}

const agnhostPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// agnhostToolFiles are the files of agnhostTools, nc named as on Alpine.
func agnhostToolFiles() ([]File, error) {
	files, err := HostFiles(agnhostTools, nil)
	if err != nil {
		return nil, fmt.Errorf("agnhost's tools (apt-get install netcat-openbsd curl bind9-dnsutils iproute2): %w", err)
	}
	return append(files,
		File{Path: "usr/bin/nc", Link: "nc.openbsd"},
		File{Path: "etc/nsswitch.conf", Data: []byte(nsswitchConf)},
	), nil
}

// agnhostShell is Debian's dynamically linked busybox (package busybox) as
// agnhost's /bin/sh, with the libraries it loads. The images here are built on
// Debian's busybox-static, which prefers its own applets
// (FEATURE_SH_STANDALONE): its shell runs busybox's nc for `sh -c 'nc ...'`
// whatever PATH says. Alpine's shell, upstream agnhost's, looks in PATH, and so
// does this one.
func agnhostShell(ctx context.Context, work string) ([]File, error) {
	root, err := debianPackage(ctx, work, "busybox")
	if err != nil {
		return nil, err
	}
	files, data, err := programWithLibraries(ctx, filepath.Join(root, "bin", "busybox"))
	if err != nil {
		return nil, err
	}
	return append(files,
		File{Path: agnhostShellPath, Mode: 0o755, Data: data},
		File{Path: "bin/sh", Link: "/" + agnhostShellPath},
	), nil
}

const agnhostShellPath = "usr/lib/busybox-dynamic/busybox"
