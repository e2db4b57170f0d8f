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
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/dropcaps"
	"github.com/kube-carry/kube-carry/hack/internal/images"
)

const (
	// KindClusterName is the name of the fork's kind cluster.
	KindClusterName = "kube-carry"
	// PristineKindClusterName is the name of the parity runs' cluster of upstream's release.
	PristineKindClusterName = KindClusterName + "-pristine"
)

// KindClusterName is the name of the kind cluster of this side: kube-carry-v1-36-3
// for the release side of v1.36.3.
func (k *Kind) KindClusterName() string {
	switch {
	case k.Release != "":
		return KindClusterName + "-" + strings.ReplaceAll(k.Release, ".", "-")
	case k.Pristine:
		return PristineKindClusterName
	}
	return KindClusterName
}

// kindPath is a file of this side's kind cluster: in the kind folder for the fork,
// in its pristine folder for the pristine side, in releases/RELEASE for a release.
func (k *Kind) kindPath(elem ...string) string {
	switch {
	case k.Release != "":
		elem = append([]string{"releases", k.Release}, elem...)
	case k.Pristine:
		elem = append([]string{"pristine"}, elem...)
	}
	return k.c.Path(elem...)
}

// KindKubeconfig is the kind cluster's kubeconfig.
func (k *Kind) KindKubeconfig() string { return k.kindPath("kubeconfig") }

// KindClient is a client of the kind cluster, as its administrator.
func (k *Kind) KindClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", k.KindKubeconfig())
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// KindPath is a file or folder of this side's kind cluster's state.
func (k *Kind) KindPath(elem ...string) string { return k.kindPath(elem...) }

// KindUp creates the kind cluster from the node image and config (build/kind), unless
// one exists that serves them (kindClusterStale; one that does not is deleted and
// created again), loads and starts its pod network (build/kind/pod-network.yaml),
// waits until every node is Ready and checks that pods reach this machine
// (CheckPodEgress). The engine must run (StartEngine).
func (k *Kind) KindUp(ctx context.Context, image, config string) error {
	clusters, err := k.kindOutput(ctx, "get", "clusters")
	if err != nil {
		return err
	}
	name := k.KindClusterName()
	missing, err := dropcaps.Missing()
	if err != nil {
		return err
	}
	if config, err = k.kindConfig(config, missing); err != nil {
		return err
	}
	exists := slices.Contains(strings.Fields(clusters), name)
	if exists {
		stale, err := k.kindClusterStale(ctx, image, config)
		if err != nil {
			return err
		}
		if stale == "" {
			k.c.Logf("%-24s exists, of %s and the config's nodes (make kind-down deletes it)", "kind cluster "+name, image)
		} else {
			k.c.Logf("%-24s exists but %s: deleting it to create it again", "kind cluster "+name, stale)
			if err := k.KindDown(ctx); err != nil {
				return err
			}
			exists = false
		}
	}
	if !exists {
		changed, err := raiseInotifyLimits("/proc/sys/fs/inotify")
		if err != nil {
			return err
		}
		for _, c := range changed {
			k.c.Logf("%-24s %s (kind's known issues: too many open files)", "host", c)
		}
		if err := k.loadLoadBalancer(ctx); err != nil {
			return err
		}
		k.c.Logf("%-24s kind create cluster --config %s --image %s", "kind cluster "+name, k.c.Rel(config), image)
		if err := k.kind(ctx, "create", "cluster", "--name", name, "--config", config,
			"--image", image, "--kubeconfig", k.KindKubeconfig()); err != nil {
			return err
		}
	}
	if err := k.loadPodNetwork(ctx); err != nil {
		return err
	}
	if err := k.KindLoadBalloonAgent(ctx, k.c.Tree); err != nil {
		return err
	}
	if err := k.kubectl(ctx, "apply", "-f", filepath.Join(k.root, "build", "kind", "pod-network.yaml")); err != nil {
		return err
	}
	k.c.Logf("%-24s waiting for every node to be Ready", "kind cluster "+name)
	if err := k.kubectl(ctx, "wait", "--for=condition=Ready", "node", "--all", "--timeout=5m"); err != nil {
		return err
	}
	// A cluster kept from an earlier run gets the pod network's new pods one
	// node at a time.
	if err := k.kubectl(ctx, "rollout", "status", "daemonset/kind-pod-network", "-n", "kube-system", "--timeout=5m"); err != nil {
		return err
	}
	return k.CheckPodEgress(ctx)
}

// kindNode is a node container of a kind cluster.
type kindNode struct {
	name, role, imageID string
}

