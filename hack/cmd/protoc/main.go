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

// Command protoc is a protoc-compatible front end built on
// github.com/bufbuild/protocompile, for machines where protoc 23.4 (the version
// Kubernetes generates its protobuf code with) cannot be installed. It compiles the
// .proto files, runs the protoc-gen-NAME plugins with the same CodeGeneratorRequest
// protoc 23.4 sends (compiler_version 4.23.4), and writes what they return.
//
// It understands the command lines upstream's scripts use:
//
//	protoc --version
//	protoc -I DIR|--proto_path=DIR ... --NAME_out=[OPTS:]DIR --NAME_opt=OPTS ... FILE.proto ...
//	protoc ... --descriptor_set_out=FILE [--include_imports] [--include_source_info] FILE.proto ...
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"github.com/bufbuild/protocompile/protoutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// The protoc release this front end stands in for.
const (
	versionMajor, versionMinor, versionPatch = 4, 23, 4
	versionString                            = "libprotoc 23.4"
)

// extraProtoPathEnv names import paths searched after the command line's.
const extraProtoPathEnv = "KUBE_CARRY_PROTO_PATH"

type generator struct {
	name string   // NAME of --NAME_out
	out  string   // output directory
	opts []string // parameters, from --NAME_out=OPTS:DIR and --NAME_opt
}

type invocation struct {
	importPaths    []string
	generators     []*generator
	plugins        map[string]string // NAME -> plugin path (--plugin=protoc-gen-NAME=PATH)
	descriptorOut  string
	includeImports bool
	includeSource  bool
	files          []string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println(versionString)
		return nil
	}
	inv, err := parseArgs(args)
	if err != nil {
		return err
	}
	return inv.execute(context.Background())
}

