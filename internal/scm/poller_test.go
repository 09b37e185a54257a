package scm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/github"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest/economy"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

var ctx = context.Background()

type pollEnv struct {
	fake    *fakegithub.Server
	clock   *scmtest.Clock
	p       *github.Provider
	poller  *scm.Poller
	repo    scm.Repo
	mu      sync.Mutex
	changed map[types.NamespacedName]int
}

func newPollEnv(t *testing.T, opts scm.PollerOptions) *pollEnv {
	t.Helper()
	g := NewWithT(t)
	e := &pollEnv{clock: scmtest.NewClock(), repo: scm.Repo{Owner: "acme", Name: "widgets"}, changed: map[types.NamespacedName]int{}}
	fake, err := fakegithub.New(fakegithub.Options{Dir: t.TempDir(), Clock: e.clock.Now, GraphQLLimit: 100000})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "bot")
	_, err = fake.CreateRepo("acme/widgets", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	e.fake = fake
	e.p, err = github.New(scm.Config{APIURL: fake.URL(), Token: []byte("tok"), Clock: e.clock})
	g.Expect(err).NotTo(HaveOccurred())
	opts.Clock = e.clock
	opts.OnChange = func(k types.NamespacedName) {
		e.mu.Lock()
		e.changed[k]++
		e.mu.Unlock()
	}
	e.poller = scm.NewPoller(e.p, opts)
	return e
}

func (e *pollEnv) changes(k types.NamespacedName) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed[k]
}

func (e *pollEnv) openPR(t *testing.T, branch string) int {
	t.Helper()
	_, err := e.fake.Push("acme/widgets", branch, map[string]string{branch + ".txt": branch}, branch)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	n, err := e.fake.OpenPullRequest("acme/widgets", "bot", branch, "main", "Work "+branch, "", false)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return n
}

func key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "team", Name: name}
}

// pollUntil runs Poll, advancing the simulated clock to each next due time, until t.
func (e *pollEnv) pollUntil(t *testing.T, until time.Time) {
	t.Helper()
	for {
		next, err := e.poller.Poll(ctx)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		if next.IsZero() || next.After(until) {
			e.clock.Set(until)
			return
		}
		if next.After(e.clock.Now()) {
			e.clock.Set(next)
		}
	}
}

func TestPollerFollowsAPullRequest(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute})
	n := e.openPR(t, "feature")
	k := key("s1")
	e.poller.Register(k, scm.Watch{Repo: e.repo, Number: n, Head: scm.Head{Branch: "feature"}})
	_, ok := e.poller.Get(k)
	g.Expect(ok).To(BeFalse())

	next, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, ok := e.poller.Get(k)
	g.Expect(ok).To(BeTrue())
	g.Expect(obs.Err).NotTo(HaveOccurred())
	g.Expect(obs.PullRequest.Number).To(Equal(n))
	g.Expect(obs.CheckedAt).To(Equal(e.clock.Now()))
	g.Expect(e.changes(k)).To(Equal(1))
	g.Expect(next).To(Equal(e.clock.Now().Add(55*time.Second)), "refreshed a little before the maximum age")

	// Nothing due: no call.
	before := e.fake.Stats().GraphQLQueries
	again, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(next))
	g.Expect(e.fake.Stats().GraphQLQueries).To(Equal(before))

	// At the deadline a probe; nothing changed, nobody is told.
	e.clock.Set(next)
	_, err = e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.fake.Stats().GraphQLQueries).To(Equal(before + 1))
	g.Expect(e.changes(k)).To(Equal(1))
	obs, _ = e.poller.Get(k)
	g.Expect(obs.CheckedAt).To(Equal(next))

	// A failing check changes the probe's view: a full read follows at once and the
	// controller is told, with the failed check's details.
	pr, _ := e.fake.PullRequest("acme/widgets", n)
	_, err = e.fake.AddCheckRun("acme/widgets", pr.HeadSHA, fakegithub.CheckRun{Name: "build", Conclusion: "failure"})
	g.Expect(err).NotTo(HaveOccurred())
	e.pollUntil(t, next.Add(time.Minute))
	g.Expect(e.changes(k)).To(Equal(2))
	obs, _ = e.poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksFailing))
	g.Expect(obs.PullRequest.Checks.FailedChecks[0].Name).To(Equal("build"))
	g.Expect(e.clock.Now().Sub(obs.CheckedAt)).To(BeNumerically("<=", time.Minute))

	e.poller.Forget(k)
	g.Expect(e.poller.Len()).To(Equal(0))
	_, ok = e.poller.Get(k)
	g.Expect(ok).To(BeFalse())
}

