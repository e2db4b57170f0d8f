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

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// An old descriptor.proto in an import path (as Kubernetes' third_party/protobuf
// has) must not hide options newer than it, such as debug_redact.
const oldDescriptor = `syntax = "proto2";
package google.protobuf;
message FieldOptions { optional bool deprecated = 3; extensions 1000 to max; }
`

const api = `syntax = "proto3";
package example.v1;
option go_package = "example.com/api/v1";
message AuthConfig { string password = 1 [debug_redact = true]; }
`

func TestDescriptorSetWithNewerOptionsThanTheImportPathsDescriptor(t *testing.T) {
	dir := t.TempDir()
	third := filepath.Join(dir, "third_party")
	os.MkdirAll(filepath.Join(third, "google", "protobuf"), 0o755)
	os.WriteFile(filepath.Join(third, "google", "protobuf", "descriptor.proto"), []byte(oldDescriptor), 0o644)
	os.MkdirAll(filepath.Join(dir, "api", "v1"), 0o755)
	file := filepath.Join(dir, "api", "v1", "api.proto")
	os.WriteFile(file, []byte(api), 0o644)
	out := filepath.Join(dir, "set.pb")

	if err := run([]string{"--proto_path=" + dir, "-I", third, "--descriptor_set_out=" + out, file}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.File) != 1 || set.File[0].GetName() != "api/v1/api.proto" {
		t.Fatalf("files: %v", set.File)
	}
	field := set.File[0].MessageType[0].Field[0]
	if !field.GetOptions().GetDebugRedact() || field.GetJsonName() != "password" {
		t.Errorf("field %v: want debug_redact and a json_name, as protoc sends them", field)
	}
}

func TestArgumentErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing input file"},
		{[]string{"a.proto"}, "missing output directives"},
		{[]string{"--go_opt=paths=source_relative", "a.proto"}, "--go_opt without --go_out"},
		{[]string{"--encode=x", "a.proto"}, "unsupported option --encode=x"},
		{[]string{"-I", dir, "--go_out=" + dir, "/elsewhere/a.proto"}, "File does not reside within any path specified using --proto_path"},
	} {
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestImportNamesFollowProtoc(t *testing.T) {
	inv := &invocation{importPaths: []string{".", "/src/staging/src", "/src/vendor"}}
	for file, want := range map[string]string{
		"/src/staging/src/k8s.io/api/core/v1/generated.proto": "k8s.io/api/core/v1/generated.proto",
		"staging/src/k8s.io/api/core/v1/generated.proto":      "staging/src/k8s.io/api/core/v1/generated.proto",
	} {
		got, err := inv.importName(file)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", file, got, err, want)
		}
	}
}
