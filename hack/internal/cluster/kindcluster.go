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

package cluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/dropcaps"
	"github.com/kube-carry/kube-carry/hack/internal/images"
)

const (
	// KindClusterName is the name of the fork's kind cluster.
	KindClusterName = "kube-carry"
	// PristineKindClusterName is the name of the parity runs' cluster of upstream's release.
	PristineKindClusterName = KindClusterName + "-pristine"
)

// KindClusterName is the name of the kind cluster of this side.
func (c *Cluster) KindClusterName() string {
	if c.Pristine {
		return PristineKindClusterName
	}
	return KindClusterName
}

// kindPath is a file of this side's kind cluster: in the kind folder for the fork,
// in its pristine folder for the pristine side.
func (c *Cluster) kindPath(elem ...string) string {
	if c.Pristine {
		elem = append([]string{"pristine"}, elem...)
	}
	return c.path(elem...)
}

// KindKubeconfig is the kind cluster's kubeconfig.
func (c *Cluster) KindKubeconfig() string { return c.kindPath("kubeconfig") }

// KindUp creates the kind cluster from the node image and config (build/kind), unless
// one exists that serves them (kindClusterStale; one that does not is deleted and
// created again), loads and starts its pod network (build/kind/pod-network.yaml) and
// waits until every node is Ready. The engine must run (StartEngine).
func (c *Cluster) KindUp(ctx context.Context, image, config string) error {
	clusters, err := c.kindOutput(ctx, "get", "clusters")
	if err != nil {
		return err
	}
	name := c.KindClusterName()
	missing, err := dropcaps.Missing()
	if err != nil {
		return err
	}
	if config, err = c.kindConfig(config, missing); err != nil {
		return err
	}
	exists := slices.Contains(strings.Fields(clusters), name)
	if exists {
		stale, err := c.kindClusterStale(ctx, image, config)
		if err != nil {
			return err
		}
		if stale == "" {
			c.logf("%-24s exists, of %s and the config's nodes (make kind-down deletes it)", "kind cluster "+name, image)
		} else {
			c.logf("%-24s exists but %s: deleting it to create it again", "kind cluster "+name, stale)
			if err := c.KindDown(ctx); err != nil {
				return err
			}
			exists = false
		}
	}
	if !exists {
		if err := c.loadLoadBalancer(ctx); err != nil {
			return err
		}
		c.logf("%-24s kind create cluster --config %s --image %s", "kind cluster "+name, c.rel(config), image)
		if err := c.kind(ctx, "create", "cluster", "--name", name, "--config", config,
			"--image", image, "--kubeconfig", c.KindKubeconfig()); err != nil {
			return err
		}
	}
	if err := c.loadPodNetwork(ctx); err != nil {
		return err
	}
	if err := c.kubectl(ctx, "apply", "-f", filepath.Join(c.base, "build", "kind", "pod-network.yaml")); err != nil {
		return err
	}
	c.logf("%-24s waiting for every node to be Ready", "kind cluster "+name)
	return c.kubectl(ctx, "wait", "--for=condition=Ready", "node", "--all", "--timeout=5m")
}

// kindNode is a node container of a kind cluster.
type kindNode struct {
	name, role, imageID string
}

// kindClusterStale says why this side's existing cluster cannot serve a run of
// image and config, or "" when it can: a cluster kept from an earlier run would
// otherwise run a new e2e.test against the old binaries of its nodes, or differ
// in topology from the other side's.
func (c *Cluster) kindClusterStale(ctx context.Context, image, config string) (string, error) {
	data, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	var cfg kindv1alpha4.Cluster
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w", config, err)
	}
	id, err := c.docker(ctx, "image", "inspect", "--format", "{{.Id}}", image).Output()
	if err != nil {
		return "", fmt.Errorf("docker image inspect %s: %w", image, err)
	}
	out, err := c.docker(ctx, "ps", "--all", "--filter", "label=io.x-k8s.kind.cluster="+c.KindClusterName(),
		"--format", `{{.Names}} {{.Label "io.x-k8s.kind.role"}}`).Output()
	if err != nil {
		return "", fmt.Errorf("docker ps: %w", err)
	}
	var nodes []kindNode
	for line := range strings.Lines(string(out)) {
		name, role, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == "" {
			continue
		}
		imageID, err := c.docker(ctx, "inspect", "--format", "{{.Image}}", name).Output()
		if err != nil {
			return "", fmt.Errorf("docker inspect %s: %w", name, err)
		}
		nodes = append(nodes, kindNode{name: name, role: role, imageID: strings.TrimSpace(string(imageID))})
	}
	return staleness(nodes, strings.TrimSpace(string(id)), cfg.Nodes), nil
}

