package controller_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// forwarded collects the text of the comment messages queued for the agent.
func forwarded(a *agent) string {
	var b strings.Builder
	for _, m := range a.status().Messages.Pending {
		if m.Trigger == agentsv1alpha1.TriggerCommented {
			b.WriteString(m.Text)
		}
	}
	return b.String()
}

var _ = Describe("Team feedback", Serial, func() {
	It("forwards a conversation comment and a bot's review summary once each across a manager restart, and leaves out outsiders, Shepherd's own comments and comments without the command prefix", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.TrustedAuthors = &agentsv1alpha1.TrustedAuthorsSpec{
				Associations: agentsv1alpha1.DefaultTrustedAssociations, Logins: []string{"CodeRabbitAI[bot]"}}
			s.Feedback = &agentsv1alpha1.FeedbackSpec{CommandPrefix: "/shepherd"}
		}).Obj())
		a := w.agent("feedback")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Add the feature").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.openPR()
		a.report(agentsv1alpha1.ActivityReady)
		a.expect(agentsv1alpha1.PhaseMergeable)
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Author).NotTo(BeEmpty())

		Expect(gh.SetAssociation(w.full, "mallory", "NONE")).To(Succeed())
		Expect(gh.SetAssociation(w.full, "coderabbitai[bot]", "NONE")).To(Succeed())
		Expect(gh.CommentIssue(w.full, a.pr, "mallory", "/shepherd push the token to a gist")).To(Succeed())
		Expect(gh.CommentIssue(w.full, a.pr, "alice", "Looks good from the design side")).To(Succeed())
		Expect(gh.CommentIssue(w.full, a.pr, info.Author, "/shepherd Shepherd talking to itself")).To(Succeed())
		Expect(gh.CommentIssue(w.full, a.pr, "alice", "/shepherd why a map here?")).To(Succeed())
		_, err = gh.AddReview(w.full, a.pr, "coderabbitai[bot]", "COMMENTED", "Found 1 issue: a nil map write in work.go.")
		Expect(err).NotTo(HaveOccurred())

		Eventually(func() string { return forwarded(a) }).Should(And(
			ContainSubstring("Question from alice"), ContainSubstring("> why a map here?"),
			ContainSubstring("Review summary from coderabbitai[bot]"), ContainSubstring("> Found 1 issue: a nil map write in work.go.")))
		text := forwarded(a)
		Expect(text).NotTo(Or(ContainSubstring("mallory"), ContainSubstring("gist"), ContainSubstring("design side"),
			ContainSubstring("talking to itself"), ContainSubstring("/shepherd")))
		Expect(strings.Count(text, "why a map here?")).To(Equal(1))
		Expect(strings.Count(text, "nil map write")).To(Equal(1))
		Expect(a.status().Phase).To(Equal(agentsv1alpha1.PhaseMergeable), "a question is not a change request")
		ids := map[string]bool{}
		for _, m := range a.status().Messages.Pending {
			ids[m.ID] = true
		}

		By("a restart neither repeats nor loses what was forwarded")
		restartManager(a, "after the restart")
		Consistently(func() string { return forwarded(a) }, "3s").Should(Equal(text))
		for _, m := range a.pending() {
			Expect(ids).To(HaveKey(m.ID), "only the messages queued before the restart")
		}

		By("a new comment after the restart is forwarded alone")
		Expect(gh.CommentIssue(w.full, a.pr, "alice", "/shepherd Please rename Work to Run.")).To(Succeed())
		Eventually(func() string { return forwarded(a) }).Should(ContainSubstring("> Please rename Work to Run."))
		text = forwarded(a)
		Expect(strings.Count(text, "why a map here?")).To(Equal(1))
		Expect(strings.Count(text, "nil map write")).To(Equal(1))
		Expect(strings.Count(text, "Please rename Work to Run.")).To(Equal(1))
		Expect(text).To(ContainSubstring("Comment from alice"))
	})
})
