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
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	corev1lister "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	baseversion "k8s.io/component-base/version"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/kubernetes/pkg/auth/nodeidentifier"
	"k8s.io/utils/ptr"
)

func TestAdmitFeatureUses(t *testing.T) {
	reported := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	stored := []featuresapi.FeatureUse{
		{Component: "kube-apiserver", Value: true, Instances: []string{"apiserver-a"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported},
		{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported},
	}
	withUses := func(uses ...featuresapi.FeatureUse) []featuresapi.FeatureUse {
		return append([]featuresapi.FeatureUse{stored[0], stored[1]}, uses...)
	}
	addInstance := func(instances ...string) []featuresapi.FeatureUse {
		uses := withUses()
		uses[1].Instances = instances
		return uses
	}
	tests := []struct {
		name        string
		node        string
		subresource string
		operation   admission.Operation
		uses        []featuresapi.FeatureUse
		wantErr     string
	}{
		{name: "a new value naming only itself", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported})},
		{name: "itself added to an existing value", node: "mynode", uses: addInstance("node-1", "mynode")},
		{name: "unchanged", node: "mynode", uses: withUses()},
		{name: "another node's use", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"node-2"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}), wantErr: `may only report its own use: the new kubelet use of value false names [node-2]`},
		{name: "another node added", node: "mynode", uses: addInstance("node-1", "node-2"), wantErr: "may only add itself to the kubelet use of value true"},
		{name: "another node removed", node: "mynode", uses: addInstance("mynode"), wantErr: "may only add itself to the kubelet use of value true"},
		{name: "another component's use", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kube-scheduler", Value: true, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.36"}), wantErr: `may only report uses of component "kubelet", not change those of "kube-scheduler"`},
		{name: "a use removed", node: "mynode", uses: []featuresapi.FeatureUse{stored[1]}, wantErr: "may not remove uses: kube-apiserver=true is missing"},
		{name: "the report time changed", node: "node-1", uses: func() []featuresapi.FeatureUse {
			uses := withUses()
			uses[1].FirstReportTime = ptr.To(metav1.NewTime(reported.Add(time.Hour)))
			return uses
		}(), wantErr: "not change the other instances or the report time"},
		{name: "itself moved to the other value, its entry gone", node: "node-1", uses: []featuresapi.FeatureUse{stored[0], {Component: "kubelet", Value: false, Instances: []string{"node-1"}, BinaryVersion: "1.37", EmulationVersion: "1.37", FirstReportTime: &reported}}},
		{name: "itself moved to a new version, its entry gone", node: "node-1", uses: []featuresapi.FeatureUse{stored[0], {Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.37", EmulationVersion: "1.37", FirstReportTime: &reported}}},
		{name: "its entry renewed", node: "node-1", uses: func() []featuresapi.FeatureUse {
			uses := withUses()
			uses[1].LastReportTime = ptr.To(metav1.NewTime(reported.Add(time.Hour)))
			return uses
		}()},
		{name: "an entry that does not name it renewed", node: "mynode", uses: func() []featuresapi.FeatureUse {
			uses := withUses()
			uses[1].LastReportTime = ptr.To(metav1.NewTime(reported.Add(time.Hour)))
			return uses
		}(), wantErr: "may only renew a kubelet use that names it"},
		{name: "its own entry removed without moving", node: "node-1", uses: []featuresapi.FeatureUse{stored[0]}, wantErr: "may not remove uses: kubelet=true is missing"},
		{name: "another node's entry removed", node: "mynode", uses: []featuresapi.FeatureUse{stored[0]}, wantErr: "may not remove uses: kubelet=true is missing"},
		{name: "itself twice", node: "mynode", uses: addInstance("node-1", "mynode", "mynode"), wantErr: "named more than once"},
		// An entry nobody names would hold a transition for ever (issue 34).
		{name: "a new value naming no instance", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported}), wantErr: "names no instance"},
		{name: "its own entry left without instances", node: "node-1", uses: addInstance(), wantErr: "may not leave the kubelet use of value true without instances"},
		{name: "itself in a second entry", node: "node-1", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"node-1"}, BinaryVersion: "1.37", EmulationVersion: "1.36", FirstReportTime: &reported}), wantErr: "may be named in one kubelet use only"},
		{name: "itself in two new entries", node: "mynode", uses: withUses(
			featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported},
			featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.37", EmulationVersion: "1.37", FirstReportTime: &reported},
		), wantErr: "may be named in one kubelet use only"},
		// A node names itself only in an entry of its kubelet's versions, as
		// its Node reports them (newFeaturesTestPlugin).
		{name: "a binary version other than its Node's", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.37", EmulationVersion: "1.37", FirstReportTime: &reported}),
			wantErr: `node "mynode" may only report its kubelet's binary version "1.36" (status.nodeInfo.kubeletVersion "v1.36.3"), not "1.37"`},
		{name: "itself added to an entry of another binary version", node: "newnode", uses: addInstance("node-1", "newnode"),
			wantErr: `node "newnode" may only report its kubelet's binary version "1.37"`},
		{name: "an emulation version newer than its binary", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.37", FirstReportTime: &reported}),
			wantErr: `node "mynode" may only report an emulation version from 1.33 to 1.36, not "1.37"`},
		{name: "the oldest emulation version", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.33", FirstReportTime: &reported})},
		{name: "an emulation version too old", node: "mynode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.32", FirstReportTime: &reported}),
			wantErr: `not "1.32"`},
		{name: "a node without a Node", node: "ghost", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"ghost"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported}),
			wantErr: `node "ghost": cannot check the versions of its kubelet use against its Node`},
		{name: "a build without a version reports the release it is built from", node: "devnode", uses: withUses(featuresapi.FeatureUse{Component: "kubelet", Value: false, Instances: []string{"devnode"}, BinaryVersion: baseversion.DefaultKubeBinaryVersion, EmulationVersion: baseversion.DefaultKubeBinaryVersion, FirstReportTime: &reported})},
		{name: "status subresource", node: "mynode", subresource: "status", uses: withUses(), wantErr: "nodes may only update the uses subresource of features"},
		{name: "create", node: "mynode", operation: admission.Create, uses: withUses(), wantErr: "unexpected operation CREATE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			subresource, operation := "uses", admission.Update
			if tc.subresource != "" {
				subresource = tc.subresource
			}
			if tc.operation != "" {
				operation = tc.operation
			}
			expectAdmission(t, admitNodeUses(t, tc.node, subresource, operation, stored, tc.uses), tc.wantErr)
		})
	}
}

