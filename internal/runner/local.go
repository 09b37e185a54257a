package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/gitproxy"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// DefaultListen is where the runner's local server listens in the pod: the pod's loopback,
// which the agent's container shares.
const DefaultListen = "127.0.0.1:8737"

// Paths of the local server.
const (
	// LocalGitPath prefixes git's smart HTTP: the checkout's origin is
	// http://127.0.0.1:8737/git/<owner>/<name>.git.
	LocalGitPath = "/git/"
	// LocalHealthzPath answers 204 once the runner made what the checkout step needs.
	LocalHealthzPath = "/runner/healthz"
	// LocalPreparedPath is where the checkout step posts its result.
	LocalPreparedPath = "/runner/prepared"
)

// modelHold bounds how long a model API call waits for the runner's startup (the task read from
// the manager, retried); past it the call is answered 503, which the CLIs retry.
const modelHold = 2 * time.Minute

// Local is the runner's server on the pod's loopback: the only way out of the pod for the agent
// besides the egress proxy. It exposes operations, not secrets:
//
//   - git smart HTTP to the session's repository (LocalGitPath), forwarded to the manager with the
//     runner's token, pushes allowed to the session's branch only;
//   - the model API (the model proxy, when the Project configures one), the key added here;
//   - the checkout step's readiness check and result.
//
// Whoever reaches it (the agent, or anything the agent runs) can do no more than these.
type Local struct {
	// Git forwards smart HTTP to the manager.
	git *gitproxy.Proxy
	// Model serves the model API; nil answers 404.
	Model http.Handler
	// ModelReady, when set, holds model API calls until it is closed: a restarted runner's
	// proxy must carry the session's earlier totals before it counts (and saves) a request, or a
	// call from the agent still running beside it would start the count, and the state file,
	// from zero.
	ModelReady <-chan struct{}

	mu       sync.Mutex
	branch   string
	mounted  bool
	ready    bool
	readyErr error
	volume   workspace.VolumeResult
	prepared chan Prepared
}

// Prepared is what the checkout step posts when it ends: its result, or why it failed.
type Prepared struct {
	workspace.Result
	// Error says why no usable checkout came out; empty when one did.
	Error string `json:"error,omitempty"`
}

// NewLocal returns the local server of a runner that reaches the manager through ch. Pushes are
// refused until SetBranch names the session's branch.
func NewLocal(ch Channel) (*Local, error) {
	client, err := ch.Client()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(client.BaseURL + runnerapi.PathGit)
	if err != nil {
		return nil, fmt.Errorf("manager URL: %w", err)
	}
	l := &Local{prepared: make(chan Prepared, 1)}
	l.git = &gitproxy.Proxy{
		Transport: client.HTTP.Transport,
		Target: func(*http.Request) (gitproxy.Target, error) {
			// Read on every request: the kubelet rotates the projected token.
			tok, err := os.ReadFile(client.TokenFile)
			if err != nil {
				return gitproxy.Target{}, errors.New("the runner cannot read its service account token")
			}
			return gitproxy.Target{URL: u, Header: http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(tok))}}}, nil
		},
		Policy: func(*http.Request) (gitproxy.Policy, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return gitproxy.BranchOnly(l.branch), nil
		},
	}
	return l, nil
}

// SetBranch allows pushes to the session's branch.
func (l *Local) SetBranch(b string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.branch = b
}

// SetMounted says the directories the agent's containers mount are final (a spare moved into
// place): the runner container's postStart hook returns and the kubelet starts them, while the
// runner may still be fetching the mirror (SetReady follows).
func (l *Local) SetMounted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mounted = true
}

// SetReady marks the startup done: err nil lets the checkout step go on (and tells it what the
// runner did to the volume), an error fails it with that message.
func (l *Local) SetReady(res workspace.VolumeResult, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ready, l.readyErr, l.volume = true, err, res
}

// Prepared delivers the checkout step's outcome once.
func (l *Local) Prepared() <-chan Prepared { return l.prepared }

// ServeHTTP implements http.Handler.
func (l *Local) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, LocalGitPath):
		l.git.ServeHTTP(w, r)
	case r.URL.Path == LocalHealthzPath && r.Method == http.MethodGet:
		l.healthz(w, r.URL.Query().Get("stage") == stageMounts)
	case r.URL.Path == LocalPreparedPath && r.Method == http.MethodPost:
		l.postPrepared(w, r)
	case l.Model != nil && (strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/v1beta/")):
		if l.ModelReady != nil {
			select {
			case <-l.ModelReady:
			case <-r.Context().Done():
				return
			case <-time.After(modelHold):
				http.Error(w, "the runner is starting: try again", http.StatusServiceUnavailable)
				return
			}
		}
		l.Model.ServeHTTP(w, r)
	default:
		http.Error(w, "not found: the runner serves git under /git/ and the model API under /v1/ (and Gemini's /v1beta/)", http.StatusNotFound)
	}
}

