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
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The tags of test/utils/image's GlibcDnsTesting and APIServer (test/images/glibc-dns-testing
// and sample-apiserver).
const (
	GlibcDNSTestingTag = "2.1.1"
	SampleAPIServerTag = "1.29.2"
)

// dnsTestingPrograms are what the DNS specs' probes run besides busybox's shell
// tools: Debian's dig (package bind9-dnsutils, as the image's dnsutils) and glibc's
// getent, which resolves through glibc's resolver and nsswitch, the point of the image.
var dnsTestingPrograms = []string{"dig", "nslookup", "getent"}

// nsswitchConf is Debian's hosts line: /etc/hosts, then DNS.
const nsswitchConf = "hosts: files dns\n"

// GlibcDNSTesting builds test/images/glibc-dns-testing as its Dockerfile lays it out
// (Debian's dnsutils on Debian, CoreDNS at /coredns) from this machine's dig, nslookup
// and getent with the libraries they load, glibc's resolver modules and an nsswitch.conf,
// on busybox, and the CoreDNS of the kind node image at /coredns.
func GlibcDNSTesting(ctx context.Context, work string, busybox v1.Image) (v1.Image, error) {
	files, err := dnsTestingFiles()
	if err != nil {
		return nil, err
	}
	coreDNS, err := GoProgram{Pkg: coreDNSModule, Version: coreDNSVersion}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	l, err := Layer(append(files, File{Path: "coredns", Mode: 0o755, Data: coreDNS}))
	if err != nil {
		return nil, err
	}
	return Image(busybox, v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, l)
}

// SampleAPIServer builds test/images/sample-apiserver, k8s.io/sample-apiserver at
// /sample-apiserver, from the tree's staging module (upstream's Makefile builds a
// tag of its published repository) on busybox.
func SampleAPIServer(ctx context.Context, tree, work string, busybox v1.Image) (v1.Image, error) {
	bin, err := GoProgram{Pkg: "k8s.io/sample-apiserver", ModuleDir: tree}.build(ctx, work)
	if err != nil {
		return nil, err
	}
	return programImage(busybox, "sample-apiserver", bin, v1.Config{Entrypoint: []string{"/sample-apiserver"}})
}

// dnsTestingFiles are the image's files but CoreDNS.
func dnsTestingFiles() ([]File, error) {
	files, err := HostFiles(dnsTestingPrograms, nil)
	if err != nil {
		return nil, fmt.Errorf("glibc-dns-testing's programs (apt-get install bind9-dnsutils): %w", err)
	}
	return append(files, File{Path: "etc/nsswitch.conf", Data: []byte(nsswitchConf)}), nil
}
