package github

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

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
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "clone")
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), gitserver.CommitterEnv()...)
		cmd.Env = append(cmd.Env, "GIT_TERMINAL_PROMPT=0")
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
	}
	authURL := "http://x-access-token:" + token + "@" + url[len("http://"):]
	run("clone", "-q", authURL, dir)
	run("-C", dir, "checkout", "-q", "-b", branch)
	g.Expect(os.WriteFile(filepath.Join(dir, file), []byte("change\n"), 0o644)).To(Succeed())
	run("-C", dir, "add", "-A")
	run("-C", dir, "commit", "-q", "-m", "change "+file)
	run("-C", dir, "push", "-q", "origin", branch)
}
