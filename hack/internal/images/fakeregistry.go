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
	"fmt"
	"io"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FakeRegistryTag is the tag agnhost's fake-registry-server serves the pause image
// under (test/images/agnhost/fakeregistryserver/images.txt: pause 3.10.2 testing).
const FakeRegistryTag = "testing"

// WithFakeRegistry adds to agnhost what its fake-registry-server serves from
// /var/registry, as upstream's Dockerfile prepares it (prepare_registry.sh): the
// pause image as pause:testing, in the registry layout registryserver.go reads
// (a tag file holding the manifest's digest; manifests and blobs at
// <kind>/sha256/<first two>/<hash>/data). Upstream's node e2e credential specs
// pull it from the registry's pod on localhost:5000.
func WithFakeRegistry(agnhost, pause v1.Image) (v1.Image, error) {
	files, err := registryFiles("var/registry/pause", FakeRegistryTag, pause)
	if err != nil {
		return nil, err
	}
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	cf, err := agnhost.ConfigFile()
	if err != nil {
		return nil, err
	}
	return Image(agnhost, cf.Config, l)
}

// registryFiles lays out img under dir as the fake registry serves it under tag.
func registryFiles(dir, tag string, img v1.Image) ([]File, error) {
	at := func(kind string, h v1.Hash) string {
		return path.Join(dir, kind, h.Algorithm, h.Hex[:2], h.Hex, "data")
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: path.Join(dir, "manifests", tag), Data: []byte(digest.String() + "\n")},
		{Path: at("manifests", digest), Data: manifest},
		{Path: at("blobs", configName), Data: config},
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d, err)
		}
		files = append(files, File{Path: at("blobs", d), Data: data})
	}
	if !strings.HasPrefix(digest.String(), "sha256:") {
		return nil, fmt.Errorf("manifest digest %s: the fake registry serves sha256 only", digest)
	}
	return files, nil
}
