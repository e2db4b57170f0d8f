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

// +k8s:deepcopy-gen=package,register

// Package v1alpha1 contains alpha objects of the Vertical Pod Autoscaler: the
// slices that hold the per-node recommendations of VerticalPodAutoscalers with
// scope node (feature gate DaemonSetNodeScope).
// +groupName=autoscaling.k8s.io
// +kubebuilder:object:generate=true
package v1alpha1
