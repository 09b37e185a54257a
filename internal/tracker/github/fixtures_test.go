package github

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// These tests feed the tracker GitHub's documented answers (test/fakegithub/testdata), not the
// fake's, so that the fake and the tracker cannot drift from GitHub together.

// documentedIssue is GitHub's "Get an issue" example. That example is a pull request (it carries
// the pull_request key, as GitHub's issues API answers for pull requests); asIssue drops the key
// to get the same answer for a plain issue, and state overrides the state when set.
func documentedIssue(t *testing.T, asIssue bool, state string) []byte {
	t.Helper()
	var is map[string]any
	NewWithT(t).Expect(json.Unmarshal(fakegithub.Fixture("rest/issue.json"), &is)).To(Succeed())
	if asIssue {
		delete(is, "pull_request")
	}
	if state != "" {
		is["state"] = state
	}
	b, err := json.Marshal(is)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b
}

// fixtureGitHub serves documented answers for octocat/Hello-World and records the requests.
type fixtureGitHub struct {
	mu       sync.Mutex
	issue    []byte
	pull     []byte
	requests []string
	bodies   []string
}

func (f *fixtureGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.bodies = append(f.bodies, string(b))
	issue, pull := f.issue, f.pull
	f.mu.Unlock()
	answer := func(status int, body []byte) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /repos/octocat/Hello-World/issues/1347":
		answer(http.StatusOK, issue)
	case "GET /repos/octocat/Hello-World/issues/1347/comments":
		answer(http.StatusOK, fakegithub.Fixture("rest/issue-comments.json"))
	case "GET /repos/octocat/Hello-World/issues":
		// The documented pull request first, then the same answer as a plain issue.
		answer(http.StatusOK, []byte("["+string(pull)+","+string(issue)+"]"))
	case "POST /repos/octocat/Hello-World/issues/1347/labels", "DELETE /repos/octocat/Hello-World/issues/1347/labels/bug":
		answer(http.StatusOK, fakegithub.Fixture("rest/labels.json"))
	case "DELETE /repos/octocat/Hello-World/issues/1347/labels/absent":
		answer(http.StatusNotFound, []byte(`{"message":"Label does not exist","documentation_url":"https://docs.github.com/rest/issues/labels#remove-a-label-from-an-issue","status":"404"}`))
	default:
		answer(http.StatusNotFound, []byte(`{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`))
	}
}

func fixtureTracker(t *testing.T, issue []byte) (*fixtureGitHub, tracker.Tracker) {
	t.Helper()
	f := &fixtureGitHub{issue: issue, pull: documentedIssue(t, false, "")}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	tr, err := tracker.New(tracker.Config{Provider: "github", APIURL: srv.URL, Token: []byte("t"),
		Repo: scm.Repo{Owner: "octocat", Name: "Hello-World"}})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return f, tr
}

func TestParseDocumentedIssueAndComments(t *testing.T) {
	g := NewWithT(t)
	_, tr := fixtureTracker(t, documentedIssue(t, true, ""))
	is, err := tr.GetIssue(context.Background(), "#1347")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(is.ID).To(Equal("1347"))
	g.Expect(is.Key).To(Equal("1347"))
	g.Expect(is.Title).To(Equal("Found a bug"))
	g.Expect(is.Body).To(Equal("I'm having a problem with this."))
	g.Expect(is.URL).To(Equal("https://github.com/octocat/Hello-World/issues/1347"))
	g.Expect(is.Labels).To(Equal([]string{"bug"}))
	g.Expect(is.State).To(Equal("open"))
	g.Expect(is.Completed).To(BeFalse())
	g.Expect(is.Comments).To(Equal([]tracker.Comment{{Author: "octocat", Association: scm.AssociationCollaborator, Body: "Me too",
		CreatedAt: time.Date(2011, 4, 14, 16, 0, 49, 0, time.UTC)}}))
}

func TestDocumentedPullRequestIsNotAnIssue(t *testing.T) {
	g := NewWithT(t)
	// GitHub's own example answer carries pull_request: the issues API is answering for a pull
	// request, which a session cannot work from.
	f, tr := fixtureTracker(t, documentedIssue(t, false, ""))
	_, err := tr.GetIssue(context.Background(), "1347")
	g.Expect(errors.Is(err, tracker.ErrInvalidID)).To(BeTrue(), "%v", err)
	g.Expect(f.requests).To(Equal([]string{"GET /repos/octocat/Hello-World/issues/1347"}), "no comments read for a pull request")

	list, err := tr.ListIssues(context.Background(), tracker.ListOptions{Labels: []string{"bug"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty(), "both answers are the pull request")
}

func TestDocumentedListCompletionAndLabels(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f, tr := fixtureTracker(t, documentedIssue(t, true, ""))

	list, err := tr.ListIssues(ctx, tracker.ListOptions{Labels: []string{"bug"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(1), "the pull request in the list is left out")
	g.Expect(list[0].ID).To(Equal("1347"))
	g.Expect(list[0].Labels).To(Equal([]string{"bug"}))
	g.Expect(list[0].Comments).To(BeEmpty())

	done, err := tr.IsCompleted(ctx, "1347")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeFalse())
	f.mu.Lock()
	f.issue = documentedIssue(t, true, "closed")
	f.mu.Unlock()
	done, err = tr.IsCompleted(ctx, "1347")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(done).To(BeTrue())

	// Adding and removing labels answer GitHub's documented label list.
	g.Expect(tr.AddLabels(ctx, "1347", "bug")).To(Succeed())
	g.Expect(tr.RemoveLabels(ctx, "1347", "bug", "absent")).To(Succeed(), "an absent label (404) is the wanted state")
	f.mu.Lock()
	defer f.mu.Unlock()
	g.Expect(f.requests).To(ContainElements(
		"POST /repos/octocat/Hello-World/issues/1347/labels",
		"DELETE /repos/octocat/Hello-World/issues/1347/labels/bug",
		"DELETE /repos/octocat/Hello-World/issues/1347/labels/absent"))
	for i, r := range f.requests {
		if r == "POST /repos/octocat/Hello-World/issues/1347/labels" {
			g.Expect(f.bodies[i]).To(MatchJSON(`["bug"]`), "GitHub takes the labels as a bare array too")
		}
	}
}