// stageMounts asks the readiness check about the mounts only (the postStart hook's probe).
const stageMounts = "mounts"

func (l *Local) healthz(w http.ResponseWriter, mounts bool) {
	l.mu.Lock()
	mounted, ready, err, res := l.mounted, l.ready, l.readyErr, l.volume
	l.mu.Unlock()
	switch {
	case mounts && mounted && !ready:
		w.WriteHeader(http.StatusNoContent)
	case !ready:
		http.Error(w, "the runner is still preparing the volume", http.StatusServiceUnavailable)
	case err != nil:
		// 424: the checkout step stops waiting and reports this.
		http.Error(w, err.Error(), http.StatusFailedDependency)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}
}

func (l *Local) postPrepared(w http.ResponseWriter, r *http.Request) {
	var res Prepared
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&res); err != nil {
		http.Error(w, "bad result: "+err.Error(), http.StatusBadRequest)
		return
	}
	select {
	case l.prepared <- res:
	default: // one result per pod; a second (a repeated post) is dropped
	}
	w.WriteHeader(http.StatusNoContent)
}

// Serve serves l on addr until ctx ends.
func (l *Local) Serve(ctx context.Context, addr string) (net.Addr, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return ln.Addr(), stop, nil
}

// LocalGitURL is the checkout's origin: the runner's git endpoint for the repository's path.
func LocalGitURL(addr, repository string) string {
	path := "repository.git"
	if u, err := url.Parse(repository); err == nil && u.Path != "" {
		path = strings.TrimPrefix(u.Path, "/")
	}
	return "http://" + addr + LocalGitPath + path
}

// WaitLocal waits until the runner's local server at addr says the volume is ready, for the
// checkout step, and returns what the runner did. A runner that failed its startup answers why,
// and WaitLocal returns that.
func WaitLocal(ctx context.Context, addr string) (workspace.VolumeResult, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	delay := 50 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+LocalHealthzPath, nil)
		if err != nil {
			return workspace.VolumeResult{}, err
		}
		resp, err := c.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				var res workspace.VolumeResult
				if err := json.Unmarshal(msg, &res); err != nil {
					return res, fmt.Errorf("the runner's answer is unreadable: %w", err)
				}
				return res, nil
			case http.StatusFailedDependency:
				return workspace.VolumeResult{}, fmt.Errorf("the runner could not prepare the volume: %s", strings.TrimSpace(string(msg)))
			}
		}
		select {
		case <-ctx.Done():
			return workspace.VolumeResult{}, fmt.Errorf("the runner's container did not get ready: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond) // loopback: asking costs nothing, waiting does
	}
}

// Probe waits until the runner's local server says the agent's containers may start (the
// runner container's postStart hook, which holds them back until it returns): nil once the
// directories they mount are final (the mirror may still be fetching: the checkout step waits
// for that with WaitLocal), and also when preparing the volume failed, so that the checkout
// step starts, reads why from the runner and ends the pod with it (a hook that failed would
// only restart the runner).
func Probe(ctx context.Context, addr string) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	// Polled every 20 ms on loopback: the hook returns the moment the runner is ready.
	for {
		err := probeOnce(ctx, c, addr)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func probeOnce(ctx context.Context, c *http.Client, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+LocalHealthzPath+"?stage="+stageMounts, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("the runner does not answer yet: %w", err)
	}
	var msg [2048]byte
	n, _ := resp.Body.Read(msg[:])
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusFailedDependency {
		return fmt.Errorf("not ready (%d): %s", resp.StatusCode, strings.TrimSpace(string(msg[:n])))
	}
	return nil
}

// postPrepared sends the checkout step's outcome to the runner, which reports it and starts the
// agent (or ends the pod with the failure). A runner restarting meanwhile (a native sidecar the
// kubelet restarts) is waited for, up to a minute.
func postPrepared(ctx context.Context, addr string, out Prepared) error {
	raw, err := json.Marshal(out)
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		err := postOnce(ctx, c, addr, raw)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func postOnce(ctx context.Context, c *http.Client, addr string, raw []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+LocalPreparedPath, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("the runner answered %d", resp.StatusCode)
	}
	return nil
}
