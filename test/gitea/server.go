package gitea

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Names of the users every server has.
const (
	AdminName    = "forge-admin"
	ReviewerName = "reviewer"
)

// Timeouts of the server's life cycle.
const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 20 * time.Second
	cliTimeout   = 60 * time.Second
)

// Options configure Start.
type Options struct {
	// Dir is the run directory: app.ini, the SQLite database, repositories, gitea.log and
	// gitea.json (what Attach reads). Required; created when missing.
	Dir string
	// Addr is the listen address (default 127.0.0.1). 0.0.0.0 or the node's IP makes the forge
	// reachable from pods.
	Addr string
	// Port to listen on (default: a free port).
	Port int
	// Host is the host of ROOT_URL: the name clients (and pods) use (default Addr, or 127.0.0.1
	// when Addr is 0.0.0.0).
	Host string
	// WebhookHosts is [webhook] ALLOWED_HOST_LIST (default "loopback"). Add "private" when
	// webhooks go to a cluster Service.
	WebhookHosts []string
	// LogLevel of Gitea's log (default Warn; Info logs every request).
	LogLevel string
	// Detach runs Gitea in its own session so that it outlives the caller (the command line);
	// Stop or `hack/gitea.sh stop` ends it.
	Detach bool
	// Log receives progress lines (default: discarded).
	Log io.Writer
}

// User is a Gitea account with a token that has every scope.
type User struct {
	Name     string `json:"name"`
	Password string `json:"password"`
	Email    string `json:"email"`
	Token    string `json:"token"`
}

// Server is a running Gitea.
type Server struct {
	// URL is ROOT_URL without the trailing slash (http://127.0.0.1:PORT).
	URL string `json:"url"`
	// APIURL is URL/api/v1: what scm.Config.APIURL takes.
	APIURL string `json:"apiURL"`
	// Admin owns the test repositories; Reviewer reviews (an author cannot approve their own
	// pull request).
	Admin    User   `json:"admin"`
	Reviewer User   `json:"reviewer"`
	Dir      string `json:"dir"`
	Bin      string `json:"bin"`
	PID      int    `json:"pid"`
	Version  string `json:"version"`

	cmd  *exec.Cmd
	done chan struct{}
	log  io.Writer
}

// stateFile is where a started server describes itself.
const stateFile = "gitea.json"

// Start builds Gitea if needed, writes app.ini into opts.Dir, starts it, waits until it answers and
// creates the admin and the reviewer with their tokens.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("gitea: the run directory is required")
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1"
	}
	if opts.Host == "" {
		opts.Host = opts.Addr
		if opts.Addr == "0.0.0.0" || opts.Addr == "::" {
			opts.Host = "127.0.0.1"
		}
	}
	if len(opts.WebhookHosts) == 0 {
		opts.WebhookHosts = []string{"loopback"}
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "Warn"
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("gitea run directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gitea run directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "gitea.db")); err == nil {
		return nil, fmt.Errorf("gitea: %s already holds a forge; stop it and remove the directory first", dir)
	}
	bin, err := Build(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	// A free port may be taken between choosing it and Gitea binding it: try a few.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(opts.Addr); err != nil {
				return nil, err
			}
		}
		s, err := start(ctx, opts, dir, bin, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if opts.Port != 0 || !errors.Is(err, errExited) {
			break
		}
		_ = os.RemoveAll(filepath.Join(dir, "data"))
	}
	return nil, lastErr
}

var errExited = errors.New("gitea exited before it was ready")

func start(ctx context.Context, opts Options, dir, bin string, port int) (*Server, error) {
	hostPort := net.JoinHostPort(opts.Host, strconv.Itoa(port))
	s := &Server{
		URL:     "http://" + hostPort,
		Dir:     dir,
		Bin:     bin,
		Version: Version,
		log:     opts.Log,
	}
	s.APIURL = s.URL + "/api/v1"
	ini, err := appINI(opts, dir, bin, port, s.URL+"/")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "app.ini"), []byte(ini), 0o600); err != nil {
		return nil, fmt.Errorf("write app.ini: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "gitea.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gitea log: %w", err)
	}
	defer func() { _ = logf.Close() }()
	// Not CommandContext: the server outlives the context that started it; Stop ends it.
	cmd := exec.Command(filepath.Join(bin, "gitea"), "web", "--config", filepath.Join(dir, "app.ini"),
		"--work-path", dir, "--custom-path", filepath.Join(dir, "custom"))
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, s.env(), logf, logf
	if opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// The server dies with the test process even when Stop is never called (a panic, a
		// killed `go test`).
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gitea: %w", err)
	}
	s.cmd, s.PID, s.done = cmd, cmd.Process.Pid, make(chan struct{})
	// Reaps the process and tells waitReady and Stop when it exited. A detached server outlives
	// this process; init reaps it then.
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	fmt.Fprintf(opts.Log, "gitea: %s ready at %s in %s\n", Version, s.URL, time.Since(started).Round(time.Millisecond))
	if err := s.createUsers(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if err := s.save(); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// env is the environment of Gitea and its command line.
func (s *Server) env() []string {
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GITEA_") {
			continue // GITEA_WORK_DIR, GITEA_CUSTOM and the like would override app.ini
		}
		env = append(env, kv)
	}
	if os.Geteuid() == 0 {
		env = append(env, "GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true")
	}
	return env
}

