package fakegithub

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
	. "github.com/onsi/gomega"
)

// recorder collects webhooks in-process.
type recorder struct {
	mu   sync.Mutex
	byEv map[string][][]byte
	// sigs are the X-Hub-Signature-256 headers, in the order of byEv's bodies.
	sigs map[string][]string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	ev := req.Header.Get("X-GitHub-Event")
	r.mu.Lock()
	r.byEv[ev] = append(r.byEv[ev], b)
	r.sigs[ev] = append(r.sigs[ev], req.Header.Get("X-Hub-Signature-256"))
	r.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// helloWorld starts a fake (opts, with signed webhooks to a recorder) with the token "tok" of
// octocat and the empty repository octocat/Hello-World.
func helloWorld(t *testing.T, opts Options) (*Server, *recorder) {
	t.Helper()
	g := NewWithT(t)
	rec := &recorder{byEv: map[string][][]byte{}, sigs: map[string][]string{}}
	opts.Dir, opts.WebhookHandler, opts.WebhookSecret = t.TempDir(), rec, []byte("s3cret")
	s, err := New(opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = s.Close() })
	s.AddToken("tok", "octocat")
	_, err = s.CreateRepo("octocat/Hello-World", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	return s, rec
}

// world builds a repository with a pull request that has checks, statuses, reviews, threads and
// an issue, so that every shape the fake serves is populated.
func world(t *testing.T) (*Server, *recorder, int) {
	t.Helper()
	g := NewWithT(t)
	s, rec := helloWorld(t, Options{})
	g.Expect(s.SetProtection("octocat/Hello-World", Protection{RequiredChecks: []string{"build"}, RequiredApprovals: 1})).To(Succeed())
	sha, err := s.Push("octocat/Hello-World", "new-topic", map[string]string{"f.txt": "x"}, "work")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := s.OpenPullRequest("octocat/Hello-World", "octocat", "new-topic", "main", "Amazing new feature", "Please pull", false)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.AddCheckRun("octocat/Hello-World", sha, CheckRun{Name: "build", Conclusion: "failure", Log: "##[error]x"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.SetStatus("octocat/Hello-World", sha, "ci/jenkins", "success", "https://ci.example.com/1")).To(Succeed())
	_, err = s.AddReview("octocat/Hello-World", n, "hubot", "CHANGES_REQUESTED", "no")
	g.Expect(err).NotTo(HaveOccurred())
	th, err := s.AddReviewThread("octocat/Hello-World", n, "hubot", "f.txt", 1, "why?")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.ResolveThread("octocat/Hello-World", n, th, true)).To(Succeed())
	g.Expect(s.CommentIssue("octocat/Hello-World", n, "hubot", "ping")).To(Succeed())
	is, err := s.CreateIssue("octocat/Hello-World", Issue{Title: "Found a bug", Labels: []string{"bug"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.CommentIssue("octocat/Hello-World", is, "hubot", "me too")).To(Succeed())
	return s, rec, n
}

func get(t *testing.T, s *Server, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL()+path, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	NewWithT(t).Expect(resp.StatusCode).To(Equal(http.StatusOK), string(b))
	return b
}

func expectShape(t *testing.T, fixture string, actual []byte) {
	t.Helper()
	diff, err := ShapeDiff(Fixture(fixture), actual)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(diff).To(BeEmpty(), "the fake's answer leaves GitHub's documented shape (%s)", fixture)
}

func TestRESTAnswersKeepGitHubShapes(t *testing.T) {
	g := NewWithT(t)
	s, _, n := world(t)
	pr := get(t, s, "/repos/octocat/Hello-World/pulls/1")
	expectShape(t, "rest/pull-request.json", pr)
	missing, err := MissingFields(pr, "number", "state", "draft", "merged", "mergeable", "mergeable_state", "head.ref", "head.sha",
		"head.repo.owner.login", "base.ref", "merge_commit_sha", "html_url", "title", "body")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(missing).To(BeEmpty())
	g.Expect(n).To(Equal(1))

	list := get(t, s, "/repos/octocat/Hello-World/pulls?state=all&head=octocat:new-topic")
	var items []json.RawMessage
	g.Expect(json.Unmarshal(list, &items)).To(Succeed())
	g.Expect(items).To(HaveLen(1))
	expectShape(t, "rest/pull-request.json", items[0])

	expectShape(t, "rest/repository.json", get(t, s, "/repos/octocat/Hello-World"))
	expectShape(t, "rest/issue.json", get(t, s, "/repos/octocat/Hello-World/issues/2"))
	expectShape(t, "rest/issue.json", get(t, s, "/repos/octocat/Hello-World/issues/1"))
	expectShape(t, "rest/issue-comments.json", get(t, s, "/repos/octocat/Hello-World/issues/2/comments"))
	expectShape(t, "rest/check-runs.json", get(t, s, "/repos/octocat/Hello-World/commits/new-topic/check-runs"))
	expectShape(t, "rest/combined-status.json", get(t, s, "/repos/octocat/Hello-World/commits/new-topic/status"))
	expectShape(t, "rest/reviews.json", get(t, s, "/repos/octocat/Hello-World/pulls/1/reviews"))
}

func TestWebhookPayloadsKeepGitHubShapes(t *testing.T) {
	g := NewWithT(t)
	s, rec, n := world(t)
	_, err := s.Merge("octocat/Hello-World", n, "squash")
	g.Expect(err).NotTo(HaveOccurred())
	for event, fixture := range map[string]string{
		"pull_request":                "webhooks/pull_request.opened.json",
		"pull_request_review":         "webhooks/pull_request_review.submitted.json",
		"pull_request_review_comment": "webhooks/pull_request_review_comment.created.json",
		"pull_request_review_thread":  "webhooks/pull_request_review_thread.resolved.json",
		"check_run":                   "webhooks/check_run.completed.json",
		"check_suite":                 "webhooks/check_suite.completed.json",
		"status":                      "webhooks/status.json",
		"issue_comment":               "webhooks/issue_comment.created.json",
		"push":                        "webhooks/push.created.json",
	} {
		bodies := rec.byEv[event]
		g.Expect(bodies).NotTo(BeEmpty(), event)
		for i, b := range bodies {
			expectShape(t, fixture, b)
			// Deliveries are signed with the secret: sha256= and the hex HMAC-SHA256 of the body.
			mac := hmac.New(sha256.New, []byte("s3cret"))
			mac.Write(b)
			g.Expect(rec.sigs[event][i]).To(Equal("sha256="+hex.EncodeToString(mac.Sum(nil))), event)
		}
	}
	d := s.Deliveries()[0]
	g.Expect(d.ID).To(MatchRegexp(`^[0-9a-f-]{36}$`))
}

func TestLabelsAndInstallationTokenKeepGitHubShapes(t *testing.T) {
	g := NewWithT(t)
	s, _, _ := world(t)
	send := func(method, path, auth, body string, want int) []byte {
		req, _ := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		g.Expect(resp.StatusCode).To(Equal(want), string(b))
		return b
	}
	added := send(http.MethodPost, "/repos/octocat/Hello-World/issues/2/labels", "Bearer tok", `{"labels": ["agent:backlog"]}`, http.StatusOK)
	expectShape(t, "rest/labels.json", added)
	g.Expect(added).To(ContainSubstring(`"name":"agent:backlog"`))
	expectShape(t, "rest/labels.json", send(http.MethodDelete, "/repos/octocat/Hello-World/issues/2/labels/bug", "Bearer tok", "", http.StatusOK))

	key, err := NewAppKey()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AddApp(42, 4242, "octocat", key)).To(Succeed())
	priv, err := jwt.ParseRSAPrivateKeyFromPEM(key)
	g.Expect(err).NotTo(HaveOccurred())
	now := time.Now()
	signed, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		Issuer: "42", IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute)),
	}).SignedString(priv)
	g.Expect(err).NotTo(HaveOccurred())
	before := s.Stats().InstallationTokens
	scoped := send(http.MethodPost, "/app/installations/4242/access_tokens", "Bearer "+signed,
		`{"repositories": ["Hello-World"], "permissions": {"contents": "write"}}`, http.StatusCreated)
	expectShape(t, "rest/installation-token.json", scoped)
	missing, err := MissingFields(scoped, "token", "expires_at", "permissions.contents", "repository_selection", "repositories.[].full_name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(missing).To(BeEmpty())
	// Without a body the token gets the installation's permissions. GitHub's example lists two of
	// them; the others are further keys of the same object, each "read" or "write".
	var whole map[string]any
	g.Expect(json.Unmarshal(send(http.MethodPost, "/app/installations/4242/access_tokens", "Bearer "+signed, "", http.StatusCreated), &whole)).To(Succeed())
	perms, ok := whole["permissions"].(map[string]any)
	g.Expect(ok).To(BeTrue())
	g.Expect(perms).NotTo(BeEmpty())
	for name, level := range perms {
		g.Expect(level).To(BeElementOf("read", "write"), name)
	}
	delete(whole, "permissions")
	rest, err := json.Marshal(whole)
	g.Expect(err).NotTo(HaveOccurred())
	expectShape(t, "rest/installation-token.json", rest)
	g.Expect(s.Stats().InstallationTokens - before).To(Equal(2))
}