func TestPollerFindsThePullRequestOfABranch(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: 30 * time.Second})
	k := key("by-head")
	e.poller.Register(k, scm.Watch{Repo: e.repo, Head: scm.Head{Branch: "later"}})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, ok := e.poller.Get(k)
	g.Expect(ok).To(BeTrue())
	g.Expect(obs.PullRequest).To(BeNil())
	g.Expect(obs.Err).NotTo(HaveOccurred())

	n := e.openPR(t, "later")
	e.pollUntil(t, e.clock.Now().Add(30*time.Second))
	obs, _ = e.poller.Get(k)
	g.Expect(obs.PullRequest).NotTo(BeNil())
	g.Expect(obs.PullRequest.Number).To(Equal(n))
	g.Expect(e.changes(k)).To(Equal(2))
}

func TestPollerWebhookHintsAndHealth(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute, WebhookMaxAge: 10 * time.Minute, HintDelay: 2 * time.Second, HintInterval: 5 * time.Second})
	a, b := e.openPR(t, "a"), e.openPR(t, "b")
	ka, kb := key("a"), key("b")
	e.poller.Register(ka, scm.Watch{Repo: e.repo, Number: a, Head: scm.Head{Branch: "a"}})
	e.poller.Register(kb, scm.Watch{Repo: e.repo, Number: b, Head: scm.Head{Branch: "b"}})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	start := e.clock.Now()

	// A review arrives; the webhook names PR a.
	_, err = e.fake.AddReview("acme/widgets", a, "alice", "APPROVED", "ok")
	g.Expect(err).NotTo(HaveOccurred())
	e.clock.Advance(time.Second)
	e.poller.Notify(scm.Hint{Repo: e.repo, Event: "pull_request_review", Numbers: []int{a}, Webhook: true})
	next, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).To(Equal(e.clock.Now().Add(2*time.Second)), "hints wait a moment for the rest of a burst")
	e.clock.Set(next)
	_, err = e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ := e.poller.Get(ka)
	g.Expect(obs.PullRequest.ReviewDecision).To(Equal(scm.ReviewApproved))
	g.Expect(obs.PullRequest.Reviews).To(HaveLen(1))
	g.Expect(e.changes(ka)).To(Equal(2))

	// Webhooks flow for this repository: the safety net relaxes to WebhookMaxAge.
	queries := e.fake.Stats().GraphQLQueries
	e.pollUntil(t, start.Add(9*time.Minute))
	g.Expect(e.fake.Stats().GraphQLQueries).To(Equal(queries), "no polling while webhooks flow")
	e.pollUntil(t, start.Add(11*time.Minute))
	g.Expect(e.fake.Stats().GraphQLQueries).To(Equal(queries + 1))
	// Silence longer than WebhookMaxAge: back to MaxAge.
	queries = e.fake.Stats().GraphQLQueries
	e.pollUntil(t, start.Add(14*time.Minute))
	g.Expect(e.fake.Stats().GraphQLQueries - queries).To(BeNumerically(">=", 2))

	// A push to main (a merge elsewhere) makes PRs based on main due for a probe.
	e.poller.Notify(scm.Hint{Repo: e.repo, Event: "push", Branches: []string{"main"}, Webhook: true})
	_, err = e.fake.Push("acme/widgets", "main", map[string]string{"main.txt": "x"}, "main moves")
	g.Expect(err).NotTo(HaveOccurred())
	queries = e.fake.Stats().GraphQLQueries
	e.pollUntil(t, e.clock.Now().Add(6*time.Second))
	g.Expect(e.fake.Stats().GraphQLQueries).To(BeNumerically(">", queries))
}