// appINI renders the configuration: headless, offline, SQLite in WAL mode, no mail, no cron, no
// Actions, an in-memory queue (webhooks within ~100 ms) and secrets generated here, so that Gitea
// never rewrites the file.
func appINI(opts Options, dir, bin string, port int, rootURL string) (string, error) {
	secret, err := randomHex(32)
	if err != nil {
		return "", err
	}
	internal, err := randomHex(48)
	if err != nil {
		return "", err
	}
	jwtKey := make([]byte, 32)
	if _, err := rand.Read(jwtKey); err != nil {
		return "", fmt.Errorf("random secret: %w", err)
	}
	jwt := base64.RawURLEncoding.EncodeToString(jwtKey)
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("current user: %w", err)
	}
	level := opts.LogLevel
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("APP_NAME = Shepherd test forge")
	w("RUN_USER = %s", u.Username)
	w("RUN_MODE = prod")
	w("WORK_PATH = %s", dir)
	if os.Geteuid() == 0 {
		w("I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true")
	}
	w("\n[server]")
	w("PROTOCOL = http")
	w("HTTP_ADDR = %s", opts.Addr)
	w("HTTP_PORT = %d", port)
	w("ROOT_URL = %s", rootURL)
	w("DOMAIN = %s", opts.Host)
	w("OFFLINE_MODE = true")
	w("DISABLE_SSH = true")
	w("START_SSH_SERVER = false")
	w("LFS_START_SERVER = false")
	w("STATIC_ROOT_PATH = %s", bin)
	w("APP_DATA_PATH = %s", filepath.Join(dir, "data"))
	w("\n[database]")
	w("DB_TYPE = sqlite3")
	w("PATH = %s", filepath.Join(dir, "data", "gitea.db"))
	w("SQLITE_JOURNAL_MODE = WAL")
	w("\n[repository]")
	w("ROOT = %s", filepath.Join(dir, "repositories"))
	w("DEFAULT_BRANCH = main")
	w("\n[security]")
	w("INSTALL_LOCK = true")
	w("SECRET_KEY = %s", secret)
	w("INTERNAL_TOKEN = %s", internal)
	w("\n[oauth2]")
	w("ENABLED = false")
	// Gitea generates (and writes back) a JWT secret even with OAuth2 off.
	w("JWT_SECRET = %s", jwt)
	w("\n[service]")
	w("DISABLE_REGISTRATION = true")
	w("ENABLE_CAPTCHA = false")
	w("REQUIRE_SIGNIN_VIEW = false")
	w("DEFAULT_ALLOW_CREATE_ORGANIZATION = true")
	w("NO_REPLY_ADDRESS = noreply.example.com")
	w("\n[mailer]")
	w("ENABLED = false")
	w("\n[actions]")
	w("ENABLED = false")
	w("\n[cron]")
	w("ENABLED = false")
	w("\n[cron.update_checker]")
	w("ENABLED = false")
	w("\n[webhook]")
	w("ALLOWED_HOST_LIST = %s", strings.Join(opts.WebhookHosts, ","))
	w("DELIVER_TIMEOUT = 10")
	w("\n[queue]")
	w("TYPE = channel")
	w("\n[indexer]")
	// The database indexer answers issue searches synchronously; bleve indexes through a queue.
	w("ISSUE_INDEXER_TYPE = db")
	w("REPO_INDEXER_ENABLED = false")
	w("\n[session]")
	w("PROVIDER = memory")
	w("\n[cache]")
	w("ADAPTER = memory")
	w("\n[log]")
	w("MODE = console")
	w("LEVEL = %s", level)
	w("ROOT_PATH = %s", filepath.Join(dir, "log"))
	w("\n[api]")
	w("ENABLE_SWAGGER = false")
	return b.String(), nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", addr, err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls /api/healthz until Gitea answers, it exits or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/healthz", nil)
		if err != nil {
			return fmt.Errorf("gitea health check: %w", err)
		}
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("%w: %s", errExited, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("gitea not ready at %s within %s: %w: %s", s.URL, readyTimeout, ctx.Err(), s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of gitea.log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "gitea.log"))
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// createUsers makes the admin with the command line (the first account cannot be made over the
// API) and the reviewer over the API.
func (s *Server) createUsers(ctx context.Context) error {
	pw, err := randomHex(12)
	if err != nil {
		return err
	}
	s.Admin = User{Name: AdminName, Password: pw, Email: AdminName + "@example.com"}
	out, err := s.CLI(ctx, "admin", "user", "create", "--username", s.Admin.Name, "--password", s.Admin.Password,
		"--email", s.Admin.Email, "--admin", "--must-change-password=false",
		"--access-token", "--access-token-name", "shepherd-tests", "--access-token-scopes", "all")
	if err != nil {
		return err
	}
	const marker = "Access token was successfully created... "
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		if tok, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), marker); ok {
			s.Admin.Token = strings.TrimSpace(tok)
		}
	}
	if s.Admin.Token == "" {
		return fmt.Errorf("gitea admin user create printed no token: %s", out)
	}
	s.Reviewer, err = s.CreateUser(ctx, ReviewerName)
	return err
}

