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

package featurelifecycle

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// liveAPIServers returns the identities of the kube-apiservers whose identity
// lease was renewed within liveness before now. Upstream's identity leases last
// an hour and are collected hourly, so the lease's existence says little: a
// server that stopped renewing a few renew periods ago is gone. The same rule
// holds for this server: one whose own lease is stale, or already deleted on
// shutdown, is a leader to no one else, so it must not lead either.
func liveAPIServers(leases []*coordinationv1.Lease, now time.Time, liveness time.Duration) []string {
	var live []string
	for _, lease := range leases {
		if lease.Spec.RenewTime == nil || now.Sub(lease.Spec.RenewTime.Time) > liveness {
			continue
		}
		live = append(live, lease.Name)
	}
	slices.Sort(live)
	return live
}

// LeaderOf returns the member that leads the named Feature: the highest
// random weight of (feature, member) (rendezvous hashing). Every server that
// sees the same members picks the same leader without talking to the others,
// features spread evenly, and a member leaving moves only its own features.
func LeaderOf(feature string, members []string) string {
	var leader string
	var best uint64
	for _, m := range members {
		if w := weight(feature, m); leader == "" || w > best || (w == best && m < leader) {
			leader, best = m, w
		}
	}
	return leader
}

func weight(feature, member string) uint64 {
	h := sha256.New()
	h.Write([]byte(feature))
	h.Write([]byte{0})
	h.Write([]byte(member))
	return binary.BigEndian.Uint64(h.Sum(nil))
}
