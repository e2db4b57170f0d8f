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

package series

import (
	"path/filepath"
	"slices"
	"testing"
)

func TestGatesAreTheOnesThePatchesDeclare(t *testing.T) {
	f := newFixture(t)
	writeFiles(t, f.repo.Root, map[string]string{
		"patches/fake/30-gates/HEADER": "features: two gates\n",
		"patches/fake/30-gates/upstream.patch": `diff --git a/pkg/features/features.go b/pkg/features/features.go
--- a/pkg/features/features.go
+++ b/pkg/features/features.go
@@ -1,3 +1,9 @@
 	// owner: @upstream
 	Existing featuregate.Feature = "Existing"
+
+	// owner: @kube-carry
+	Zebra featuregate.Feature = "Zebra"
+
+	// owner: @kube-carry
+	Alpha featuregate.Feature = "Alpha"
+	// Alpha featuregate.Feature = "InAComment"
@@ -20,3 +26,3 @@
-	Removed featuregate.Feature = "Removed"
+	Renamed featuregate.Feature = "Renamed"
`,
	})
	got, err := f.repo.Gates(fakeUpstream)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Alpha", "Renamed", "Zebra"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// The repository's own series: the gates the clusters and the e2e targets turn on.
func TestTheSeriesGates(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for up, want := range map[string][]string{
		"kubernetes": {"BalloonPod", "FeatureLifecycle", "KubeletImagePullGate"},
		"autoscaler": {"DaemonSetNodeScope"},
	} {
		u := Kubernetes
		if up == "autoscaler" {
			u = Autoscaler
		}
		got, err := Repo{Root: root}.Gates(u)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", up, got, want)
		}
	}
}
