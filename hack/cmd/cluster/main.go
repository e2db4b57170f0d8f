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

// Command cluster runs the local single-node cluster of the patched binaries.
//
//	cluster up [-nodes 2]  start what is not running; wait until the node is Ready;
//	                with -nodes 2 also a second node (a second kubelet and containerd)
//	cluster down    stop what up started and remove its mounts and network devices
//	cluster status  say what runs and what is left on the machine
//	cluster apiserver-up    etcd and a kube-apiserver of _output/bin alone, on
//	                127.0.0.1:26443 (etcd 23811), state in _output/apiserver: a
//	                real API server for measurements (docs/vpa-node-scope.md)
//	cluster apiserver-down  stop them and remove etcd's store
//	cluster slow-registry [-listen ADDR -upstream ADDR -delay D]  serve the local
//	                registry slowly on 127.0.0.1:5001 (up starts it)
//	cluster node-e2e-preflight  fail when the suite cannot run now (ports in use)
//	cluster node-e2e-up    what upstream's node e2e suite runs on (make node-e2e):
//	                its registry and containerd under _output/node-e2e
//	cluster node-e2e-down  stop them and the suite's kubelet, and remove their
//	                mounts, sandboxes and network device
//	cluster packages  install the Debian packages up needs that are missing (up does it
//	                too; make test runs it early, in the background)
//	cluster e2e-images   build the images of upstream's e2e tests (agnhost) into the
//	                running cluster's registry (make e2e)
//	cluster engine-up    start the project's own Docker engine for kind (_output/kind)
//	cluster engine-down  stop it and remove its mounts
//	cluster kind-base    build kind's base image into the engine (engine-up first)
//	cluster kind-image [-pristine|-release V] TARBALL IMAGE  build a kind node image of a server release
//	                tarball with kind build node-image, offline (engine-up first)
//	cluster kind-up IMAGE CONFIG  create the kind cluster of the node image with a
//	                config of build/kind, start its pod network, wait until Ready
//	cluster kind-egress  check that the kind cluster's pods reach this machine through
//	                the pod network's masquerading, as kind-up does (CheckPodEgress)
//	cluster kind-e2e-images  build the images of upstream's e2e tests (pause, busybox,
//	                agnhost) under their upstream names and load them into the kind
//	                cluster's nodes (make kind-e2e)
//	cluster kind-slow-registry  serve the image pull gate's e2e tests a slow registry
//	                the kind cluster's nodes reach, until interrupted (make kind-e2e)
//	cluster kind-gates [-wait D] Name=bool,...  set feature gates in every component
//	                of the kind cluster, node by node, as kubeadm's reconfigure guide
//	                does; with -wait, then wait up to D until each gate's Feature in
//	                kube-system is On or Off as set, logging its states (docs/kind.md)
//	cluster kind-upgrade TARBALL TREE  upgrade the kind cluster to the release of a
//	                server tarball built from TREE, as kinder does: kubeadm upgrade
//	                apply and node, then kubelets node by node with drain and uncordon
//	cluster kind-upgrade-lane FORK_TARBALL FORK_TREE FORK_BIN PRISTINE_TARBALL PRISTINE_TREE VPA_TREE CONFIG
//	                make kind-upgrade's lane on the kind cluster (of -release V):
//	                workloads and a prober, then upgrade to the fork with the
//	                series' settings of the kind CONFIG, the features rolled back
//	                and on again, the binaries rolled back to pristine and forward
//	                to the fork; the workloads and Features checked after each step;
//	                LANE_LEAVE_ON=GATE leaves GATE on in step c, on purpose
//	cluster kind-delete  delete the kind cluster, leaving the engine up
//	cluster kind-down    delete the kind clusters (fork, pristine, releases) and stop the engine
//
// kind-image, kind-up, kind-egress, kind-e2e-images, kind-slow-registry, kind-gates, kind-upgrade(-lane) and kind-delete take -pristine first: the pristine side of
// the parity runs, upstream's release built in _output/pristine (docs/kind.md); or
// -release V: pristine upstream at release V, built in _output/releases/V.
// kind-e2e-images and kind-slow-registry also take -upgraded V: the cluster of
// release V after make kind-upgrade, with the fork's tree and binaries.
// kind-up takes -workers N after it: a cluster with N workers (WORKERS=N make kind-up).
//
// Run as sudo, systemd-run or systemctl (make node-e2e links them to this binary),
// it stands in for them as upstream's node e2e suite uses them (package sysshim).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/kube-carry/kube-carry/hack/internal/apiserver"
	"github.com/kube-carry/kube-carry/hack/internal/cluster"
	"github.com/kube-carry/kube-carry/hack/internal/kind"
	"github.com/kube-carry/kube-carry/hack/internal/nodee2e"
	"github.com/kube-carry/kube-carry/hack/internal/sysshim"
	"github.com/kube-carry/kube-carry/hack/internal/upgradelane"
)

