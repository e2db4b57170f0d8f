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
	"slices"
	"strings"
	"testing"
)

const (
	baseProto = `syntax = "proto3";
package runtime.v1;
message RuntimeFeatures {
    bool supplemental_groups_policy = 1;
    bool user_namespaces = 2;
}
`
	baseFeatures = `package features

const (
	Upstream featuregate.Feature = "Upstream"
)
`
	baseAggregator = `package apiserver

var apiVersionPriorities = map[schema.GroupVersion]priority{
	{Group: "", Version: "v1"}: {Group: 18000, Version: 1},
	{Group: "apps", Version: "v1"}: {Group: 17800, Version: 15},
}
`
	baseMetrics = `package metrics

const KubeletSubsystem = "kubelet"

var PullDuration = metrics.NewHistogram(&metrics.HistogramOpts{
	Subsystem: KubeletSubsystem,
	Name:      "image_pull_duration_seconds",
})
`
)

// seriesFiles is what a series adds to the base above: a field, a gate, an API
// group with its priority, a metric.
var seriesFiles = map[string]string{
	"api.proto": strings.Replace(baseProto, "    bool user_namespaces = 2;\n", "    bool user_namespaces = 2;\n    bool image_pull_concurrency = 3;\n", 1),
	"pkg/features/kube_features.go": strings.Replace(baseFeatures, "\tUpstream featuregate.Feature = \"Upstream\"\n",
		"\tUpstream featuregate.Feature = \"Upstream\"\n\tBalloonPod featuregate.Feature = \"BalloonPod\"\n", 1),
	"aggregator.go":                 strings.Replace(baseAggregator, ",\n}", ",\n\t{Group: \"features.k8s.io\", Version: \"v1alpha1\"}: {Group: 15700, Version: 9},\n}", 1),
	"pkg/apis/features/register.go": "package features\n\nconst GroupName = \"features.k8s.io\"\n",
	"metrics.go":                    strings.Replace(baseMetrics, "})\n", "})\n\nvar QueueLength = metrics.NewGauge(&metrics.GaugeOpts{\n\tSubsystem: KubeletSubsystem,\n\tName:      \"image_pull_queue_length\",\n})\n", 1),
}

// nextRelease takes, as upstream 1.37 did to the series on 1.36, field number 3
// and priority 15700 for names of its own, and adds the series' metric's name, its API
// group and a gate of the series' name in other packages.
var nextRelease = map[string]string{
	"api.proto":     strings.Replace(baseProto, "    bool user_namespaces = 2;\n", "    bool user_namespaces = 2;\n    bool mount_options = 3;\n", 1),
	"aggregator.go": strings.Replace(baseAggregator, ",\n}", ",\n\t{Group: \"lifecycle.k8s.io\", Version: \"v1alpha1\"}: {Group: 15700, Version: 10},\n}", 1),
	"staging/src/k8s.io/apiserver/pkg/features/kube_features.go": "package features\n\nconst (\n\tBalloonPod featuregate.Feature = \"BalloonPod\"\n)\n",
	"staging/src/k8s.io/api/features/v1/register.go":             "package v1\n\nconst GroupName = \"features.k8s.io\"\n",
	"pkg/kubelet/queue/metrics.go":                               "package queue\n\nvar L = metrics.NewGauge(&metrics.GaugeOpts{\n\tSubsystem: \"kubelet\",\n\tName: \"image_pull_queue_length\",\n})\n",
}

func commitFiles(t *testing.T, g git, msg string, files map[string]string) string {
	t.Helper()
	writeFiles(t, g.dir, files)
	if _, err := g.run("add", "-A", "."); err != nil {
		t.Fatal(err)
	}
	if _, err := g.run("commit", "-q", "--allow-empty", "-m", msg); err != nil {
		t.Fatal(err)
	}
	head, err := g.run("rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	return head
}

func collisionRepo(t *testing.T) (git, string, string) {
	g := git{dir: t.TempDir(), ident: DefaultIdentity}
	if _, err := g.run("init", "-q"); err != nil {
		t.Fatal(err)
	}
	base := commitFiles(t, g, "base", map[string]string{"api.proto": baseProto, "pkg/features/kube_features.go": baseFeatures, "aggregator.go": baseAggregator, "metrics.go": baseMetrics})
	tip := commitFiles(t, g, "series", seriesFiles)
	return g, base, tip
}

func collisionStrings(t *testing.T, g git, base, tip, against string) []string {
	t.Helper()
	cs, err := Collisions(g, base, tip, against)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

func TestCollisionsNoneOnTheSeriesOwnBase(t *testing.T) {
	g, base, tip := collisionRepo(t)
	if got := collisionStrings(t, g, base, tip, base); len(got) > 0 {
		t.Errorf("collisions with the series' own base:\n%s", strings.Join(got, "\n"))
	}
}

// want is what the next release takes from the series.
var want = []string{
	"API group features.k8s.io: the series' pkg/apis/features, upstream's staging/src/k8s.io/api/features/v1",
	"aggregator group priority 15700: the series' features.k8s.io, upstream's lifecycle.k8s.io",
	"feature gate BalloonPod: the series' pkg/features/kube_features.go, upstream's staging/src/k8s.io/apiserver/pkg/features/kube_features.go",
	"metric kubelet_image_pull_queue_length: the series' metrics.go, upstream's pkg/kubelet/queue/metrics.go",
	"protobuf field runtime.v1.RuntimeFeatures = 3: the series' image_pull_concurrency, upstream's mount_options",
}

// TestCollisionsWithANewerRelease is make pin's check: the series as it was made,
// against the release it moves to.
func TestCollisionsWithANewerRelease(t *testing.T) {
	g, base, tip := collisionRepo(t)
	if _, err := g.run("checkout", "-q", base); err != nil {
		t.Fatal(err)
	}
	next := commitFiles(t, g, "next release", nextRelease)
	if got := collisionStrings(t, g, base, tip, next); !slices.Equal(got, want) {
		t.Errorf("collisions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCollisionsInAMergedTree is make verify's check: a series merged onto the
// newer release without a textual conflict still collides with it.
func TestCollisionsInAMergedTree(t *testing.T) {
	g, base, _ := collisionRepo(t)
	if _, err := g.run("checkout", "-q", base); err != nil {
		t.Fatal(err)
	}
	next := commitFiles(t, g, "next release", nextRelease)
	merged := map[string]string{}
	for p, c := range seriesFiles {
		merged[p] = c
	}
	merged["api.proto"] = strings.Replace(nextRelease["api.proto"], "    bool mount_options = 3;\n", "    bool mount_options = 3;\n    bool image_pull_concurrency = 3;\n", 1)
	merged["aggregator.go"] = strings.Replace(nextRelease["aggregator.go"], ",\n}", ",\n\t{Group: \"features.k8s.io\", Version: \"v1alpha1\"}: {Group: 15700, Version: 9},\n}", 1)
	tip := commitFiles(t, g, "series on the next release", merged)
	if got := collisionStrings(t, g, next, tip, next); !slices.Equal(got, want) {
		t.Errorf("collisions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
