// Package gitserver serves real bare git repositories over the smart HTTP protocol by running
// the real `git http-backend` as a CGI program. Tests clone, fetch and push through it exactly
// as they would against a forge; nothing about git is mocked.
package gitserver

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Server serves the bare repositories under Root at http://Addr/<owner>/<repo>.git.
type Server struct {
	// Root holds the bare repositories, as <owner>/<repo>.git.
	Root string
	// Username and Password, when set, are required (HTTP basic auth) for every request.
	Username, Password string
	// OnPush, when set, is called after every successful push with the repository path
	// ("owner/repo").
	OnPush func(repo string)

	listener net.Listener
	srv      *http.Server
	gitPath  string
	execPath string
}

// New returns a server for the repositories under root (created when missing).
func New(root string) (*Server, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git is required: %w", err)
	}
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create root: %w", err)
	}
	return &Server{Root: root, gitPath: git, execPath: strings.TrimSpace(string(out))}, nil
}

// Start listens on addr ("127.0.0.1:0" picks a free port; use "0.0.0.0:0" to be reachable from
// pods on the local cluster) and serves until Close.
func (s *Server) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.listener = l
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return nil
}

// Addr is host:port the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// URL of a repository ("owner/repo") as seen from this host.
func (s *Server) URL(repo string) string {
	return fmt.Sprintf("http://%s/%s.git", s.Addr(), repo)
}

// Close stops the server.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Path of a repository's bare directory.
func (s *Server) Path(repo string) string { return filepath.Join(s.Root, repo+".git") }

// CreateRepo makes an empty bare repository ("owner/repo") whose HEAD is defaultBranch.
func (s *Server) CreateRepo(repo, defaultBranch string) error {
	dir := s.Path(repo)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create owner dir: %w", err)
	}
	if out, err := exec.Command(s.gitPath, "init", "--bare", "--initial-branch="+defaultBranch, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("git init --bare: %w: %s", err, out)
	}
	// Allow pushes over http-backend without authentication configuration in the repo itself.
	if out, err := exec.Command(s.gitPath, "-C", dir, "config", "http.receivepack", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("git config: %w: %s", err, out)
	}
	return nil
}

// Seed creates repo with one commit per file map entry on defaultBranch, made by a real git in a
// temporary work tree and pushed into the bare repository. It returns the head commit.
func (s *Server) Seed(repo, defaultBranch string, files map[string]string) (string, error) {
	if err := s.CreateRepo(repo, defaultBranch); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "gitserver-seed-")
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(s.gitPath, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), CommitterEnv()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("init", "--initial-branch="+defaultBranch); err != nil {
		return "", err
	}
	if len(files) == 0 {
		files = map[string]string{"README.md": "# " + repo + "\n"}
	}
	for name, content := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", fmt.Errorf("mkdir: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", fmt.Errorf("write %s: %w", name, err)
		}
	}
	if _, err := run("add", "-A"); err != nil {
		return "", err
	}
	if _, err := run("commit", "-q", "-m", "Initial commit"); err != nil {
		return "", err
	}
	if _, err := run("push", "-q", s.Path(repo), defaultBranch); err != nil {
		return "", err
	}
	return run("rev-parse", "HEAD")
}

// Ref returns the commit a ref ("refs/heads/main" or "main") points at in repo, or "" when the ref
// does not exist.
func (s *Server) Ref(repo, ref string) string {
	out, err := exec.Command(s.gitPath, "-C", s.Path(repo), "rev-parse", "--verify", "--quiet", ref+"^{commit}").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// CommitterEnv is a fixed identity for commits made by tests.
func CommitterEnv() []string {
	return []string{
		"GIT_AUTHOR_NAME=Shepherd Test", "GIT_AUTHOR_EMAIL=test@shepherd.dev",
		"GIT_COMMITTER_NAME=Shepherd Test", "GIT_COMMITTER_EMAIL=test@shepherd.dev",
		"GIT_CONFIG_NOSYSTEM=1", "HOME=" + os.TempDir(),
	}
}

// ServeHTTP runs git http-backend for the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.Username != "" || s.Password != "" {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(s.Username)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(s.Password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="gitserver"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	if strings.Contains(r.URL.Path, "..") {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	h := &cgi.Handler{
		Path: filepath.Join(s.execPath, "git-http-backend"),
		Dir:  s.Root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=shepherd",
		},
	}
	push := strings.HasSuffix(r.URL.Path, "/git-receive-pack")
	h.ServeHTTP(w, r)
	if push && s.OnPush != nil {
		repo := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/git-receive-pack")
		repo = strings.TrimSuffix(repo, ".git")
		s.OnPush(repo)
	}
}
