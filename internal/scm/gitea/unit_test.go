package gitea

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
)

func TestStatusContextGlobsMatchLikeGitea(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"ci/build", []string{"ci/build"}, []string{"ci/build2", "xci/build"}},
		{"ci/*", []string{"ci/build", "ci/a/b", "ci/"}, []string{"lint", "ci"}},
		{"ci/**", []string{"ci/a/b"}, []string{"cd/a"}},
		{"test-?", []string{"test-1"}, []string{"test-12", "test-"}},
		{"ci/{build,test}", []string{"ci/build", "ci/test"}, []string{"ci/lint"}},
		{"shard-[0-3]", []string{"shard-0", "shard-3"}, []string{"shard-4"}},
		{"shard-[!0-3]", []string{"shard-4"}, []string{"shard-1"}},
		{`literal\*`, []string{"literal*"}, []string{"literalx"}},
		{"a.b (c)+$", []string{"a.b (c)+$"}, []string{"aXb (c)+$"}},
	} {
		re, err := compileGlob(tc.pattern)
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), tc.pattern)
		for _, s := range tc.match {
			NewWithT(t).Expect(re.MatchString(s)).To(BeTrue(), "%q should match %q", tc.pattern, s)
		}
		for _, s := range tc.miss {
			NewWithT(t).Expect(re.MatchString(s)).To(BeFalse(), "%q should not match %q", tc.pattern, s)
		}
	}
	for _, bad := range []string{"[abc", "{a,b", `trailing\`} {
		_, err := compileGlob(bad)
		NewWithT(t).Expect(err).To(HaveOccurred(), bad)
	}
}

func openPull(mergeable bool) *apiPull {
	return &apiPull{Number: 1, State: "open", Mergeable: mergeable,
		Head: &apiBranchInfo{Label: "b", Ref: "b", SHA: "h1"}, Base: &apiBranchInfo{Label: "main", Ref: "main", SHA: "base1"}, MergeBase: "base1"}
}

func protected(b apiBranch, rule *apiProtection) *protection {
	b.Protected = true
	p := &protection{branch: b, rule: rule}
	for _, c := range b.StatusCheckContexts {
		re, _ := compileGlob(c)
		p.required = append(p.required, re)
	}
	return p
}

func review(user, state string, official, dismissed bool) *apiReview {
	return &apiReview{User: &apiUser{Login: user}, State: state, Official: official, Dismissed: dismissed}
}

func TestMergeStateFollowsGiteasMergeRules(t *testing.T) {
	green := scm.Checks{State: scm.ChecksPassing, Total: 1, Passed: 1}
	canMerge := apiBranch{UserCanMerge: true}
	approved := []*apiReview{review("r", reviewApproved, true, false)}
	for _, tc := range []struct {
		name     string
		pull     *apiPull
		conflict bool
		prot     *protection
		reviews  []*apiReview
		checks   scm.Checks
		want     scm.MergeState
	}{
		{"closed", &apiPull{State: "closed"}, false, nil, nil, green, scm.MergeStateUnknown},
		{"draft", func() *apiPull { p := openPull(false); p.Draft = true; return p }(), false, &protection{}, nil, green, scm.MergeStateDraft},
		{"checking", openPull(false), false, &protection{}, nil, green, scm.MergeStateUnknown},
		{"conflict", openPull(false), true, &protection{}, nil, green, scm.MergeStateDirty},
		{"probe: protection unknown", openPull(true), false, nil, nil, green, scm.MergeStateUnknown},
		{"unprotected and green", openPull(true), false, &protection{}, nil, green, scm.MergeStateClean},
		{"unprotected, optional failure", openPull(true), false, &protection{}, nil, scm.Checks{State: scm.ChecksFailing, Failed: 1}, scm.MergeStateUnstable},
		{"merge whitelist excludes the token", openPull(true), false, protected(apiBranch{}, nil), nil, green, scm.MergeStateBlocked},
		{"required statuses pending", openPull(true), false, protected(apiBranch{UserCanMerge: true, EnableStatusCheck: true, StatusCheckContexts: []string{"ci"}}, nil),
			nil, scm.Checks{State: scm.ChecksPending}, scm.MergeStateBlocked},
		{"required statuses pass", openPull(true), false, protected(apiBranch{UserCanMerge: true, EnableStatusCheck: true, StatusCheckContexts: []string{"ci"}}, nil),
			nil, green, scm.MergeStateClean},
		{"approvals missing", openPull(true), false, protected(apiBranch{UserCanMerge: true, RequiredApprovals: 1}, nil), nil, green, scm.MergeStateBlocked},
		{"approvals met", openPull(true), false, protected(apiBranch{UserCanMerge: true, RequiredApprovals: 1}, nil), approved, green, scm.MergeStateClean},
		{"dismissed approval does not count", openPull(true), false, protected(apiBranch{UserCanMerge: true, RequiredApprovals: 1}, nil),
			[]*apiReview{review("r", reviewApproved, true, true)}, green, scm.MergeStateBlocked},
		{"rejection blocks when the rule says so", openPull(true), false, protected(canMerge, &apiProtection{BlockOnRejectedReviews: true}),
			[]*apiReview{review("r", reviewRequestChanges, true, false)}, green, scm.MergeStateBlocked},
		{"unofficial rejection does not block", openPull(true), false, protected(canMerge, &apiProtection{BlockOnRejectedReviews: true}),
			[]*apiReview{review("r", reviewRequestChanges, false, false)}, green, scm.MergeStateClean},
		{"official review request blocks", openPull(true), false, protected(canMerge, &apiProtection{BlockOnOfficialReviewRequests: true}),
			[]*apiReview{review("r", reviewRequested, true, false)}, green, scm.MergeStateBlocked},
		{"behind with an up-to-date rule", func() *apiPull { p := openPull(true); p.MergeBase = "old"; return p }(), false,
			protected(canMerge, &apiProtection{BlockOnOutdatedBranch: true}), nil, green, scm.MergeStateBehind},
		{"behind without the rule merges", func() *apiPull { p := openPull(true); p.MergeBase = "old"; return p }(), false,
			protected(canMerge, &apiProtection{}), nil, green, scm.MergeStateClean},
	} {
		got := mergeStateOf(tc.pull, tc.conflict, tc.prot, tc.reviews, tc.checks)
		NewWithT(t).Expect(got).To(Equal(tc.want), tc.name)
	}
}

func TestReviewDecisionCountsWhatGiteaCounts(t *testing.T) {
	two := protected(apiBranch{RequiredApprovals: 2}, nil)
	stale := protected(apiBranch{RequiredApprovals: 1}, &apiProtection{IgnoreStaleApprovals: true})
	staleApproval := review("a", reviewApproved, true, false)
	staleApproval.Stale = true
	for _, tc := range []struct {
		name    string
		reviews []*apiReview
		prot    *protection
		want    scm.ReviewDecision
	}{
		{"nothing", nil, nil, scm.ReviewNone},
		{"comments only", []*apiReview{review("a", reviewComment, false, false)}, nil, scm.ReviewNone},
		{"approved without protection", []*apiReview{review("a", reviewApproved, true, false)}, nil, scm.ReviewApproved},
		{"an unofficial approval", []*apiReview{review("a", reviewApproved, false, false)}, nil, scm.ReviewNone},
		{"changes requested wins", []*apiReview{review("a", reviewApproved, true, false), review("b", reviewRequestChanges, true, false)}, nil, scm.ReviewChangesRequested},
		{"dismissed request", []*apiReview{review("b", reviewRequestChanges, true, true)}, nil, scm.ReviewNone},
		{"one of two approvals", []*apiReview{review("a", reviewApproved, true, false)}, two, scm.ReviewRequired},
		{"two approvals", []*apiReview{review("a", reviewApproved, true, false), review("b", reviewApproved, true, false)}, two, scm.ReviewApproved},
		{"a stale approval ignored by the rule", []*apiReview{staleApproval}, stale, scm.ReviewRequired},
		{"a stale approval counts without the rule", []*apiReview{staleApproval}, protected(apiBranch{RequiredApprovals: 1}, nil), scm.ReviewApproved},
	} {
		NewWithT(t).Expect(reviewDecision(tc.reviews, tc.prot)).To(Equal(tc.want), tc.name)
	}
}

func TestThreadsGroupByFileAndLine(t *testing.T) {
	g := NewWithT(t)
	at := func(s int) time.Time { return time.Unix(int64(1000+s), 0) }
	resolver := &apiUser{Login: "alice"}
	comments := []*apiReviewComment{
		{ID: 10, Body: "reply", User: &apiUser{Login: "bob"}, Path: "a.go", Position: 3, Created: at(5)},
		{ID: 7, Body: "root", User: &apiUser{Login: "alice"}, Path: "a.go", Position: 3, Created: at(1), HTMLURL: "u7"},
		{ID: 8, Body: "old side", User: &apiUser{Login: "alice"}, Path: "a.go", OrigPosition: 3, Created: at(2)},
		{ID: 9, Body: "resolved", User: &apiUser{Login: "alice"}, Path: "b.go", Position: 1, Created: at(3), Resolver: resolver},
		{ID: 11, Body: "ghost", Path: "c.go", Position: 2, Created: at(4)},
	}
	got := threads(comments)
	g.Expect(got).To(Equal([]scm.ReviewThread{
		{ID: "7", Author: "alice", Path: "a.go", Line: 3, Body: "root", URL: "u7"},
		{ID: "8", Author: "alice", Path: "a.go", Line: 3, Body: "old side"},
		{ID: "11", Author: "Ghost", Path: "c.go", Line: 2, Body: "ghost"},
	}))
}

func TestMergeableMapping(t *testing.T) {
	g := NewWithT(t)
	g.Expect(mergeable(openPull(true), false)).To(Equal(scm.MergeableTrue))
	g.Expect(mergeable(openPull(false), false)).To(Equal(scm.MergeableUnknown), "false may be the check running")
	g.Expect(mergeable(openPull(false), true)).To(Equal(scm.MergeableFalse))
	g.Expect(mergeable(&apiPull{State: "closed", Mergeable: true}, false)).To(Equal(scm.MergeableUnknown))
}

func TestSettledPairsBecomeConflicts(t *testing.T) {
	g := NewWithT(t)
	p, err := New(scm.Config{APIURL: "http://127.0.0.1:1", Token: []byte("t")})
	g.Expect(err).NotTo(HaveOccurred())
	repo := scm.Repo{Owner: "o", Name: "r"}
	pull := openPull(false)
	start := time.Unix(5000, 0)
	g.Expect(p.noteFalse(repo, pull, start)).To(BeFalse())
	g.Expect(p.noteFalse(repo, pull, start.Add(conflictSettle-time.Millisecond))).To(BeFalse())
	g.Expect(p.noteFalse(repo, pull, start.Add(conflictSettle))).To(BeTrue())
	g.Expect(p.knownConflict(repo, pull)).To(BeTrue())
	moved := openPull(false)
	moved.Head.SHA = "h2"
	g.Expect(p.knownConflict(repo, moved)).To(BeFalse(), "a new head is a new pair")
	g.Expect(p.noteFalse(repo, moved, start.Add(time.Hour))).To(BeFalse())
	// Read mergeable after all (a check slower than conflictSettle): forgotten.
	p.noteTrue(repo, openPull(true))
	g.Expect(p.knownConflict(repo, pull)).To(BeFalse())
}

func TestRetryableMergeRefusals(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   bool
	}{
		{http.StatusMethodNotAllowed, `{"message":"Please try again later"}`, true},
		{http.StatusMethodNotAllowed, `{"message":"Not all required status checks successful"}`, false},
		{http.StatusMethodNotAllowed, `{"message":"Does not have enough approvals"}`, false},
		{http.StatusMethodNotAllowed, `{"message":"Work in progress PRs cannot be merged"}`, false},
		{http.StatusConflict, `{"message":"merge push out of date"}`, true},
		{http.StatusConflict, `{"message":"head out of date"}`, false},
		{http.StatusConflict, `{"Message":"Merge Conflict"}`, false},
	} {
		got := retryableMerge(&response{status: tc.status, body: []byte(tc.body)})
		NewWithT(t).Expect(got).To(Equal(tc.want), tc.body)
	}
}

// tryAgainLater answers every merge of pull request 1 of o/r with Gitea's 405 "Please try again
// later" and every read of it with an open, mergeable pull request at head h1, and counts the
// requests; anything else is a 404 it records.
type tryAgainLater struct {
	mu            sync.Mutex
	merges, reads int
	unexpected    []string
	server        *httptest.Server
}

func newTryAgainLater(t *testing.T) *tryAgainLater {
	f := &tryAgainLater{}
	f.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/repos/o/r/pulls/1/merge":
			f.merges++
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = w.Write([]byte(`{"message":"Please try again later","url":"http://gitea.example/api/swagger"}`))
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/repos/o/r/pulls/1":
			f.reads++
			_ = json.NewEncoder(w).Encode(openPull(true))
		default:
			f.unexpected = append(f.unexpected, r.Method+" "+r.URL.Path)
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"not found"}`))
		}
	}))
	t.Cleanup(f.server.Close)
	return f
}

