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

package dropcaps

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSpecFiles(t *testing.T) {
	// The global flags containerd's runc shim passes (go-runc), then the command.
	global := []string{"--root", "/run/docker/runtime-runc/moby", "--log", "/run/x/log.json", "--log-format", "json", "--systemd-cgroup"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"create", append(global, "create", "--bundle", "/run/b", "--pid-file", "/run/b/init.pid", "id"), []string{"/run/b/config.json"}},
		{"create, bundle after =", append(global, "create", "--bundle=/run/b", "id"), []string{"/run/b/config.json"}},
		{"run, short flag", []string{"run", "-b", "/run/b", "-d", "id"}, []string{"/run/b/config.json"}},
		{"create, default bundle", []string{"create", "id"}, []string{"config.json"}},
		{"exec with a process file", append(global, "exec", "--process", "/tmp/runc-process1", "--detach", "--pid-file", "/run/p.pid", "id"), []string{"/tmp/runc-process1"}},
		{"exec, single dash", []string{"exec", "-process=/tmp/p", "id"}, []string{"/tmp/p"}},
		{"exec of a command line", []string{"exec", "-t", "id", "sh"}, nil},
		{"a global value named like a command", []string{"--root", "create", "start", "id"}, nil},
		{"start", append(global, "start", "id"), nil},
		{"delete", []string{"delete", "--force", "id"}, nil},
		{"state", []string{"state", "id"}, nil},
		{"no command", []string{"--version"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SpecFiles(tc.args); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("SpecFiles(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

func TestDrop(t *testing.T) {
	sets := func(list ...string) map[string][]string {
		return map[string][]string{"bounding": list, "effective": list, "permitted": list, "inheritable": list}
	}
	for _, tc := range []struct {
		name string
		doc  func(caps map[string][]string) map[string]any
	}{
		{"runtime spec", func(caps map[string][]string) map[string]any {
			return map[string]any{
				"ociVersion": "1.0.2",
				"process":    map[string]any{"args": []string{"/sbin/init"}, "capabilities": caps, "terminal": false},
				"linux":      map[string]any{"maskedPaths": []string{"/proc/kcore"}},
			}
		}},
		{"exec process", func(caps map[string][]string) map[string]any {
			return map[string]any{"args": []string{"sh"}, "cwd": "/", "capabilities": caps}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.json")
			writeJSON(t, path, tc.doc(sets("CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN")))
			if err := Drop(path, []string{"CAP_SYS_RESOURCE", "CAP_BPF"}); err != nil {
				t.Fatal(err)
			}
			got := readJSON(t, path)
			want := readJSONBytes(t, mustJSON(t, tc.doc(sets("CAP_CHOWN", "CAP_SYS_ADMIN"))))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
		})
	}
}

func TestDropLeavesUnchangedFilesAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	original := `{"process": {"capabilities": {"bounding": ["CAP_CHOWN"]}},   "x": 1}`
	if err := os.WriteFile(path, []byte(original), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Drop(path, []string{"CAP_SYS_RESOURCE"}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != original {
		t.Errorf("file rewritten: %s", data)
	}
}

func TestDropBadInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(`{"process": `), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Drop(path, []string{"CAP_SYS_RESOURCE"})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("error = %v, want one naming %s", err, path)
	}
	if data, _ := os.ReadFile(path); string(data) != `{"process": ` {
		t.Errorf("bad file changed: %s", data)
	}
}

func TestMissingNamesOCICapabilities(t *testing.T) {
	missing, err := Missing()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range missing {
		if !strings.HasPrefix(c, "CAP_") || strings.ToUpper(c) != c {
			t.Errorf("%q is not an OCI capability name", c)
		}
	}
	t.Logf("missing from this machine's bounding set: %v", missing)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := os.WriteFile(path, mustJSON(t, v), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readJSONBytes(t, data)
}

func readJSONBytes(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
