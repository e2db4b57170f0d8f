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

// Package kind runs kind clusters of the fork (and of upstream's release, for the
// parity runs) on the project's own Docker engine: the engine, kind's base image,
// the node image of a release tarball, the clusters, their e2e images and the
// image pull gate's slow registry, all under _output/kind (docs/kind.md). The
// engine runs with the local cluster's process handling (package cluster).
package kind