// A watch's own WebhookMaxAge (the Project's webhookPollInterval) replaces the Poller's while
// webhooks flow: a Project that asks for a tight safety net gets it.
func TestPollerWatchWebhookMaxAge(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute, WebhookMaxAge: 10 * time.Minute, HintDelay: 2 * time.Second, HintInterval: 5 * time.Second})
	a := e.openPR(t, "a")
	e.poller.Register(key("a"), scm.Watch{Repo: e.repo, Number: a, Head: scm.Head{Branch: "a"}, MaxAge: 20 * time.Second, WebhookMaxAge: 2 * time.Minute})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	start := e.clock.Now()
	e.poller.Notify(scm.Hint{Repo: e.repo, Event: "pull_request", Numbers: []int{a}, Webhook: true})
	e.pollUntil(t, start.Add(10*time.Second))
	queries := e.fake.Stats().GraphQLQueries

	// Webhooks flow: no poll before the watch's 2 minutes (not the item's 20 s), one at 2 minutes
	// (not the Poller's 10).
	e.pollUntil(t, start.Add(110*time.Second))
	g.Expect(e.fake.Stats().GraphQLQueries).To(Equal(queries), "relaxed to the watch's WebhookMaxAge while webhooks flow")
	e.pollUntil(t, start.Add(130*time.Second))
	g.Expect(e.fake.Stats().GraphQLQueries).To(Equal(queries+1), "and no further")
	// The webhooks fell silent for that long: back to the watch's 20 s.
	queries = e.fake.Stats().GraphQLQueries
	e.pollUntil(t, start.Add(190*time.Second))
	g.Expect(e.fake.Stats().GraphQLQueries - queries).To(BeNumerically(">=", 2))
}

// Hint-driven reads come from a bucket of HintBurst tokens refilled one per HintInterval: the
// first webhooks after a quiet time are each read within HintDelay, even seconds apart; once the
// burst is spent they are paced at HintInterval; a quiet minute refills the bucket.
func TestPollerHintBurst(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Hour, HintDelay: 2 * time.Second, HintInterval: 10 * time.Second, HintBurst: 2})
	n := e.openPR(t, "a")
	k := key("a")
	e.poller.Register(k, scm.Watch{Repo: e.repo, Number: n, Head: scm.Head{Branch: "a"}})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	start := e.clock.Now()
	// readAfterHint delivers a webhook naming the pull request at start+at and returns how long
	// after start the Poller read it.
	readAfterHint := func(at time.Duration) time.Duration {
		e.clock.Set(start.Add(at))
		e.poller.Notify(scm.Hint{Repo: e.repo, Event: "pull_request_review", Numbers: []int{n}, Webhook: true})
		for range 100 {
			next, err := e.poller.Poll(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			if obs, _ := e.poller.Get(k); !obs.CheckedAt.Before(start.Add(at)) {
				return obs.CheckedAt.Sub(start)
			}
			g.Expect(next.IsZero()).To(BeFalse(), "a hinted item is always due at some point")
			e.clock.Set(next)
		}
		t.Fatal("the hinted item was never read")
		return 0
	}
	g.Expect(readAfterHint(1*time.Second)).To(Equal(3*time.Second), "a token: read after HintDelay")
	g.Expect(readAfterHint(4*time.Second)).To(Equal(6*time.Second), "the second token: read after HintDelay")
	// After the reads at 3s and 6s the next is allowed at 13s (3s + 10s, the burst spent); the
	// hint is due at 9s and waits.
	g.Expect(readAfterHint(7*time.Second)).To(Equal(13*time.Second), "burst spent: paced by HintInterval")
	g.Expect(readAfterHint(80*time.Second)).To(Equal(82*time.Second), "a quiet time refills the bucket")
}

