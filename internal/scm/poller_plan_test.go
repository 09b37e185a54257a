package scm

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/test/benchcost"
)

// The Poller plans at every wake-up (each registration, hint and call) over every followed item.
// These check its plans against the straightforward way of making them (every candidate in a
// slice, all of them sorted: how it planned until 2026-12-07), and measure both.

type idleSource struct{}

func (idleSource) Refresh(context.Context, []RefreshRequest) ([]RefreshResult, error) {
	return nil, nil
}
func (idleSource) BatchSize() int { return 100 }

var planEpoch = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// plannedPoller follows n items in two repositories, one of them with webhooks flowing: most
// read within the last minute (deadlines spread over the next one), some overdue, some hinted,
// some with a recheck pending, some never read; every time distinct, so that the order of a
// plan is fully determined.
func plannedPoller(rng *rand.Rand, n int) *Poller {
	p := NewPoller(idleSource{}, PollerOptions{MaxAge: time.Minute})
	repos := []Repo{{Owner: "acme", Name: "widgets"}, {Owner: "Acme", Name: "Gadgets"}}
	p.webhooks[webhookKey{namespace: "team", repo: repos[1].Key()}] = planEpoch.Add(-time.Minute)
	ns := func() time.Duration { return time.Duration(rng.Int63n(int64(time.Second))) }
	for i := 0; i < n; i++ {
		repo := repos[i%2]
		it := &pollItem{key: types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("s%05d", i)},
			watch: Watch{Repo: repo, Number: i + 1}, repoKey: repo.Key()}
		switch r := rng.Intn(100); {
		case r < 3: // never read
			it.needFull, it.registered = true, planEpoch.Add(-time.Duration(rng.Intn(5))*time.Second-ns())
		default:
			it.observed = true
			it.obs.CheckedAt = planEpoch.Add(-time.Duration(rng.Intn(600))*time.Second - ns())
			it.detailAt = it.obs.CheckedAt
			switch {
			case r < 6:
				it.fullDue = planEpoch.Add(-ns())
			case r < 8:
				it.probeDue = planEpoch.Add(time.Duration(rng.Intn(3))*time.Second + ns())
			case r < 10:
				it.recheckAt = planEpoch.Add(-ns())
			}
		}
		p.items[it.key] = it
	}
	return p
}

// referencePlan plans as the Poller did before its scratch space: every candidate appended to
// a slice, the ones not due all sorted, and the repository key of every item computed again.
func referencePlan(p *Poller, now time.Time) ([]types.NamespacedName, time.Time) {
	var next time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	type candidate struct {
		it       *pollItem
		deadline time.Time
	}
	deadline := func(it *pollItem) time.Time {
		it.repoKey = it.watch.Repo.Key()
		return p.deadlineLocked(it, now)
	}
	var due, rest []candidate
	hintReadyAt := p.hintReadyAtLocked(now)
	hintReady := !now.Before(hintReadyAt)
	for _, it := range p.items {
		d := deadline(it)
		c := candidate{it: it, deadline: d}
		switch p.dueLocked(it, now, d, hintReady) {
		case dueDeadline, dueHint:
			due = append(due, c)
		case dueHintBudget:
			soon(hintReadyAt)
			rest = append(rest, c)
		default:
			soon(d)
			soon(it.fullDue)
			soon(it.probeDue)
			rest = append(rest, c)
		}
	}
	if len(due) == 0 {
		return nil, next
	}
	sort.Slice(rest, func(i, j int) bool {
		return padsBefore(cand(rest[i]), cand(rest[j]), now)
	})
	b := p.opts.BatchSize
	want := ((len(due) + b - 1) / b) * b
	for _, c := range rest {
		if len(due) >= want {
			break
		}
		due = append(due, c)
	}
	sort.Slice(due, func(i, j int) bool { return due[i].deadline.Before(due[j].deadline) })
	keys := make([]types.NamespacedName, len(due))
	for i, c := range due {
		keys[i] = c.it.key
	}
	return keys, now // due now (see planLocked)
}

