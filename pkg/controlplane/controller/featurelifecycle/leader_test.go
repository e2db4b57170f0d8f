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
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lease(name string, renewed time.Time) *coordinationv1.Lease {
	return versionedLease(name, renewed, "1.36.3", "1.36")
}

// versionedLease is the identity lease of a kube-apiserver at the given binary
// and emulation versions, as AnnotateIdentityLease writes them.
func versionedLease(name string, renewed time.Time, binary, emulation string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: versionAnnotations(binary, emulation)},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// seenAtRenewal are the sightings of a server whose clock agrees with the
// servers that renewed the leases, and that saw each renewal as it happened.
func seenAtRenewal(leases []*coordinationv1.Lease) *localAges {
	ages := newLocalAges()
	for _, lease := range leases {
		if lease.Spec.RenewTime != nil {
			renewedWithin(lease, ages, lease.Spec.RenewTime.Time, 0)
		}
	}
	return ages
}

// Liveness is measured on this server's clock: a server whose clock runs ahead
// of its peers' by more than the liveness period still sees them live while
// they renew, and dead once they stop; the peers' stamps decide nothing.
func TestLivenessDoesNotDependOnClocksAgreeing(t *testing.T) {
	const liveness = 30 * time.Second
	for _, skew := range []time.Duration{-time.Hour, -2 * liveness, 0, 2 * liveness, time.Hour} {
		ages := newLocalAges()
		// The peers' clock reads peer; this server's reads peer+skew.
		peer := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
		renewed := peer
		for range 10 {
			peer = peer.Add(10 * time.Second)
			renewed = peer // apiserver-b renews every 10 s
			leases := []*coordinationv1.Lease{lease("apiserver-b", renewed)}
			if got := names(liveAPIServers(leases, ages, "", peer.Add(skew), liveness)); !slices.Equal(got, []string{"apiserver-b"}) {
				t.Fatalf("skew %v: a peer renewing every 10 s is live %v, want [apiserver-b]", skew, got)
			}
		}
		// It stops renewing: dead once this server has seen no renewal for
		// the liveness period, on its own clock.
		leases := []*coordinationv1.Lease{lease("apiserver-b", renewed)}
		if got := names(liveAPIServers(leases, ages, "", peer.Add(skew+liveness), liveness)); len(got) != 1 {
			t.Errorf("skew %v: live %v at the liveness period, want the peer", skew, got)
		}
		if got := names(liveAPIServers(leases, ages, "", peer.Add(skew+liveness+time.Second), liveness)); len(got) != 0 {
			t.Errorf("skew %v: live %v after the liveness period, want none", skew, got)
		}
	}
}

func versionAnnotations(binary, emulation string) map[string]string {
	return map[string]string{BinaryVersionAnnotation: binary, EmulationVersionAnnotation: emulation}
}

