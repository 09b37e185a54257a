package github

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

const testToken = "ghp_testtoken"

// env is a fake GitHub with one repository and an adapter on a shared simulated clock.
type env struct {
	fake  *fakegithub.Server
	clock *scmtest.Clock
	p     *Provider
	repo  scm.Repo
	full  string
}

func newEnv(t *testing.T, opts ...func(*fakegithub.Options)) *env {
	t.Helper()
	g := NewWithT(t)
	clock := scmtest.NewClock()
	o := fakegithub.Options{Dir: t.TempDir(), Clock: clock.Now}
	for _, f := range opts {
		f(&o)
	}
	fake, err := fakegithub.New(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddToken(testToken, "shepherd-bot")
	_, err = fake.CreateRepo("acme/widgets", "main", map[string]string{"README.md": "# widgets\n", "main.go": "package main\n"})
	g.Expect(err).NotTo(HaveOccurred())
	p, err := New(scm.Config{APIURL: fake.URL(), Token: []byte(testToken), Clock: clock})
	g.Expect(err).NotTo(HaveOccurred())
	return &env{fake: fake, clock: clock, p: p, repo: scm.Repo{Owner: "acme", Name: "widgets"}, full: "acme/widgets"}
}

// branch pushes a branch with one commit through the fake's Go API.
func (e *env) branch(t *testing.T, repo, name string) string {
	t.Helper()
	sha, err := e.fake.Push(repo, name, map[string]string{name + ".txt": "work on " + name + "\n"}, "Work on "+name)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return sha
}

// gitPush clones over HTTP with a token, commits and pushes with the real git.
func gitPush(t *testing.T, url, token, branch, file string) {
	t.Helper()
	out, err := gitPushAs(t, url, token, token, branch, file)
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), out)
}

// gitPushAs clones with cloneToken, commits, and pushes with pushToken; it returns git's output
// and error of the push.
func gitPushAs(t *testing.T, url, cloneToken, pushToken, branch, file string) (string, error) {
	t.Helper()
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "clone")
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), gitserver.CommitterEnv()...)
		cmd.Env = append(cmd.Env, "GIT_TERMINAL_PROMPT=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(args ...string) {
		out, err := git(args...)
		g.Expect(err).NotTo(HaveOccurred(), out)
	}
	authURL := func(token string) string { return "http://x-access-token:" + token + "@" + url[len("http://"):] }
	run("clone", "-q", authURL(cloneToken), dir)
	run("-C", dir, "checkout", "-q", "-b", branch)
	g.Expect(os.WriteFile(filepath.Join(dir, file), []byte("change\n"), 0o644)).To(Succeed())
	run("-C", dir, "add", "-A")
	run("-C", dir, "commit", "-q", "-m", "change "+file)
	run("-C", dir, "remote", "set-url", "origin", authURL(pushToken))
	return git("-C", dir, "push", "-q", "origin", branch)
}

// newMetrics returns metrics on a registry of their own.
func newMetrics(t *testing.T) *scm.Metrics {
	t.Helper()
	m, err := scm.NewMetrics(prometheus.NewRegistry())
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return m
}

// requests is the request counter of one kind, operation and outcome.
func requests(m *scm.Metrics, kind, op, outcome string) float64 {
	return testutil.ToFloat64(m.Requests.WithLabelValues(providerName, kind, op, outcome))
}

// counted returns an adapter on e's fake and clock that counts in fresh metrics.
func (e *env) counted(t *testing.T, maxWait time.Duration) (*Provider, *scm.Metrics) {
	t.Helper()
	m := newMetrics(t)
	p, err := New(scm.Config{APIURL: e.fake.URL(), Token: []byte(testToken), Clock: e.clock, Metrics: m, MaxWait: maxWait})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return p, m
}
