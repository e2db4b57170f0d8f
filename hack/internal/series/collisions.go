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
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	protoparser "github.com/bufbuild/protocompile/parser"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/types/descriptorpb"
)

// A name is something upstream hands out once and for all: a protobuf field or
// enum number in a message, an aggregator group priority, a feature gate, an API
// group, a metric. The series takes some; an upstream release that takes the same
// one breaks the wire or the API of any mix of the two, often with no conflict in
// the patch (the numbers sit in different lines). Collisions lists them.

// name is one definition: Key is what must be unique upstream-wide (a field
// number in its message, a priority, a gate's name), Owner what holds it (the
// field's name, the group, the file that declares it).
type name struct {
	Kind, Key, Owner string
}

// Collision is a name the series takes that upstream takes too.
type Collision struct {
	Kind, Key, Series, Upstream string
}

func (c Collision) String() string {
	return fmt.Sprintf("%s %s: the series' %s, upstream's %s", c.Kind, c.Key, c.Series, c.Upstream)
}

// Collisions returns the names the series (base..tip) adds whose key the upstream
// tree at against takes for another owner. In a built tree against is the base;
// when moving to a new release, the new release's base.
func Collisions(g git, base, tip, against string) ([]Collision, error) {
	changes, err := g.diffTrees(base, tip)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, c := range changes {
		if c.Status != 'D' {
			changed = append(changed, c.Path)
		}
	}
	tipNames, err := namesIn(g, tip, changed)
	if err != nil {
		return nil, err
	}
	baseNames, err := namesIn(g, base, changed)
	if err != nil {
		return nil, err
	}
	had := map[name]bool{}
	for _, n := range baseNames {
		had[n] = true
	}
	// Upstream's names: every file of against that can define one, and against's
	// version of the files the series changes.
	files, err := g.grepFiles(against, namePatterns)
	if err != nil {
		return nil, err
	}
	upNames, err := namesIn(g, against, append(files, changed...))
	if err != nil {
		return nil, err
	}
	taken := map[[2]string][]string{}
	for _, n := range upNames {
		k := [2]string{n.Kind, n.Key}
		taken[k] = append(taken[k], n.Owner)
	}
	var out []Collision
	seen := map[Collision]bool{}
	for _, n := range tipNames {
		if had[n] {
			continue // upstream's own, not the series'
		}
		for _, owner := range taken[[2]string{n.Kind, n.Key}] {
			if owner == n.Owner && n.Kind != "feature gate" && n.Kind != "API group" && n.Kind != "metric" {
				continue // the same definition (a field upstream took as it is)
			}
			c := Collision{Kind: n.Kind, Key: n.Key, Series: n.Owner, Upstream: owner}
			if owner == n.Owner {
				c.Upstream = "the same, upstream's own now"
			}
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// namePatterns find the files that can define a name (git grep -E).
var namePatterns = []string{`featuregate\.Feature *= *"`, `GroupName *= *"`, `Opts\{`, `\{Group: *[0-9]+, *Version: *[0-9]+\}`}

var (
	gateRE     = regexp.MustCompile(`(?m)^\s*\w+\s+featuregate\.Feature\s*=\s*"([^"]+)"`)
	groupRE    = regexp.MustCompile(`(?m)^\s*(?:const\s+)?GroupName\s*=\s*"([^"]+)"`)
	priorityRE = regexp.MustCompile(`\{Group:\s*"([^"]*)",\s*Version:\s*"[^"]+"\}:\s*\{Group:\s*(\d+),\s*Version:\s*\d+\}`)
)

// namesIn reads the names the files define at commit; files absent there are skipped.
func namesIn(g git, commit string, files []string) ([]name, error) {
	contents, err := g.blobs(commit, files)
	if err != nil {
		return nil, err
	}
	var out []name
	for _, f := range files {
		data, ok := contents[f]
		if !ok {
			continue
		}
		switch {
		case strings.HasSuffix(f, ".proto"):
			out = append(out, protoNames(f, data)...)
		case strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go"):
			for _, m := range gateRE.FindAllSubmatch(data, -1) {
				out = append(out, name{"feature gate", string(m[1]), f})
			}
			if path.Base(f) == "register.go" {
				for _, m := range groupRE.FindAllSubmatch(data, -1) {
					out = append(out, name{"API group", string(m[1]), path.Dir(f)})
				}
			}
			for _, m := range priorityRE.FindAllSubmatch(data, -1) {
				out = append(out, name{"aggregator group priority", string(m[2]), string(m[1])})
			}
			if bytes.Contains(data, []byte("Opts{")) {
				out = append(out, metricNames(f, data)...)
			}
		}
	}
	return out, nil
}

// protoNames lists the field and enum value numbers of a .proto file's messages.
func protoNames(file string, data []byte) []name {
	h := reporter.NewHandler(reporter.NewReporter(func(reporter.ErrorWithPos) error { return nil }, nil))
	n, err := protoparser.Parse(file, bytes.NewReader(data), h)
	if err != nil {
		return nil
	}
	res, err := protoparser.ResultFromAST(n, false, h)
	if err != nil {
		return nil
	}
	fd := res.FileDescriptorProto()
	var out []name
	var enum func(prefix string, e *descriptorpb.EnumDescriptorProto)
	enum = func(prefix string, e *descriptorpb.EnumDescriptorProto) {
		for _, v := range e.GetValue() {
			out = append(out, name{"protobuf enum value", fmt.Sprintf("%s%s = %d", prefix, e.GetName(), v.GetNumber()), v.GetName()})
		}
	}
	var msg func(prefix string, m *descriptorpb.DescriptorProto)
	msg = func(prefix string, m *descriptorpb.DescriptorProto) {
		full := prefix + m.GetName()
		for _, f := range m.GetField() {
			out = append(out, name{"protobuf field", fmt.Sprintf("%s = %d", full, f.GetNumber()), f.GetName()})
		}
		for _, r := range m.GetReservedRange() {
			for i := r.GetStart(); i < r.GetEnd() && i < r.GetStart()+1000; i++ {
				out = append(out, name{"protobuf field", fmt.Sprintf("%s = %d", full, i), "reserved"})
			}
		}
		for _, e := range m.GetEnumType() {
			enum(full+".", e)
		}
		for _, nested := range m.GetNestedType() {
			msg(full+".", nested)
		}
	}
	pkg := ""
	if fd.GetPackage() != "" {
		pkg = fd.GetPackage() + "."
	}
	for _, m := range fd.GetMessageType() {
		msg(pkg, m)
	}
	for _, e := range fd.GetEnumType() {
		enum(pkg, e)
	}
	return out
}

// metricNames lists the metrics a Go file declares with component-base's or
// Prometheus' options (Namespace, Subsystem, Name), the parts joined with "_" as
// Prometheus does. Constants of the same file are resolved; any other name stays
// as written, so that the same expression gives the same key on both sides.
func metricNames(file string, data []byte) []name {
	f, err := parser.ParseFile(token.NewFileSet(), file, data, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						consts[id.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	value := func(e ast.Expr) string {
		switch v := e.(type) {
		case *ast.BasicLit:
			s, _ := strconv.Unquote(v.Value)
			return s
		case *ast.Ident:
			if s, ok := consts[v.Name]; ok {
				return s
			}
			return "<" + v.Name + ">"
		case *ast.SelectorExpr:
			if x, ok := v.X.(*ast.Ident); ok {
				return "<" + x.Name + "." + v.Sel.Name + ">"
			}
		}
		return "<?>"
	}
	var out []name
	ast.Inspect(f, func(n ast.Node) bool {
		cl, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := cl.Type.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
			return true
		}
		parts := map[string]string{}
		for _, el := range cl.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok {
					parts[k.Name] = value(kv.Value)
				}
			}
		}
		if parts["Name"] == "" {
			return true
		}
		var full []string
		for _, p := range []string{parts["Namespace"], parts["Subsystem"], parts["Name"]} {
			if p != "" {
				full = append(full, p)
			}
		}
		out = append(out, name{"metric", strings.Join(full, "_"), file})
		return true
	})
	return out
}

// grepFiles lists the files at commit that match any of the patterns.
func (g git) grepFiles(commit string, patterns []string) ([]string, error) {
	args := []string{"grep", "-l", "-E"}
	for _, p := range patterns {
		args = append(args, "-e", p)
	}
	args = append(args, commit, "--", "*.go", ":!vendor/", ":!*_test.go", ":!**/testdata/**")
	out, err := g.run(args...)
	if err != nil {
		if ge, ok := err.(*GitError); ok && ge.Stderr == "" {
			return nil, nil // no match
		}
		return nil, err
	}
	var files []string
	for _, l := range lines(out) {
		files = append(files, strings.TrimPrefix(l, commit+":"))
	}
	return files, nil
}

// blobs reads the files at commit in one git process; absent files are left out.
func (g git) blobs(commit string, files []string) (map[string][]byte, error) {
	var in bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&in, "%s:%s\n", commit, f)
	}
	c := g.cmd("cat-file", "--batch")
	c.Stdin = &in
	var stdout bytes.Buffer
	c.Stdout = &stdout
	if err := c.Run(); err != nil {
		return nil, err
	}
	r := bufio.NewReader(&stdout)
	out := map[string][]byte{}
	for _, f := range files {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		fields := strings.Fields(header)
		if len(fields) == 2 && fields[1] == "missing" {
			continue
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("git cat-file: %q", header)
		}
		size, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, err
		}
		data := make([]byte, size+1) // the content and a newline
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, err
		}
		if fields[1] == "blob" {
			out[f] = data[:size]
		}
	}
	return out, nil
}

// Collisions of the tree's series with its own base.
func (t *Tree) Collisions() ([]Collision, error) {
	st, err := t.LoadState()
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("no tree at %s; run 'make tree' first", t.Dir())
	}
	return Collisions(t.git(), st.BaseCommit, st.Tip(), st.BaseCommit)
}
