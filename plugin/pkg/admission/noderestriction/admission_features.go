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

package noderestriction

import (
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	baseversion "k8s.io/component-base/version"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
)

var featureResource = featuresapi.Resource("features")

// kubeletComponent is the component name kubelets report their feature uses under.
const kubeletComponent = "kubelet"

// admitFeatureUses lets a node report what its kubelet found: it may add its
// own name to the kubelet entry of a value and versions, or add that entry
// naming exactly itself, renew an entry that names it, remove its name from
// another kubelet entry (and that entry, if it named only the node, when
// another kubelet entry reports), remove a kubelet entry that names nobody,
// and change nothing else. It ends up named in at most one kubelet entry, and
// leaves no entry without instances:
// an entry nobody names would hold a transition (it is an old value still
// in use) and would be the node's to keep alive.
func (p *Plugin) admitFeatureUses(nodeName string, a admission.Attributes) error {
	if a.GetSubresource() != "uses" {
		return admission.NewForbidden(a, fmt.Errorf("nodes may only update the uses subresource of features"))
	}
	if a.GetOperation() != admission.Update {
		return admission.NewForbidden(a, fmt.Errorf("unexpected operation %s", a.GetOperation()))
	}
	oldFeature, ok := a.GetOldObject().(*featuresapi.Feature)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetOldObject()))
	}
	newFeature, ok := a.GetObject().(*featuresapi.Feature)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected type %T", a.GetObject()))
	}
	if err := checkNodeFeatureUses(nodeName, oldFeature.Status.Uses, newFeature.Status.Uses); err != nil {
		return admission.NewForbidden(a, err)
	}
	if err := p.checkReportedVersions(nodeName, oldFeature.Status.Uses, newFeature.Status.Uses); err != nil {
		return admission.NewForbidden(a, err)
	}
	return nil
}

// emulationRange is how many minor versions older than its binary a
// component may emulate (KEP-4330: binary version - 3).
const emulationRange = 3

// checkReportedVersions returns why a kubelet entry the node names itself in
// anew does not carry the versions of the kubelet its Node object reports:
// the binary version, major.minor, of status.nodeInfo.kubeletVersion, and an
// emulation version no newer than that and at most emulationRange minors
// older. Entries that named the node before are not checked again, so that an
// object stored before the check stays writable.
func (p *Plugin) checkReportedVersions(nodeName string, oldUses, newUses []featuresapi.FeatureUse) error {
	for _, use := range newUses {
		if use.Component != kubeletComponent || !slices.Contains(use.Instances, nodeName) ||
			slices.ContainsFunc(oldUses, func(old featuresapi.FeatureUse) bool {
				return featuresapi.SameUse(old, use) && slices.Contains(old.Instances, nodeName)
			}) {
			continue
		}
		node, err := p.nodesGetter.Get(nodeName)
		if err != nil {
			return fmt.Errorf("node %q: cannot check the versions of its kubelet use against its Node: %w", nodeName, err)
		}
		binary := kubeletMinorVersion(node.Status.NodeInfo.KubeletVersion)
		if use.BinaryVersion != binary.String() {
			return fmt.Errorf("node %q may only report its kubelet's binary version %q (status.nodeInfo.kubeletVersion %q), not %q",
				nodeName, binary.String(), node.Status.NodeInfo.KubeletVersion, use.BinaryVersion)
		}
		emulated, err := version.ParseMajorMinor(use.EmulationVersion)
		if err != nil || emulated.GreaterThan(binary) || emulated.LessThan(binary.SubtractMinor(emulationRange)) {
			return fmt.Errorf("node %q may only report an emulation version from %s to %s, not %q",
				nodeName, binary.SubtractMinor(emulationRange).String(), binary.String(), use.EmulationVersion)
		}
	}
	return nil
}

// kubeletMinorVersion is the major.minor version a kubelet of the given
// version reports its uses at: as the reporter does, a build without a
// version (0.0, unit and integration tests) reports the release it is built
// from.
func kubeletMinorVersion(kubeletVersion string) *version.Version {
	v, err := version.ParseGeneric(kubeletVersion)
	if err != nil || v.Major() == 0 && v.Minor() == 0 {
		v = version.MustParse(baseversion.DefaultKubeBinaryVersion)
	}
	return version.MajorMinor(v.Major(), v.Minor())
}