func planKeys(p *Poller, now time.Time) ([]types.NamespacedName, time.Time) {
	pl, next := p.planLocked(now)
	if pl == nil {
		return nil, next
	}
	keys := make([]types.NamespacedName, len(pl.items))
	for i, it := range pl.items {
		keys[i] = it.key
	}
	return keys, next
}

func TestPlanMatchesTheFullSort(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < 200; round++ {
		n := 1 + rng.Intn(700)
		p := plannedPoller(rng, n)
		if round%3 == 0 {
			// The hint budget is spent: hinted items wait, and pad.
			p.hintTAT = planEpoch.Add(time.Hour)
		}
		if round%5 == 0 {
			p.firstReadAt = planEpoch.Add(-time.Second)
		}
		for _, now := range []time.Time{planEpoch, planEpoch.Add(-9 * time.Minute), planEpoch.Add(30 * time.Second)} {
			want, wantNext := referencePlan(p, now)
			got, gotNext := planKeys(p, now)
			// Items of equal deadline (new items waiting for the same call) may come in any
			// order, and either of two at the padding's edge: the plans must agree on the
			// deadlines they read, in order, and name no item twice.
			if !slices.Equal(p.deadlines(got, now), p.deadlines(want, now)) || !gotNext.Equal(wantNext) || len(got) != len(unique(got)) {
				t.Fatalf("round %d, %d items, at %s: planned %d items (next %s), the full sort %d (next %s)\n got %v\nwant %v",
					round, n, now.Sub(planEpoch), len(got), gotNext, len(want), wantNext, got, want)
			}
			if len(want) > 0 && len(want)%p.opts.BatchSize != 0 && len(want) < len(p.items) {
				t.Fatalf("round %d: %d items planned: calls not padded to a whole batch", round, len(want))
			}
		}
	}
}

func (p *Poller) deadlines(keys []types.NamespacedName, now time.Time) []time.Time {
	out := make([]time.Time, len(keys))
	for i, k := range keys {
		out[i] = p.deadlineLocked(p.items[k], now)
	}
	return out
}

