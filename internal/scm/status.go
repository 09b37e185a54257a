package scm

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Limits of the API's PullRequestStatus fields, repeated so that conversion never produces an
// object the API server refuses.
const (
	maxStatusFailedChecks = 20
	maxStatusName         = 256
	maxStatusURL          = 2048
	maxStatusSummary      = 256
	maxStatusBranch       = 255
)

// Status converts a pull request into the AgentSession's status block, within the API's bounds.
func (pr *PullRequest) Status() agentsv1alpha1.PullRequestStatus {
	st := agentsv1alpha1.PullRequestStatus{
		Number:            int64(pr.Number),
		URL:               clip.To(pr.URL, maxStatusURL),
		State:             agentsv1alpha1.PullRequestState(pr.State),
		Draft:             pr.Draft,
		HeadSHA:           clip.To(pr.HeadSHA, 64),
		BaseBranch:        clip.To(pr.BaseRef, maxStatusBranch),
		Checks:            agentsv1alpha1.ChecksState(orDefault(string(pr.Checks.State), string(ChecksNone))),
		ChecksSummary:     clip.To(pr.Checks.Summary(), maxStatusSummary),
		ReviewDecision:    agentsv1alpha1.ReviewDecision(orDefault(string(pr.ReviewDecision), string(ReviewNone))),
		UnresolvedThreads: int32(min(len(pr.Threads), 1<<30)),
		MergeState:        agentsv1alpha1.MergeState(orDefault(string(pr.MergeState), string(MergeStateUnknown))),
		MergeCommitSHA:    clip.To(pr.MergeCommitSHA, 64),
	}
	for _, c := range pr.Checks.FailedChecks {
		if len(st.FailedChecks) == maxStatusFailedChecks {
			break
		}
		st.FailedChecks = append(st.FailedChecks, agentsv1alpha1.CheckRef{
			Name: clip.To(c.Name, maxStatusName),
			URL:  clip.To(c.URL, maxStatusURL),
		})
	}
	if !pr.FetchedAt.IsZero() {
		t := metav1.NewTime(pr.FetchedAt)
		st.LastChangeTime = &t
	}
	return st
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
