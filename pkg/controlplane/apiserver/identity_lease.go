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
