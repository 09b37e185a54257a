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
func fixtureServer(t *testing.T, body []byte, opts ...func(*scm.Config)) *Provider {
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
	cfg := scm.Config{APIURL: srv.URL, Token: []byte("t"), Clock: scmtest.NewClock()}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
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

	g.Expect(c.Summary()).To(Equal("1/4 passed, 2 failed, 1 pending"))
	g.Expect(pr.ReviewDecision).To(Equal(scm.ReviewChangesRequested))
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
	m := newMetrics(t)
	clock := scmtest.NewClock()
	p := fixtureServer(t, fakegithub.Fixture("graphql/rate-limited.json"), func(c *scm.Config) { c.Metrics, c.Clock = m, clock })
	_, err := p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: scm.Repo{Owner: "o", Name: "r"}, Number: 1}}})
	var rl *scm.RateLimitError
	g.Expect(errors.As(err, &rl)).To(BeTrue())
	g.Expect(rl.Resource).To(Equal("graphql"))
	// The answer is a 200, but a refusal: counted as rate limited, never as ok. Without a known
	// reset the adapter waits a minute once, then reports.
	g.Expect(clock.Sleeps()).To(Equal([]time.Duration{time.Minute}))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.probe", scm.OutcomeRateLimited)).To(Equal(2.0))
	g.Expect(requests(m, scm.KindGraphQL, "pulls.probe", scm.OutcomeOK)).To(Equal(0.0))
}

// restFixtureServer answers the listed "METHOD /path" routes with documented bodies and
// everything else with 404.
func restFixtureServer(t *testing.T, routes map[string]fixtureAnswer) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

type fixtureAnswer struct {
	status int
	body   []byte
}

func TestParseDocumentedRepository(t *testing.T) {
	g := NewWithT(t)
	url := restFixtureServer(t, map[string]fixtureAnswer{
		"GET /repos/octocat/Hello-World": {http.StatusOK, fakegithub.Fixture("rest/repository.json")},
	})
	p, err := New(scm.Config{APIURL: url, Token: []byte("t"), Clock: scmtest.NewClock()})
	g.Expect(err).NotTo(HaveOccurred())
	repo := scm.Repo{Owner: "octocat", Name: "Hello-World"}
	info, err := p.CheckAccess(ctx, repo)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info).To(Equal(scm.RepoInfo{Repo: repo, DefaultBranch: "master", Private: false, CanPush: false}),
		"GitHub's example grants pull only: no push")
}

func TestParseDocumentedInstallationToken(t *testing.T) {
	g := NewWithT(t)
	key, err := fakegithub.NewAppKey()
	g.Expect(err).NotTo(HaveOccurred())
	url := restFixtureServer(t, map[string]fixtureAnswer{
		"POST /app/installations/4242/access_tokens": {http.StatusCreated, fakegithub.Fixture("rest/installation-token.json")},
	})
	p, err := New(scm.Config{APIURL: url, App: &scm.AppCredentials{AppID: 42, InstallationID: 4242, PrivateKey: key}, Clock: scmtest.NewClock()})
	g.Expect(err).NotTo(HaveOccurred())
	cred, err := p.PushCredential(ctx, scm.Repo{Owner: "octocat", Name: "Hello-World"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cred).To(Equal(scm.Credential{Username: "x-access-token", Password: "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
		ExpiresAt: time.Date(2016, 7, 11, 22, 14, 10, 0, time.UTC)}))
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
