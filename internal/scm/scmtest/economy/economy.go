// Package economy is the world of the SCM economy benchmarks, shared by the SCM-level benchmark
// (internal/scm, BenchmarkSCMEconomy) and the one through the manager (test/bench/scmmanager,
// BenchmarkSCMEconomyManager): open pull requests on the fake GitHub, one deterministic hour of
// activity on them, and the two baselines measured on that activity: a naive per-PR REST poll and
// Shepherd's Poller on its own (polling only, or fed by webhooks).
package economy

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	gh "github.com/google/go-github/v88/github"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/github"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// Repo is the repository every pull request of the benchmark is on.
const Repo = "acme/monorepo"

// WebhookSecret signs the fake's deliveries.
var WebhookSecret = []byte("bench")

// Kinds of activity.
const (
	Push   = "push"   // a commit on the head, with a CI run starting on it
	CI     = "ci"     // the CI run of an earlier push concludes (Arg: success or failure)
	Review = "review" // a review (Arg: APPROVED, CHANGES_REQUESTED or COMMENTED)
	Thread = "thread" // a review thread
	Merge  = "merge"  // a human merges the pull request
)

// Activity is one change to the world at a simulated second.
type Activity struct {
	At   int // second
	Kind string
	PR   int // index
	Arg  string
}

