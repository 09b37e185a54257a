package github

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// Tests of the adapter at GitHub's edges: connections longer than one page, mergeability that
// GitHub has not computed yet, and the GraphQL node limit.

func TestMoreThanOneHundredUnresolvedThreadsArePaged(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	pr := e.open(t, "feature", false)
	// 260 threads, every fifth resolved, so that unresolved threads sit on every page (GitHub's
	// reviewThreads lists resolved threads too) and more than 100 of them are unresolved.
	type want struct {
		id, author, path, body string
		line                   int
	}
	var unresolved []want
	for i := 0; i < 260; i++ {
		w := want{author: fmt.Sprintf("reviewer-%d", i%7), path: fmt.Sprintf("pkg/f%03d.go", i), line: i + 1, body: fmt.Sprintf("Remark %d", i)}
		id, err := e.fake.AddReviewThread(e.full, pr.Number, w.author, w.path, w.line, w.body)
		g.Expect(err).NotTo(HaveOccurred())
		w.id = id
		if i%5 == 4 {
			g.Expect(e.fake.ResolveThread(e.full, pr.Number, id, true)).To(Succeed())
			continue
		}
		unresolved = append(unresolved, w)
	}
	g.Expect(unresolved).To(HaveLen(208))

	p, m := e.counted(t, 0)
	before := e.fake.Stats()
	prs, err := p.GetPullRequests(ctx, []scm.PRRef{{Repo: e.repo, Number: pr.Number}})
	g.Expect(err).NotTo(HaveOccurred())
	got := prs[0]
	g.Expect(got.Threads).To(HaveLen(len(unresolved)))
	for i, w := range unresolved {
		th := got.Threads[i]
		g.Expect(th.ID).To(Equal(w.id), "thread %d", i)
		g.Expect(th.Author).To(Equal(w.author), "thread %d", i)
		g.Expect(th.Path).To(Equal(w.path), "thread %d", i)
		g.Expect(th.Line).To(Equal(w.line), "thread %d", i)
		g.Expect(th.Body).To(Equal(w.body), "thread %d", i)
		g.Expect(th.URL).To(ContainSubstring("/acme/widgets/pull/1#discussion_r"), "thread %d", i)
	}
	g.Expect(got.Threads).To(HaveLen(len(unresolved)))

	// One full read (the first 100 threads), two pages (after its cursor: 100, then 60) and the
	// first comments of the 208 unresolved threads, 25 per query (textBatch).
	g.Expect(requests(m, scm.KindGraphQL, "pulls.read", scm.OutcomeOK)).To(Equal(1.0))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.threads_page", scm.OutcomeOK)).To(Equal(2.0))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.texts", scm.OutcomeOK)).To(Equal(9.0))
	after := e.fake.Stats()
	g.Expect(after.GraphQLQueries - before.GraphQLQueries).To(Equal(12))
	g.Expect(after.GraphQLPoints-before.GraphQLPoints).To(Equal(12), "each query within one point")

	// First comments are cached: a second read pages the threads again but reads no comment.
	prs, err = p.GetPullRequests(ctx, []scm.PRRef{{Repo: e.repo, Number: pr.Number}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(prs[0].Threads).To(Equal(got.Threads))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.threads_page", scm.OutcomeOK)).To(Equal(4.0))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.texts", scm.OutcomeOK)).To(Equal(9.0))
}

// refresh reads one pull request by number through the adapter's batched read.
func (e *env) refresh(t *testing.T, p *Provider, n int, full bool) scm.RefreshResult {
	t.Helper()
	res, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: e.repo, Number: n}, Full: full}})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(res[0].Err).NotTo(HaveOccurred())
	NewWithT(t).Expect(res[0].PullRequest).NotTo(BeNil())
	return res[0]
}

