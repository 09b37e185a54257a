// Package agenthost runs programs in the agent's container on behalf of the runner.
//
// An agent pod has two trust domains: the runner's container (its own uid, the channel token,
// the model API key) and the agent's (the agent CLI, everything it runs, nothing secret). The
// runner decides every turn, but the agent CLI and git must run where the checkout and the
// agent's tools are, as the agent's uid. So the agent container's main process is this host: a
// small server on the pod's loopback that starts a program with the argument list, directory,
// environment and standard input the runner asks for, and streams its output back.
//
// The host trusts nobody and holds nothing: whoever reaches it (the runner, or code the agent
// runs) can only run programs as the agent, which the agent can do anyway. The runner, in turn,
// treats everything the host sends as untrusted agent output.
package agenthost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultAddr is where the host listens inside the pod.
const DefaultAddr = "127.0.0.1:8738"

// Paths of the host's endpoints.
const (
	PathExec    = "/host/v1/exec"
	PathDir     = "/host/v1/dir"
	PathExit    = "/host/v1/exit"
	PathHealthz = "/host/v1/healthz"
)

// Limits of one request.
const (
	maxRequestBody = 4 << 20
	maxArgs        = 256
	maxEnv         = 256
)

// ExecRequest asks the host to run one program.
type ExecRequest struct {
	// Args is the program and its arguments; Args[0] is looked up on the host's PATH.
	Args []string `json:"args"`
	// Dir is the working directory; empty is the host's own.
	Dir string `json:"dir,omitempty"`
	// Env is added to the host's environment (KEY=VALUE; a later entry wins).
	Env []string `json:"env,omitempty"`
	// Stdin is the program's standard input; empty gives it none.
	Stdin []byte `json:"stdin,omitempty"`
	// Grace is how long the program gets between SIGTERM and SIGKILL when the request is
	// cancelled (the runner is stopping the turn); 0 is 10 seconds.
	Grace time.Duration `json:"grace,omitempty"`
}

// Frame is one piece of the streamed answer: output as it is printed, then the exit.
type Frame struct {
	Stdout []byte `json:"o,omitempty"`
	Stderr []byte `json:"e,omitempty"`
	// Exit is set on the last frame: the exit code, or 128+signal when the program was killed.
	Exit *int `json:"x,omitempty"`
	// Error says why the program could not be started (then Exit is 127).
	Error string `json:"err,omitempty"`
	// Stopped says the host itself was told to stop (the pod is going away) and stopped the
	// program: not a crash of the program.
	Stopped bool `json:"stopped,omitempty"`
}

// DirRequest asks for a directory to exist (made with its parents) and for its entries.
type DirRequest struct {
	Path string `json:"path"`
}

// DirAnswer lists a directory's entry names, at most 1000.
type DirAnswer struct {
	Entries []string `json:"entries"`
}

// ExitRequest ends the host with Code: the agent container's exit code is the pod's verdict on
// the agent (the runner decides it and the host carries it out).
type ExitRequest struct {
	Code int `json:"code"`
}

// Server is the host.
type Server struct {
	// Env is the base environment of every program; nil uses the host's own.
	Env []string
	// Ready, when set, must return nil before /healthz answers 200.
	Ready func() error

	mux      *http.ServeMux
	stopping context.Context
	stop     context.CancelFunc
	exit     chan int
}

// NewServer returns a host.
func NewServer() *Server {
	s := &Server{exit: make(chan int, 1)}
	s.stopping, s.stop = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathExec, s.exec)
	mux.HandleFunc("POST "+PathDir, s.dir)
	mux.HandleFunc("POST "+PathExit, s.exitHandler)
	mux.HandleFunc("GET "+PathHealthz, s.healthz)
	s.mux = mux
	return s
}

// Exited delivers the exit code the runner asked for.
func (s *Server) Exited() <-chan int { return s.exit }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Serve serves on l until ctx ends. Then the programs still running are stopped (their last
// frame says Stopped) and Serve returns once their answers are sent, within 30 seconds.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		s.stop()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if s.Ready != nil {
		if err := s.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, "bad exec request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(req.Args) == 0 || req.Args[0] == "" || len(req.Args) > maxArgs || len(req.Env) > maxEnv {
		http.Error(w, "exec needs a program and at most 256 arguments and environment entries", http.StatusBadRequest)
		return
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			http.Error(w, fmt.Sprintf("environment entry %q is not KEY=VALUE", kv), http.StatusBadRequest)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := &frameWriter{w: w, enc: json.NewEncoder(w)}
	// Stopped by the caller (the request ends) or by the host stopping.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stopping.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	code := s.run(ctx, req, out)
	out.write(Frame{Exit: &code, Stopped: s.stopping.Err() != nil})
}

func (s *Server) dir(w http.ResponseWriter, r *http.Request) {
	var req DirRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || !strings.HasPrefix(req.Path, "/") {
		http.Error(w, "dir needs an absolute path", http.StatusBadRequest)
		return
	}
	if err := os.MkdirAll(req.Path, 0o775); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f, err := os.Open(req.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(1000)
	if err != nil && !errors.Is(err, io.EOF) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(DirAnswer{Entries: append([]string{}, names...)})
}

func (s *Server) exitHandler(w http.ResponseWriter, r *http.Request) {
	var req ExitRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1024)).Decode(&req); err != nil || req.Code < 0 || req.Code > 255 {
		http.Error(w, "exit needs a code between 0 and 255", http.StatusBadRequest)
		return
	}
	select {
	case s.exit <- req.Code:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// run starts the program and streams its output until it exits; a cancelled request stops it
// (SIGTERM to its process group, SIGKILL after the grace).
func (s *Server) run(ctx context.Context, req ExecRequest, out *frameWriter) int {
	cmd := exec.Command(req.Args[0], req.Args[1:]...)
	cmd.Dir = req.Dir
	base := s.Env
	if base == nil {
		base = os.Environ()
	}
	cmd.Env = append(append([]string(nil), base...), req.Env...)
	if len(req.Stdin) > 0 {
		cmd.Stdin = strings.NewReader(string(req.Stdin))
	}
	// Its own process group, so that a stop reaches every tool the program started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = streamTo(out, false)
	cmd.Stderr = streamTo(out, true)
	if err := cmd.Start(); err != nil {
		out.write(Frame{Error: fmt.Sprintf("could not start %s: %v", req.Args[0], err)})
		return 127
	}
	grace := req.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(grace):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	return exitCode(err)
}

// exitCode is the shell's convention: the code, or 128+signal for a killed process.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// frameWriter writes frames one at a time and flushes each, so output arrives as it is printed.
type frameWriter struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	enc *json.Encoder
}

func (f *frameWriter) write(fr Frame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.enc.Encode(fr)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
}

type streamWriter struct {
	out    *frameWriter
	stderr bool
}

func streamTo(out *frameWriter, stderr bool) io.Writer {
	return &streamWriter{out: out, stderr: stderr}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	b := append([]byte(nil), p...)
	if s.stderr {
		s.out.write(Frame{Stderr: b})
	} else {
		s.out.write(Frame{Stdout: b})
	}
	return len(p), nil
}
