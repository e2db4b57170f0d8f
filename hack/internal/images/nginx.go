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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The tags of test/utils/image's Nginx and NginxNew (test/images/nginx and
// nginx-new: nginx's own Alpine images under e2e names).
const (
	NginxTag    = "1.27.0-2"
	NginxNewTag = "1.28.0-2"
)

// nginxConf is nginx's own image's configuration, reduced to what it serves: the
// files of /usr/share/nginx/html on port 80, the access log on the container's
// output, errors on its error stream.
const nginxConf = `user nobody nogroup;
worker_processes 1;
error_log stderr notice;
pid /run/nginx.pid;
events {
    worker_connections 1024;
}
http {
    types {
        text/html html htm;
        text/plain txt;
        application/json json;
        image/jpeg jpeg jpg;
    }
    default_type application/octet-stream;
    access_log /dev/stdout;
    server {
        listen 80;
        server_name localhost;
        location / {
            root /usr/share/nginx/html;
            index index.html index.htm;
        }
        error_page 500 502 503 504 /50x.html;
        location = /50x.html {
            root /usr/share/nginx/html;
        }
    }
}
`

var lddNotFound = regexp.MustCompile(`(\S+) => not found`)

// Nginx builds the e2e nginx image from Debian's nginx package (apt-get download, no
// install), its program with this machine's libraries on busybox, laid out as nginx's
// own image: /etc/nginx/nginx.conf, /usr/share/nginx/html/{index,50x}.html, and
// `nginx -g "daemon off;"`, stopped by SIGQUIT.
func Nginx(ctx context.Context, work string, busybox v1.Image) (v1.Image, error) {
	root, err := debianPackage(ctx, work, "nginx")
	if err != nil {
		return nil, err
	}
	files, data, err := programWithLibraries(ctx, filepath.Join(root, "usr", "sbin", "nginx"))
	if err != nil {
		return nil, err
	}
	const page = "<!DOCTYPE html>\n<html>\n<head><title>%[1]s</title></head>\n<body>\n<h1>%[1]s</h1>\n</body>\n</html>\n"
	files = append(files,
		File{Path: "usr/sbin/nginx", Mode: 0o755, Data: data},
		File{Path: "etc/nginx/nginx.conf", Data: []byte(nginxConf)},
		File{Path: "usr/share/nginx/html/index.html", Data: fmt.Appendf(nil, page, "Welcome to nginx!")},
		File{Path: "usr/share/nginx/html/50x.html", Data: fmt.Appendf(nil, page, "An error occurred.")},
		File{Path: "var/lib/nginx", Dir: true, Mode: 0o1777},
		File{Path: "var/log/nginx/access.log", Link: "/dev/stdout"},
		File{Path: "var/log/nginx/error.log", Link: "/dev/stderr"},
		File{Path: "run", Dir: true},
	)
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	return Image(busybox, v1.Config{
		Cmd:          []string{"nginx", "-g", "daemon off;"},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		ExposedPorts: map[string]struct{}{"80/tcp": {}},
		StopSignal:   "SIGQUIT",
	}, l)
}

// debianPackage downloads a Debian package into work/NAME (apt-get download, nothing
// installed) and returns the folder it is unpacked into.
func debianPackage(ctx context.Context, work, name string) (string, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	download := exec.CommandContext(ctx, "apt-get", "download", name)
	download.Dir = dir
	if out, err := download.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w\n%s", name, err, out)
	}
	debs, err := filepath.Glob(filepath.Join(dir, name+"_*.deb"))
	if err != nil || len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d packages in %s", name, len(debs), dir)
	}
	root := filepath.Join(dir, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w\n%s", debs[0], err, out)
	}
	return root, nil
}

// programWithLibraries reads a program and returns this machine's shared
// libraries it loads (as ldd lists them), as image files, and the program.
func programWithLibraries(ctx context.Context, program string) ([]File, []byte, error) {
	data, err := os.ReadFile(program)
	if err != nil {
		return nil, nil, err
	}
	out, err := exec.CommandContext(ctx, "ldd", program).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	if m := lddNotFound.FindStringSubmatch(string(out)); m != nil {
		return nil, nil, fmt.Errorf("%s needs %s, which this machine lacks (apt-get install the package that holds it)", filepath.Base(program), m[1])
	}
	var libs []string
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		libs = append(libs, m[1])
	}
	files, err := HostFiles(nil, libs)
	return files, data, err
}