func TestMergeabilityUnknownOnFirstReadIsNeverGuessed(t *testing.T) {
	g := NewWithT(t)
	// GitHub computes mergeability lazily: the first read after a push to the head or the base
	// answers UNKNOWN and starts the computation; a later read has the value.
	e := newEnv(t, func(o *fakegithub.Options) { o.MergeableUnknownFirst = true })
	e.branch(t, e.full, "feature")
	n, err := e.fake.OpenPullRequest(e.full, "shepherd-bot", "feature", "main", "Work on feature", "", false)
	g.Expect(err).NotTo(HaveOccurred())

	for _, full := range []bool{false, true} {
		// A new head: unknown for the probe and for the full read alike.
		_, err := e.fake.Push(e.full, "feature", map[string]string{fmt.Sprintf("full-%t.txt", full): "x\n"}, "more work")
		g.Expect(err).NotTo(HaveOccurred())
		first := e.refresh(t, e.p, n, full)
		g.Expect(first.PullRequest.Mergeable).To(Equal(scm.MergeableUnknown), "full=%t", full)
		g.Expect(first.PullRequest.MergeState).To(Equal(scm.MergeStateUnknown), "full=%t: not a guessed clean or dirty", full)
		g.Expect(first.RecheckAfter).To(Equal(mergeRecheckAfter), "full=%t: the Poller is asked to look again soon", full)

		second := e.refresh(t, e.p, n, full)
		g.Expect(second.PullRequest.Mergeable).To(Equal(scm.MergeableTrue))
		g.Expect(second.PullRequest.MergeState).To(Equal(scm.MergeStateClean))
		g.Expect(second.RecheckAfter).To(BeZero(), "computed: nothing to look at again")
		g.Expect(second.Fingerprint).NotTo(Equal(first.Fingerprint), "a probe sees the change")
	}

	// The base moves to a conflicting change: no webhook names the pull request, and the first
	// read is still unknown, never the old CLEAN and never a guessed DIRTY.
	_, err = e.fake.Push(e.full, "main", map[string]string{"feature.txt": "main's own version\n"}, "conflicting work on main")
	g.Expect(err).NotTo(HaveOccurred())
	first := e.refresh(t, e.p, n, false)
	g.Expect(first.PullRequest.Mergeable).To(Equal(scm.MergeableUnknown))
	g.Expect(first.PullRequest.MergeState).To(Equal(scm.MergeStateUnknown))
	g.Expect(first.RecheckAfter).To(Equal(mergeRecheckAfter))
	second := e.refresh(t, e.p, n, true)
	g.Expect(second.PullRequest.Mergeable).To(Equal(scm.MergeableFalse))
	g.Expect(second.PullRequest.MergeState).To(Equal(scm.MergeStateDirty))
	g.Expect(second.RecheckAfter).To(BeZero())

	// A closed pull request's mergeability is UNKNOWN for good: nothing to wait for.
	g.Expect(e.p.ClosePullRequest(ctx, e.repo, n)).To(Succeed())
	closed := e.refresh(t, e.p, n, true)
	g.Expect(closed.PullRequest.State).To(Equal(scm.StateClosed))
	g.Expect(closed.PullRequest.MergeState).To(Equal(scm.MergeStateUnknown))
	g.Expect(closed.RecheckAfter).To(BeZero())
}

func TestMergeabilityStillUnknownIsRecheckedLessOften(t *testing.T) {
	g := NewWithT(t)
	// GitHub's documented answer, with a mergeability GitHub keeps computing.
	body := strings.Replace(string(fakegithub.Fixture("graphql/pull-request.json")), `"mergeable": "MERGEABLE"`, `"mergeable": "UNKNOWN"`, 1)
	body = strings.Replace(body, `"mergeStateStatus": "BLOCKED"`, `"mergeStateStatus": "UNKNOWN"`, 1)
	g.Expect(body).To(ContainSubstring(`"mergeable": "UNKNOWN"`))
	g.Expect(body).To(ContainSubstring(`"mergeStateStatus": "UNKNOWN"`))
	clock := scmtest.NewClock()
	p := fixtureServer(t, []byte(body), func(c *scm.Config) { c.Clock = clock })
	repo := scm.Repo{Owner: "octocat", Name: "Hello-World"}
	read := func() scm.RefreshResult {
		res, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: repo, Number: 1347}, Full: true}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res[0].PullRequest.MergeState).To(Equal(scm.MergeStateUnknown))
		return res[0]
	}
	// Each recheck waits as long as the mergeability has been unknown so far (at least
	// mergeRecheckAfter, at most mergeRecheckMax): a computation GitHub never finishes costs a
	// few reads, not one every few seconds for good.
	var waits []time.Duration
	for i := 0; i < 10; i++ {
		r := read()
		waits = append(waits, r.RecheckAfter)
		clock.Advance(r.RecheckAfter)
	}
	g.Expect(waits[:4]).To(Equal([]time.Duration{mergeRecheckAfter, mergeRecheckAfter, 2 * mergeRecheckAfter, 4 * mergeRecheckAfter}))
	for i := 1; i < len(waits); i++ {
		g.Expect(waits[i]).To(BeNumerically(">=", waits[i-1]))
	}
	g.Expect(waits[len(waits)-1]).To(Equal(mergeRecheckMax))
}