func TestGraphQLAnswerKeepsGitHubShape(t *testing.T) {
	g := NewWithT(t)
	s, _, _ := world(t)
	q := `query($o: String!, $n: String!) {
  rateLimit { cost limit remaining resetAt }
  r0: repository(owner: $o, name: $n) {
    i0: pullRequest(number: 1) {
      id number url title state isDraft merged updatedAt headRefName headRefOid baseRefName
      headRepositoryOwner { login } mergeable mergeStateStatus reviewDecision mergeCommit { oid }
      headRef { target { ... on Commit { oid statusCheckRollup { state } } } }
      body
      reviews(last: 100) { nodes { id author { login } state submittedAt } }
      reviewThreads(first: 100) { pageInfo { hasNextPage endCursor } nodes { id isResolved isOutdated path line originalLine } }
      commits(last: 1) { nodes { commit { id oid statusCheckRollup { state contexts(first: 100) { pageInfo { hasNextPage endCursor } nodes { __typename
        ... on CheckRun { databaseId name status conclusion detailsUrl isRequired(pullRequestNumber: 1) checkSuite { app { slug } } }
        ... on StatusContext { context state targetUrl isRequired(pullRequestNumber: 1) } } } } } } }
    }
  }
}`
	body, _ := json.Marshal(map[string]any{"query": q, "variables": map[string]any{"o": "octocat", "n": "Hello-World"}})
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/graphql", bytes.NewReader(body))
	req.Header.Set("Authorization", "bearer tok")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	g.Expect(string(b)).NotTo(ContainSubstring(`"errors"`))
	expectShape(t, "graphql/pull-request.json", b)
	g.Expect(resp.Header.Get("X-RateLimit-Resource")).To(Equal("graphql"))
	// 1 (reviews) + 1 (threads) + 1 (commits) + 1 (contexts) = 4 requests: 1 point.
	g.Expect(s.Stats().GraphQLPoints).To(Equal(1))
}

