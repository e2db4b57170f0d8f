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
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func lease(name string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func TestLiveAPIServers(t *testing.T) {
	now := time.Now()
	leases := []*coordinationv1.Lease{
		lease("apiserver-b", now.Add(-5*time.Second)),
		lease("apiserver-c", now.Add(-31*time.Second)), // stopped renewing
		lease("apiserver-a", now.Add(-time.Hour)),      // self, lease not renewed yet
		{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-d"}},
	}
	got := fmt.Sprint(liveAPIServers(leases, "apiserver-a", now, 30*time.Second))
	if want := "[apiserver-a apiserver-b]"; got != want {
		t.Errorf("live = %s, want %s", got, want)
	}
}

func TestLeaderOfSpreadsAndMovesOnlyTheDepartedMembersFeatures(t *testing.T) {
	members := []string{"apiserver-1", "apiserver-2", "apiserver-3"}
	features := make([]string, 600)
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
	for _, m := range members {
		// 200 each on average; a binomial spread stays well within 150..250.
		if count[m] < 150 || count[m] > 250 {
			t.Errorf("%s leads %d of 600 features, want about 200 (%v)", m, count[m], count)
		}
	}
	for _, f := range features {
		after := LeaderOf(f, []string{"apiserver-1", "apiserver-3"})
		if leaders[f] != "apiserver-2" && after != leaders[f] {
			t.Errorf("%s moved from %s to %s although its leader stayed", f, leaders[f], after)
		}
		if after == "apiserver-2" {
			t.Errorf("%s is led by the departed member", f)
		}
	}
	if LeaderOf("feature0", nil) != "" {
		t.Error("no members, want no leader")
	}
}
