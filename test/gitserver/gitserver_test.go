package gitserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCloneAndPush(t *testing.T) {
	g := NewWithT(t)
	s, err := New(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	s.Username, s.Password = "u", "p"
	pushed := make(chan string, 1)
	s.OnPush = func(repo string) { pushed <- repo }
	g.Expect(s.Start("127.0.0.1:0")).To(Succeed())
	defer func() { _ = s.Close() }()
	head, err := s.Seed("acme/widgets", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())

	work := filepath.Join(t.TempDir(), "w")
	url := strings.Replace(s.URL("acme/widgets"), "http://", "http://u:p@", 1)
	git := func(dir string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), CommitterEnv()...)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return strings.TrimSpace(string(out))
	}
	git("", "clone", "-q", url, work)
	g.Expect(git(work, "rev-parse", "HEAD")).To(Equal(head))
	g.Expect(os.WriteFile(filepath.Join(work, "x.txt"), []byte("x"), 0o644)).To(Succeed())
	git(work, "checkout", "-q", "-b", "feature/x")
	git(work, "add", "x.txt")
	git(work, "commit", "-q", "-m", "add x")
	git(work, "push", "-q", "origin", "feature/x")
	g.Expect(<-pushed).To(Equal("acme/widgets"))
	g.Expect(s.Ref("acme/widgets", "refs/heads/feature/x")).To(Equal(git(work, "rev-parse", "HEAD")))

	// Wrong credentials are refused.
	bad := strings.Replace(s.URL("acme/widgets"), "http://", "http://u:wrong@", 1)
	cmd := exec.Command("git", "ls-remote", bad)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("Authentication failed"))
}
