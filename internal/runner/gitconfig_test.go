package runner_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runner"
)

// TestAgentGitConfigTrustsTheRunnersRepositories: in the pod the mirror and a claimed spare are
// the runner's (another uid), and the agent's git refuses them as of dubious ownership, even
// with safe.directory on the command line, which git does not pass to the upload-pack of a local
// fetch. The system configuration the runner writes for the agent's containers lets both work.
// Real git; the other owner is made with chown, so the test runs as root (as CI does).
func TestAgentGitConfigTrustsTheRunnersRepositories(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the repositories another owner (CI runs as root)")
	}
	g := NewWithT(t)
	dir := t.TempDir()
	git := func(env []string, args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com",
			"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com"}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mirror, checkout, spare := filepath.Join(dir, "mirror.git"), filepath.Join(dir, "checkout"), filepath.Join(dir, "spare")
	for _, args := range [][]string{
		{"init", "--quiet", "--bare", mirror},
		{"init", "--quiet", "-b", "main", spare},
		{"-C", spare, "commit", "--quiet", "--allow-empty", "-m", "base"},
		{"-C", spare, "push", "--quiet", mirror, "main"},
		{"init", "--quiet", checkout},
	} {
		out, err := git(nil, args...)
		g.Expect(err).NotTo(HaveOccurred(), "%v: %s", args, out)
	}
	// The runner's uid owns the mirror and the spare.
	for _, p := range []string{mirror, spare} {
		g.Expect(exec.Command("chown", "-R", "65533:65533", p).Run()).To(Succeed())
	}
	fetch := []string{"-c", "safe.directory=*", "-C", checkout, "fetch", "--quiet", mirror, "+refs/heads/*:refs/remotes/m/*"}
	status := []string{"-C", spare, "status", "--short"}

	out, err := git(nil, fetch...)
	g.Expect(err).To(HaveOccurred(), "git refuses a fetch from another user's mirror")
	g.Expect(out).To(ContainSubstring("dubious ownership"))
	out, err = git(nil, status...)
	g.Expect(err).To(HaveOccurred(), "git refuses another user's checkout")
	g.Expect(out).To(ContainSubstring("dubious ownership"))

	cfg := filepath.Join(dir, "gitconfig")
	g.Expect(runner.WriteAgentGitConfig(cfg)).To(Succeed())
	withCfg := []string{"GIT_CONFIG_SYSTEM=" + cfg}
	out, err = git(withCfg, fetch...)
	g.Expect(err).NotTo(HaveOccurred(), out)
	out, err = git(withCfg, status...)
	g.Expect(err).NotTo(HaveOccurred(), out)
	out, err = git(withCfg, "config", "--system", "--get", "safe.directory")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(Equal("*\n"))
}

// TestPrepareWithARunnerOwnedMirror: the checkout step, as the agent, borrows from and fetches a
// mirror the runner owns (another uid), through its hardened git.
func TestPrepareWithARunnerOwnedMirror(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the mirror another owner (CI runs as root)")
	}
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/owned", prompt: "p"})
	h.startRunner()
	g.Expect(exec.Command("chown", "-R", "65533:65533", h.mirror()).Run()).To(Succeed())
	res, err := runner.Prepare(context.Background(), runner.PrepareConfig{Workspace: h.workspaceOptions(), RunnerAddr: h.localAddr})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Facts.Branch).To(Equal("shepherd/owned"))
	h.cancel()
}
