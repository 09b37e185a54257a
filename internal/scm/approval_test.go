package scm

import (
	"testing"
	"time"
)

func TestApprovedAt(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	approve := func(who, sha string, m int) Review {
		return Review{Author: who, State: ReviewStateApproved, CommitSHA: sha, SubmittedAt: at(m)}
	}
	for _, tc := range []struct {
		name    string
		reviews []Review
		want    bool
	}{
		{"no review", nil, false},
		{"an approval at the head", []Review{approve("ana", "h2", 1)}, true},
		{"an approval of an earlier head", []Review{approve("ana", "h1", 1)}, false},
		{"an approval without a commit (a forge that does not say)", []Review{approve("ana", "", 1)}, false},
		{"an earlier head's approval, then this head's by another", []Review{approve("ana", "h1", 1), approve("bo", "h2", 2)}, true},
		{"approved, then changes requested by the same reviewer", []Review{approve("ana", "h2", 1),
			{Author: "ana", State: ReviewStateChangesRequested, CommitSHA: "h2", SubmittedAt: at(2)}}, false},
		{"changes requested by another reviewer", []Review{approve("ana", "h2", 2),
			{Author: "bo", State: ReviewStateChangesRequested, CommitSHA: "h1", SubmittedAt: at(1)}}, false},
		{"a comment after the approval does not undo it", []Review{approve("ana", "h2", 1),
			{Author: "ana", State: ReviewStateCommented, CommitSHA: "h2", SubmittedAt: at(2)}}, true},
		{"a dismissed approval", []Review{{Author: "ana", State: ReviewStateApproved, Dismissed: true, CommitSHA: "h2", SubmittedAt: at(1)}}, false},
		{"GitHub's dismissal", []Review{approve("ana", "h2", 1), {Author: "ana", State: ReviewStateDismissed, Dismissed: true, SubmittedAt: at(2)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := &PullRequest{HeadSHA: "h2", Reviews: tc.reviews}
			if got := pr.ApprovedAt("h2"); got != tc.want {
				t.Fatalf("ApprovedAt = %v, want %v", got, tc.want)
			}
		})
	}
	if (*PullRequest)(nil).ApprovedAt("h2") {
		t.Fatal("a missing pull request is not approved")
	}
}
