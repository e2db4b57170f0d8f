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
	coordinationapiv1 "k8s.io/api/coordination/v1"
	"k8s.io/component-helpers/apimachinery/lease"
)

// HoldsIdentityLease registers stop as the stop of a loop whose ownership of work
// rests on this server's identity lease being live, as the feature lifecycle
// controller's leadership of Features does. On shutdown, stop is called, and
// must return only once the loop has stopped, before the lease is deleted:
// other servers take the work over as soon as the lease is gone, and
// pre-shutdown hooks run in no set order, so a hook of the loop's own could run
// after the deletion.
func (s *Server) HoldsIdentityLease(stop func()) {
	s.identityLeaseHolders = append(s.identityLeaseHolders, stop)
}

// stopIdentityLeaseHolders stops the loops of HoldsIdentityLease, in the
// order they were registered.
func (s *Server) stopIdentityLeaseHolders() {
	for _, stop := range s.identityLeaseHolders {
		stop()
	}
}

// AnnotateIdentityLease adds an annotation that every renewal of this server's
// identity lease writes, as the feature lifecycle controller does with the
// versions it elects leaders by. Call it before the server starts.
func (s *Server) AnnotateIdentityLease(key, value string) {
	if s.identityLeaseAnnotations == nil {
		s.identityLeaseAnnotations = map[string]string{}
	}
	s.identityLeaseAnnotations[key] = value
}

// withIdentityLeaseAnnotations adds the annotations of AnnotateIdentityLease
// to each renewal that f makes.
func (s *Server) withIdentityLeaseAnnotations(f lease.ProcessLeaseFunc) lease.ProcessLeaseFunc {
	return func(l *coordinationapiv1.Lease) error {
		if err := f(l); err != nil {
			return err
		}
		if len(s.identityLeaseAnnotations) > 0 && l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		for k, v := range s.identityLeaseAnnotations {
			l.Annotations[k] = v
		}
		return nil
	}
}