func (f *tryAgainLater) counts() (merges, reads int, unexpected []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.merges, f.reads, append([]string(nil), f.unexpected...)
}

// TestMergeRetryIsBounded: a Gitea that keeps answering "try again later" gets the merge retried
// with a growing pause (250 ms doubling, at most 4 s) for at most mergeRetryBudget of the
// provider's clock, or until the context's deadline when that comes first, and then the refusal
// is returned. The clock is simulated: its sleeps cost no time.
func TestMergeRetryIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		sleeps   []time.Duration
	}{
		{"the retry budget", 0, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
			4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}},
		{"an earlier context deadline", 10 * time.Second, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond,
			time.Second, 2 * time.Second, 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newTryAgainLater(t)
			clock := scmtest.NewClock()
			clock.Set(time.Now())
			p, err := New(scm.Config{APIURL: f.server.URL, Token: []byte("token"), Clock: clock})
			g.Expect(err).NotTo(HaveOccurred())
			mctx := context.Background()
			limit := mergeRetryBudget
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				mctx, cancel = context.WithDeadline(mctx, clock.Now().Add(tc.deadline))
				defer cancel()
				limit = tc.deadline
			}

			_, err = p.MergePullRequest(mctx, scm.Repo{Owner: "o", Name: "r"}, 1, scm.MergeOptions{ExpectedHeadSHA: "h1"})
			g.Expect(errors.Is(err, scm.ErrNotMergeable)).To(BeTrue(), "%v", err)
			var ae *scm.APIError
			g.Expect(errors.As(err, &ae)).To(BeTrue(), "%v", err)
			g.Expect(ae.Status).To(Equal(http.StatusMethodNotAllowed))
			g.Expect(ae.Message).To(ContainSubstring("try again later"))

			// The pauses grew as documented, stayed within the limit, and one more would not have.
			sleeps := clock.Sleeps()
			g.Expect(sleeps).To(Equal(tc.sleeps))
			var waited time.Duration
			for _, d := range sleeps {
				waited += d
			}
			g.Expect(waited).To(BeNumerically("<=", limit))
			g.Expect(waited + mergeMaxBackoff).To(BeNumerically(">", limit))
			// One merge per pause and a last one, each refusal followed by a read of the pull request.
			merges, reads, unexpected := f.counts()
			g.Expect(merges).To(Equal(len(sleeps) + 1))
			g.Expect(reads).To(Equal(merges))
			g.Expect(unexpected).To(BeEmpty())
		})
	}
}
