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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// vpaModule is the Vertical Pod Autoscaler's Go module, whose common package
// takes the commit a build is of.
const vpaModule = "k8s.io/autoscaler/vertical-pod-autoscaler"

// VPAComponents are the VPA's programs, by the name of their main package under
// pkg/ and of the program in upstream's images (pkg/*/Dockerfile).
var VPAComponents = []string{"recommender", "updater", "admission-controller"}

// MetricsServerVersion is the metrics-server the VPA runs against: the version
// hack/vpa.sh pins (METRICS_SERVER_VERSION).
const MetricsServerVersion = "v0.9.0"

// metricsServerProgram is metrics-server built as its Makefile builds it, its
// version in client-go's version package, which --version and its logs report.
var metricsServerProgram = GoProgram{
	Pkg:     "sigs.k8s.io/metrics-server/cmd/metrics-server",
	Version: MetricsServerVersion,
	Ldflags: "-X k8s.io/client-go/pkg/version.gitVersion=" + MetricsServerVersion,
}

// carryTag is the tag of an image this project builds from a program of version:
// upstream's release tag with -carry and the image's digest. Not upstream's own
// names: these are patched builds (or, for metrics-server, a build without
// upstream's base image), and a node that has or can pull upstream's image of
// that name would otherwise run upstream's code as ours or ours as upstream's.
// The digest makes a new build a new name, so that a Deployment rolls out when
// its program changed and is left alone when it did not (the builds are
// reproducible); a kind load under an unchanged name would replace the image
// under pods that keep running the old program.
func carryTag(repo, version string, img v1.Image) (string, error) {
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s:%s-carry.%s", repo, version, digest.Hex[:12]), nil
}

// VPAImages are the references of the images of the VPA's components, by
// component (VPAComponents), as VPA builds them.
type VPAImages map[string]string

// VPA builds the images of the VPA's three components from the VPA module at
// tree (the patched tree: _output/autoscaler/vertical-pod-autoscaler) into
// work, as the components' Makefiles and hack/vpa.sh build them (CGO off,
// static, stripped, the tree's commit in their version), each program alone in
// its image as upstream's Dockerfiles place it, named
// registry.k8s.io/autoscaling/vpa-COMPONENT:VERSION-carry.DIGEST.
func VPA(ctx context.Context, tree, work string) (VPAImages, Set, error) {
	// go build -C reads -o after changing to the tree.
	work, err := filepath.Abs(work)
	if err != nil {
		return nil, nil, err
	}
	version, err := vpaVersion(tree)
	if err != nil {
		return nil, nil, err
	}
	commit, err := treeCommit(ctx, tree)
	if err != nil {
		return nil, nil, err
	}
	refs, set := VPAImages{}, Set{}
	for _, component := range VPAComponents {
		data, err := GoProgram{
			Pkg: "./pkg/" + component, ModuleDir: tree,
			Ldflags: "-X " + vpaModule + "/common.gitCommit=" + commit,
		}.build(ctx, work)
		if err != nil {
			return nil, nil, err
		}
		img, err := vpaComponentImage(component, data)
		if err != nil {
			return nil, nil, err
		}
		ref, err := carryTag("registry.k8s.io/autoscaling/vpa-"+component, version, img)
		if err != nil {
			return nil, nil, err
		}
		refs[component], set[ref] = ref, img
	}
	return refs, set, nil
}

// vpaComponentImage is the program at /COMPONENT, its entrypoint, run as
// nobody: upstream's images are distroless/static:nonroot, and deploy/'s
// Deployments run them as 65534. The components talk only to the API server,
// with the service account's CA, so no CA bundle is needed.
func vpaComponentImage(component string, program []byte) (v1.Image, error) {
	return programImage(nil, component, program, v1.Config{Entrypoint: []string{"/" + component}, User: "65534:65534"})
}

// versionCore is the constant of the VPA's common/version.go that names its release.
var versionCore = regexp.MustCompile(`(?m)^const versionCore = "([^"]+)"`)

// vpaVersion reads the VPA release of the tree (common/version.go).
func vpaVersion(tree string) (string, error) {
	path := filepath.Join(tree, "common", "version.go")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	m := versionCore.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s has no versionCore", path)
	}
	return string(m[1]), nil
}

// treeCommit is the commit of the tree's checkout, with -dirty when it has
// changes, as hack/vpa.sh's build stamps it.
func treeCommit(ctx context.Context, tree string) (string, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", tree}, args...)...).Output()
		if err != nil {
			return "", fmt.Errorf("git -C %s %s: %w", tree, strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	status, err := git("status", "--porcelain")
	if err != nil {
		return "", err
	}
	if status != "" {
		commit += "-dirty"
	}
	return commit, nil
}

// MetricsServer builds metrics-server (metricsServerProgram) into work and
// returns its image: the program at /metrics-server, its entrypoint, as upstream's
// Dockerfile places it, run as nobody. It needs nothing of distroless's base:
// it talks to the API server with the service account's CA and to the kubelets
// with --kubelet-insecure-tls (or a CA file of its own), and writes its
// self-signed serving certificate to --cert-dir, a volume.
func MetricsServer(ctx context.Context, work string) (string, v1.Image, error) {
	data, err := metricsServerProgram.build(ctx, work)
	if err != nil {
		return "", nil, err
	}
	img, err := metricsServerImage(data)
	if err != nil {
		return "", nil, err
	}
	ref, err := carryTag("registry.k8s.io/metrics-server/metrics-server", MetricsServerVersion, img)
	if err != nil {
		return "", nil, err
	}
	return ref, img, nil
}

func metricsServerImage(program []byte) (v1.Image, error) {
	return programImage(nil, "metrics-server", program, v1.Config{Entrypoint: []string{"/metrics-server"}, User: "65534:65534"})
}