func TestQueryCostFollowsGitHubsFormula(t *testing.T) {
	g := NewWithT(t)
	// GitHub's formula: the top-level connection is 1 request, each nested connection one request
	// per node of its parent: 1 + 100 (reviews) + 100 (reviewThreads) = 201 requests, 2 points.
	cost, nodes, err := QueryCost(`query {
  repository(owner: "o", name: "r") {
    pullRequests(first: 100) { nodes { reviews(first: 50) { nodes { id } } reviewThreads(first: 60) { nodes { id } } } }
  }
}`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cost).To(Equal(2))
	g.Expect(nodes).To(Equal(100 + 100*50 + 100*60))

	// 1 + 100 + 100×100 = 10,101 requests: 101 points.
	cost, _, err = QueryCost(`query { repository(owner: "o", name: "r") { pullRequests(first: 100) { nodes { reviewThreads(first: 100) { nodes { comments(first: 100) { nodes { id } } } } } } } }`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cost).To(Equal(101))

	cost, _, err = QueryCost(`query { a: repository(owner: "o", name: "r") { pullRequest(number: 1) { number } } b: repository(owner: "o", name: "s") { pullRequest(number: 2) { number } } }`, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cost).To(Equal(1), "no connections: the minimum")

	_, _, err = QueryCost(`query { repository(owner: "o", name: "r") { pullRequests { nodes { id } } } }`, nil)
	g.Expect(err).To(MatchError(ContainSubstring("MISSING_PAGINATION_BOUNDARIES")))
	_, _, err = QueryCost(`query { repository(owner: "o", name: "r") { pullRequests(first: 101) { nodes { id } } } }`, nil)
	g.Expect(err).To(MatchError(ContainSubstring("EXCESSIVE_PAGINATION")))
	_, _, err = QueryCost(`query { repository(owner: "o", name: "r") { nope } }`, nil)
	g.Expect(err).To(HaveOccurred(), "queries are validated against GitHub's schema")
}