// staleness compares a cluster's node containers with the node image's ID and the
// nodes a config asks for.
func staleness(nodes []kindNode, imageID string, want []kindv1alpha4.Node) string {
	has, wants := map[string]int{}, map[string]int{}
	for _, n := range want {
		wants[string(n.Role)]++
	}
	var mismatch string
	for _, n := range nodes {
		if n.role != string(kindv1alpha4.ControlPlaneRole) && n.role != string(kindv1alpha4.WorkerRole) {
			continue // the load balancer of several control planes
		}
		has[n.role]++
		if n.imageID != imageID && mismatch == "" {
			mismatch = fmt.Sprintf("node %s runs image %s, not the node image being tested (%s)", n.name, shortID(n.imageID), shortID(imageID))
		}
	}
	if !maps.Equal(has, wants) {
		return fmt.Sprintf("its nodes are %s where the config asks for %s", topology(has), topology(wants))
	}
	return mismatch
}

func topology(roles map[string]int) string {
	return fmt.Sprintf("%d control planes and %d workers", roles[string(kindv1alpha4.ControlPlaneRole)], roles[string(kindv1alpha4.WorkerRole)])
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	return id[:min(12, len(id))]
}

// restrictOOMScoreAdj is the containerd configuration patch (kind's config.toml,
// version 2) that keeps the CRI plugin from giving a container an oom_score_adj below
// containerd's own, as kind's entrypoint does for rootless nodes.
const restrictOOMScoreAdj = `[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
`

// kindConfig returns the cluster configuration to create the cluster from: config,
// or a copy of it in the kind folder, derived
//   - when the capability bounding set lacks CAP_SYS_RESOURCE: the nodes' containerd
//     restricts oom_score_adj. Without that capability nothing in a node may lower an
//     oom_score_adj, and the kubelet asks for -998 for every pod sandbox: runc would
//     fail every sandbox ("failed to update /proc/self/oom_score_adj: Permission
//     denied") and no static pod would start.
//   - on the pristine side: without the feature gates and APIs, which are the
//     series' own and which upstream's components refuse as unknown.
//   - with KindWorkers more than the config's workers: that many workers.
func (c *Cluster) kindConfig(config string, missing []string) (string, error) {
	restrict := slices.Contains(missing, "CAP_SYS_RESOURCE")
	if !restrict && !c.Pristine && c.KindWorkers == 0 {
		return config, nil
	}
	data, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	var cluster kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &cluster); err != nil {
		return "", fmt.Errorf("%s: %w", config, err)
	}
	derived := c.kindPath(filepath.Base(config))
	if restrict {
		cluster.ContainerdConfigPatches = append(cluster.ContainerdConfigPatches, restrictOOMScoreAdj)
		c.logf("%-24s the capability bounding set lacks CAP_SYS_RESOURCE: the nodes' containerd restricts oom_score_adj (%s)", "kind cluster "+c.KindClusterName(), c.rel(derived))
	}
	workers := 0
	for _, n := range cluster.Nodes {
		if n.Role == kindv1alpha4.WorkerRole {
			workers++
		}
	}
	for ; workers < c.KindWorkers; workers++ {
		cluster.Nodes = append(cluster.Nodes, kindv1alpha4.Node{Role: kindv1alpha4.WorkerRole})
	}
	if c.Pristine {
		cluster.FeatureGates, cluster.RuntimeConfig = nil, nil
		c.logf("%-24s upstream's release: without the series' feature gates and APIs (%s)", "kind cluster "+c.KindClusterName(), c.rel(derived))
	}
	if data, err = yaml.Marshal(&cluster); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(derived), 0o755); err != nil {
		return "", err
	}
	return derived, os.WriteFile(derived, data, 0o644)
}

// KindDown deletes the kind cluster of this side, if the engine runs.
func (c *Cluster) KindDown(ctx context.Context) error {
	if _, ok := c.running("dockerd"); !ok {
		return nil
	}
	return c.kind(ctx, "delete", "cluster", "--name", c.KindClusterName(), "--kubeconfig", c.KindKubeconfig())
}