// checkNodeFeatureUses returns why the new uses are more than the old ones plus
// the node's own report.
func checkNodeFeatureUses(nodeName string, oldUses, newUses []featuresapi.FeatureUse) error {
	remaining := slices.Clone(oldUses)
	for _, use := range newUses {
		i := slices.IndexFunc(remaining, func(old featuresapi.FeatureUse) bool { return featuresapi.SameUse(old, use) })
		if use.Component != kubeletComponent {
			if i < 0 || !apiequality.Semantic.DeepEqual(remaining[i], use) {
				return fmt.Errorf("node %q may only report uses of component %q, not change those of %q", nodeName, kubeletComponent, use.Component)
			}
			remaining = slices.Delete(remaining, i, i+1)
			continue
		}
		own := without(use.Instances, nodeName)
		if len(own) < len(use.Instances)-1 {
			return fmt.Errorf("node %q is named more than once in the kubelet use of value %t", nodeName, use.Value)
		}
		if i < 0 {
			if len(own) > 0 {
				return fmt.Errorf("node %q may only report its own use: the new kubelet use of value %t names %v", nodeName, use.Value, own)
			}
			if len(use.Instances) == 0 {
				return fmt.Errorf("node %q may only add a kubelet use that names it: the new kubelet use of value %t names no instance", nodeName, use.Value)
			}
			continue
		}
		old := remaining[i]
		if !slices.Equal(own, without(old.Instances, nodeName)) || !old.FirstReportTime.Equal(use.FirstReportTime) {
			return fmt.Errorf("node %q may only add itself to the kubelet use of value %t, not change the other instances or the report time", nodeName, use.Value)
		}
		if len(use.Instances) == 0 && len(old.Instances) > 0 {
			return fmt.Errorf("node %q may not leave the kubelet use of value %t without instances: remove the entry that named only it", nodeName, use.Value)
		}
		if !old.LastReportTime.Equal(use.LastReportTime) && !slices.Contains(use.Instances, nodeName) {
			return fmt.Errorf("node %q may only renew a kubelet use that names it, not the one of value %t", nodeName, use.Value)
		}
		remaining = slices.Delete(remaining, i, i+1)
	}
	if named, before := kubeletUsesNaming(newUses, nodeName), kubeletUsesNaming(oldUses, nodeName); named > 1 && named > before {
		return fmt.Errorf("node %q may be named in one kubelet use only: its kubelet reports one value at one version", nodeName)
	}
	// A node whose value or version changed moves itself: the kubelet entry
	// that named only it may go when another kubelet entry reports now, one
	// that names the node or, its sample being full, only others (a kubelet
	// joins a sample with room only, reporting.Options.SampleSize). Any node
	// may report any value of its own, so this takes nothing from the server
	// flow that a false report would not. A kubelet entry that names nobody
	// may go too.
	remaining = slices.DeleteFunc(remaining, func(old featuresapi.FeatureUse) bool {
		if old.Component != kubeletComponent {
			return false
		}
		return len(old.Instances) == 0 || slices.Equal(old.Instances, []string{nodeName}) &&
			slices.ContainsFunc(newUses, func(use featuresapi.FeatureUse) bool {
				return use.Component == kubeletComponent && !featuresapi.SameUse(use, old)
			})
	})
	if len(remaining) > 0 {
		return fmt.Errorf("node %q may not remove uses: %s=%t is missing", nodeName, remaining[0].Component, remaining[0].Value)
	}
	return nil
}

// kubeletUsesNaming is the number of kubelet uses that name nodeName.
func kubeletUsesNaming(uses []featuresapi.FeatureUse, nodeName string) int {
	n := 0
	for _, use := range uses {
		if use.Component == kubeletComponent && slices.Contains(use.Instances, nodeName) {
			n++
		}
	}
	return n
}

// without returns the instances other than nodeName.
func without(instances []string, nodeName string) []string {
	return slices.DeleteFunc(slices.Clone(instances), func(instance string) bool { return instance == nodeName })
}
