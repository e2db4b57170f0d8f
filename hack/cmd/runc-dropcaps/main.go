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

// Command runc-dropcaps is the OCI runtime of the kind Docker engine on a machine
// whose capability bounding set lacks capabilities the kernel knows (docs/kind.md).
// A privileged container asks for all of them and runc cannot grant what the
// bounding set lacks, so this removes those from the container's spec (create, run)
// or process (exec), then runs runc with the same arguments.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/kube-carry/kube-carry/hack/internal/dropcaps"
)

// runc is Debian's runc, which docker.io depends on.
const runc = "/usr/sbin/runc"

func main() {
	if err := dropMissing(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "runc-dropcaps:", err)
		os.Exit(1)
	}
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "runc-dropcaps:", &exec.Error{Name: runc, Err: err})
	os.Exit(1)
}

func dropMissing(args []string) error {
	files := dropcaps.SpecFiles(args)
	if len(files) == 0 {
		return nil
	}
	missing, err := dropcaps.Missing()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := dropcaps.Drop(f, missing); err != nil {
			return err
		}
	}
	return nil
}