// The manager's own hints (a runner opened a pull request, Shepherd merged one) make the items
// they name due, but are no evidence that the repository's webhooks flow: without webhooks, the
// repository keeps its poll interval.
func TestPollerOwnHintsKeepThePollInterval(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute, WebhookMaxAge: 10 * time.Minute, HintDelay: 2 * time.Second, HintInterval: 5 * time.Second})
	a, b := e.openPR(t, "a"), e.openPR(t, "b")
	ka, kb := key("a"), key("b")
	e.poller.Register(ka, scm.Watch{Repo: e.repo, Number: a, Head: scm.Head{Branch: "a"}})
	e.poller.Register(kb, scm.Watch{Repo: e.repo, Number: b, Head: scm.Head{Branch: "b"}})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	start := e.clock.Now()

	// The runner opened (found) pull request a through the manager, which tells the Poller.
	_, err = e.fake.AddReview("acme/widgets", a, "alice", "APPROVED", "ok")
	g.Expect(err).NotTo(HaveOccurred())
	e.clock.Advance(time.Second)
	e.poller.Notify(scm.Hint{Repo: e.repo, Event: "pull_request", Numbers: []int{a}, Branches: []string{"a"}})
	e.pollUntil(t, start.Add(5*time.Second))
	obs, _ := e.poller.Get(ka)
	g.Expect(obs.PullRequest.ReviewDecision).To(Equal(scm.ReviewApproved), "the named item is read within the hint delay")

	// Every item is still read at least once a minute: look at the ages just before each call.
	queries := e.fake.Stats().GraphQLQueries
	worst := time.Duration(0)
	for e.clock.Now().Before(start.Add(10 * time.Minute)) {
		for _, k := range []types.NamespacedName{ka, kb} {
			obs, ok := e.poller.Get(k)
			g.Expect(ok).To(BeTrue())
			worst = max(worst, e.clock.Now().Sub(obs.CheckedAt))
		}
		next, err := e.poller.Poll(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		e.clock.Set(next)
	}
	g.Expect(worst).To(BeNumerically("<=", time.Minute), "an internal hint must not relax the poll interval to WebhookMaxAge")
	g.Expect(e.fake.Stats().GraphQLQueries-queries).To(BeNumerically(">=", 9), "one call a minute")
}

func TestPollerKeepsManyItemsFreshInFewCalls(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute})
	const n = 150
	nums, err := e.fake.BulkOpenPullRequests("acme/widgets", "pr", n)
	g.Expect(err).NotTo(HaveOccurred())
	for i, num := range nums {
		e.poller.Register(key(fmt.Sprint(i)), scm.Watch{Repo: e.repo, Number: num})
	}
	start := e.clock.Now()
	before := e.fake.Stats()
	worst := time.Duration(0)
	last := map[int]time.Time{}
	for e.clock.Now().Before(start.Add(10 * time.Minute)) {
		next, err := e.poller.Poll(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for i := 0; i < n; i++ {
			obs, ok := e.poller.Get(key(fmt.Sprint(i)))
			g.Expect(ok).To(BeTrue())
			if prev, seen := last[i]; seen && obs.CheckedAt.After(prev) {
				worst = max(worst, obs.CheckedAt.Sub(prev))
			}
			last[i] = obs.CheckedAt
		}
		if floor := e.clock.Now().Add(time.Second); next.Before(floor) {
			next = floor
		}
		e.clock.Set(next)
	}
	after := e.fake.Stats()
	g.Expect(worst).To(BeNumerically("<=", time.Minute), "every item refreshed within MaxAge")
	// 150 items: 6 one-point queries of 25 full reads first, then 100 probes per one-point
	// query, 2 queries a minute for 10 minutes.
	g.Expect(after.GraphQLPoints - before.GraphQLPoints).To(BeNumerically("<=", 6+2*11))
	g.Expect(after.RESTCounted - before.RESTCounted).To(Equal(0))
}

