package scm_test

// The SCM economy benchmark: 1000 open pull requests on the fake GitHub, one simulated hour of
// activity (pushes, CI runs, reviews, review threads, merges), the clock compressed. It measures,
// in the same run and on the same activity:
//
//   - naive: a per-PR REST poll every minute (the pull, its check runs, its combined status and
//     its reviews: what a `gh pr view` / `gh pr checks` loop does), without ETags;
//   - polling: Shepherd's Poller, no webhooks, poll interval 1m;
//   - webhooks: the Poller fed by the webhook handler (signed deliveries from the fake).
//
// Run it with:
//
//	go test ./internal/scm/ -run '^$' -bench BenchmarkSCMEconomy -benchtime 1x -timeout 30m
//
// Flags: -scm.prs (default 1000), -scm.minutes (default 60). A full run takes about 4½ minutes
// on 2 cores, most of it serving the naive poll's 240,000 requests.

import (
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	gh "github.com/google/go-github/v88/github"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/github"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

var (
	benchPRs     = flag.Int("scm.prs", 1000, "open pull requests in the SCM economy benchmark")
	benchMinutes = flag.Int("scm.minutes", 60, "simulated minutes in the SCM economy benchmark")
)

// activity is one change to the world at a simulated second.
type activity struct {
	at   int // second
	kind string
	pr   int // index
	arg  string
}

// schedule draws a deterministic hour of activity: every PR sees on average ~0.45 changes:
// 30% get a push with a CI run (failing one time in five) finishing 3–8 minutes later, 10% a
// review, 5% a review thread, and three pull requests merge. Nothing happens in the last two
// minutes, so that every change has had the time to be observed when the hour ends.
func schedule(prs, total int) []activity {
	rng := rand.New(rand.NewSource(42))
	var out []activity
	scale := float64(total) / 3600
	seconds := total - 120
	for i := 0; i < int(0.30*float64(prs)*scale); i++ {
		at := rng.Intn(seconds)
		pr := rng.Intn(prs)
		out = append(out, activity{at: at, kind: "push", pr: pr})
		conclusion := "success"
		if rng.Intn(5) == 0 {
			conclusion = "failure"
		}
		if done := at + 180 + rng.Intn(300); done < seconds {
			out = append(out, activity{at: done, kind: "ci", pr: pr, arg: conclusion})
		}
	}
	states := []string{"APPROVED", "CHANGES_REQUESTED", "COMMENTED"}
	for i := 0; i < int(0.10*float64(prs)*scale); i++ {
		out = append(out, activity{at: rng.Intn(seconds), kind: "review", pr: rng.Intn(prs), arg: states[rng.Intn(3)]})
	}
	for i := 0; i < int(0.05*float64(prs)*scale); i++ {
		out = append(out, activity{at: rng.Intn(seconds), kind: "thread", pr: rng.Intn(prs)})
	}
	for i := 0; i < 3; i++ {
		out = append(out, activity{at: (i + 1) * seconds / 4, kind: "merge", pr: prs - 1 - i})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

type economyResult struct {
	name          string
	rest, notMod  int
	gqlQueries    int
	gqlPoints     int
	webhooks      int
	maxAge        time.Duration
	latencyP50    time.Duration
	latencyP95    time.Duration
	latencyMax    time.Duration
	missedChanges int
}

func (r economyResult) counted() int { return r.rest + r.gqlPoints }

type ciRun struct {
	id  int64
	sha string
}

type world struct {
	fake   *fakegithub.Server
	clock  *scmtest.Clock
	nums   []int
	runs   map[int]ciRun // pr index → running CI check
	merged map[int]bool
}

const benchRepo = "acme/monorepo"

func newWorld(b *testing.B, prs int, hook http.Handler) *world {
	b.Helper()
	clock := scmtest.NewClock()
	fake, err := fakegithub.New(fakegithub.Options{Dir: b.TempDir(), Clock: clock.Now, WebhookHandler: hook, WebhookSecret: []byte("bench"),
		// Budgets large enough to measure the naive poll, which would exhaust GitHub's 5,000.
		CoreLimit: 10_000_000, GraphQLLimit: 10_000_000})
	if err != nil {
		b.Fatal(err)
	}
	if err := fake.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "shepherd")
	if _, err := fake.CreateRepo(benchRepo, "main", nil); err != nil {
		b.Fatal(err)
	}
	if err := fake.SetProtection(benchRepo, fakegithub.Protection{RequiredChecks: []string{"build"}, RequiredApprovals: 1}); err != nil {
		b.Fatal(err)
	}
	nums, err := fake.BulkOpenPullRequests(benchRepo, "agent", prs)
	if err != nil {
		b.Fatal(err)
	}
	fake.ResetStats()
	return &world{fake: fake, clock: clock, nums: nums, runs: map[int]ciRun{}, merged: map[int]bool{}}
}

// apply makes one change through the fake's Go API (the world changing, not API requests). It
// reports whether the change is visible on the pull request (a CI run of a head that has moved
// on is not).
func (w *world) apply(b *testing.B, a activity) bool {
	n := w.nums[a.pr]
	if w.merged[a.pr] {
		return false
	}
	visible := true
	var err error
	switch a.kind {
	case "push":
		var info fakegithub.PullRequestInfo
		info, err = w.fake.PullRequest(benchRepo, n)
		if err == nil {
			var sha string
			sha, err = w.fake.Push(benchRepo, info.HeadRef, map[string]string{fmt.Sprintf("%s-%d.txt", info.HeadRef, a.at): "change\n"}, "change")
			if err == nil {
				var id int64
				id, err = w.fake.AddCheckRun(benchRepo, sha, fakegithub.CheckRun{Name: "build", Status: "in_progress",
					Log: "##[group]Run make test\n--- FAIL: TestThing\n##[error]Process completed with exit code 2.\n"})
				w.runs[a.pr] = ciRun{id: id, sha: sha}
			}
		}
	case "ci":
		run, ok := w.runs[a.pr]
		if !ok {
			return false
		}
		var info fakegithub.PullRequestInfo
		if info, err = w.fake.PullRequest(benchRepo, n); err == nil {
			visible = info.HeadSHA == run.sha
			err = w.fake.UpdateCheckRun(benchRepo, run.id, "completed", a.arg)
		}
		delete(w.runs, a.pr)
	case "review":
		_, err = w.fake.AddReview(benchRepo, n, "reviewer", a.arg, "review")
	case "thread":
		_, err = w.fake.AddReviewThread(benchRepo, n, "reviewer", "main.go", 10, "please rename")
	case "merge":
		_, err = w.fake.Merge(benchRepo, n, "squash")
		w.merged[a.pr] = true
	}
	if err != nil {
		b.Fatalf("%s on #%d: %v", a.kind, n, err)
	}
	return visible
}

func runNaive(b *testing.B, prs, seconds int, acts []activity) economyResult {
	w := newWorld(b, prs, nil)
	// A plain client: no ETag cache, no governor, as a naive poller has.
	u := w.fake.URL() + "/"
	rest, err := gh.NewClient(gh.WithAuthToken("tok"), gh.WithURLs(&u, &u), gh.WithTimeout(30*time.Second),
		gh.WithTransport(&http.Transport{MaxIdleConnsPerHost: 16}))
	if err != nil {
		b.Fatal(err)
	}
	start := w.clock.Now()
	last := make([]time.Time, prs)
	var maxAge time.Duration
	ai := 0
	for s := 0; s < seconds; s++ {
		w.clock.Set(start.Add(time.Duration(s) * time.Second))
		for ai < len(acts) && acts[ai].at == s {
			w.apply(b, acts[ai])
			ai++
		}
		if s%60 != 0 {
			continue
		}
		// Every minute, every pull request: four requests, eight at a time.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i, n := range w.nums {
			wg.Add(1)
			sem <- struct{}{}
			go func(i, n int) {
				defer wg.Done()
				defer func() { <-sem }()
				pr, _, err := rest.PullRequests.Get(ctx, "acme", "monorepo", n)
				if err != nil {
					b.Error(err)
					return
				}
				sha := pr.GetHead().GetSHA()
				if _, _, err := rest.Checks.ListCheckRunsForRef(ctx, "acme", "monorepo", sha, nil); err != nil {
					b.Error(err)
				}
				if _, _, err := rest.Repositories.GetCombinedStatus(ctx, "acme", "monorepo", sha, nil); err != nil {
					b.Error(err)
				}
				if _, _, err := rest.PullRequests.ListReviews(ctx, "acme", "monorepo", n, nil); err != nil {
					b.Error(err)
				}
			}(i, n)
		}
		wg.Wait()
		now := w.clock.Now()
		for i := range last {
			if !last[i].IsZero() {
				maxAge = max(maxAge, now.Sub(last[i]))
			}
			last[i] = now
		}
	}
	st := w.fake.Stats()
	// Without ETags the naive poll's staleness equals its interval.
	return economyResult{name: "naive REST poll", rest: st.RESTCounted, notMod: st.NotModified, gqlQueries: st.GraphQLQueries,
		gqlPoints: st.GraphQLPoints, maxAge: maxAge, latencyMax: maxAge}
}

// hookRelay lets the world be built before the handler that feeds the Poller exists.
type hookRelay struct{ h http.Handler }

func (r *hookRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.h == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	r.h.ServeHTTP(w, req)
}

func runShepherd(b *testing.B, name string, prs, seconds int, acts []activity, webhooks bool) economyResult {
	relay := &hookRelay{}
	var hook http.Handler
	if webhooks {
		hook = relay
	}
	w := newWorld(b, prs, hook)
	p, err := github.New(scm.Config{APIURL: w.fake.URL(), Token: []byte("tok"), Clock: w.clock})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	pending := map[types.NamespacedName]time.Time{}
	var latencies []time.Duration
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Minute, Clock: w.clock, OnChange: func(k types.NamespacedName) {
		mu.Lock()
		defer mu.Unlock()
		if t, ok := pending[k]; ok {
			latencies = append(latencies, w.clock.Now().Sub(t))
			delete(pending, k)
		}
	}})
	if webhooks {
		relay.h, err = webhook.NewHandler(webhook.Options{
			Secret: func(scm.Repo) ([]byte, bool) { return []byte("bench"), true },
			OnHint: poller.Notify,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	repo := scm.Repo{Owner: "acme", Name: "monorepo"}
	keys := make([]types.NamespacedName, prs)
	for i, n := range w.nums {
		keys[i] = types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("s%04d", i)}
		poller.Register(keys[i], scm.Watch{Repo: repo, Number: n})
	}
	start := w.clock.Now()
	// Warm up: the first full read of every pull request is not part of the hour.
	if _, err := poller.Poll(ctx); err != nil {
		b.Fatal(err)
	}
	w.fake.ResetStats()
	var maxAge time.Duration
	var next time.Time
	ai := 0
	for s := 0; s < seconds; s++ {
		w.clock.Set(start.Add(time.Duration(s) * time.Second))
		for ai < len(acts) && acts[ai].at == s {
			a := acts[ai]
			at := w.clock.Now()
			if w.apply(b, a) {
				mu.Lock()
				if _, ok := pending[keys[a.pr]]; !ok {
					pending[keys[a.pr]] = at
				}
				mu.Unlock()
			}
			ai++
		}
		if !w.clock.Now().Before(next) || webhooks {
			if next, err = poller.Poll(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if s%5 == 0 {
			now := w.clock.Now()
			for _, k := range keys {
				if obs, ok := poller.Get(k); ok {
					maxAge = max(maxAge, now.Sub(obs.CheckedAt))
				}
			}
		}
	}
	st := w.fake.Stats()
	res := economyResult{name: name, rest: st.RESTCounted, notMod: st.NotModified, gqlQueries: st.GraphQLQueries, gqlPoints: st.GraphQLPoints, maxAge: maxAge}
	for _, v := range st.Webhooks {
		res.webhooks += v
	}
	mu.Lock()
	res.missedChanges = len(pending)
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	if len(latencies) > 0 {
		res.latencyP50 = latencies[len(latencies)/2]
		res.latencyP95 = latencies[len(latencies)*95/100]
		res.latencyMax = latencies[len(latencies)-1]
	}
	mu.Unlock()
	return res
}

func BenchmarkSCMEconomy(b *testing.B) {
	prs, seconds := *benchPRs, *benchMinutes*60
	acts := schedule(prs, seconds)
	for i := 0; i < b.N; i++ {
		naive := runNaive(b, prs, seconds, acts)
		polling := runShepherd(b, "Shepherd, polling only", prs, seconds, acts, false)
		hooks := runShepherd(b, "Shepherd, webhooks", prs, seconds, acts, true)
		prHours := float64(prs) * float64(seconds) / 3600
		out := os.Stdout
		fmt.Fprintf(out, "\nSCM economy: %d open pull requests, %d simulated minutes, %d changes (poll interval 1m)\n", prs, seconds/60, len(acts))
		fmt.Fprintf(out, "%-24s %10s %8s %8s %8s %10s %11s %10s %9s %13s %9s\n", "", "REST", "304s", "GQL q", "GQL pts",
			"counted", "per PR-h", "vs naive", "max age", "change p50/95", "max lat")
		for _, r := range []economyResult{naive, polling, hooks} {
			per := float64(r.counted()) / prHours
			fmt.Fprintf(out, "%-24s %10d %8d %8d %8d %10d %11.3f %9.2f%% %9s %6s/%-6s %9s\n", r.name, r.rest, r.notMod, r.gqlQueries, r.gqlPoints,
				r.counted(), per, 100*float64(r.counted())/float64(naive.counted()), r.maxAge, r.latencyP50, r.latencyP95, r.latencyMax)
		}
		fmt.Fprintf(out, "webhook deliveries: %d; changes never observed: polling %d, webhooks %d\n\n", hooks.webhooks, polling.missedChanges, hooks.missedChanges)
		b.ReportMetric(float64(polling.counted())/prHours, "polling-counted/PR-h")
		b.ReportMetric(float64(hooks.counted())/prHours, "webhooks-counted/PR-h")
		b.ReportMetric(float64(naive.counted())/prHours, "naive-counted/PR-h")
		if per := float64(polling.counted()) / prHours; per > 5 || polling.maxAge > time.Minute {
			b.Errorf("polling only: %.3f counted requests per PR-hour (target ≤ 5), max age %s (target ≤ 1m)", per, polling.maxAge)
		}
		if per := float64(hooks.counted()) / prHours; per > 0.5 {
			b.Errorf("with webhooks: %.3f counted requests per PR-hour (target ≤ 0.5)", per)
		}
	}
}
