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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/images"
	"sigs.k8s.io/kind/pkg/build/nodeimage"
)

// buildCAFile is where the build base image trusts the registry proxy's authority;
// the node image whites it out.
const buildCAFile = "/etc/ssl/certs/kube-carry-build-proxy.pem"

// BuildKindNodeImage builds a kind node image named image from a server release
// tarball with kind's own `kind build node-image --type file`, offline: the base
// image is built here (BuildKindBase), and the images kind pulls inside its build
// container come from a registry proxy on the engine's bridge that serves the
// images built here (images.KindNode) under their real names. The build container
// trusts the proxy through a layer on the base image; the node image drops that
// trust again, and the proxy's key never leaves this process.
func (k *Kind) BuildKindNodeImage(ctx context.Context, tarball, image string) error {
	if err := k.BuildKindBase(ctx); err != nil {
		return err
	}
	work := k.c.Path("node-image")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	k.c.Logf("%-24s building etcd, CoreDNS, pause, the local path provisioner and kindnetd's stand-in", "kind node image")
	set, err := images.KindNode(ctx, k.root, k.c.Tree, work)
	if err != nil {
		return err
	}
	proxy, err := images.StartRegistryProxy(ctx, set, engineBridgeAddr+":0")
	if err != nil {
		return err
	}
	defer proxy.Close()

	tag := strings.SplitN(image, ":", 2)
	if len(tag) != 2 {
		return fmt.Errorf("image %q has no tag", image)
	}
	buildBase := "kube-carry/kind-build-base:" + tag[1]
	withCA := tag[0] + "-build-proxy:" + tag[1]
	defer k.docker(context.WithoutCancel(ctx), "image", "rm", "--force", buildBase, withCA).Run()
	if err := k.dockerBuild(ctx, filepath.Join(work, "build-base"), buildBase,
		"FROM "+nodeimage.DefaultBaseImage+"\nCOPY proxy-ca.pem "+buildCAFile+"\n",
		map[string][]byte{"proxy-ca.pem": proxy.CACert()}); err != nil {
		return err
	}

	k.c.Logf("%-24s kind build node-image --type file %s (log %s)", "kind node image", k.c.Rel(tarball), k.c.Rel(filepath.Join(work, "kind-build.log")))
	kind := exec.CommandContext(ctx, "go", "tool", "kind", "build", "node-image", "--type", "file", tarball,
		"--base-image", buildBase, "--image", withCA)
	kind.Dir = k.root
	// kind extracts the tarball into a directory of TMPDIR that it never
	// removes (about 280 MiB a build): give it one of its own, removed after.
	tmp, err := os.MkdirTemp(work, "kind-tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	kind.Env = append(os.Environ(), "TMPDIR="+tmp, "DOCKER_HOST="+k.DockerHost(),
		"HTTPS_PROXY="+proxy.URL(), "HTTP_PROXY="+proxy.URL(), "NO_PROXY=", "https_proxy=", "http_proxy=", "no_proxy=")
	if err := k.runCmd(kind, filepath.Join(work, "kind-build.log")); err != nil {
		if missing := proxy.Missing(); len(missing) > 0 {
			return fmt.Errorf("%w\nthe build asked for images that are not built here: %s", err, strings.Join(missing, ", "))
		}
		return err
	}
	return k.dockerBuild(ctx, filepath.Join(work, "final"), image,
		"FROM "+withCA+"\nRUN rm "+buildCAFile+"\n", nil)
}

// dockerBuild builds an image from a Dockerfile and files in dir, with the engine's
// classic builder (BuildKit does not come with Debian's engine).
func (k *Kind) dockerBuild(ctx context.Context, dir, tag, dockerfile string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	cmd := k.docker(ctx, "build", "--tag", tag, dir)
	cmd.Env = append(cmd.Env, "DOCKER_BUILDKIT=0")
	return k.runCmd(cmd, filepath.Join(dir, "build.log"))
}

// runCmd runs cmd with its output in log, and names the log when it fails.
func (k *Kind) runCmd(cmd *exec.Cmd, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w; the last lines of %s:\n%s", strings.Join(cmd.Args, " "), err, k.c.Rel(log), cluster.Tail(log, 20))
	}
	return nil
}