// CLI runs a gitea subcommand against this server's configuration and returns its output.
func (s *Server) CLI(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	full := append([]string{"--config", filepath.Join(s.Dir, "app.ini"), "--work-path", s.Dir,
		"--custom-path", filepath.Join(s.Dir, "custom")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(s.Bin, "gitea"), full...)
	cmd.Dir, cmd.Env = s.Dir, s.env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("gitea %s: %w: %s", strings.Join(args[:min(3, len(args))], " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// CreateUser creates an active user with a random password and a token with every scope.
func (s *Server) CreateUser(ctx context.Context, name string) (User, error) {
	pw, err := randomHex(12)
	if err != nil {
		return User{}, err
	}
	u := User{Name: name, Password: pw, Email: name + "@example.com"}
	admin := s.Client(s.Admin)
	if err := admin.Do(ctx, http.MethodPost, "/admin/users", map[string]any{
		"username": u.Name, "email": u.Email, "password": u.Password, "must_change_password": false,
	}, nil); err != nil {
		return User{}, fmt.Errorf("create user %s: %w", name, err)
	}
	// A token is created by its owner, authenticated with the password.
	c := &Client{base: s.APIURL, basicUser: u.Name, basicPass: u.Password, http: newHTTPClient()}
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	if err := c.Do(ctx, http.MethodPost, "/users/"+u.Name+"/tokens", map[string]any{
		"name": "shepherd-tests", "scopes": []string{"all"},
	}, &tok); err != nil {
		return User{}, fmt.Errorf("token for %s: %w", name, err)
	}
	u.Token = tok.SHA1
	return u, nil
}

func (s *Server) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", stateFile, err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, stateFile), b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", stateFile, err)
	}
	return nil
}

// Attach returns the server a run directory describes (started by another process, for example
// `hack/gitea.sh start`).
func Attach(dir string) (*Server, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("gitea in %s: %w", dir, err)
	}
	s := &Server{log: io.Discard}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("gitea in %s: %w", dir, err)
	}
	return s, nil
}

// Running reports whether the server's process is alive.
func (s *Server) Running() bool {
	if s.done != nil {
		select {
		case <-s.done:
			return false
		default:
			return true
		}
	}
	return s.PID > 0 && syscall.Kill(s.PID, 0) == nil
}

// Stop ends Gitea: SIGTERM (it shuts down gracefully), SIGKILL after stopTimeout. Stopping a
// stopped server succeeds.
func (s *Server) Stop() error {
	if s.PID <= 0 || !s.Running() {
		return nil
	}
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop gitea (pid %d): %w", s.PID, err)
	}
	deadline := time.Now().Add(stopTimeout)
	for s.Running() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(s.PID, syscall.SIGKILL)
			if s.done != nil {
				<-s.done
			}
			return fmt.Errorf("gitea (pid %d) did not stop within %s; killed", s.PID, stopTimeout)
		}
		if s.done != nil {
			select {
			case <-s.done:
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