func TestRateLimitHeadersAndSecondaryLimit(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	s, err := New(Options{Dir: t.TempDir(), Clock: func() time.Time { return now }, CoreLimit: 10, SecondaryPointsPerMinute: 3})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = s.Close() })
	s.AddToken("tok", "octocat")
	_, err = s.CreateRepo("o/r", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	do := func() *http.Response {
		req, _ := http.NewRequest(http.MethodGet, s.URL()+"/repos/o/r", nil)
		req.Header.Set("Authorization", "token tok")
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp
	}
	for i := 0; i < 3; i++ {
		r := do()
		g.Expect(r.StatusCode).To(Equal(200))
		g.Expect(r.Header.Get("X-RateLimit-Limit")).To(Equal("10"))
		g.Expect(r.Header.Get("X-RateLimit-Remaining")).To(Equal(itoa(10 - i - 1)))
		g.Expect(r.Header.Get("X-RateLimit-Resource")).To(Equal("core"))
		g.Expect(r.Header.Get("ETag")).NotTo(BeEmpty())
	}
	r := do()
	g.Expect(r.StatusCode).To(Equal(http.StatusForbidden))
	g.Expect(r.Header.Get("Retry-After")).To(Equal("30"))
}

func TestAdminHTTPAPI(t *testing.T) {
	g := NewWithT(t)
	s, err := New(Options{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = s.Close() })
	post := func(path, body string) map[string]any {
		resp, err := http.Post(s.URL()+"/_fake"+path, "application/json", strings.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		g.Expect(resp.StatusCode).To(Equal(200), string(b))
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return out
	}
	post("/repos", `{"full_name": "demo/app", "default_branch": "main"}`)
	post("/tokens", `{"token": "t", "login": "demo"}`)
	sha := post("/repos/demo/app/push", `{"branch": "feat", "files": {"a.txt": "hi"}}`)["sha"].(string)
	g.Expect(sha).To(HaveLen(40))
	num := post("/repos/demo/app/pulls", `{"head": "feat", "base": "main", "title": "Feat", "user": "demo"}`)["number"]
	g.Expect(num).To(BeEquivalentTo(1))
	post("/repos/demo/app/check-runs", `{"head_sha": "`+sha+`", "name": "ci", "conclusion": "success"}`)
	post("/repos/demo/app/pulls/1/reviews", `{"user": "rev", "state": "APPROVED"}`)
	post("/repos/demo/app/pulls/1/behind", `{}`)
	post("/repos/demo/app/pulls/1/merge", `{"method": "squash"}`)
	info, err := s.PullRequest("demo/app", 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Merged).To(BeTrue())
	resp, err := http.Get(s.URL() + "/_fake/stats")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(200))
}

func TestOutage(t *testing.T) {
	g := NewWithT(t)
	s, _, _ := world(t)
	s.AddToken("other", "someone")
	get := func(path, token string) int {
		req, _ := http.NewRequest(http.MethodGet, s.URL()+path, nil)
		req.Header.Set("Authorization", "token "+token)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	graphql := func(token string) int {
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/graphql", strings.NewReader(`{"query":"{ viewer { login } }"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	s.SetOutage("octocat", http.StatusBadGateway)
	g.Expect(get("/repos/octocat/Hello-World", "tok")).To(Equal(http.StatusBadGateway))
	g.Expect(graphql("tok")).To(Equal(http.StatusBadGateway))
	g.Expect(get("/repos/octocat/Hello-World", "other")).To(Equal(http.StatusOK), "other identities are served")
	s.SetOutage("octocat", 0)
	g.Expect(get("/repos/octocat/Hello-World", "tok")).To(Equal(http.StatusOK))
}
