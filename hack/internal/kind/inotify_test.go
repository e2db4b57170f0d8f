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
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRaiseInotifyLimitsRaisesOnlyWhatIsBelowKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, value string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The host's defaults here: 128 instances; watches already above kind's.
	write("max_user_instances", "128")
	write("max_user_watches", "1048576")
	changed, err := raiseInotifyLimits(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fs.inotify.max_user_instances 128 -> 512"}; !reflect.DeepEqual(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	for name, want := range map[string]string{"max_user_instances": "512", "max_user_watches": "1048576"} {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		if got := strings.TrimSpace(string(data)); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if changed, err := raiseInotifyLimits(dir); err != nil || len(changed) != 0 {
		t.Errorf("second call: %v, %v; want nothing to change", changed, err)
	}
	write("max_user_watches", "many")
	if _, err := raiseInotifyLimits(dir); err == nil {
		t.Error("an unreadable limit: want an error")
	}
}
