package gitea

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/scm"
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