// loadPodNetwork builds the pod network's image and loads it into the nodes.
func (c *Cluster) loadPodNetwork(ctx context.Context) error {
	work := c.kindPath("pod-network")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	img, err := images.PodNetworkImage(filepath.Join(c.Bin, "kubectl"))
	if err != nil {
		return err
	}
	archive, err := writeArchive(work, images.PodNetwork, img)
	if err != nil {
		return err
	}
	return c.kind(ctx, "load", "image-archive", archive, "--name", c.KindClusterName())
}

// KindLoadE2EImages builds the images upstream's e2e tests use that this project
// builds (pause, busybox, agnhost, images.ConformanceExtras, nginx, glibc-dns-testing and
// sample-apiserver), named as upstream's test/utils/image names them
// by default, and loads them into every node of the kind cluster: the tests' pods
// find them there, and no repository list is needed.
func (c *Cluster) KindLoadE2EImages(ctx context.Context) error {
	work := c.kindPath("e2e-images")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	names := images.Names{Registry: "registry.k8s.io"}
	set, err := images.Standard(c.Tree, work, names, nil)
	if err != nil {
		return err
	}
	// The programs agnhost and glibc-dns-testing carry from this machine.
	if err := InstallPackages(c.Log, images.AgnhostPackages); err != nil {
		return err
	}
	e2e, err := images.E2E(c.Tree, work, names)
	if err != nil {
		return err
	}
	if e2e[names.Agnhost()], err = images.AgnhostWithTools(ctx, work, e2e[names.Agnhost()]); err != nil {
		return err
	}
	maps.Copy(set, e2e)
	extras, err := images.ConformanceExtras(ctx, c.Tree, work, names, set[names.Agnhost()], set[names.Busybox()])
	if err != nil {
		return err
	}
	maps.Copy(set, extras)
	nginx, err := images.Nginx(ctx, work, set[names.Busybox()])
	if err != nil {
		return err
	}
	set[names.E2E("nginx", images.NginxTag)], set[names.E2E("nginx", images.NginxNewTag)] = nginx, nginx
	if set[names.E2E("glibc-dns-testing", images.GlibcDNSTestingTag)], err = images.GlibcDNSTesting(ctx, work, set[names.Busybox()]); err != nil {
		return err
	}
	if set[names.E2E("sample-apiserver", images.SampleAPIServerTag)], err = images.SampleAPIServer(ctx, c.Tree, work, set[names.Busybox()]); err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(set)) {
		archive, err := writeArchive(work, ref, set[ref])
		if err != nil {
			return err
		}
		c.logf("%-24s loading %s", "kind cluster "+c.KindClusterName(), ref)
		if err := c.kind(ctx, "load", "image-archive", archive, "--name", c.KindClusterName()); err != nil {
			return err
		}
	}
	return nil
}

// loadLoadBalancer puts the image of kind's load balancer (images.KindLoadBalancer)
// into the engine, unless it is there; kind uses it with several control planes.
func (c *Cluster) loadLoadBalancer(ctx context.Context) error {
	if c.docker(ctx, "image", "inspect", images.KindLoadBalancer).Run() == nil {
		return nil
	}
	work := c.path("load-balancer")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	img, err := images.LoadBalancerImage(ctx, c.base, work)
	if err != nil {
		return err
	}
	archive, err := writeArchive(work, images.KindLoadBalancer, img)
	if err != nil {
		return err
	}
	return c.runCmd(c.docker(ctx, "load", "--input", archive), filepath.Join(work, "load.log"))
}

// writeArchive writes an image as a docker archive into dir.
func writeArchive(dir, ref string, img v1.Image) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	archive := archivePath(dir, ref)
	return archive, tarball.WriteToFile(archive, tag, img)
}

// archivePath is where writeArchive writes ref's image in dir.
func archivePath(dir, ref string) string {
	return filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
}

// kind runs the kind CLI go.mod pins on the engine, its output in the log.
func (c *Cluster) kind(ctx context.Context, args ...string) error {
	cmd := c.kindCmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kind %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (c *Cluster) kindOutput(ctx context.Context, args ...string) (string, error) {
	out, err := c.kindCmd(ctx, args...).Output()
	if err != nil {
		return "", fmt.Errorf("kind %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (c *Cluster) kindCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "kind"}, args...)...)
	cmd.Dir = c.base
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+c.DockerHost())
	return cmd
}

// kubectl runs the fork's kubectl on the kind cluster, its output in the log.
func (c *Cluster) kubectl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.KindKubeconfig()}, args...)...)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
