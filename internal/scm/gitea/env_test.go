//go:build integration

package gitea

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/scm"
	giteatest "github.com/shepherd-dev/shepherd/test/gitea"
)

// forge is the real Gitea every test of the package shares; each test works in repositories of
// its own.
var forge *giteatest.Server

var ctx = context.Background()

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// A cold build of Gitea takes minutes; `make test` builds it first (hack/gitea.mk).
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "shepherd-gitea-scm-")
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
	defer func() {
		if err := forge.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	return m.Run()
}

// env is one repository on the shared forge, an adapter acting as its owner (the admin), and
// clients for the owner (CI, settings) and the reviewer.
type env struct {
	t        *testing.T
	p        *Provider
	repo     scm.Repo
	owner    *giteatest.Client
	reviewer *giteatest.Client
	metrics  *scm.Metrics
	// wire is every exchange the adapter had with Gitea.
	wire *recorder
}

var repoSeq atomic.Int64

var nonName = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

func newEnv(t *testing.T) *env {
	t.Helper()
	g := NewWithT(t)
	name := strings.Trim(nonName.ReplaceAllString(strings.TrimPrefix(t.Name(), "Test"), "-"), "-")
	name = fmt.Sprintf("%s-%d", name[:min(len(name), 60)], repoSeq.Add(1))
	owner := forge.Client(forge.Admin)
	g.Expect(owner.CreateRepo(ctx, name)).To(Succeed())
	g.Expect(owner.AddCollaborator(ctx, forge.Admin.Name, name, forge.Reviewer.Name, "write")).To(Succeed())
	m, err := scm.NewMetrics(nil)
	g.Expect(err).NotTo(HaveOccurred())
	wire := &recorder{}
	p, err := New(scm.Config{APIURL: forge.APIURL, Token: []byte(forge.Admin.Token), Metrics: m, Timeout: 20 * time.Second, Transport: wire})
	g.Expect(err).NotTo(HaveOccurred())
	return &env{t: t, p: p, repo: scm.Repo{Owner: forge.Admin.Name, Name: name}, owner: owner,
		reviewer: forge.Client(forge.Reviewer), metrics: m, wire: wire}
}

// exchange is one request the adapter sent and Gitea's answer.
type exchange struct {
	method string
	url    *url.URL
	status int
	body   string
}

// recorder is the adapter's transport in these tests: it passes every request to Gitea and
// keeps what was asked and answered, so that a test sees Gitea's real status codes.
type recorder struct {
	mu  sync.Mutex
	log []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, exchange{method: req.Method, url: req.URL, status: resp.StatusCode, body: string(body)})
	return resp, nil
}

// exchanges are the recorded requests of method whose path ends with suffix, in order.
func (e *env) exchanges(method, suffix string) []exchange {
	e.wire.mu.Lock()
	defer e.wire.mu.Unlock()
	var out []exchange
	for _, x := range e.wire.log {
		if x.method == method && strings.HasSuffix(x.url.Path, suffix) {
			out = append(out, x)
		}
	}
	return out
}

// statuses are the status codes of exchanges.
func statuses(xs []exchange) []int {
	var out []int
	for _, x := range xs {
		out = append(out, x.status)
	}
	return out
}

// commit writes files on a branch (created from main when new) and returns the new head.
func (e *env) commit(branch string, files map[string]string) string {
	e.t.Helper()
	sha, err := e.owner.CommitFiles(ctx, e.repo.Owner, e.repo.Name, branch, "main", files, "Change "+branch)
	NewWithT(e.t).Expect(err).NotTo(HaveOccurred())
	return sha
}

// open pushes a branch with one new file and opens a pull request for it.
func (e *env) open(branch string) *scm.PullRequest {
	e.t.Helper()
	e.commit(branch, map[string]string{branch + ".txt": "work on " + branch + "\n"})
	pr, err := e.p.CreatePullRequest(ctx, e.repo, scm.NewPullRequest{Head: scm.Head{Branch: branch}, Base: "main", Title: "Work on " + branch, Body: "body"})
	NewWithT(e.t).Expect(err).NotTo(HaveOccurred())
	return pr
}

// get reads a pull request in full.
func (e *env) get(n int) *scm.PullRequest {
	e.t.Helper()
	prs, err := e.p.GetPullRequests(ctx, []scm.PRRef{{Repo: e.repo, Number: n}})
	NewWithT(e.t).Expect(err).NotTo(HaveOccurred())
	NewWithT(e.t).Expect(prs[0]).NotTo(BeNil())
	return prs[0]
}

// probe reads a pull request the cheap way.
func (e *env) probe(n int) scm.RefreshResult {
	e.t.Helper()
	res, err := e.p.Refresh(ctx, []scm.RefreshRequest{{Ref: scm.PRRef{Repo: e.repo, Number: n}}})
	NewWithT(e.t).Expect(err).NotTo(HaveOccurred())
	NewWithT(e.t).Expect(res[0].Err).NotTo(HaveOccurred())
	return res[0]
}

// status sets a commit status as CI does.
func (e *env) status(sha, context, state string) {
	e.t.Helper()
	NewWithT(e.t).Expect(e.owner.SetStatus(ctx, e.repo.Owner, e.repo.Name, sha, context, state, "https://ci.example.com/"+context+"/"+state)).To(Succeed())
}

// requests is how many requests of an operation the adapter sent, by outcome ("" for all).
func (e *env) requests(op, outcome string) int {
	e.t.Helper()
	n := 0
	for _, o := range []string{scm.OutcomeOK, scm.OutcomeNotFound, scm.OutcomeClientError, scm.OutcomeServerError, scm.OutcomeUnauthorized} {
		if outcome == "" || outcome == o {
			n += int(counterValue(e.metrics, op, o))
		}
	}
	return n
}

// rawPull reads a pull request straight from the API, as a test observes Gitea.
func (e *env) rawPull(n int) map[string]any {
	e.t.Helper()
	var out map[string]any
	NewWithT(e.t).Expect(e.owner.Do(ctx, "GET", fmt.Sprintf("/repos/%s/%s/pulls/%d", e.repo.Owner, e.repo.Name, n), nil, &out)).To(Succeed())
	return out
}