func TestPollerBacksOffOnRateLimit(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute})
	n := e.openPR(t, "feature")
	k := key("rl")
	e.poller.Register(k, scm.Watch{Repo: e.repo, Number: n})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	e.fake.ExhaustPrimary("tok", "graphql")
	e.clock.Advance(time.Minute)
	next, err := e.poller.Poll(ctx)
	g.Expect(errors.Is(err, scm.ErrRateLimited)).To(BeTrue())
	obs, _ := e.poller.Get(k)
	g.Expect(errors.Is(obs.Err, scm.ErrRateLimited)).To(BeTrue())
	g.Expect(obs.PullRequest).NotTo(BeNil(), "the last good state is kept")
	g.Expect(next).To(BeTemporally("==", scm.RetryAfter(obs.Err)))
	g.Expect(e.changes(k)).To(Equal(2), "the controller learns about the limit once")
	refused := e.fake.Stats().PrimaryRefused
	// Until the reset nothing is sent.
	_, err = e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.fake.Stats().PrimaryRefused).To(Equal(refused))
	e.clock.Set(next)
	_, err = e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ = e.poller.Get(k)
	g.Expect(obs.Err).NotTo(HaveOccurred())
	g.Expect(e.changes(k)).To(Equal(3))
}

func TestPollerStartStopsWithContext(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{})
	n := e.openPR(t, "feature")
	seen := make(chan types.NamespacedName, 1)
	// The real clock: Start sleeps between polls.
	p := scm.NewPoller(e.p, scm.PollerOptions{MaxAge: time.Hour, OnChange: func(k types.NamespacedName) {
		select {
		case seen <- k:
		default:
		}
	}})
	p.Register(key("run"), scm.Watch{Repo: e.repo, Number: n})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Start(cctx) }()
	g.Expect(<-seen).To(Equal(key("run")))
	cancel()
	g.Expect(<-done).To(Succeed())
	obs, ok := p.Get(key("run"))
	g.Expect(ok).To(BeTrue())
	g.Expect(obs.PullRequest.Number).To(Equal(n))
	g.Expect(p.NeedLeaderElection()).To(BeTrue())
}

// recheckSource answers every read with an open pull request whose mergeability is still being
// computed for the first reads, as Gitea's conflict check makes its adapter answer.
type recheckSource struct {
	mu      sync.Mutex
	reads   []scm.RefreshRequest
	pending int
	// clock and takes, when set, make each call last takes (a busy forge: Gitea's adapter
	// re-reads a pull request still being checked for 1.5 s within the call).
	clock scm.Clock
	takes time.Duration
}

func (s *recheckSource) BatchSize() int { return 1 }

func (s *recheckSource) Refresh(ctx context.Context, reqs []scm.RefreshRequest) ([]scm.RefreshResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clock != nil {
		if err := s.clock.Sleep(ctx, s.takes); err != nil {
			return nil, err
		}
	}
	out := make([]scm.RefreshResult, len(reqs))
	for i, r := range reqs {
		s.reads = append(s.reads, r)
		pr := &scm.PullRequest{Repo: r.Ref.Repo, Number: 7, State: scm.StateOpen, Mergeable: scm.MergeableTrue, MergeState: scm.MergeStateClean}
		out[i] = scm.RefreshResult{PullRequest: pr, Fingerprint: "clean"}
		if s.pending > 0 {
			s.pending--
			pr.Mergeable, pr.MergeState = scm.MergeableUnknown, scm.MergeStateUnknown
			out[i] = scm.RefreshResult{PullRequest: pr, Fingerprint: "checking", RecheckAfter: 2 * time.Second}
		}
	}
	return out, nil
}

func TestPollerRechecksWhatTheForgeIsStillComputing(t *testing.T) {
	g := NewWithT(t)
	clock := scmtest.NewClock()
	src := &recheckSource{pending: 2}
	p := scm.NewPoller(src, scm.PollerOptions{MaxAge: time.Hour, HintInterval: 5 * time.Second, HintBurst: 1, Clock: clock})
	k := key("checking")
	repo := scm.Repo{Owner: "acme", Name: "widgets"}
	p.Register(k, scm.Watch{Repo: repo, Head: scm.Head{Branch: "b"}, Base: "release"})
	start := clock.Now()
	next, err := p.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src.reads).To(HaveLen(1))
	g.Expect(src.reads[0].Base).To(Equal("release"), "the watch's base reaches the forge")
	g.Expect(next).To(Equal(start.Add(2*time.Second)), "asked to look again, not in an hour")

	clock.Set(next)
	next, err = p.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src.reads).To(HaveLen(2))
	g.Expect(src.reads[1].Full).To(BeTrue())

	// Still computing: read again, no sooner than HintInterval after the last hinted call.
	for len(src.reads) < 3 {
		g.Expect(next.IsZero()).To(BeFalse())
		clock.Set(next)
		next, err = p.Poll(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(clock.Now()).To(Equal(start.Add(2*time.Second+5*time.Second)), "rechecks are paced like hints")
	obs, _ := p.Get(k)
	g.Expect(obs.PullRequest.MergeState).To(Equal(scm.MergeStateClean))
	next, err = p.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src.reads).To(HaveLen(3), "decided: nothing due until the deadline")
	g.Expect(next.Sub(clock.Now())).To(BeNumerically(">", 50*time.Minute))
}

