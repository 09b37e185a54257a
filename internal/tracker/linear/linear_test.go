package linear

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/gitref"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/tracker/trackertest"
	"github.com/shepherd-dev/shepherd/test/fakelinear"
)

func setup(t *testing.T) (*fakelinear.Server, tracker.Tracker) {
	t.Helper()
	fake := fakelinear.New("lin_api_key")
	fake.Start()
	t.Cleanup(fake.Close)
	fake.AddTeam("ENG", "Engineering")
	fake.AddTeam("OPS", "Operations")
	tr, err := tracker.New(tracker.Config{Provider: "linear", APIURL: fake.URL(), Token: []byte("lin_api_key"), TeamKey: "ENG"})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return fake, tr
}

func TestLinearIssueToBranchAndPrompt(t *testing.T) {
	g := NewWithT(t)
	fake, tr := setup(t)
	ctx := context.Background()
	title := "Crash when name has ; rm -rf ~ && `id` — 日本語 🚀 " + strings.Repeat("x", 250)
	key := fake.AddIssue("ENG", fakelinear.Issue{Title: title, Description: "Repro: open $(settings)", Labels: []string{"bug"},
		Comments: []fakelinear.Comment{{Author: "bob", Body: "seen in prod", CreatedAt: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)},
			{Author: "gus", Guest: true, Body: "me too", CreatedAt: time.Date(2026, 11, 2, 1, 0, 0, 0, time.UTC)},
			{Body: "synced from the support desk", CreatedAt: time.Date(2026, 11, 2, 2, 0, 0, 0, time.UTC)}}})
	g.Expect(key).To(Equal("ENG-1"))

	is, err := tr.GetIssue(ctx, "eng-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(is.ID).To(Equal("ENG-1"))
	g.Expect(is.Key).To(Equal("eng-1"))
	g.Expect(is.Title).To(Equal(title))
	g.Expect(is.Body).To(Equal("Repro: open $(settings)"))
	g.Expect(is.Labels).To(ConsistOf("bug"))
	g.Expect(is.Comments).To(HaveLen(3))
	g.Expect(is.Comments[0].Author).To(Equal("bob"))
	g.Expect([]scm.Association{is.Comments[0].Association, is.Comments[1].Association, is.Comments[2].Association}).To(Equal(
		[]scm.Association{scm.AssociationMember, scm.AssociationCollaborator, scm.AssociationNone}), "members, guests, and comments an integration synced in")

	branch, err := tracker.BranchName("agents/", is)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gitref.ValidateBranch(branch)).To(Succeed())
	g.Expect(branch).To(HavePrefix("agents/eng-1-crash-when-name-has-rm-rf-id-"))

	prompt, err := tracker.RenderPrompt("Fix {{.Issue.ID}} on {{.Branch}}: {{.Issue.Title}}", tracker.NewPromptData(is, tracker.PromptProject{Name: "w"}, branch))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(prompt).To(Equal("Fix ENG-1 on " + branch + ": " + title + "\n"))
}

func TestLinearLabelsCompletionAndList(t *testing.T) {
	g := NewWithT(t)
	fake, tr := setup(t)
	ctx := context.Background()
	a := fake.AddIssue("ENG", fakelinear.Issue{Title: "A", Labels: []string{"agent:backlog"}})
	b := fake.AddIssue("ENG", fakelinear.Issue{Title: "B", Labels: []string{"agent:backlog", "p1"}})
	c := fake.AddIssue("ENG", fakelinear.Issue{Title: "C", Labels: []string{"agent:backlog"}})
	fake.SetState(c, "Done", "completed")
	fake.AddIssue("OPS", fakelinear.Issue{Title: "other team", Labels: []string{"agent:backlog"}})

	list, err := tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"agent:backlog"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(2))
	g.Expect(list[0].ID).To(Equal(b))
	list, err = tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"agent:backlog", "p1"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(1))

	g.Expect(tr.AddLabels(ctx, a, "agent:in-progress")).To(Succeed())
	g.Expect(tr.RemoveLabels(ctx, a, "agent:backlog", "absent")).To(Succeed())
	g.Expect(fake.Labels(a)).To(Equal([]string{"agent:in-progress"}))

	done, err := tr.IsCompleted(ctx, c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeTrue())
	done, err = tr.IsCompleted(ctx, a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeFalse())
	fake.SetState(a, "Canceled", "canceled")
	done, _ = tr.IsCompleted(ctx, a)
	g.Expect(done).To(BeTrue())

	before := fake.Requests()
	closed, err := tr.Closed(ctx, []string{a, strings.ToLower(b), c, "OPS-1", "nonsense"}, time.Time{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(closed).To(Equal(map[string]string{a: "Canceled", c: "Done"}), "done and cancelled, not the open one nor another team's")
	g.Expect(fake.Requests()-before).To(Equal(1), "one query for every id")

	_, err = tr.GetIssue(ctx, "ENG-99")
	g.Expect(errors.Is(err, tracker.ErrNotFound)).To(BeTrue())
	_, err = tr.GetIssue(ctx, "OPS-1")
	g.Expect(errors.Is(err, tracker.ErrInvalidID)).To(BeTrue())
	_, err = tr.GetIssue(ctx, "42; drop")
	g.Expect(errors.Is(err, tracker.ErrInvalidID)).To(BeTrue())

	bad, err := tracker.New(tracker.Config{Provider: "linear", APIURL: fake.URL(), Token: []byte("wrong"), TeamKey: "ENG"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = bad.GetIssue(ctx, a)
	g.Expect(errors.Is(err, scm.ErrTokenRejected)).To(BeTrue())
}

func TestLinearHostileTitlesToBranchAndPrompt(t *testing.T) {
	fake, tr := setup(t)
	ctx := context.Background()
	seen := map[string]string{}
	for _, tc := range trackertest.HostileTitles {
		t.Run(tc.Name, func(t *testing.T) {
			g := NewWithT(t)
			id := fake.AddIssue("ENG", fakelinear.Issue{Title: tc.Title, Description: "Repro: open $(settings)"})
			is, err := tr.GetIssue(ctx, id)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(is.ID).To(Equal(id))
			g.Expect(is.Title).To(Equal(tc.Title), "the title reaches Shepherd verbatim")

			branch, err := tracker.BranchName("agents/", is)
			g.Expect(err).NotTo(HaveOccurred())
			trackertest.ExpectValidBranch(t, branch, "agents/", strings.ToLower(id))
			again, err := tracker.BranchName("agents/", is)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(Equal(branch), "stable")
			g.Expect(seen).NotTo(HaveKey(branch), "collision-safe")
			seen[branch] = tc.Name

			prompt, err := tracker.RenderPrompt("", tracker.NewPromptData(is, tracker.PromptProject{Name: "w"}, branch))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(prompt).To(ContainSubstring("Work on " + id + ": " + tc.Title))
			g.Expect(prompt).To(ContainSubstring(branch))
		})
	}
}
