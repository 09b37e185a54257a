package scm

import (
	"strings"
	"testing"
	"time"
)

func TestApplyFacts(t *testing.T) {
	head, next := strings.Repeat("a", 40), strings.Repeat("b", 40)
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	base := func() *PullRequest {
		runs := []Check{{Name: "build", App: "github-actions", Required: true, Outcome: CheckPending, Conclusion: "in_progress"},
			{Name: "lint", Outcome: CheckPassed, Conclusion: "success"}}
		pr := &PullRequest{Repo: Repo{Owner: "o", Name: "r"}, Number: 7, State: StateOpen, Head: Head{Branch: "b"}, HeadSHA: head, BaseRef: "main",
			Mergeable: MergeableTrue, MergeState: MergeStateBlocked, ReviewDecision: ReviewApproved, UpdatedAt: t0, Checks: Tally(runs)}
		return pr
	}
	failing := func() *PullRequest {
		pr := base()
		pr.Checks = Tally([]Check{{Name: "build", Required: true, Outcome: CheckFailed, Conclusion: "failure"}})
		pr.Checks.FailedChecks[0].LogExcerpt = "--- FAIL: TestX"
		return pr
	}
	for _, tc := range []struct {
		name     string
		pr       func() *PullRequest
		facts    []Fact
		relevant bool
		need     Need
		check    func(t *testing.T, before, after *PullRequest)
	}{
		{name: "merged", pr: base, relevant: true, need: NeedNothing,
			facts: []Fact{{Number: 7, PullRequest: &PullRequestFact{State: StateMerged, HeadSHA: head, BaseRef: "main", MergeCommitSHA: next, UpdatedAt: t0.Add(time.Minute)}}},
			check: func(t *testing.T, _, pr *PullRequest) {
				if pr.State != StateMerged || pr.MergeCommitSHA != next {
					t.Errorf("not merged: %+v", pr)
				}
			}},
		{name: "an older delivery than what was read", pr: base, relevant: true, need: NeedNothing,
			facts: []Fact{{Number: 7, PullRequest: &PullRequestFact{State: StateClosed, HeadSHA: head, UpdatedAt: t0.Add(-time.Minute)}}},
			check: func(t *testing.T, before, pr *PullRequest) {
				if pr != before {
					t.Errorf("applied: %+v", pr)
				}
			}},
		{name: "a push: the new head, its required checks pending, mergeability unknown", pr: base, relevant: true, need: NeedLater,
			facts: []Fact{{Branch: "b", SHA: next}},
			check: func(t *testing.T, _, pr *PullRequest) {
				if pr.HeadSHA != next || pr.Checks.State != ChecksPending || pr.Checks.Total != 1 || pr.Checks.RequiredPending != 1 || pr.MergeState != MergeStateUnknown {
					t.Errorf("head not moved: %+v %+v", pr.HeadSHA, pr.Checks)
				}
			}},
		{name: "a push to another branch", pr: base, facts: []Fact{{Branch: "main", SHA: next}}},
		{name: "a fork's branch of the same name is not this push's", relevant: false,
			pr:    func() *PullRequest { pr := base(); pr.Head.Owner = "forker"; return pr },
			facts: []Fact{{Branch: "b", SHA: next}}},
		{name: "the required check passes: approved, so whether it merges is asked at once", pr: base, relevant: true, need: NeedNow,
			facts: []Fact{{SHA: head, Check: &Check{Name: "build", App: "github-actions", Outcome: CheckPassed, Conclusion: "success"}}},
			check: func(t *testing.T, _, pr *PullRequest) {
				if pr.Checks.State != ChecksPassing || pr.Checks.Passed != 2 || !pr.Checks.Runs[0].Required || pr.MergeState != MergeStateUnknown {
					t.Errorf("checks: %+v", pr.Checks)
				}
			}},
		{name: "the required check passes, changes requested: no hurry", relevant: true, need: NeedLater,
			pr:    func() *PullRequest { pr := base(); pr.ReviewDecision = ReviewChangesRequested; return pr },
			facts: []Fact{{SHA: head, Check: &Check{Name: "build", Outcome: CheckPassed, Conclusion: "success"}}},
			check: func(t *testing.T, _, pr *PullRequest) {
				if pr.Checks.State != ChecksPassing {
					t.Errorf("checks: %+v", pr.Checks)
				}
			}},
		{name: "a check of an older commit", pr: base, facts: []Fact{{SHA: next, Check: &Check{Name: "build", Outcome: CheckPassed}}}},
		{name: "a new failure waits for the re-read, which brings its log", pr: base, relevant: true, need: NeedNow,
			facts: []Fact{{SHA: head, Check: &Check{Name: "build", Outcome: CheckFailed, Conclusion: "failure"}}},
			check: func(t *testing.T, before, pr *PullRequest) {
				if pr != before {
					t.Errorf("a failure without its log was applied: %+v", pr.Checks)
				}
			}},
		{name: "a passing optional check keeps a known failure's log", pr: failing, relevant: true, need: NeedNothing,
			facts: []Fact{{SHA: head, Check: &Check{Name: "docs", Outcome: CheckPassed, Conclusion: "success"}}},
			check: func(t *testing.T, _, pr *PullRequest) {
				if pr.Checks.State != ChecksFailing || len(pr.Checks.FailedChecks) != 1 || pr.Checks.FailedChecks[0].LogExcerpt != "--- FAIL: TestX" || pr.Checks.Total != 2 {
					t.Errorf("checks: %+v", pr.Checks)
				}
			}},
		{name: "the forge waits for a required check: an unseen one cannot be placed", relevant: true, need: NeedNow,
			pr:    func() *PullRequest { pr := base(); pr.Checks.Expected = true; return pr },
			facts: []Fact{{SHA: head, Check: &Check{Name: "e2e", Outcome: CheckPassed}}},
			check: func(t *testing.T, before, pr *PullRequest) {
				if pr != before {
					t.Errorf("applied: %+v", pr.Checks)
				}
			}},
		{name: "the same state again", pr: base, relevant: true, need: NeedNothing,
			facts: []Fact{{SHA: head, Check: &Check{Name: "lint", Outcome: CheckPassed, Conclusion: "success"}}},
			check: func(t *testing.T, before, pr *PullRequest) {
				if pr != before {
					t.Error("copied for nothing")
				}
			}},
		{name: "another pull request's facts", pr: base, facts: []Fact{{Number: 8, PullRequest: &PullRequestFact{State: StateClosed}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pr()
			snapshot := hashPR(before)
			after, relevant, need := ApplyFacts(before, tc.facts)
			if relevant != tc.relevant || need != tc.need {
				t.Fatalf("relevant %v need %v, want %v %v", relevant, need, tc.relevant, tc.need)
			}
			if hashPR(before) != snapshot {
				t.Fatal("the shared pull request was modified")
			}
			if !tc.relevant && after != before {
				t.Fatal("changed by an irrelevant fact")
			}
			if tc.check != nil {
				tc.check(t, before, after)
			}
		})
	}
}
