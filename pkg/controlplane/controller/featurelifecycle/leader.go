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
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// The identity lease of a kube-apiserver that runs the server flow carries its
// versions (AnnotateIdentityLease), so that leadership can follow them.
const (
	BinaryVersionAnnotation    = "apiserver.kubernetes.io/binary-version"
	EmulationVersionAnnotation = "apiserver.kubernetes.io/emulation-version"
)

// member is a live kube-apiserver and the versions its identity lease carries
// (nil when it carries none).
type member struct {
	name              string
	binary, emulation *version.Version
}

func (m member) String() string {
	return fmt.Sprintf("%s@%v/%v", m.name, m.emulation, m.binary)
}

// liveAPIServers returns the kube-apiservers whose identity lease this server
// saw renewed within liveness before now, by name (ages measures on this
// server's clock, not on the renewing server's). Upstream's identity leases last
// an hour and are collected hourly, so the lease's existence says little: a
// server that stopped renewing a few renew periods ago is gone. The same rule
// holds for this server: one whose own lease is stale, or already deleted on
// shutdown, is a leader to no one else, so it must not lead either.
func liveAPIServers(leases []*coordinationv1.Lease, ages *localAges, self string, now time.Time, liveness time.Duration) []member {
	var live []member
	for _, lease := range leases {
		if !renewedWithin(lease, ages, now, liveness) {
			continue
		}
		// This server's own lease carries its own clock's stamp: one that
		// starts and finds it stale has not renewed it.
		if lease.Name == self && now.Sub(lease.Spec.RenewTime.Time) > liveness {
			continue
		}
		m := member{name: lease.Name}
		binary, errB := version.Parse(lease.Annotations[BinaryVersionAnnotation])
		emulation, errE := version.Parse(lease.Annotations[EmulationVersionAnnotation])
		if errB == nil && errE == nil {
			m.binary, m.emulation = binary, emulation
		}
		live = append(live, m)
	}
	slices.SortFunc(live, func(a, b member) int { return cmp.Compare(a.name, b.name) })
	return live
}

// renewedWithin says whether this server saw the lease renewed within d before
// now: its renewTime changed, or was first seen, no longer than d ago.
func renewedWithin(lease *coordinationv1.Lease, ages *localAges, now time.Time, d time.Duration) bool {
	if lease.Spec.RenewTime == nil {
		return false
	}
	key := "lease/" + lease.Namespace + "/" + lease.Name + "/" + string(lease.UID)
	return ages.age(key, stamp(lease.Spec.RenewTime.Time), now) <= d
}

func names(members []member) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.name
	}
	return out
}

// candidates returns the members that may lead Features: among those whose
// lease carries their versions (the others do not run the server flow), the
// ones at the oldest emulation version, then the oldest binary version, as
// coordinated leader election (KEP-4355) picks its leaders. During a rolling
// upgrade or downgrade the Features stay with the servers of the old version
// until the last of them leaves, and then move once: leadership moving back and
// forth between old and new servers would queue Upgrade and Downgrade tasks in
// turn.
func candidates(members []member) []string {
	var oldest []member
	for _, m := range members {
		if m.binary == nil {
			continue
		}
		if len(oldest) > 0 {
			c := compareVersions(m.emulation, oldest[0].emulation)
			if c == 0 {
				c = compareVersions(m.binary, oldest[0].binary)
			}
			if c > 0 {
				continue
			}
			if c < 0 {
				oldest = oldest[:0]
			}
		}
		oldest = append(oldest, m)
	}
	return names(oldest)
}

func compareVersions(a, b *version.Version) int {
	switch {
	case a.LessThan(b):
		return -1
	case a.GreaterThan(b):
		return 1
	}
	return 0
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