// admitNodeUses runs NodeRestriction on a node's update of a Feature's uses
// from stored to uses.
func admitNodeUses(t *testing.T, nodeName, subresource string, operation admission.Operation, stored, uses []featuresapi.FeatureUse) error {
	old := &featuresapi.Feature{ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: "kube-system"}, Status: featuresapi.FeatureStatus{Uses: stored}}
	updated := old.DeepCopy()
	updated.Status.Uses = uses
	node := &user.DefaultInfo{Name: "system:node:" + nodeName, Groups: []string{"system:nodes"}}
	attrs := admission.NewAttributesRecord(updated, old, featuresapi.Kind("Feature").WithVersion("v1alpha1"), old.Namespace, old.Name,
		featureResource.WithVersion("v1alpha1"), subresource, operation, &metav1.UpdateOptions{}, false, node)
	return newFeaturesTestPlugin(t).Admit(context.TODO(), attrs, nil)
}

// expectAdmission fails the test when err is not what wantErr says: nil for
// "", an error containing it otherwise.
func expectAdmission(t *testing.T, err error, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("want the update admitted, got %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Errorf("want an error containing %q, got %v", wantErr, err)
	}
}

// A node whose new value's sample is full (every kubelet joins only a sample
// with room) leaves its old entry without being named in the new one: seen on
// the upgrade lane, where a worker restarted with the gate off was refused
// the move and held the Feature's transition for ever.
func TestAdmitFeatureUsesMoveToAFullSample(t *testing.T) {
	reported := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	use := func(value bool, instances ...string) featuresapi.FeatureUse {
		return featuresapi.FeatureUse{Component: "kubelet", Value: value, Instances: instances, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported}
	}
	apiserver := featuresapi.FeatureUse{Component: "kube-apiserver", Value: false, Instances: []string{"apiserver-a"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported}
	stored := []featuresapi.FeatureUse{apiserver, use(true, "node-1"), use(false, "cp-1", "cp-2", "cp-3")}
	tests := []struct {
		name    string
		node    string
		uses    []featuresapi.FeatureUse
		wantErr string
	}{
		{name: "its entry gone, the full sample of its new value as it was", node: "node-1", uses: []featuresapi.FeatureUse{apiserver, use(false, "cp-1", "cp-2", "cp-3")}},
		{name: "another node's entry gone", node: "node-2", uses: []featuresapi.FeatureUse{apiserver, use(false, "cp-1", "cp-2", "cp-3")}, wantErr: "may not remove uses: kubelet=true is missing"},
		{name: "its entry gone, and the other entry too", node: "node-1", uses: []featuresapi.FeatureUse{apiserver}, wantErr: "may not remove uses: kubelet=true is missing"},
		{name: "its entry gone, the other entry changed", node: "node-1", uses: []featuresapi.FeatureUse{apiserver, use(false, "cp-1", "cp-2")}, wantErr: "may only add itself to the kubelet use of value false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expectAdmission(t, admitNodeUses(t, tc.node, "uses", admission.Update, stored, tc.uses), tc.wantErr)
		})
	}
}

