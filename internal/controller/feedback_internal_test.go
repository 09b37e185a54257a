package controller

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// TestFeedbackShape: what a Project's feedback settings let through to the lifecycle, and how
// every forwarded body is bounded.
func TestFeedbackShape(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	pr := &scm.PullRequest{Author: "shepherd-bot", Comments: []scm.Comment{
		{ID: "1", Author: "alice", Body: "/ship why?", CreatedAt: t0},
		{ID: "2", Author: "alice", Body: "no prefix", CreatedAt: t0},
		{ID: "3", Author: "Shepherd-Bot", Body: "/ship from myself", CreatedAt: t0},
		{ID: "4", Author: "bob", Body: "/ship " + strings.Repeat("y", 5000), CreatedAt: t0},
		{ID: "5", Author: "bob", Body: "/ship   ", CreatedAt: t0},
	}, Reviews: []scm.Review{
		{ID: "r1", Author: "bot[bot]", State: scm.ReviewStateCommented, Body: "2 findings", SubmittedAt: t0},
		{ID: "r2", Author: "bot[bot]", State: scm.ReviewStateCommented, Body: "dismissed", Dismissed: true},
		{ID: "r3", Author: "carol", State: scm.ReviewStateApproved, Body: "LGTM"},
		{ID: "r4", Author: "carol", State: scm.ReviewStateCommented, Body: "  "},
	}}
	ev := lifecycle.PullRequestEvidence{Exists: true,
		Threads:        []lifecycle.ReviewThread{{ID: "t", Body: strings.Repeat("z", 3000)}},
		ChangeRequests: []lifecycle.Review{{ID: "c", Body: strings.Repeat("w", 3000)}}}
	p := &agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{Feedback: &agentsv1alpha1.FeedbackSpec{CommandPrefix: "/ship", MaxCommentBytes: ptrTo(int32(500))}}}
	feedbackOf(p).shape(&ev, pr)

	ids := []string{}
	for _, c := range ev.Comments {
		ids = append(ids, c.ID)
		g.Expect(len(c.Body)).To(BeNumerically("<=", 500))
	}
	g.Expect(ids).To(Equal([]string{"1", "4", "review:r1"}))
	g.Expect(ev.Comments[0]).To(And(HaveField("Body", "why?"), HaveField("Question", true)))
	g.Expect(ev.Comments[1].Body).To(HaveSuffix(cutMark))
	g.Expect(ev.Comments[2]).To(And(HaveField("Review", true), HaveField("Body", "2 findings"), HaveField("CreatedAt", t0)))
	g.Expect(ev.Threads[0].Body).To(HaveLen(500))
	g.Expect(ev.ChangeRequests[0].Body).To(HaveLen(500))

	// The defaults: no prefix, 2000 bytes.
	ev = lifecycle.PullRequestEvidence{Exists: true}
	feedbackOf(nil).shape(&ev, pr)
	g.Expect(ev.Comments).To(HaveLen(5))
	g.Expect(ev.Comments[2].Body).To(HaveLen(agentsv1alpha1.DefaultMaxCommentBytes))
}
