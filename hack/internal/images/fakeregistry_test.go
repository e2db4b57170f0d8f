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

package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestFakeRegistryLayout: the tag file names the manifest's digest, and the
// manifest and every blob it references are where registryserver.go looks for
// them, with content of that digest.
func TestFakeRegistryLayout(t *testing.T) {
	l, err := Layer([]File{{Path: "pause", Mode: 0o755, Data: []byte("not really pause")}})
	if err != nil {
		t.Fatal(err)
	}
	pause, err := Image(nil, v1.Config{Entrypoint: []string{"/pause"}}, l)
	if err != nil {
		t.Fatal(err)
	}
	files, err := registryFiles("var/registry/pause", FakeRegistryTag, pause)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string][]byte{}
	for _, f := range files {
		byPath[f.Path] = f.Data
	}
	at := func(kind, digest string) []byte {
		t.Helper()
		hex, ok := strings.CutPrefix(digest, "sha256:")
		if !ok {
			t.Fatalf("digest %q", digest)
		}
		data, ok := byPath[path.Join("var/registry/pause", kind, "sha256", hex[:2], hex, "data")]
		if !ok {
			t.Fatalf("no %s %s", kind, digest)
		}
		if got := sha256.Sum256(data); "sha256:"+hexString(got[:]) != digest {
			t.Fatalf("%s %s has other content", kind, digest)
		}
		return data
	}
	tag := strings.TrimSpace(string(byPath["var/registry/pause/manifests/testing"]))
	var m struct {
		MediaType string
		Config    struct{ Digest string }
		Layers    []struct{ Digest string }
	}
	if err := json.Unmarshal(at("manifests", tag), &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType == "" || len(m.Layers) != 1 {
		t.Fatalf("manifest: %+v", m)
	}
	at("blobs", m.Config.Digest)
	at("blobs", m.Layers[0].Digest)

	agnhost, err := Image(nil, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}})
	if err != nil {
		t.Fatal(err)
	}
	with, err := WithFakeRegistry(agnhost, pause)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := with.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Entrypoint[0] != "/agnhost" || cf.Config.Cmd[0] != "pause" {
		t.Errorf("agnhost's entrypoint changed: %+v", cf.Config)
	}
}

func hexString(b []byte) string { return hex.EncodeToString(b) }
