package controller

import (
	"strings"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// cutMark ends a forwarded body cut at the Project's maxCommentBytes.
const cutMark = "\n[… cut: the rest is on the pull request]"

// feedbackPolicy is a Project's spec.feedback with its defaults.
type feedbackPolicy struct {
	prefix   string
	maxBytes int
}

func feedbackOf(p *agentsv1alpha1.Project) feedbackPolicy {
	f := feedbackPolicy{maxBytes: agentsv1alpha1.DefaultMaxCommentBytes}
	if p != nil && p.Spec.Feedback != nil {
		f.prefix = p.Spec.Feedback.CommandPrefix
		if m := p.Spec.Feedback.MaxCommentBytes; m != nil && *m > 0 {
			f.maxBytes = int(*m)
		}
	}
	return f
}

// shape fills the evidence's conversation from pr (already filtered to trusted authors) and
// bounds every body forwarded to the agent: threads and change requests too. The pull request's
// own author is the account Shepherd acts as: its comments are Shepherd's, never the team's
// feedback. Conversation comments pass the command prefix, when there is one; review summaries
// (reviews that only comment, a code-review bot's findings) need none.
func (f feedbackPolicy) shape(ev *lifecycle.PullRequestEvidence, pr *scm.PullRequest) {
	if pr == nil || !ev.Exists {
		return
	}
	for i := range ev.Threads {
		ev.Threads[i].Body = f.bound(ev.Threads[i].Body)
	}
	for i := range ev.ChangeRequests {
		ev.ChangeRequests[i].Body = f.bound(ev.ChangeRequests[i].Body)
	}
	self := func(login string) bool { return pr.Author != "" && strings.EqualFold(login, pr.Author) }
	for _, c := range pr.Comments {
		if self(c.Author) {
			continue
		}
		text, ok := lifecycle.CommandText(c.Body, f.prefix)
		if !ok || strings.TrimSpace(text) == "" {
			continue
		}
		ev.Comments = append(ev.Comments, lifecycle.Comment{ID: c.ID, Author: c.Author, Body: f.bound(text), URL: c.URL,
			CreatedAt: c.CreatedAt, Question: lifecycle.IsQuestion(text)})
	}
	for _, r := range pr.Reviews {
		if r.State != scm.ReviewStateCommented || r.Dismissed || strings.TrimSpace(r.Body) == "" || self(r.Author) {
			continue
		}
		ev.Comments = append(ev.Comments, lifecycle.Comment{ID: "review:" + r.ID, Author: r.Author, Body: f.bound(r.Body), URL: r.URL,
			CreatedAt: r.SubmittedAt, Review: true, Question: lifecycle.IsQuestion(r.Body)})
	}
}

// bound cuts a body at the Project's maxCommentBytes and says so.
func (f feedbackPolicy) bound(s string) string { return clip.Marked(s, f.maxBytes, cutMark) }