// kindClusterStale says why this side's existing cluster cannot serve a run of
// image and config, or "" when it can: a cluster kept from an earlier run would
// otherwise run a new e2e.test against the old binaries of its nodes, or differ
// in topology from the other side's.
func (k *Kind) kindClusterStale(ctx context.Context, image, config string) (string, error) {
	data, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	var cfg kindv1alpha4.Cluster
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w", config, err)
	}
	id, err := k.docker(ctx, "image", "inspect", "--format", "{{.Id}}", image).Output()
	if err != nil {
		return "", fmt.Errorf("docker image inspect %s: %w", image, err)
	}
	nodes, err := k.nodeContainers(ctx)
	if err != nil {
		return "", err
	}
	for i := range nodes {
		imageID, err := k.docker(ctx, "inspect", "--format", "{{.Image}}", nodes[i].name).Output()
		if err != nil {
			return "", fmt.Errorf("docker inspect %s: %w", nodes[i].name, err)
		}
		nodes[i].imageID = strings.TrimSpace(string(imageID))
	}
	return staleness(nodes, strings.TrimSpace(string(id)), cfg.Nodes), nil
}

// nodeContainers returns the names and roles of the kind cluster's containers,
// running or not: its nodes, and the load balancer of several control planes.
func (k *Kind) nodeContainers(ctx context.Context) ([]kindNode, error) {
	out, err := k.docker(ctx, "ps", "--all", "--filter", "label=io.x-k8s.kind.cluster="+k.KindClusterName(),
		"--format", `{{.Names}} {{.Label "io.x-k8s.kind.role"}}`).Output()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %w", err)
	}
	var nodes []kindNode
	for line := range strings.Lines(string(out)) {
		if name, role, _ := strings.Cut(strings.TrimSpace(line), " "); name != "" {
			nodes = append(nodes, kindNode{name: name, role: role})
		}
	}
	return nodes, nil
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
func (k *Kind) kindConfig(config string, missing []string) (string, error) {
	restrict := slices.Contains(missing, "CAP_SYS_RESOURCE")
	if !restrict && !k.Pristine && k.KindWorkers == 0 {
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
	derived := k.kindPath(filepath.Base(config))
	if restrict {
		cluster.ContainerdConfigPatches = append(cluster.ContainerdConfigPatches, restrictOOMScoreAdj)
		k.c.Logf("%-24s the capability bounding set lacks CAP_SYS_RESOURCE: the nodes' containerd restricts oom_score_adj (%s)", "kind cluster "+k.KindClusterName(), k.c.Rel(derived))
	}
	workers := 0
	for _, n := range cluster.Nodes {
		if n.Role == kindv1alpha4.WorkerRole {
			workers++
		}
	}
	for ; workers < k.KindWorkers; workers++ {
		cluster.Nodes = append(cluster.Nodes, kindv1alpha4.Node{Role: kindv1alpha4.WorkerRole})
	}
	if k.Pristine {
		cluster.FeatureGates, cluster.RuntimeConfig = nil, nil
		k.c.Logf("%-24s upstream's release: without the series' feature gates and APIs (%s)", "kind cluster "+k.KindClusterName(), k.c.Rel(derived))
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
func (k *Kind) KindDown(ctx context.Context) error {
	if _, ok := k.c.Running("dockerd"); !ok {
		return nil
	}
	return k.kind(ctx, "delete", "cluster", "--name", k.KindClusterName(), "--kubeconfig", k.KindKubeconfig())
}

// loadPodNetwork builds the pod network's image and loads it into the nodes.
func (k *Kind) loadPodNetwork(ctx context.Context) error {
	work := k.kindPath("pod-network")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	img, err := images.PodNetworkImage(filepath.Join(k.c.Bin, "kubectl"))
	if err != nil {
		return err
	}
	archive, err := writeArchive(work, images.PodNetwork, img)
	if err != nil {
		return err
	}
	return k.kind(ctx, "load", "image-archive", archive, "--name", k.KindClusterName())
}

// KindLoadBalloonAgent loads the node-balloon addon's resize agent, named as its
// Deployment in tree names it, into the nodes; nothing for a tree without it
// (upstream's). The program is built from tree without cgo: the image has no
// C library, and the kubectl-balloon of a test build (make test's, cgo and
// -race) would not start in it.
func (k *Kind) KindLoadBalloonAgent(ctx context.Context, tree string) error {
	if _, err := os.Stat(filepath.Join(tree, "cmd", "kubectl-balloon")); errors.Is(err, fs.ErrNotExist) {
		return nil // upstream's release
	}
	work := k.kindPath("balloon-agent")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	bin, err := images.GoProgram{Pkg: "./cmd/kubectl-balloon", ModuleDir: tree}.Build(ctx, work)
	if err != nil {
		return err
	}
	manifest := filepath.Join(tree, "cluster", "addons", "node-balloon", "balloon-resizer-deployment.yaml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	var deployment appsv1.Deployment
	if err := yaml.Unmarshal(data, &deployment); err != nil {
		return fmt.Errorf("%s: %w", manifest, err)
	}
	if len(deployment.Spec.Template.Spec.Containers) != 1 {
		return fmt.Errorf("%s: want one container", manifest)
	}
	img, err := images.BalloonAgentImage(bin)
	if err != nil {
		return err
	}
	archive, err := writeArchive(work, deployment.Spec.Template.Spec.Containers[0].Image, img)
	if err != nil {
		return err
	}
	return k.kind(ctx, "load", "image-archive", archive, "--name", k.KindClusterName())
}

// KindLoadE2EImages builds the images upstream's e2e tests use that this project
// builds (pause, busybox, agnhost, images.ConformanceExtras, nginx, glibc-dns-testing and
// sample-apiserver), named as upstream's test/utils/image names them
// by default, and loads them into every node of the kind cluster: the tests' pods
// find them there, and no repository list is needed.
func (k *Kind) KindLoadE2EImages(ctx context.Context) error {
	work := k.kindPath("e2e-images")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	names := images.Names{Registry: "registry.k8s.io"}
	set, err := images.Standard(k.c.Tree, work, names, nil)
	if err != nil {
		return err
	}
	// The programs agnhost and glibc-dns-testing carry from this machine.
	if err := cluster.InstallPackages(k.c.Log, images.AgnhostPackages); err != nil {
		return err
	}
	e2e, err := images.E2E(k.c.Tree, work, names)
	if err != nil {
		return err
	}
	if e2e[names.Agnhost()], err = images.AgnhostWithTools(ctx, work, e2e[names.Agnhost()]); err != nil {
		return err
	}
	maps.Copy(set, e2e)
	extras, err := images.ConformanceExtras(ctx, k.c.Tree, work, names, set[names.Agnhost()], set[names.Busybox()])
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
	if set[names.E2E("sample-apiserver", images.SampleAPIServerTag)], err = images.SampleAPIServer(ctx, k.c.Tree, work, set[names.Busybox()]); err != nil {
		return err
	}
	return k.LoadImages(ctx, work, set)
}

// LoadImages loads every image of the set into every node of the kind cluster,
// by way of archives in work.
func (k *Kind) LoadImages(ctx context.Context, work string, set images.Set) error {
	for _, ref := range slices.Sorted(maps.Keys(set)) {
		archive, err := writeArchive(work, ref, set[ref])
		if err != nil {
			return err
		}
		k.c.Logf("%-24s loading %s", "kind cluster "+k.KindClusterName(), ref)
		if err := k.kind(ctx, "load", "image-archive", archive, "--name", k.KindClusterName()); err != nil {
			return err
		}
	}
	return nil
}

// loadLoadBalancer puts the image of kind's load balancer (images.KindLoadBalancer)
// into the engine, unless it is there; kind uses it with several control planes.
func (k *Kind) loadLoadBalancer(ctx context.Context) error {
	if k.docker(ctx, "image", "inspect", images.KindLoadBalancer).Run() == nil {
		return nil
	}
	work := k.c.Path("load-balancer")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	img, err := images.LoadBalancerImage(ctx, k.root, work)
	if err != nil {
		return err
	}
	archive, err := writeArchive(work, images.KindLoadBalancer, img)
	if err != nil {
		return err
	}
	return k.runCmd(k.docker(ctx, "load", "--input", archive), filepath.Join(work, "load.log"))
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
func (k *Kind) kind(ctx context.Context, args ...string) error {
	cmd := k.kindCmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = k.c.Log, k.c.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kind %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (k *Kind) kindOutput(ctx context.Context, args ...string) (string, error) {
	out, err := k.kindCmd(ctx, args...).Output()
	if err != nil {
		return "", fmt.Errorf("kind %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (k *Kind) kindCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "kind"}, args...)...)
	cmd.Dir = k.root
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+k.DockerHost())
	return cmd
}

// kubectl runs the fork's kubectl on the kind cluster, its output in the log.
func (k *Kind) kubectl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(k.c.Bin, "kubectl"), append([]string{"--kubeconfig", k.KindKubeconfig()}, args...)...)
	cmd.Stdout, cmd.Stderr = k.c.Log, k.c.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
