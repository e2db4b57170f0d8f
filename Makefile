# Copyright The Kubernetes Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# kube-carry: Kubernetes v1.37.2 and VPA v1.8.1 with four enhancement proposals,
# kept as overlay files plus a patch series. See README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := all

SERIES := _output/tools/series

.PHONY: all build vpa vpa-e2e vpa-scale tree cluster-up cluster-down kind-image kind-up kind-down kind-tarball kind-e2e kind-upgrade e2e node-e2e save verify-saved patches roundtrip verify verify-upstream test verify-bisect pin preflight tools

## all: build the patched kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kubectl-balloon into _output/bin
all: build

preflight:
	@hack/preflight.sh go

tools: preflight
	@go build -o $(SERIES) ./hack/cmd/series

## tree: materialize _output/kubernetes and _output/autoscaler from the pins, overlay and series
tree: tools
	@$(SERIES) tree

build: tree
	@hack/build.sh

## vpa: build the patched VPA recommender, updater and admission-controller into _output/vpa/bin and its CRDs into _output/vpa/crds
vpa: preflight
	@hack/vpa.sh build

## cluster-up: build, then run a single-node cluster of the patched binaries on loopback (root); NODES=2 adds a second node
cluster-up: build
	@hack/preflight.sh root
	@go build -o _output/tools/cluster ./hack/cmd/cluster
	@_output/tools/cluster up $(if $(NODES),-nodes $(NODES))

## vpa-e2e: per-node VPA recommendations end to end: a DaemonSet on two nodes, metrics-server, the patched recommender, admission controller and updater with deploy/'s RBAC (root)
vpa-e2e: build
	@hack/preflight.sh root
	@hack/vpa.sh e2e

## vpa-scale: the VPA's recommender, admission controller and updater as processes against the lone API server at 5,000 nodes, gate off and on, one and three DaemonSets (about two hours on 2 cores, not in CI; NODES=, RUNS=; docs/vpa-node-scope.md)
vpa-scale: tree
	@hack/vpa.sh scale "$(NODES)" "$(RUNS)"

## cluster-down: stop the local cluster and remove its mounts and network devices
cluster-down: preflight
	@hack/preflight.sh root
	@go build -o _output/tools/cluster ./hack/cmd/cluster
	@_output/tools/cluster down

## e2e: upstream e2e.test on the local cluster: this project's tests and the smoke subset (root)
e2e: tree
	@hack/preflight.sh root
	@hack/e2e.sh

## node-e2e: upstream's node e2e suite (test/e2e_node) with its CRI proxy on this machine, kubelet with KubeletImagePullGate on: the image pull specs and the pull gate's (FOCUS=, SKIP=, LABEL_FILTER= to choose; root; not with the local cluster up)
node-e2e: tree
	@hack/preflight.sh root
	@hack/node-e2e.sh

## kind-image: the fork's kind node image, built offline on the project's own Docker engine (root)
kind-image: tree
	@hack/kind-image.sh

## kind-up: a kind cluster of the fork (root): one control plane and a worker; HA=1: three control planes; WORKERS=2: two workers
kind-up: tree
	@hack/kind.sh up

## kind-e2e: upstream e2e.test on the kind cluster as kind's CI runs it: this project's specs and the smoke subset (FOCUS= to choose; root)
kind-e2e: tree
	@hack/kind-e2e.sh

## kind-upgrade: an HA kind cluster of pristine v1.36.3 (FROM=) with workloads, upgraded to the fork as kinder does, each step checked (root)
kind-upgrade: tree
	@hack/kind-upgrade.sh

## kind-down: delete the kind cluster and stop the project's Docker engine
kind-down: tools
	@hack/kind.sh down

## kind-tarball: the release tarball kind reads (kind build node-image --type file), no Docker needed
kind-tarball: tree
	@hack/kind-image.sh --tarball-only

## save: write edits made in the trees back into patches/ and the overlay (GROUP=name puts every edited path into that group: save new paths on their own)
save: tools
	@$(SERIES) save $(if $(GROUP),-group $(GROUP))

## verify-saved: fail with a list when a tree holds edits that are not saved
verify-saved: tools
	@$(SERIES) verify-saved

## patches: export each group as git format-patch files and its pull request text into _output/patches (OWNER=@handle for the feature gates' owner)
patches: tools
	@$(SERIES) patches $(if $(OWNER),-owner '$(OWNER)')

## roundtrip: prove the export applies to pristine upstream and yields the series' tree
roundtrip: tools
	@$(SERIES) roundtrip

## verify: formatting, vet, pins, overlay claims, the series applies, the export round trip
verify: tools
	@hack/verify.sh

## verify-upstream: upstream's own hack/verify-*.sh of Kubernetes and the VPA in scratch clones of the trees (QUICK=1: upstream's quick ones); hack/verify-upstream-skip.txt lists what it leaves out
verify-upstream: preflight
	@hack/verify-upstream.sh $(if $(QUICK),-quick)

## test: verify, then the unit and integration tests; ends with "N passed, N failed"
test: tools
	@hack/test.sh

## verify-bisect: build the binaries at every prefix of the series (slow, not in CI)
verify-bisect: tools
	@hack/verify-bisect.sh

## pin: move the pins and the series to another upstream release, e.g. make pin K8S=v1.37.2 (VPA=v1.8.2); after a conflict is fixed in the tree, make pin goes on; ABORT=1 goes back
pin: tools
	@$(SERIES) pin $(if $(K8S),-k8s $(K8S)) $(if $(VPA),-vpa $(VPA)) $(if $(ABORT),-abort)

## help: list the targets
help:
	@sed -n 's/^## //p' Makefile
