package github

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	gh "github.com/google/go-github/v88/github"
	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// These tests feed the adapter's parsers with GitHub's documented shapes (test/fakegithub/
// testdata), not with the fake's answers, so that the fake and the adapter cannot drift from
// GitHub together.

func TestConvertDocumentedRESTPullRequest(t *testing.T) {
	g := NewWithT(t)
	var pr gh.PullRequest
	g.Expect(json.Unmarshal(fakegithub.Fixture("rest/pull-request.json"), &pr)).To(Succeed())
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	got := ConvertREST(scm.Repo{Owner: "octocat", Name: "Hello-World"}, &pr, now)
	g.Expect(got.Number).To(Equal(1347))
	g.Expect(got.URL).To(Equal("https://github.com/octocat/Hello-World/pull/1347"))
	g.Expect(got.Title).To(Equal("Amazing new feature"))
	g.Expect(got.Head).To(Equal(scm.Head{Owner: "octocat", Branch: "new-topic"}))
	g.Expect(got.HeadSHA).To(Equal("6dcb09b5b57875f334f61aebed695e2e4193db5e"))
	g.Expect(got.BaseRef).To(Equal("master"))
	g.Expect(got.Mergeable).To(Equal(scm.MergeableTrue))
	g.Expect(got.MergeState).To(Equal(scm.MergeStateClean))
	// GitHub's example carries merged_at: a pull request with merged_at set was merged.
	g.Expect(got.State).To(Equal(scm.StateMerged))
	g.Expect(got.MergeCommitSHA).To(Equal("e5bd3914e2e596debea16f433f57875b5b90bcd6"))
	g.Expect(got.FetchedAt).To(Equal(now))
}

// fixtureServer answers every GraphQL request with one documented response and every REST
// request with 404.
func fixtureServer(t *testing.T, body []byte) *Provider {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/graphql" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	p, err := New(scm.Config{APIURL: srv.URL, Token: []byte("t"), Clock: scmtest.NewClock()})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return p
}

func TestParseDocumentedGraphQLPullRequest(t *testing.T) {
	g := NewWithT(t)
	p := fixtureServer(t, fakegithub.Fixture("graphql/pull-request.json"))
	repo := scm.Repo{Owner: "octocat", Name: "Hello-World"}
	res, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: repo, Number: 1347}, Full: true}})
	g.Expect(err).NotTo(HaveOccurred())
	pr := res[0].PullRequest
	g.Expect(pr).NotTo(BeNil())
	g.Expect(pr.Number).To(Equal(1347))
	g.Expect(pr.State).To(Equal(scm.StateOpen))
	g.Expect(pr.Head).To(Equal(scm.Head{Owner: "octocat", Branch: "new-topic"}))
	g.Expect(pr.MergeState).To(Equal(scm.MergeStateBlocked))
	g.Expect(pr.ReviewDecision).To(Equal(scm.ReviewChangesRequested))
	g.Expect(pr.Reviews).To(HaveLen(3))
	g.Expect(pr.Reviews[1].Dismissed).To(BeTrue())
	g.Expect(pr.Reviews[2].Author).To(Equal("ghost"), "a deleted account has a null author")
	g.Expect(pr.Threads).To(HaveLen(2))
	g.Expect(pr.Threads[0].Path).To(Equal("src/app.go"))
	g.Expect(pr.Threads[0].Line).To(Equal(42))
	g.Expect(pr.Threads[1].Outdated).To(BeTrue())
	g.Expect(pr.Threads[1].Line).To(Equal(7), "an outdated thread keeps its original line")
	c := pr.Checks
	g.Expect(c.State).To(Equal(scm.ChecksFailing))
	g.Expect(c.Total).To(Equal(4))
	g.Expect(c.Passed).To(Equal(1))
	g.Expect(c.Pending).To(Equal(1))
	g.Expect(c.RequiredFailed).To(Equal(1))
	g.Expect(c.FailedChecks).To(HaveLen(2))
	g.Expect(c.FailedChecks[0]).To(Equal(scm.Check{Name: "build", URL: "https://github.com/octocat/Hello-World/actions/runs/1/job/4711",
		Outcome: scm.CheckFailed, Conclusion: "failure", Required: true, App: "github-actions", JobID: 4711}))
	g.Expect(c.FailedChecks[1].Name).To(Equal("coverage"))
	g.Expect(c.FailedChecks[1].Conclusion).To(Equal("error"))
	g.Expect(res[0].Fingerprint).NotTo(BeEmpty())

	st := pr.Status()
	g.Expect(st.Checks).To(BeEquivalentTo("Failing"))
	g.Expect(st.ChecksSummary).To(Equal("1/4 passed, 2 failed, 1 pending"))
	g.Expect(st.FailedChecks).To(HaveLen(2))
	g.Expect(st.ReviewDecision).To(BeEquivalentTo("ChangesRequested"))
}

func TestParseDocumentedGraphQLNotFound(t *testing.T) {
	g := NewWithT(t)
	p := fixtureServer(t, fakegithub.Fixture("graphql/not-found.json"))
	res, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: scm.Repo{Owner: "o", Name: "r"}, Number: 99999}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res[0].PullRequest).To(BeNil())
	g.Expect(res[0].Err).NotTo(HaveOccurred())
}

func TestParseDocumentedGraphQLRateLimited(t *testing.T) {
	g := NewWithT(t)
	p := fixtureServer(t, fakegithub.Fixture("graphql/rate-limited.json"))
	_, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: scm.Repo{Owner: "o", Name: "r"}, Number: 1}}})
	var rl *scm.RateLimitError
	g.Expect(errors.As(err, &rl)).To(BeTrue())
	g.Expect(rl.Resource).To(Equal("graphql"))
}

func TestLogExcerpt(t *testing.T) {
	g := NewWithT(t)
	var lines []string
	for i := 0; i < 100; i++ {
		lines = append(lines, "2026-01-01T00:00:00.1234567Z step line")
	}
	lines = append(lines, "2026-01-01T00:00:00.1234567Z ##[error]boom", "2026-01-01T00:00:00.1234567Z Post job cleanup.")
	for i := 0; i < 50; i++ {
		lines = append(lines, "cleanup")
	}
	out := LogExcerpt(joinLines(lines))
	g.Expect(out).To(ContainSubstring("##[error]boom"))
	g.Expect(out).To(ContainSubstring("Post job cleanup."))
	g.Expect(out).NotTo(ContainSubstring("2026-01-01T"))
	g.Expect(len(out)).To(BeNumerically("<=", maxExcerpt))
	g.Expect(LogExcerpt("only\nlines\n")).To(Equal("only\nlines"))
}

func joinLines(l []string) string {
	out := ""
	for _, s := range l {
		out += s + "\n"
	}
	return out
}