const usage = "usage: cluster up [-nodes 2]|down|status|apiserver-up|apiserver-down|slow-registry [-listen ADDR -upstream ADDR -delay D]|node-e2e-preflight|node-e2e-up|node-e2e-down|packages|e2e-images|engine-up|engine-down|kind-base|kind-image [-pristine|-release V] TARBALL IMAGE|kind-up [-pristine|-release V] [-workers N] IMAGE CONFIG|kind-egress [-pristine|-release V]|kind-e2e-images [-pristine|-release V|-upgraded V]|kind-slow-registry [-pristine|-release V|-upgraded V]|kind-gates [-pristine|-release V] [-wait D] Name=bool,...|kind-upgrade [-pristine|-release V] TARBALL TREE|kind-upgrade-lane [-release V] FORK_TARBALL FORK_TREE FORK_BIN PRISTINE_TARBALL PRISTINE_TREE VPA_TREE CONFIG|kind-delete [-pristine|-release V]|kind-down"

func main() {
	if name := filepath.Base(os.Args[0]); slices.Contains(sysshim.Names, name) {
		os.Exit(sysshim.Main(name, os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	upFlags := flag.NewFlagSet("up", flag.ExitOnError)
	nodes := upFlags.Int("nodes", 1, "how many nodes: 1, or 2 for a second kubelet with a containerd of its own on this machine")
	kindFlags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	pristine := kindFlags.Bool("pristine", false, "the pristine side of the parity runs: upstream's release built in _output/pristine")
	release := kindFlags.String("release", "", "a release side: pristine upstream at this release, built in _output/releases/RELEASE (hack/lib.sh RELEASE)")
	upgraded := kindFlags.String("upgraded", "", "kind-e2e-images, kind-slow-registry: the release side's cluster after make kind-upgrade, with the fork's tree (hack/lib.sh UPGRADED)")
	workers := kindFlags.Int("workers", 0, "kind-up: this many worker nodes (more than the config's)")
	featureWait := kindFlags.Duration("wait", 0, "kind-gates: then wait this long at most until each gate's Feature is On or Off as set")
	slowFlags := flag.NewFlagSet("slow-registry", flag.ExitOnError)
	listen := slowFlags.String("listen", cluster.SlowRegistryAddr, "the address to serve on")
	upstream := slowFlags.String("upstream", cluster.RegistryAddr, "the registry to serve")
	delay := slowFlags.Duration("delay", cluster.SlowRegistryDelay, "how long every manifest request waits")
	args := map[string]int{"kind-image": 2, "kind-up": 2, "kind-gates": 1, "kind-upgrade": 2, "kind-upgrade-lane": 7}[os.Args[1]]
	switch os.Args[1] {
	case "up":
		upFlags.Parse(os.Args[2:])
	case "slow-registry":
		slowFlags.Parse(os.Args[2:])
	case "kind-image", "kind-up", "kind-egress", "kind-e2e-images", "kind-slow-registry", "kind-gates", "kind-upgrade", "kind-upgrade-lane", "kind-delete":
		kindFlags.Parse(os.Args[2:])
		os.Args = append(os.Args[:2], kindFlags.Args()...)
		if *workers < 0 || *workers > 0 && os.Args[1] != "kind-up" || *featureWait < 0 || *featureWait > 0 && os.Args[1] != "kind-gates" {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		fallthrough
	default:
		if len(os.Args) != 2+args {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
	}
	newKind := kind.NewKind
	switch {
	case *pristine && *release != "" || *upgraded != "" && (*pristine || *release != ""):
		fmt.Fprintln(os.Stderr, "error: -pristine, -release and -upgraded name sides; name one")
		os.Exit(2)
	case *upgraded != "":
		if os.Args[1] != "kind-e2e-images" && os.Args[1] != "kind-slow-registry" {
			fmt.Fprintln(os.Stderr, "error: -upgraded is for kind-e2e-images and kind-slow-registry")
			os.Exit(2)
		}
		newKind = func(root string, log io.Writer) *kind.Kind { return kind.NewUpgradedKind(root, *upgraded, log) }
	case *pristine:
		newKind = kind.NewPristineKind
	case *release != "":
		newKind = func(root string, log io.Writer) *kind.Kind { return kind.NewReleaseKind(root, *release, log) }
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "cmd", "cluster")); err != nil && os.Args[1] != "slow-registry" {
		fmt.Fprintln(os.Stderr, "error: run this from the repository root (make cluster-up)")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := cluster.New(root, os.Stdout)
	switch os.Args[1] {
	case "up":
		c.Nodes = *nodes
		err = c.Up(ctx)
	case "down":
		err = c.Down(ctx)
	case "apiserver-up":
		err = apiserver.NewLoneAPIServer(root, os.Stdout).Up(ctx)
	case "apiserver-down":
		err = apiserver.NewLoneAPIServer(root, os.Stdout).Down()
	case "slow-registry":
		err = (&cluster.SlowRegistry{Upstream: *upstream, Delay: *delay}).ListenAndServe(ctx, *listen)
	case "node-e2e-preflight":
		err = nodee2e.NewNodeE2E(root, os.Stdout).Preflight()
	case "node-e2e-up":
		err = nodee2e.NewNodeE2E(root, os.Stdout).Up(ctx)
	case "node-e2e-down":
		err = nodee2e.NewNodeE2E(root, os.Stdout).Down(ctx)
	case "packages":
		err = cluster.InstallPackages(os.Stdout, cluster.Packages)
	case "e2e-images":
		err = c.PushE2EImages(ctx)
	case "engine-up":
		k := kind.NewKind(root, os.Stdout)
		if err = k.StartEngine(ctx); err == nil {
			fmt.Printf("the engine serves at %s:\n  export DOCKER_HOST=%s\n", k.DockerHost(), k.DockerHost())
		}
	case "kind-base":
		err = kind.NewKind(root, os.Stdout).BuildKindBase(ctx)
	case "kind-image":
		err = newKind(root, os.Stdout).BuildKindNodeImage(ctx, os.Args[2], os.Args[3])
	case "kind-up":
		k := newKind(root, os.Stdout)
		k.KindWorkers = *workers
		if err = k.KindUp(ctx, os.Args[2], os.Args[3]); err == nil {
			fmt.Printf("the kind cluster %s is Ready:\n  export KUBECONFIG=%s\n  kubectl get nodes\n", k.KindClusterName(), k.KindKubeconfig())
		}
	case "kind-egress":
		err = newKind(root, os.Stdout).CheckPodEgress(ctx)
	case "kind-e2e-images":
		err = newKind(root, os.Stdout).KindLoadE2EImages(ctx)
	case "kind-slow-registry":
		err = newKind(root, os.Stdout).KindSlowRegistry(ctx, func(addr string) {
			fmt.Printf("the slow registry serves the kind cluster's nodes:\n  export KUBE_TEST_SLOW_REGISTRY=%s\n", addr)
		})
	case "kind-gates":
		var gates map[string]bool
		if gates, err = kind.ParseGates(os.Args[2]); err == nil {
			k := newKind(root, os.Stdout)
			if err = k.KindSetGates(ctx, gates); err == nil && *featureWait > 0 {
				err = k.KindWaitFeatures(ctx, gates, *featureWait)
			}
		}
	case "kind-upgrade":
		err = newKind(root, os.Stdout).KindUpgrade(ctx, os.Args[2], os.Args[3], kind.ClusterSettings{})
	case "kind-upgrade-lane":
		var series kind.ClusterSettings
		if series, err = kind.SeriesSettings(os.Args[8]); err == nil {
			err = (&upgradelane.Lane{
				Kind:     newKind(root, os.Stdout),
				Fork:     upgradelane.Release{Tarball: os.Args[2], Tree: os.Args[3]},
				ForkBin:  os.Args[4],
				Pristine: upgradelane.Release{Tarball: os.Args[5], Tree: os.Args[6]},
				VPATree:  os.Args[7],
				LeaveOn:  os.Getenv("LANE_LEAVE_ON"),
				Series:   series,
				Log:      os.Stdout,
			}).Run(ctx)
		}
	case "kind-delete":
		err = newKind(root, os.Stdout).KindDown(ctx)
	case "kind-down":
		var kinds []*kind.Kind
		if kinds, err = kind.SideKinds(root, os.Stdout); err == nil {
			for _, k := range kinds {
				if err = k.KindDown(ctx); err != nil {
					break
				}
			}
			if err == nil {
				err = kind.NewKind(root, os.Stdout).StopEngine(ctx)
			}
		}
	case "engine-down":
		err = kind.NewKind(root, os.Stdout).StopEngine(ctx)
	case "status":
		for _, l := range append(c.Leftovers(), kind.NewKind(root, os.Stdout).EngineLeftovers()...) {
			fmt.Println(l)
		}
	default:
		err = fmt.Errorf("unknown command %q (%s)", os.Args[1], usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
