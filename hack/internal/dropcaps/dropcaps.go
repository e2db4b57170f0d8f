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

// Package dropcaps lets privileged containers run on a machine whose capability
// bounding set lacks capabilities the kernel knows (the kind engine, docs/kind.md).
package dropcaps

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
)

// Missing lists, as OCI names (CAP_SYS_RESOURCE), the capabilities this
// machine's kernel knows but the bounding set of this process lacks. A privileged
// container asks for every capability the engine knows, and runc fails with "unable
// to apply caps" when one of them is outside the bounding set.
func Missing() ([]string, error) {
	supported, err := capability.ListSupported()
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range supported {
		ok, err := capability.GetBound(c)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, "CAP_"+strings.ToUpper(c.String()))
		}
	}
	return missing, nil
}

// runcValueFlags are runc's global flags that take a value in the next argument.
var runcValueFlags = []string{"root", "log", "log-format", "criu", "rootless"}

// SpecFiles returns the JSON files a runc command line reads capabilities from: the
// bundle's config.json for create and run, the --process file for exec. Flags may
// have one or two dashes and their value after '=' or in the next argument, as
// runc's CLI library accepts.
func SpecFiles(args []string) []string {
	i := 0
	for ; i < len(args); i++ {
		name, hasValue, ok := flagName(args[i])
		if !ok {
			break
		}
		if !hasValue && slices.Contains(runcValueFlags, name) {
			i++
		}
	}
	if i >= len(args) {
		return nil
	}
	sub, rest := args[i], args[i+1:]
	var want []string
	switch sub {
	case "create", "run":
		want = []string{"bundle", "b"}
	case "exec":
		want = []string{"process", "p"}
	default:
		return nil
	}
	value := ""
	for j := 0; j < len(rest); j++ {
		name, hasValue, ok := flagName(rest[j])
		if !ok || !slices.Contains(want, name) {
			continue
		}
		if hasValue {
			value = rest[j][strings.Index(rest[j], "=")+1:]
		} else if j+1 < len(rest) {
			value = rest[j+1]
		}
	}
	switch {
	case sub == "exec" && value == "":
		return nil // the process comes from the command line, with the container's capabilities
	case sub == "exec":
		return []string{value}
	case value == "":
		value = "." // runc's default bundle
	}
	return []string{filepath.Join(value, "config.json")}
}

// flagName returns the name of a -flag, --flag or --flag=value argument.
func flagName(arg string) (name string, hasValue, ok bool) {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
		return "", false, false
	}
	name = strings.TrimLeft(arg, "-")
	if k, _, found := strings.Cut(name, "="); found {
		return k, true, true
	}
	return name, false, true
}

// Drop removes the named capabilities from every set of the OCI
// document in path: a runtime spec (config.json, capabilities under "process") or a
// process (runc exec --process). Other fields are kept as they are.
func Drop(path string, drop []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	process := doc
	if raw, ok := doc["process"]; ok {
		process = nil
		if err := json.Unmarshal(raw, &process); err != nil {
			return fmt.Errorf("%s: process: %w", path, err)
		}
	}
	raw, ok := process["capabilities"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var sets map[string][]string
	if err := json.Unmarshal(raw, &sets); err != nil {
		return fmt.Errorf("%s: capabilities: %w", path, err)
	}
	changed := false
	for name, set := range sets {
		kept := slices.DeleteFunc(slices.Clone(set), func(c string) bool { return slices.Contains(drop, c) })
		if len(kept) != len(set) {
			sets[name], changed = kept, true
		}
	}
	if !changed {
		return nil
	}
	if process["capabilities"], err = json.Marshal(sets); err != nil {
		return err
	}
	if _, ok := doc["process"]; ok {
		if doc["process"], err = json.Marshal(process); err != nil {
			return err
		}
	}
	if data, err = json.Marshal(doc); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