func (s *recheckSource) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reads)
}

// A call can outlast the recheck it asks for (a busy forge; Gitea's adapter alone re-reads an
// undecided pull request for 1.5 s within the call, and asks again after 2 s). The recheck is
// then due when the call returns: Poll says so (now, not zero, which Start reads as "nothing
// followed" and sleeps a minute), and the loop reads again at once.
func TestPollerRechecksWhenTheCallOutlastsTheRecheck(t *testing.T) {
	g := NewWithT(t)
	clock := scmtest.NewClock()
	src := &recheckSource{pending: 2, clock: clock, takes: 3 * time.Second}
	p := scm.NewPoller(src, scm.PollerOptions{MaxAge: time.Hour, HintInterval: time.Second, Clock: clock})
	p.Register(key("busy"), scm.Watch{Repo: scm.Repo{Owner: "acme", Name: "widgets"}, Head: scm.Head{Branch: "b"}})
	next, err := p.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src.readCount()).To(Equal(1))
	g.Expect(next.IsZero()).To(BeFalse(), "something is followed and due")
	g.Expect(next).NotTo(BeTemporally(">", clock.Now()), "the recheck came due during the call")

	// The real clock and the Poller's own loop: each call lasts 300 ms, the recheck is asked
	// for after 200 ms. Two rechecks follow the first read well within the minute the loop
	// sleeps when it thinks nothing is due.
	src = &recheckSource{pending: 2, clock: scm.RealClock{}, takes: 300 * time.Millisecond}
	p = scm.NewPoller(recheckAfter{src, 200 * time.Millisecond}, scm.PollerOptions{MaxAge: time.Hour, HintDelay: 10 * time.Millisecond, HintInterval: 10 * time.Millisecond})
	p.Register(key("busy"), scm.Watch{Repo: scm.Repo{Owner: "acme", Name: "widgets"}, Head: scm.Head{Branch: "b"}})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = p.Start(cctx) }()
	g.Eventually(func() scm.MergeState {
		obs, _ := p.Get(key("busy"))
		if obs.PullRequest == nil {
			return ""
		}
		return obs.PullRequest.MergeState
	}).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(scm.MergeStateClean))
	g.Expect(src.readCount()).To(Equal(3), "a first read and two rechecks")
}

// recheckAfter shortens the recheck a source asks for.
type recheckAfter struct {
	*recheckSource
	d time.Duration
}

func (r recheckAfter) Refresh(ctx context.Context, reqs []scm.RefreshRequest) ([]scm.RefreshResult, error) {
	out, err := r.recheckSource.Refresh(ctx, reqs)
	for i := range out {
		if out[i].RecheckAfter > 0 {
			out[i].RecheckAfter = r.d
		}
	}
	return out, err
}