func TestPollerRechecksUnknownMergeabilitySoon(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, func(o *fakegithub.Options) { o.MergeableUnknownFirst = true })
	pr := e.open(t, "feature", false)
	_, err := e.fake.Push(e.full, "feature", map[string]string{"more.txt": "x\n"}, "more work")
	g.Expect(err).NotTo(HaveOccurred())

	// No webhooks and an hour between polls: only RecheckAfter brings the Poller back.
	p, m := e.counted(t, 0)
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Hour, Clock: e.clock})
	key := types.NamespacedName{Namespace: "ns", Name: "feature"}
	poller.Register(key, scm.Watch{Repo: e.repo, Number: pr.Number, Head: scm.Head{Branch: "feature"}, Base: "main"})
	start := e.clock.Now()
	next, err := poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, ok := poller.Get(key)
	g.Expect(ok).To(BeTrue())
	g.Expect(obs.PullRequest.Mergeable).To(Equal(scm.MergeableUnknown))
	g.Expect(obs.PullRequest.MergeState).To(Equal(scm.MergeStateUnknown))
	g.Expect(next).To(Equal(start.Add(mergeRecheckAfter)), "asked to look again, not in an hour")

	e.clock.Set(next)
	next, err = poller.Poll(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ = poller.Get(key)
	g.Expect(obs.PullRequest.Mergeable).To(Equal(scm.MergeableTrue))
	g.Expect(obs.PullRequest.MergeState).To(Equal(scm.MergeStateClean))
	g.Expect(next.Sub(e.clock.Now())).To(BeNumerically(">", 50*time.Minute), "computed: nothing due until the deadline")
	g.Expect(requests(m, scm.KindGraphQL, "pulls.read", scm.OutcomeOK)).To(Equal(2.0), "two full reads, nothing else")
}

// queryLog records the GraphQL queries an adapter sends, with the node count GitHub's formula
// gives each.
type queryLog struct {
	mu    sync.Mutex
	base  http.RoundTripper
	nodes map[string][]int // by queryKind
	err   error
}

func (l *queryLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/graphql") && req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(strings.NewReader(string(b)))
		var in struct {
			Query     string         `json:"query"`
			Variables map[string]any `json:"variables"`
		}
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, err
		}
		_, nodes, err := fakegithub.QueryCost(in.Query, in.Variables)
		l.mu.Lock()
		if err != nil && l.err == nil {
			l.err = err
		}
		l.nodes[queryKind(in.Query)] = append(l.nodes[queryKind(in.Query)], nodes)
		l.mu.Unlock()
	}
	return l.base.RoundTrip(req)
}

// queryKind names a query by what it reads.
func queryKind(q string) string {
	switch {
	case strings.Contains(q, "comments(first: 1)"):
		return "thread comments"
	case strings.Contains(q, "node(id: $id) { ... on PullRequest"):
		return "threads page"
	case strings.Contains(q, "node(id: $id) { ... on Commit"):
		return "checks page"
	}
	return "pull requests"
}

// nodeLimit is GitHub's limit on the nodes one query may request.
const nodeLimit = 500000