// A kubelet entry that names nobody, stored before NodeRestriction refused
// them, neither blocks a node's report nor needs it: the node may keep it as
// it is or remove it.
func TestAdmitFeatureUsesAroundAnEntryNamingNobody(t *testing.T) {
	reported := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	empty := featuresapi.FeatureUse{Component: "kubelet", Value: false, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported}
	own := featuresapi.FeatureUse{Component: "kubelet", Value: true, Instances: []string{"mynode"}, BinaryVersion: "1.36", EmulationVersion: "1.36", FirstReportTime: &reported}
	for name, uses := range map[string][]featuresapi.FeatureUse{
		"kept":    {empty, own},
		"removed": {own},
	} {
		old := &featuresapi.Feature{ObjectMeta: metav1.ObjectMeta{Name: "balloonpod", Namespace: "kube-system"}, Status: featuresapi.FeatureStatus{Uses: []featuresapi.FeatureUse{empty}}}
		updated := old.DeepCopy()
		updated.Status.Uses = uses
		node := &user.DefaultInfo{Name: "system:node:mynode", Groups: []string{"system:nodes"}}
		attrs := admission.NewAttributesRecord(updated, old, featuresapi.Kind("Feature").WithVersion("v1alpha1"), old.Namespace, old.Name,
			featureResource.WithVersion("v1alpha1"), "uses", admission.Update, &metav1.UpdateOptions{}, false, node)
		if err := newFeaturesTestPlugin(t).Admit(context.TODO(), attrs, nil); err != nil {
			t.Errorf("the entry naming nobody %s: want the update admitted, got %v", name, err)
		}
	}
}

// newFeaturesTestPlugin is the plugin with the Nodes of the features tests:
// mynode at v1.36.3, node-1 and newnode at v1.37.2, devnode a build without a
// version.
func newFeaturesTestPlugin(t *testing.T) *Plugin {
	t.Helper()
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	for name, kubeletVersion := range map[string]string{"mynode": "v1.36.3", "node-1": "v1.37.2", "newnode": "v1.37.2", "devnode": "v0.0.0-master+$Format:%H$"} {
		if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubeletVersion}}}); err != nil {
			t.Fatal(err)
		}
	}
	p := NewPlugin(nodeidentifier.NewDefaultNodeIdentifier())
	p.nodesGetter = corev1lister.NewNodeLister(nodes)
	return p
}
