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
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// inotifyLimits are the host limits kind's known issues ask for when a host
// runs many nodes ("Pod errors due to too many open files"): every node's
// kubelet and containerd watch files, and two HA clusters (ten nodes) exhaust
// Linux's default of 128 instances, after which the first control plane of the
// second cluster never starts kube-apiserver.
var inotifyLimits = map[string]int{
	"max_user_instances": 512,
	"max_user_watches":   524288,
}

// raiseInotifyLimits raises each limit in dir (/proc/sys/fs/inotify) that is
// below kind's value, and returns what it changed; it never lowers one.
func raiseInotifyLimits(dir string) ([]string, error) {
	var changed []string
	for _, name := range []string{"max_user_instances", "max_user_watches"} {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return changed, err
		}
		current, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return changed, fmt.Errorf("%s: %w", path, err)
		}
		if want := inotifyLimits[name]; current < want {
			if err := os.WriteFile(path, []byte(strconv.Itoa(want)), 0o644); err != nil {
				return changed, fmt.Errorf("raising %s from %d to %d as kind's known issues ask: %w", path, current, want, err)
			}
			changed = append(changed, fmt.Sprintf("fs.inotify.%s %d -> %d", name, current, want))
		}
	}
	return changed, nil
}