func TestBatchesStayUnderTheNodeLimitByConstruction(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	var numbers []int
	for i := 0; i < fullBatch; i++ {
		numbers = append(numbers, e.open(t, fmt.Sprintf("b%02d", i), false).Number)
	}
	// The first pull request needs every follow-up: 150 threads, 105 checks.
	for i := 0; i < 150; i++ {
		_, err := e.fake.AddReviewThread(e.full, numbers[0], "alice", fmt.Sprintf("f%d.go", i), i+1, "why?")
		g.Expect(err).NotTo(HaveOccurred())
	}
	head := e.get(t, numbers[0]).HeadSHA
	for i := 0; i < 105; i++ {
		_, err := e.fake.AddCheckRun(e.full, head, fakegithub.CheckRun{Name: fmt.Sprintf("shard-%03d", i), Conclusion: "success", App: "ci"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	log := &queryLog{base: http.DefaultTransport, nodes: map[string][]int{}}
	p, err := New(scm.Config{APIURL: e.fake.URL(), Token: []byte(testToken), Clock: e.clock, Transport: log})
	g.Expect(err).NotTo(HaveOccurred())

	// The heaviest call the Poller can make: a full batch of full reads by number and the rest
	// of the probe batch as full reads by head (each a connection of candidates, then a full
	// read of what it found).
	var reqs []scm.RefreshRequest
	for _, n := range numbers {
		reqs = append(reqs, scm.RefreshRequest{Ref: scm.PRRef{Repo: e.repo, Number: n}, Full: true})
	}
	for i := 0; len(reqs) < probeBatch; i++ {
		reqs = append(reqs, scm.RefreshRequest{Ref: scm.PRRef{Repo: e.repo}, Head: scm.Head{Branch: fmt.Sprintf("b%02d", i%fullBatch)}, Full: true})
	}
	res, err := p.Refresh(ctx, reqs)
	g.Expect(err).NotTo(HaveOccurred())
	for i, r := range res {
		g.Expect(r.Err).NotTo(HaveOccurred())
		g.Expect(r.PullRequest).NotTo(BeNil(), "request %d", i)
	}
	g.Expect(res[0].PullRequest.Threads).To(HaveLen(150))
	g.Expect(res[0].PullRequest.Checks.Total).To(Equal(105))

	g.Expect(log.err).NotTo(HaveOccurred())
	g.Expect(log.nodes).To(HaveKey("pull requests"))
	g.Expect(log.nodes).To(HaveKey("threads page"))
	g.Expect(log.nodes).To(HaveKey("checks page"))
	g.Expect(log.nodes).To(HaveKey("thread comments"))
	largest := 0
	for kind, counts := range log.nodes {
		for _, n := range counts {
			g.Expect(n).To(BeNumerically("<", nodeLimit), kind)
			largest = max(largest, n)
		}
	}
	// By GitHub's formula a full read asks for at most 100 reviews, 100 threads, 30 comments,
	// 1 commit and its 100 checks, a lookup by head for 10 candidates: 25×331 + 75×10 nodes per
	// query, two orders of magnitude under the limit, whatever the pull requests hold.
	g.Expect(largest).To(Equal(fullBatch*(100+100+scm.MaxComments+1+100) + (probeBatch-fullBatch)*byHeadCandidates))
}

func TestNodeLimitExceededIsAClearError(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	p, m := e.counted(t, 0)
	// GitHub refuses a query over the limit before running it. No query of the adapter's can be
	// (see above); this one asks for 100 × 100 × 100 comments.
	q := `query($o: String!, $n: String!) {
  ` + rateLimitSelection + `
  repository(owner: $o, name: $n) { pullRequests(first: 100) { nodes { reviewThreads(first: 100) { nodes { comments(first: 100) { nodes { body } } } } } } }
}`
	var out map[string]any
	before := e.fake.Stats()
	gqlErrs, err := p.GraphQL(ctx, "test.too_large", q, map[string]any{"o": "acme", "n": "widgets"}, 1, &out)
	g.Expect(err).To(HaveOccurred())
	g.Expect(errors.Is(err, scm.ErrInvalid)).To(BeTrue(), "%v", err)
	g.Expect(scm.Retryable(err)).To(BeFalse(), "the same query would be refused again")
	g.Expect(err.Error()).To(ContainSubstring("MAX_NODE_LIMIT_EXCEEDED"))
	g.Expect(err.Error()).To(ContainSubstring("500,000"))
	g.Expect(gqlErrs).To(HaveLen(1))
	g.Expect(gqlErrs[0].Type).To(Equal("MAX_NODE_LIMIT_EXCEEDED"))
	g.Expect(out).To(BeNil(), "nothing decoded: not a success")
	g.Expect(requests(m, scm.KindGraphQL, "test.too_large", scm.OutcomeOK)).To(Equal(0.0))
	g.Expect(requests(m, scm.KindGraphQL, "test.too_large", scm.OutcomeClientError)).To(Equal(1.0))
	g.Expect(e.fake.Stats().GraphQLPoints).To(Equal(before.GraphQLPoints), "refused before it ran: nothing charged")
}

func TestParseDocumentedGraphQLNodeLimitExceeded(t *testing.T) {
	g := NewWithT(t)
	m := newMetrics(t)
	p := fixtureServer(t, fakegithub.Fixture("graphql/max-node-limit.json"), func(c *scm.Config) { c.Metrics = m })
	res, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: scm.Repo{Owner: "o", Name: "r"}, Number: 1}, Full: true}})
	g.Expect(res).To(BeNil(), "no result is made up from a refused query")
	g.Expect(errors.Is(err, scm.ErrInvalid)).To(BeTrue(), "%v", err)
	g.Expect(scm.Retryable(err)).To(BeFalse())
	g.Expect(err.Error()).To(ContainSubstring("MAX_NODE_LIMIT_EXCEEDED"))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.read", scm.OutcomeClientError)).To(Equal(1.0))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.read", scm.OutcomeOK)).To(Equal(0.0))
}