// A hint in the forge's canonical case reaches a watch registered in another case; a hint that
// speaks for one namespace (a Project's verified delivery) wakes that namespace's sessions only.
func TestPollerHintsIgnoreCaseAndKeepToTheirNamespace(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Hour, HintDelay: time.Second, HintInterval: time.Second})
	a := e.openPR(t, "a")
	mine, theirs := types.NamespacedName{Namespace: "team", Name: "s"}, types.NamespacedName{Namespace: "other", Name: "s"}
	e.poller.Register(mine, scm.Watch{Repo: e.repo, Number: a, Head: scm.Head{Branch: "a"}})
	e.poller.Register(theirs, scm.Watch{Repo: e.repo, Number: a, Head: scm.Head{Branch: "a"}})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.changes(mine)).To(Equal(1))
	g.Expect(e.changes(theirs)).To(Equal(1))

	_, err = e.fake.AddReview("acme/widgets", a, "alice", "APPROVED", "ok")
	g.Expect(err).NotTo(HaveOccurred())
	e.poller.Notify(scm.Hint{Repo: scm.Repo{Owner: "ACME", Name: "Widgets"}, Namespace: "team", Event: "pull_request_review", Numbers: []int{a}, Webhook: true})
	e.pollUntil(t, e.clock.Now().Add(3*time.Second))
	g.Expect(e.changes(mine)).To(Equal(2), "the hint's case does not matter")
	g.Expect(e.changes(theirs)).To(Equal(1), "another namespace's session is not woken by this Project's delivery")
}

// A fan-out registers thousands of sessions within minutes, none with a pull request yet. Their
// first reads share calls: one per HintDelay however fast the registrations come, each new
// item read within HintDelay of its registration; an isolated registration is read at once.
func TestPollerFanOutSharesFirstReads(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute, HintDelay: 2 * time.Second})
	e.poller.Register(key("alone"), scm.Watch{Repo: e.repo, Head: scm.Head{Branch: "alone"}})
	_, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	_, ok := e.poller.Get(key("alone"))
	g.Expect(ok).To(BeTrue(), "an isolated registration is read at once")

	// 300 registrations at 10 a second, polled as the Poller's loop does (make bench-scm runs
	// the same with 1000).
	fan := economy.RunFanOutPoller(t, 300, 10)
	t.Logf("%d registrations in %s: %d queries, the slowest first read %s after its registration", fan.Sessions, fan.Duration, fan.GQLQueries, fan.FirstReadMax)
	g.Expect(fan.FirstReadMax).To(BeNumerically("<=", 2*time.Second), "each new item read within HintDelay")
	// 30 s of registrations: one call per 2 s, and one more for the last of them.
	g.Expect(fan.GQLQueries).To(BeNumerically("<=", int(fan.Duration/(2*time.Second))+1), "one call per HintDelay, not one per registration")
}

// A read that fails for one item (its repository is gone) is retried at the item's interval,
// and does not hide the other items' deadlines: the Poller still says when it must call next.
func TestPollerRetriesAFailedItemAtItsInterval(t *testing.T) {
	g := NewWithT(t)
	e := newPollEnv(t, scm.PollerOptions{MaxAge: time.Minute})
	num := e.openPR(t, "feature")
	e.poller.Register(key("good"), scm.Watch{Repo: e.repo, Number: num})
	e.poller.Register(key("gone"), scm.Watch{Repo: scm.Repo{Owner: "acme", Name: "gone"}, Number: 1})
	start := e.clock.Now()
	next, err := e.poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ := e.poller.Get(key("gone"))
	g.Expect(errors.Is(obs.Err, scm.ErrRepositoryNotFound)).To(BeTrue(), "%v", obs.Err)
	g.Expect(next).To(BeTemporally("==", start.Add(55*time.Second)), "the next call is at the items' deadline")

	// Ten minutes of the Poller's loop: a call is a Poll that sent queries.
	calls := 0
	for e.clock.Now().Before(start.Add(10 * time.Minute)) {
		if next.After(e.clock.Now()) {
			e.clock.Set(next)
		} else {
			e.clock.Advance(time.Second)
		}
		before := e.fake.Stats().GraphQLQueries
		next, err = e.poller.Poll(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		if e.fake.Stats().GraphQLQueries > before {
			calls++
		}
	}
	g.Expect(calls).To(BeNumerically("<=", 11), "one call a minute, not one per wake-up")
	obs, _ = e.poller.Get(key("good"))
	g.Expect(obs.CheckedAt).To(BeTemporally(">=", start.Add(9*time.Minute)), "the good item kept fresh")
}