func TestLiveAPIServers(t *testing.T) {
	now := time.Now()
	leases := []*coordinationv1.Lease{
		lease("apiserver-b", now.Add(-5*time.Second)),
		lease("apiserver-c", now.Add(-31*time.Second)), // stopped renewing
		lease("apiserver-a", now.Add(-2*time.Second)),
		{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-d"}},
	}
	got := fmt.Sprint(names(liveAPIServers(leases, seenAtRenewal(leases), "", now, 30*time.Second)))
	if want := "[apiserver-a apiserver-b]"; got != want {
		t.Errorf("live = %s, want %s", got, want)
	}
}

// A server whose own lease is stale (it could not renew) or gone (deleted on
// shutdown) is dead to the others, which take its Features over: it must not
// count itself live and lead them too.
func TestAServerWithoutALiveLeaseLeadsNothing(t *testing.T) {
	now := time.Now()
	for name, own := range map[string][]*coordinationv1.Lease{
		"stale":   {lease("apiserver-a", now.Add(-time.Minute))},
		"deleted": nil,
	} {
		leases := append([]*coordinationv1.Lease{lease("apiserver-b", now)}, own...)
		members := candidates(liveAPIServers(leases, seenAtRenewal(leases), "", now, 30*time.Second))
		for i := range 100 {
			if leader := LeaderOf(fmt.Sprintf("feature%d", i), members); leader != "apiserver-b" {
				t.Fatalf("own lease %s: feature%d led by %s among %v, want apiserver-b, the only live lease", name, i, leader, members)
			}
		}
	}
}

func TestLeaderOfSpreadsAndMovesOnlyTheDepartedMembersFeatures(t *testing.T) {
	members := []string{"apiserver-1", "apiserver-2", "apiserver-3"}
	features := make([]string, 1000)
	for i := range features {
		features[i] = fmt.Sprintf("feature%d", i)
	}
	leaders := map[string]string{}
	count := map[string]int{}
	for _, f := range features {
		leaders[f] = LeaderOf(f, members)
		count[leaders[f]]++
		// The order the members are listed in does not matter.
		if other := LeaderOf(f, []string{members[2], members[0], members[1]}); other != leaders[f] {
			t.Fatalf("%s: leader %s or %s depending on order", f, leaders[f], other)
		}
	}
	t.Logf("1,000 features over 3 members: %v", count)
	for _, m := range members {
		// 333 each on average, standard deviation 15: four of them either side.
		if count[m] < 273 || count[m] > 393 {
			t.Errorf("%s leads %d of 1,000 features, want about 333 (%v)", m, count[m], count)
		}
	}

	// A member leaving moves only its own features, spread over the others.
	moved := map[string]int{}
	for _, f := range features {
		after := LeaderOf(f, []string{"apiserver-1", "apiserver-3"})
		if leaders[f] != "apiserver-2" && after != leaders[f] {
			t.Errorf("%s moved from %s to %s although its leader stayed", f, leaders[f], after)
		}
		if after == "apiserver-2" {
			t.Errorf("%s is led by the departed member", f)
		}
		if leaders[f] == "apiserver-2" {
			moved[after]++
		}
	}
	t.Logf("apiserver-2 left: its %d features went to %v", count["apiserver-2"], moved)

	// A member joining takes features only from the others, about a quarter.
	joined := 0
	for _, f := range features {
		after := LeaderOf(f, append([]string{"apiserver-4"}, members...))
		if after != leaders[f] && after != "apiserver-4" {
			t.Errorf("%s moved from %s to %s, not to the member that joined", f, leaders[f], after)
		}
		if after == "apiserver-4" {
			joined++
		}
	}
	t.Logf("apiserver-4 joined: it took %d of 1,000 features", joined)
	if joined < 190 || joined > 310 {
		t.Errorf("the member that joined took %d of 1,000 features, want about 250", joined)
	}
	if LeaderOf("feature0", nil) != "" {
		t.Error("no members, want no leader")
	}
}

// During a rolling upgrade the Features stay with the servers of the old
// version until the last of them leaves, then move once; a server whose lease
// carries no versions does not run the server flow and leads nothing.
func TestLeadershipStaysWithTheOldestVersions(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		leases []*coordinationv1.Lease
		want   []string
	}{{
		name: "upgrade under way",
		leases: []*coordinationv1.Lease{
			versionedLease("apiserver-a", now, "1.37.0", "1.37"),
			versionedLease("apiserver-b", now, "1.36.3", "1.36"),
			versionedLease("apiserver-c", now, "1.36.3", "1.36"),
		},
		want: []string{"apiserver-b", "apiserver-c"},
	}, {
		name: "new binaries still emulating the old version",
		leases: []*coordinationv1.Lease{
			versionedLease("apiserver-a", now, "1.37.0", "1.36"),
			versionedLease("apiserver-b", now, "1.37.0", "1.36"),
			versionedLease("apiserver-c", now, "1.36.3", "1.36"),
		},
		want: []string{"apiserver-c"},
	}, {
		name: "emulation version first",
		leases: []*coordinationv1.Lease{
			versionedLease("apiserver-a", now, "1.37.0", "1.36"),
			versionedLease("apiserver-b", now, "1.36.3", "1.36"),
			versionedLease("apiserver-c", now, "1.37.0", "1.37"),
		},
		want: []string{"apiserver-b"},
	}, {
		name: "the last old server left",
		leases: []*coordinationv1.Lease{
			versionedLease("apiserver-a", now, "1.37.0", "1.37"),
			versionedLease("apiserver-b", now, "1.37.0", "1.37"),
			versionedLease("apiserver-c", now.Add(-time.Minute), "1.36.3", "1.36"),
		},
		want: []string{"apiserver-a", "apiserver-b"},
	}, {
		name: "a lease without versions",
		leases: []*coordinationv1.Lease{
			versionedLease("apiserver-a", now, "1.36.3", "1.36"),
			{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-b"}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now}}},
			versionedLease("apiserver-c", now, "not-a-version", "1.35"),
		},
		want: []string{"apiserver-a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			members := candidates(liveAPIServers(tc.leases, seenAtRenewal(tc.leases), "", now, 30*time.Second))
			if fmt.Sprint(members) != fmt.Sprint(tc.want) {
				t.Fatalf("candidates = %v, want %v", members, tc.want)
			}
			for i := range 200 {
				if leader := LeaderOf(fmt.Sprintf("feature%d", i), members); !slices.Contains(tc.want, leader) {
					t.Fatalf("feature%d led by %s, want one of %v", i, leader, tc.want)
				}
			}
		})
	}
}
