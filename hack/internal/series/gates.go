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
	"bufio"
	"os"
	"regexp"
	"slices"
)

// gateDeclaration is a feature gate's declaration that a patch adds, as upstream
// declares its gates (pkg/features/kube_features.go, the VPA's features.go).
var gateDeclaration = regexp.MustCompile(`^\+\t([A-Za-z0-9]+) +featuregate\.Feature = "([A-Za-z0-9]+)"$`)

// Gates returns the feature gates the series adds to upstream u, sorted: the
// one list of them that make test, the clusters and the e2e targets read.
func (r Repo) Gates(u Upstream) ([]string, error) {
	groups, err := r.Groups(u)
	if err != nil {
		return nil, err
	}
	var gates []string
	for _, g := range groups {
		if g.Patch == "" {
			continue
		}
		f, err := os.Open(g.Patch)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
		for sc.Scan() {
			if m := gateDeclaration.FindStringSubmatch(sc.Text()); m != nil && m[1] == m[2] {
				gates = append(gates, m[2])
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(gates)
	return slices.Compact(gates), nil
}
