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

package apiserver

import (
	"reflect"
	"testing"

	coordinationapiv1 "k8s.io/api/coordination/v1"
)

func TestIdentityLeaseHoldersStopInOrder(t *testing.T) {
	var s Server
	var stopped []string
	s.HoldsIdentityLease(func() { stopped = append(stopped, "first") })
	s.HoldsIdentityLease(func() { stopped = append(stopped, "second") })
	s.stopIdentityLeaseHolders()
	if want := []string{"first", "second"}; !reflect.DeepEqual(stopped, want) {
		t.Errorf("stopped %v, want %v", stopped, want)
	}
}

func TestIdentityLeaseRenewalsCarryTheAnnotations(t *testing.T) {
	var plain Server
	l := &coordinationapiv1.Lease{}
	if err := plain.withIdentityLeaseAnnotations(labelAPIServerHeartbeatFunc(KubeAPIServer, ""))(l); err != nil {
		t.Fatal(err)
	}
	if len(l.Annotations) != 0 || l.Labels[IdentityLeaseComponentLabelKey] != KubeAPIServer {
		t.Errorf("with no annotations registered: labels %v, annotations %v; want the identity label and no annotation", l.Labels, l.Annotations)
	}

	var s Server
	s.AnnotateIdentityLease("example.com/version", "1.36.3")
	l = &coordinationapiv1.Lease{}
	if err := s.withIdentityLeaseAnnotations(labelAPIServerHeartbeatFunc(KubeAPIServer, ""))(l); err != nil {
		t.Fatal(err)
	}
	if l.Annotations["example.com/version"] != "1.36.3" || l.Labels[IdentityLeaseComponentLabelKey] != KubeAPIServer {
		t.Errorf("labels %v, annotations %v; want the identity label and example.com/version=1.36.3", l.Labels, l.Annotations)
	}
}
