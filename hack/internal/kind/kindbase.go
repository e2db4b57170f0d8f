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
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/images"
	"github.com/kube-carry/kube-carry/hack/internal/series"
	"sigs.k8s.io/kind/pkg/build/nodeimage"
)

const (
	// KindModule is the kind release whose CLI (go tool kind), base image files and
	// node image build this project uses, at the version go.mod pins.
	KindModule = "sigs.k8s.io/kind"
	// kindBaseSuite is the Debian release of the base image. kind's own is trixie;
	// this machine's package mirror serves bookworm.
	kindBaseSuite = "bookworm"
)

// kindBasePackages are the Debian packages of kind's base image, as its
// images/base/Dockerfile lists them.
var kindBasePackages = []string{
	"systemd",
	"conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount", "kmod",
	"libseccomp2", "pigz", "fuse-overlayfs",
	"nfs-common", "open-iscsi",
	"e2fsprogs",
	"bash", "ca-certificates", "curl", "jq", "procps",
}

// kindBasePrograms are containerd, runc, crictl and the CNI plugins at the versions
// of kind's images/base/Dockerfile, with its build tags. containerd's
// fuse-overlayfs snapshotter, used only by rootless kind, is left out.
var kindBasePrograms = func() []kindBaseProgram {
	const containerd, runc, crictl, cni = "v2.3.4", "v1.4.3", "v1.36.0", "v1.9.1"
	ctrdFlags := "-X github.com/containerd/containerd/v2/version.Version=" + containerd
	ctrdTags := "no_aufs no_zfs no_btrfs no_devmapper"
	p := []kindBaseProgram{
		{images.GoProgram{Pkg: "github.com/containerd/containerd/v2/cmd/containerd", Version: containerd, Tags: ctrdTags, Ldflags: ctrdFlags, CGO: true}, "/usr/local/bin/containerd"},
		{images.GoProgram{Pkg: "github.com/containerd/containerd/v2/cmd/ctr", Version: containerd, Tags: ctrdTags, Ldflags: ctrdFlags, CGO: true}, "/usr/local/bin/ctr"},
		{images.GoProgram{Pkg: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2", Version: containerd, Tags: ctrdTags, Ldflags: ctrdFlags, CGO: true}, "/usr/local/bin/containerd-shim-runc-v2"},
		{images.GoProgram{Pkg: "github.com/opencontainers/runc", Version: runc, Tags: "seccomp urfave_cli_no_docs", Ldflags: "-X main.version=" + strings.TrimPrefix(runc, "v"), CGO: true}, "/usr/local/sbin/runc"},
		// go install crictl@version fails: the proxy refuses cri-tools' version list,
		// which go install reads for deprecations. build/kind/crictl pins crictl.
		{images.GoProgram{Pkg: "sigs.k8s.io/cri-tools/cmd/crictl", ModuleDir: "build/kind/crictl", Ldflags: "-X sigs.k8s.io/cri-tools/pkg/version.Version=" + crictl}, "/usr/local/bin/crictl"},
	}
	for _, plugin := range []string{"ipam/host-local", "main/loopback", "main/ptp", "meta/portmap"} {
		p = append(p, kindBaseProgram{images.GoProgram{Pkg: "github.com/containernetworking/plugins/plugins/" + plugin, Version: cni}, "/opt/cni/bin/" + path.Base(plugin)})
	}
	return p
}()

// kindBaseProgram is a program of the base image and its path there.
type kindBaseProgram struct {
	images.GoProgram
	dest string
}

// kindBaseBuildPackages are what building kindBasePrograms needs on this machine
// (runc links libseccomp), by the file each provides.
var kindBaseBuildPackages = map[string]string{"/usr/include/seccomp.h": "libseccomp-dev"}

// kindBaseSetup is the rest of kind's base Dockerfile, run in the image's root: the
// systemd units kind turns off and on, and the folders a node needs.
const kindBaseSetup = `set -e
chmod 755 /kind /kind/bin
find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >> /etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
`

// BuildKindBase builds kind's base image into the engine, under the name kind's node
// image build starts from (nodeimage.DefaultBaseImage), unless the engine has it: a
// Debian root file system with kind's packages (debootstrap), kind's base files from
// its module, and containerd, runc, crictl and the CNI plugins built from their Go
// modules.
func (k *Kind) BuildKindBase(ctx context.Context) error {
	if k.docker(ctx, "image", "inspect", nodeimage.DefaultBaseImage).Run() == nil {
		k.c.Logf("%-24s present", nodeimage.DefaultBaseImage)
		return nil
	}
	if err := cluster.InstallPackages(k.c.Log, kindBaseBuildPackages); err != nil {
		return err
	}
	kindDir, err := series.GoSource{Root: k.root}.ModuleDir(KindModule, "")
	if err != nil {
		return err
	}
	work := k.c.Path("base")
	rootfs := filepath.Join(work, "rootfs")
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	if err := k.buildPrograms(ctx, filepath.Join(work, "bin")); err != nil {
		return err
	}
	k.c.Logf("%-24s debootstrap %s (log %s)", "kind base image", kindBaseSuite, k.c.Rel(filepath.Join(work, "debootstrap.log")))
	if err := k.run(ctx, filepath.Join(work, "debootstrap.log"), "debootstrap", "--variant=minbase", kindBaseSuite, rootfs, debianMirror()); err != nil {
		return err
	}
	if err := copyKindBaseFiles(filepath.Join(kindDir, "images", "base", "files"), rootfs); err != nil {
		return err
	}
	for _, p := range kindBasePrograms {
		if err := copyFile(filepath.Join(work, "bin", path.Base(p.Pkg)), filepath.Join(rootfs, p.dest), 0o755); err != nil {
			return err
		}
	}
	if err := k.installKindPackages(ctx, rootfs, work); err != nil {
		return err
	}
	if err := k.run(ctx, filepath.Join(work, "setup.log"), "chroot", rootfs, "sh", "-c", kindBaseSetup); err != nil {
		return err
	}
	if err := writeCRIBaseSpec(ctx, filepath.Join(work, "bin", "ctr"), rootfs); err != nil {
		return err
	}
	k.c.Logf("%-24s importing %s", "kind base image", nodeimage.DefaultBaseImage)
	tar := exec.CommandContext(ctx, "tar", "-C", rootfs, "--numeric-owner", "-c", ".")
	imp := k.docker(ctx, "import",
		"--change", "ENV container=docker",
		"--change", `ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]`,
		"-", kindBaseImport)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	if err := tar.Start(); err != nil {
		return err
	}
	out, impErr := imp.CombinedOutput()
	pipe.Close() // should the import stop early, tar stops too
	tarErr := tar.Wait()
	if impErr != nil {
		return fmt.Errorf("docker import: %w: %s", impErr, out)
	}
	if tarErr != nil {
		return fmt.Errorf("tar of %s: %w", rootfs, tarErr)
	}
	// The engine's import takes no STOPSIGNAL; a build from the import adds it,
	// without a layer (systemd stops on SIGRTMIN+3).
	err = k.dockerBuild(ctx, filepath.Join(work, "stopsignal"), nodeimage.DefaultBaseImage,
		"FROM "+kindBaseImport+"\nSTOPSIGNAL SIGRTMIN+3\n", nil)
	k.docker(context.WithoutCancel(ctx), "image", "rm", kindBaseImport).Run()
	if err != nil {
		return err
	}
	return os.RemoveAll(rootfs)
}

// kindBaseImport is the name of the base image's root as imported, before its stop signal.
const kindBaseImport = "kube-carry/kind-base-import:latest"

// hostAptFiles are what apt inside the root needs of this machine's settings to
// reach its package mirror.
var hostAptFiles = []string{"/etc/resolv.conf", "/etc/apt/sources.list.d/debian.sources", "/etc/apt/apt.conf.d/99artifact-registry"}

// installKindPackages installs kindBasePackages with kind's clean-install in the
// root, with /proc mounted, and no service started (policy-rc.d), then removes what
// it borrowed from this machine.
func (k *Kind) installKindPackages(ctx context.Context, rootfs, work string) (err error) {
	var borrowed []string
	for _, f := range hostAptFiles {
		if _, err := os.Stat(f); err == nil {
			if err := copyFile(f, filepath.Join(rootfs, f), 0o644); err != nil {
				return err
			}
			borrowed = append(borrowed, filepath.Join(rootfs, f))
		}
	}
	policy := filepath.Join(rootfs, "usr", "sbin", "policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return err
	}
	borrowed = append(borrowed, policy)
	proc := filepath.Join(rootfs, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting proc on %s: %w", proc, err)
	}
	defer func() {
		if uerr := cluster.UnmountUnder(rootfs); uerr != nil && err == nil {
			err = uerr
		}
		for _, f := range borrowed {
			os.Remove(f)
		}
	}()
	k.c.Logf("%-24s installing kind's packages with its clean-install (log %s)", "kind base image", k.c.Rel(filepath.Join(work, "install.log")))
	return k.run(ctx, filepath.Join(work, "install.log"), "chroot", append([]string{rootfs, "clean-install"}, kindBasePackages...)...)
}

// buildPrograms builds kindBasePrograms into dir, which the Go build cache makes
// quick the second time.
func (k *Kind) buildPrograms(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range kindBasePrograms {
		k.c.Logf("%-24s building %s", "kind base image", p)
		if p.ModuleDir != "" {
			p.ModuleDir = filepath.Join(k.root, p.ModuleDir)
		}
		if _, err := p.Build(ctx, dir); err != nil {
			return err
		}
	}
	return nil
}

// writeCRIBaseSpec writes /etc/containerd/cri-base.json as kind's Dockerfile does:
// ctr's default OCI spec, with kind's createContainer hook and without rlimits.
func writeCRIBaseSpec(ctx context.Context, ctr, rootfs string) error {
	out, err := exec.CommandContext(ctx, ctr, "oci", "spec").Output()
	if err != nil {
		return fmt.Errorf("ctr oci spec: %w", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(out, &spec); err != nil {
		return fmt.Errorf("ctr oci spec: %w", err)
	}
	hooks, _ := spec["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
		spec["hooks"] = hooks
	}
	create, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(create, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	if process, ok := spec["process"].(map[string]any); ok {
		delete(process, "rlimits")
	}
	data, err := json.MarshalIndent(spec, "", "    ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(rootfs, "etc", "containerd", "cri-base.json"), data, 0o644)
}

// copyKindBaseFiles copies kind's images/base/files into the root as its Dockerfile
// does: scripts in usr/local/bin and kind/bin executable, everything else 0644.
func copyKindBaseFiles(src, rootfs string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || d.IsDir() {
			return err
		}
		mode := fs.FileMode(0o644)
		if dir := filepath.Dir(rel); dir == "usr/local/bin" || dir == "kind/bin" {
			mode = 0o755
		}
		return copyFile(p, filepath.Join(rootfs, rel), mode)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	os.Remove(dst) // a link or a read-only file from the module cache
	if err := os.WriteFile(dst, data, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// debianMirror is the first Debian mirror of this machine's apt sources.
func debianMirror() string {
	for _, f := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:":
				return fields[1]
			case len(fields) >= 3 && fields[0] == "deb":
				return fields[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

// docker is the docker CLI on the engine.
func (k *Kind) docker(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+k.DockerHost())
	return cmd
}

// run runs a command with its output in log, and names the log when it fails.
func (k *Kind) run(ctx context.Context, log, name string, args ...string) error {
	return k.runCmd(exec.CommandContext(ctx, name, args...), log)
}