func unique(keys []types.NamespacedName) map[types.NamespacedName]bool {
	out := map[types.NamespacedName]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

func TestKeepBest(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for round := 0; round < 500; round++ {
		n, k := rng.Intn(300), rng.Intn(120)
		all := make([]cand, n)
		var h []cand
		for i := range all {
			all[i] = cand{it: &pollItem{}, deadline: planEpoch.Add(time.Duration(rng.Int63n(int64(time.Hour))))}
			if rng.Intn(10) == 0 {
				all[i].it.recheckAt = planEpoch.Add(-time.Second)
			}
			h = keepBest(h, all[i], k, planEpoch)
		}
		order := func(a, b cand) int {
			if padsBefore(a, b, planEpoch) {
				return -1
			}
			if padsBefore(b, a, planEpoch) {
				return 1
			}
			return 0
		}
		slices.SortFunc(all, order)
		slices.SortFunc(h, order)
		want := all[:min(k, n)]
		if len(h) != len(want) {
			t.Fatalf("round %d: kept %d of %d, want %d", round, len(h), n, len(want))
		}
		for i := range want {
			if order(h[i], want[i]) != 0 {
				t.Fatalf("round %d: kept[%d] = %v, want %v", round, i, h[i].deadline, want[i].deadline)
			}
		}
	}
}

// BenchmarkPollerPlan measures one plan of a fan-out in progress (n items followed, a new one
// just registered) the Poller's way and the full sort's way, in the same run. Run it with
// `make bench-poller-plan`.
func BenchmarkPollerPlan(b *testing.B) {
	fmt.Fprintf(os.Stdout, "\nPoller planning: n items followed, one just registered (a fan-out in progress)\n")
	fmt.Fprintf(os.Stdout, "%8s  %-12s %12s %12s %10s   %s\n", "n", "way", "ns/plan", "B/plan", "allocs", "vs full sort (time, bytes)")
	for _, n := range []int{1000, 10000, 50000} {
		p := plannedPoller(rand.New(rand.NewSource(int64(n))), n)
		// Every item read recently (deadlines spread over the next minute), and a registration.
		for _, it := range p.items {
			it.observed, it.needFull, it.fullDue, it.probeDue, it.recheckAt = true, false, time.Time{}, time.Time{}, time.Time{}
			it.obs.CheckedAt = planEpoch.Add(-time.Duration(rand.Int63n(int64(50 * time.Second))))
		}
		fresh := &pollItem{key: types.NamespacedName{Namespace: "team", Name: "new"}, watch: Watch{Repo: Repo{Owner: "acme", Name: "widgets"}},
			needFull: true, registered: planEpoch}
		fresh.repoKey = fresh.watch.Repo.Key()
		p.items[fresh.key] = fresh
		ref := measurePlans(b, func() int {
			keys, _ := referencePlan(p, planEpoch)
			return len(keys)
		})
		got := measurePlans(b, func() int {
			pl, _ := p.planLocked(planEpoch)
			if pl == nil {
				return 0
			}
			return len(pl.items)
		})
		for _, r := range []struct {
			way string
			res benchcost.Cost
		}{{"full sort", ref}, {"Poller", got}} {
			fmt.Fprintf(os.Stdout, "%8d  %-12s %12.0f %12.0f %10.1f   %.2f×, %.3f×\n", n, r.way, r.res.NS, r.res.Bytes, r.res.Allocs,
				r.res.NS/ref.NS, r.res.Bytes/max(ref.Bytes, 1))
		}
		b.ReportMetric(got.NS/ref.NS, fmt.Sprintf("time-ratio-%d", n))
	}
}

// measurePlans runs plan for at least half a second and returns its cost per plan; every plan
// must be one whole batch.
func measurePlans(b *testing.B, plan func() int) benchcost.Cost {
	return benchcost.Measure(10, 500*time.Millisecond, func() {
		if got := plan(); got != 100 {
			b.Fatalf("planned %d items, want one batch of 100", got)
		}
	})
}

// A registration wakes the Poller's loop only when the new item is due before the loop would
// wake anyway: during a fan-out, the registrations that wait for the next call of first reads
// cost no plan.
func TestRegisterWakesOnlyForEarlierWork(t *testing.T) {
	clock := scmtest.NewClock()
	clock.Set(planEpoch)
	p := NewPoller(idleSource{}, PollerOptions{MaxAge: time.Minute, HintDelay: 2 * time.Second, Clock: clock})
	woken := func() bool {
		select {
		case <-p.wake:
			return true
		default:
			return false
		}
	}
	repo := Repo{Owner: "acme", Name: "widgets"}
	p.Register(types.NamespacedName{Namespace: "team", Name: "a"}, Watch{Repo: repo, Head: Head{Branch: "a"}})
	if !woken() {
		t.Fatal("the first registration did not wake the loop")
	}
	next, err := p.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// idleSource answers nothing: "a" is not read, and stays due HintDelay after this call.
	if want := planEpoch.Add(2 * time.Second); !next.Equal(want) {
		t.Fatalf("next call at %s, want %s", next, want)
	}
	clock.Set(planEpoch.Add(500 * time.Millisecond))
	p.Register(types.NamespacedName{Namespace: "team", Name: "b"}, Watch{Repo: repo, Head: Head{Branch: "b"}})
	if woken() {
		t.Fatal("a registration due with the next call woke the loop")
	}
	// Something due sooner than the loop's wake-up still wakes it.
	p.wakeAt = planEpoch.Add(time.Hour)
	p.firstReadAt = time.Time{}
	p.Register(types.NamespacedName{Namespace: "team", Name: "c"}, Watch{Repo: repo, Head: Head{Branch: "c"}})
	if !woken() {
		t.Fatal("a registration due before the loop's wake-up did not wake it")
	}
}