func parseArgs(args []string) (*invocation, error) {
	inv := &invocation{plugins: map[string]string{}}
	byName := map[string]*generator{}
	gen := func(name string) *generator {
		g, ok := byName[name]
		if !ok {
			g = &generator{name: name}
			byName[name] = g
			inv.generators = append(inv.generators, g)
		}
		return g
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if _, v, ok := strings.Cut(a, "="); ok {
				return v, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		switch {
		case a == "-I" || strings.HasPrefix(a, "--proto_path"):
			v, err := value()
			if err != nil {
				return nil, err
			}
			inv.importPaths = append(inv.importPaths, filepath.SplitList(v)...)
		case strings.HasPrefix(a, "-I"):
			inv.importPaths = append(inv.importPaths, filepath.SplitList(a[2:])...)
		case strings.HasPrefix(a, "--plugin="):
			name, path, ok := strings.Cut(strings.TrimPrefix(a, "--plugin="), "=")
			if !ok {
				path = name
			}
			inv.plugins[strings.TrimPrefix(filepath.Base(name), "protoc-gen-")] = path
		case strings.HasPrefix(a, "--descriptor_set_out"):
			v, err := value()
			if err != nil {
				return nil, err
			}
			inv.descriptorOut = v
		case a == "--include_imports":
			inv.includeImports = true
		case a == "--include_source_info":
			inv.includeSource = true
		case strings.HasPrefix(a, "--") && strings.Contains(a, "_out"):
			flag, v, ok := strings.Cut(a[2:], "=")
			if !ok {
				return nil, fmt.Errorf("%s needs =DIR", a)
			}
			g := gen(strings.TrimSuffix(flag, "_out"))
			if opts, dir, ok := strings.Cut(v, ":"); ok {
				g.opts = append(g.opts, opts)
				v = dir
			}
			g.out = v
		case strings.HasPrefix(a, "--") && strings.Contains(a, "_opt"):
			flag, v, ok := strings.Cut(a[2:], "=")
			if !ok {
				return nil, fmt.Errorf("%s needs =OPTS", a)
			}
			g := gen(strings.TrimSuffix(flag, "_opt"))
			g.opts = append(g.opts, v)
		case strings.HasPrefix(a, "-"):
			return nil, fmt.Errorf("unsupported option %s (this front end implements what Kubernetes' scripts use)", a)
		default:
			inv.files = append(inv.files, a)
		}
	}
	if len(inv.files) == 0 {
		return nil, errors.New("missing input file")
	}
	if len(inv.importPaths) == 0 {
		inv.importPaths = []string{"."}
	}
	// Import paths to search last, for the .proto files a vendor/ directory would
	// hold (hack/in-tree.sh sets it: the module zips carry no vendor/).
	inv.importPaths = append(inv.importPaths, filepath.SplitList(os.Getenv(extraProtoPathEnv))...)
	for _, g := range inv.generators {
		if g.out == "" {
			return nil, fmt.Errorf("--%s_opt without --%s_out", g.name, g.name)
		}
	}
	if len(inv.generators) == 0 && inv.descriptorOut == "" {
		return nil, errors.New("missing output directives")
	}
	return inv, nil
}

// importName maps an input file to its name relative to the first import path that
// holds it, as protoc does: paths are compared as given, so "-I ." never matches an
// absolute file. A relative file under no relative import path is then looked up as
// an absolute one.
func (inv *invocation) importName(file string) (string, error) {
	under := func(dir, file string) (string, bool) {
		rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(file))
		return filepath.ToSlash(rel), err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	for _, p := range inv.importPaths {
		if filepath.IsAbs(p) == filepath.IsAbs(file) {
			if rel, ok := under(p, file); ok {
				return rel, nil
			}
		}
	}
	if abs, err := filepath.Abs(file); err == nil && !filepath.IsAbs(file) {
		for _, p := range inv.importPaths {
			if ap, err := filepath.Abs(p); err == nil {
				if rel, ok := under(ap, abs); ok {
					return rel, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%s: File does not reside within any path specified using --proto_path (or -I)", file)
}

func (inv *invocation) execute(ctx context.Context) error {
	names := make([]string, len(inv.files))
	for i, f := range inv.files {
		n, err := inv.importName(f)
		if err != nil {
			return err
		}
		names[i] = n
	}
	sources := &protocompile.SourceResolver{ImportPaths: inv.importPaths}
	standard := protocompile.WithStandardImports(protocompile.ResolverFunc(func(string) (protocompile.SearchResult, error) {
		return protocompile.SearchResult{}, os.ErrNotExist
	}))
	compiler := protocompile.Compiler{
		// protoc interprets options with its own descriptor.proto, whatever older
		// copy an import path holds (Kubernetes' third_party/protobuf has one that
		// predates debug_redact); every other file comes from the import paths first.
		Resolver: protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
			if path == "google/protobuf/descriptor.proto" {
				return standard.FindFileByPath(path)
			}
			if res, err := sources.FindFileByPath(path); err == nil {
				return res, nil
			}
			return standard.FindFileByPath(path)
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := compiler.Compile(ctx, names...)
	if err != nil {
		return err
	}
	all := ordered(files)
	if inv.descriptorOut != "" {
		if err := inv.writeDescriptorSet(names, all); err != nil {
			return err
		}
	}
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: names,
		CompilerVersion: &pluginpb.Version{
			Major: proto.Int32(versionMajor), Minor: proto.Int32(versionMinor), Patch: proto.Int32(versionPatch), Suffix: proto.String(""),
		},
	}
	generate := map[string]bool{}
	for _, n := range names {
		generate[n] = true
	}
	for _, f := range all {
		fd := protoutil.ProtoFromFileDescriptor(f)
		if !generate[f.Path()] {
			// protoc sends source info only for the files to generate.
			fd = proto.Clone(fd).(*descriptorpb.FileDescriptorProto)
			fd.SourceCodeInfo = nil
		}
		req.ProtoFile = append(req.ProtoFile, fd)
	}
	for _, g := range inv.generators {
		if err := inv.runPlugin(g, req); err != nil {
			return err
		}
	}
	return nil
}

// ordered lists the compiled files with their imports, dependencies first.
func ordered(files linker.Files) []protoreflect.FileDescriptor {
	var out []protoreflect.FileDescriptor
	seen := map[string]bool{}
	var visit func(f protoreflect.FileDescriptor)
	visit = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := 0; i < imports.Len(); i++ {
			visit(imports.Get(i).FileDescriptor)
		}
		out = append(out, f)
	}
	for _, f := range files {
		visit(f)
	}
	return out
}

func (inv *invocation) writeDescriptorSet(names []string, all []protoreflect.FileDescriptor) error {
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, f := range all {
		if !inv.includeImports && !wanted[f.Path()] {
			continue
		}
		fd := protoutil.ProtoFromFileDescriptor(f)
		if !inv.includeSource {
			fd = proto.Clone(fd).(*descriptorpb.FileDescriptorProto)
			fd.SourceCodeInfo = nil
		}
		set.File = append(set.File, fd)
	}
	data, err := proto.Marshal(set)
	if err != nil {
		return err
	}
	return os.WriteFile(inv.descriptorOut, data, 0o644)
}

func (inv *invocation) runPlugin(g *generator, req *pluginpb.CodeGeneratorRequest) error {
	path := inv.plugins[g.name]
	if path == "" {
		var err error
		if path, err = exec.LookPath("protoc-gen-" + g.name); err != nil {
			return fmt.Errorf("protoc-gen-%s: program not found or is not executable", g.name)
		}
	}
	r := proto.Clone(req).(*pluginpb.CodeGeneratorRequest)
	if len(g.opts) > 0 {
		r.Parameter = proto.String(strings.Join(g.opts, ","))
	}
	in, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	cmd := exec.Command(path)
	cmd.Stdin = bytes.NewReader(in)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("--%s_out: protoc-gen-%s: %w", g.name, g.name, err)
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("--%s_out: reading the plugin's response: %w", g.name, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("--%s_out: %s", g.name, resp.GetError())
	}
	for _, f := range resp.File {
		if f.GetInsertionPoint() != "" {
			return fmt.Errorf("--%s_out: insertion points are not supported (%s)", g.name, f.GetName())
		}
		dst := filepath.Join(g.out, filepath.FromSlash(f.GetName()))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