// Schedule draws a deterministic hour of activity: every PR sees on average ~0.45 changes:
// 30% get a push with a CI run (failing one time in five) finishing 3–8 minutes later, 10% a
// review, 5% a review thread, and three pull requests merge. Nothing happens in the last two
// minutes, so that every change has had the time to be observed when the hour ends.
func Schedule(prs, total int) []Activity {
	rng := rand.New(rand.NewSource(42))
	var out []Activity
	scale := float64(total) / 3600
	seconds := total - 120
	for i := 0; i < int(0.30*float64(prs)*scale); i++ {
		at := rng.Intn(seconds)
		pr := rng.Intn(prs)
		out = append(out, Activity{At: at, Kind: Push, PR: pr})
		conclusion := "success"
		if rng.Intn(5) == 0 {
			conclusion = "failure"
		}
		if done := at + 180 + rng.Intn(300); done < seconds {
			out = append(out, Activity{At: done, Kind: CI, PR: pr, Arg: conclusion})
		}
	}
	states := []string{"APPROVED", "CHANGES_REQUESTED", "COMMENTED"}
	for i := 0; i < int(0.10*float64(prs)*scale); i++ {
		out = append(out, Activity{At: rng.Intn(seconds), Kind: Review, PR: rng.Intn(prs), Arg: states[rng.Intn(3)]})
	}
	for i := 0; i < int(0.05*float64(prs)*scale); i++ {
		out = append(out, Activity{At: rng.Intn(seconds), Kind: Thread, PR: rng.Intn(prs)})
	}
	for i := 0; i < 3; i++ {
		out = append(out, Activity{At: (i + 1) * seconds / 4, Kind: Merge, PR: prs - 1 - i})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Options shape a World.
type Options struct {
	// Dir holds the fake's repositories (a test temporary directory when empty).
	Dir string
	// Clock is the fake's time.
	Clock func() time.Time
	// WebhookHandler receives the fake's deliveries in-process; WebhookURL over HTTP.
	WebhookHandler http.Handler
	WebhookURL     string
	// BranchPrefix names the head branches <prefix>-NNNN (default "agent").
	BranchPrefix string
}

type ciRun struct {
	id  int64
	sha string
}

// World is the fake GitHub with the benchmark's repository and its open pull requests.
type World struct {
	Fake *fakegithub.Server
	// Nums are the pull request numbers, by index.
	Nums []int
	// Branches are their head branches, by index.
	Branches []string
	runs     map[int]ciRun // pr index → running CI check
	merged   map[int]bool
}

// NewWorld starts the fake with prs open pull requests on Repo, each with a head commit of its
// own, branch protection requiring the check "build" and one approval, and the token "tok". Its
// budgets are large enough to measure the naive poll, which would exhaust GitHub's 5,000 an hour.
func NewWorld(tb testing.TB, prs int, opts Options) *World {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	if opts.BranchPrefix == "" {
		opts.BranchPrefix = "agent"
	}
	fake, err := fakegithub.New(fakegithub.Options{Dir: opts.Dir, Clock: opts.Clock, WebhookHandler: opts.WebhookHandler, WebhookURL: opts.WebhookURL,
		WebhookSecret: WebhookSecret, CoreLimit: 10_000_000, GraphQLLimit: 10_000_000})
	if err != nil {
		tb.Fatal(err)
	}
	if err := fake.Start("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "shepherd")
	if _, err := fake.CreateRepo(Repo, "main", nil); err != nil {
		tb.Fatal(err)
	}
	if err := fake.SetProtection(Repo, fakegithub.Protection{RequiredChecks: []string{"build"}, RequiredApprovals: 1}); err != nil {
		tb.Fatal(err)
	}
	nums, err := fake.BulkOpenPullRequests(Repo, opts.BranchPrefix, prs)
	if err != nil {
		tb.Fatal(err)
	}
	branches := make([]string, prs)
	for i := range branches {
		branches[i] = fmt.Sprintf("%s-%04d", opts.BranchPrefix, i)
	}
	fake.ResetStats()
	return &World{Fake: fake, Nums: nums, Branches: branches, runs: map[int]ciRun{}, merged: map[int]bool{}}
}

// Applied is what one change did.
type Applied struct {
	// Visible is false for a change the pull request does not show: a CI run of a head that has
	// moved on, anything on a merged pull request.
	Visible bool
	// SHA is the new head of a push.
	SHA string
}

// Apply makes one change through the fake's Go API (the world changing, not API requests).
func (w *World) Apply(tb testing.TB, a Activity) Applied {
	n := w.Nums[a.PR]
	if w.merged[a.PR] {
		return Applied{}
	}
	res := Applied{Visible: true}
	var err error
	switch a.Kind {
	case Push:
		var info fakegithub.PullRequestInfo
		info, err = w.Fake.PullRequest(Repo, n)
		if err == nil {
			var sha string
			sha, err = w.Fake.Push(Repo, info.HeadRef, map[string]string{fmt.Sprintf("%s-%d.txt", info.HeadRef, a.At): "change\n"}, "change")
			if err == nil {
				var id int64
				id, err = w.Fake.AddCheckRun(Repo, sha, fakegithub.CheckRun{Name: "build", Status: "in_progress",
					Log: "##[group]Run make test\n--- FAIL: TestThing\n##[error]Process completed with exit code 2.\n"})
				w.runs[a.PR] = ciRun{id: id, sha: sha}
				res.SHA = sha
			}
		}
	case CI:
		run, ok := w.runs[a.PR]
		if !ok {
			return Applied{}
		}
		var info fakegithub.PullRequestInfo
		if info, err = w.Fake.PullRequest(Repo, n); err == nil {
			res.Visible = info.HeadSHA == run.sha
			err = w.Fake.UpdateCheckRun(Repo, run.id, "completed", a.Arg)
		}
		delete(w.runs, a.PR)
	case Review:
		_, err = w.Fake.AddReview(Repo, n, "reviewer", a.Arg, "review")
	case Thread:
		_, err = w.Fake.AddReviewThread(Repo, n, "reviewer", "main.go", 10, "please rename")
	case Merge:
		_, err = w.Fake.Merge(Repo, n, "squash")
		w.merged[a.PR] = true
	}
	if err != nil {
		tb.Fatalf("%s on #%d: %v", a.Kind, n, err)
	}
	return res
}

// Result is what one way of following the pull requests cost, and how fresh it kept them.
type Result struct {
	Name          string
	REST, NotMod  int
	GQLQueries    int
	GQLPoints     int
	Webhooks      int
	MaxAge        time.Duration
	LatencyP50    time.Duration
	LatencyP95    time.Duration
	LatencyMax    time.Duration
	MissedChanges int
	// ByKind are the sorted latencies by kind of change ("push/", "ci/failure", "review/APPROVED").
	ByKind map[string][]time.Duration
}

// Counted is what GitHub bills: counted REST requests and GraphQL points.
func (r Result) Counted() int { return r.REST + r.GQLPoints }

func fill(r *Result, st fakegithub.Stats) {
	r.REST, r.NotMod, r.GQLQueries, r.GQLPoints = st.RESTCounted, st.NotModified, st.GraphQLQueries, st.GraphQLPoints
	for _, v := range st.Webhooks {
		r.Webhooks += v
	}
}

// RunNaive follows the pull requests the naive way: every minute, for every pull request, the
// pull, its check runs, its combined status and its reviews (what a `gh pr view` / `gh pr checks`
// loop does), without ETags.
func RunNaive(tb testing.TB, prs, seconds int, acts []Activity) Result {
	ctx := context.Background()
	clock := scmtest.NewClock()
	w := NewWorld(tb, prs, Options{Clock: clock.Now})
	// A plain client: no ETag cache, no governor, as a naive poller has.
	u := w.Fake.URL() + "/"
	rest, err := gh.NewClient(gh.WithAuthToken("tok"), gh.WithURLs(&u, &u), gh.WithTimeout(30*time.Second),
		gh.WithTransport(&http.Transport{MaxIdleConnsPerHost: 16}))
	if err != nil {
		tb.Fatal(err)
	}
	owner, name := "acme", "monorepo"
	start := clock.Now()
	last := make([]time.Time, prs)
	var maxAge time.Duration
	ai := 0
	for s := 0; s < seconds; s++ {
		clock.Set(start.Add(time.Duration(s) * time.Second))
		for ai < len(acts) && acts[ai].At == s {
			w.Apply(tb, acts[ai])
			ai++
		}
		if s%60 != 0 {
			continue
		}
		// Every minute, every pull request: four requests, eight at a time.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, n := range w.Nums {
			wg.Add(1)
			sem <- struct{}{}
			go func(n int) {
				defer wg.Done()
				defer func() { <-sem }()
				pr, _, err := rest.PullRequests.Get(ctx, owner, name, n)
				if err != nil {
					tb.Error(err)
					return
				}
				sha := pr.GetHead().GetSHA()
				if _, _, err := rest.Checks.ListCheckRunsForRef(ctx, owner, name, sha, nil); err != nil {
					tb.Error(err)
				}
				if _, _, err := rest.Repositories.GetCombinedStatus(ctx, owner, name, sha, nil); err != nil {
					tb.Error(err)
				}
				if _, _, err := rest.PullRequests.ListReviews(ctx, owner, name, n, nil); err != nil {
					tb.Error(err)
				}
			}(n)
		}
		wg.Wait()
		now := clock.Now()
		for i := range last {
			if !last[i].IsZero() {
				maxAge = max(maxAge, now.Sub(last[i]))
			}
			last[i] = now
		}
	}
	// Without ETags the naive poll's staleness equals its interval.
	r := Result{Name: "naive REST poll", MaxAge: maxAge, LatencyMax: maxAge}
	fill(&r, w.Fake.Stats())
	return r
}

// hookRelay lets the world be built before the handler that feeds the Poller exists.
type hookRelay struct{ h http.Handler }

func (r *hookRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.h == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// The fake's in-process deliveries carry no Project path: they are the bench Project's.
	req.URL.Path = webhook.ProjectPath(benchProject)
	r.h.ServeHTTP(w, req)
}

// benchProject is the Project whose webhook receives the economy runs' deliveries.
var benchProject = types.NamespacedName{Namespace: "bench", Name: "monorepo"}

// RunPoller follows the pull requests with Shepherd's Poller alone (poll interval 1m), called
// step by step on a simulated clock, with or without the webhook handler feeding it. Latencies
// are from a change to the Poller's OnChange.
func RunPoller(tb testing.TB, name string, prs, seconds int, acts []Activity, webhooks bool) Result {
	ctx := context.Background()
	relay := &hookRelay{}
	var hook http.Handler
	if webhooks {
		hook = relay
	}
	clock := scmtest.NewClock()
	w := NewWorld(tb, prs, Options{Clock: clock.Now, WebhookHandler: hook})
	p, err := github.New(scm.Config{APIURL: w.Fake.URL(), Token: []byte("tok"), Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	pending := map[types.NamespacedName]time.Time{}
	pendingKind := map[types.NamespacedName]string{}
	byKind := map[string][]time.Duration{}
	var latencies []time.Duration
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Minute, Clock: clock, OnChange: func(k types.NamespacedName) {
		mu.Lock()
		defer mu.Unlock()
		if t, ok := pending[k]; ok {
			latencies = append(latencies, clock.Now().Sub(t))
			byKind[pendingKind[k]] = append(byKind[pendingKind[k]], clock.Now().Sub(t))
			delete(pending, k)
		}
	}})
	if webhooks {
		relay.h, err = webhook.NewHandler(webhook.Options{
			Lookup: func(_ context.Context, key types.NamespacedName) (webhook.Target, error) {
				if key != benchProject {
					return webhook.Target{}, webhook.ErrUnknownProject
				}
				return webhook.Target{Repo: scm.Repo{Owner: "acme", Name: "monorepo"}, Secret: WebhookSecret}, nil
			},
			OnHint: poller.Notify,
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	repo := scm.Repo{Owner: "acme", Name: "monorepo"}
	keys := make([]types.NamespacedName, prs)
	for i, n := range w.Nums {
		keys[i] = types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("s%04d", i)}
		poller.Register(keys[i], scm.Watch{Repo: repo, Number: n})
	}
	start := clock.Now()
	// Warm up: the first full read of every pull request is not part of the hour.
	if _, err := poller.Poll(ctx); err != nil {
		tb.Fatal(err)
	}
	w.Fake.ResetStats()
	var maxAge time.Duration
	var next time.Time
	ai := 0
	for s := 0; s < seconds; s++ {
		clock.Set(start.Add(time.Duration(s) * time.Second))
		for ai < len(acts) && acts[ai].At == s {
			a := acts[ai]
			at := clock.Now()
			// Marked before the change is made: the fake delivers its webhooks while it makes
			// it, and the facts they carry may be seen before Apply returns.
			k := keys[a.PR]
			mu.Lock()
			_, had := pending[k]
			if !had {
				pending[k] = at
				pendingKind[k] = a.Kind + "/" + a.Arg
			}
			mu.Unlock()
			if !w.Apply(tb, a).Visible && !had {
				mu.Lock()
				delete(pending, k)
				mu.Unlock()
			}
			ai++
		}
		if !clock.Now().Before(next) || webhooks {
			if next, err = poller.Poll(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		if s%5 == 0 {
			now := clock.Now()
			for _, k := range keys {
				if obs, ok := poller.Get(k); ok {
					maxAge = max(maxAge, now.Sub(obs.CheckedAt))
				}
			}
		}
	}
	res := Result{Name: name, MaxAge: maxAge, ByKind: map[string][]time.Duration{}}
	for k, v := range byKind {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		res.ByKind[k] = v
	}
	fill(&res, w.Fake.Stats())
	mu.Lock()
	res.MissedChanges = len(pending)
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	if len(latencies) > 0 {
		res.LatencyP50 = latencies[len(latencies)/2]
		res.LatencyP95 = latencies[len(latencies)*95/100]
		res.LatencyMax = latencies[len(latencies)-1]
	}
	mu.Unlock()
	return res
}

// FanOut is what the first reads of a fan-out cost: n new sessions registered at a steady rate,
// none with a pull request yet (their agents have not pushed).
type FanOut struct {
	Name       string
	Sessions   int
	Duration   time.Duration
	REST       int
	GQLQueries int
	GQLPoints  int
	// FirstReadP50, P99 and Max are from a registration to its first answer.
	FirstReadP50, FirstReadP99, FirstReadMax time.Duration
}

// Counted is what GitHub bills.
func (f FanOut) Counted() int { return f.REST + f.GQLPoints }

// RunFanOutNaive looks each new session's branch up once, as it comes (one REST search for a
// pull request by head per session): the least a follower that reads every session on its own
// pays.
func RunFanOutNaive(tb testing.TB, n, perSecond int) FanOut {
	ctx := context.Background()
	clock := scmtest.NewClock()
	w := NewWorld(tb, 0, Options{Clock: clock.Now})
	u := w.Fake.URL() + "/"
	rest, err := gh.NewClient(gh.WithAuthToken("tok"), gh.WithURLs(&u, &u), gh.WithTimeout(30*time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	start := clock.Now()
	for i := 0; i < n; i++ {
		clock.Set(start.Add(time.Duration(i) * time.Second / time.Duration(perSecond)))
		prs, _, err := rest.PullRequests.List(ctx, "acme", "monorepo", &gh.PullRequestListOptions{Head: fmt.Sprintf("acme:fan-%05d", i), State: "all"})
		if err != nil {
			tb.Fatal(err)
		}
		if len(prs) != 0 {
			tb.Fatalf("branch fan-%05d has %d pull requests, want none", i, len(prs))
		}
	}
	st := w.Fake.Stats()
	return FanOut{Name: "naive: one lookup each", Sessions: n, Duration: clock.Now().Sub(start), REST: st.RESTCounted,
		GQLQueries: st.GraphQLQueries, GQLPoints: st.GraphQLPoints}
}

// RunFanOutPoller registers the n sessions with Shepherd's Poller (HintDelay 2s, as the
// manager runs it) and polls as its loop does: at every registration (the loop wakes at most that
// often) and whenever the time it asked for has come, the fake answering at once; then until
// every session has had its first answer.
func RunFanOutPoller(tb testing.TB, n, perSecond int) FanOut {
	ctx := context.Background()
	clock := scmtest.NewClock()
	w := NewWorld(tb, 0, Options{Clock: clock.Now})
	p, err := github.New(scm.Config{APIURL: w.Fake.URL(), Token: []byte("tok"), Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Minute, HintDelay: 2 * time.Second, Clock: clock})
	repo := scm.Repo{Owner: "acme", Name: "monorepo"}
	start := clock.Now()
	registered := map[types.NamespacedName]time.Time{}
	var firsts []time.Duration
	var next time.Time
	for i := 0; i < n || len(registered) > 0; i++ {
		clock.Set(start.Add(time.Duration(i) * time.Second / time.Duration(perSecond)))
		if i < n {
			k := types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("fan-%05d", i)}
			poller.Register(k, scm.Watch{Repo: repo, Head: scm.Head{Branch: k.Name}})
			registered[k] = clock.Now()
		}
		for first := true; first || !next.IsZero() && !next.After(clock.Now()); first = false {
			if next, err = poller.Poll(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		for k, at := range registered {
			if obs, ok := poller.Get(k); ok {
				if obs.Err != nil || obs.PullRequest != nil {
					tb.Fatalf("%s: first answer %v, %v; want no pull request", k, obs.PullRequest, obs.Err)
				}
				firsts = append(firsts, clock.Now().Sub(at))
				delete(registered, k)
			}
		}
		if i > n+100*perSecond {
			tb.Fatalf("%d sessions never read", len(registered))
		}
	}
	st := w.Fake.Stats()
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	return FanOut{Name: "Shepherd's Poller", Sessions: n, Duration: clock.Now().Sub(start), REST: st.RESTCounted,
		GQLQueries: st.GraphQLQueries, GQLPoints: st.GraphQLPoints,
		FirstReadP50: firsts[len(firsts)/2], FirstReadP99: firsts[len(firsts)*99/100], FirstReadMax: firsts[len(firsts)-1]}
}
