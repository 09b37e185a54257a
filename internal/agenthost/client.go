package agenthost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Client runs programs through a host.
type Client struct {
	// BaseURL of the host, http://127.0.0.1:8738.
	BaseURL string
	HTTP    *http.Client
}

// NewClient returns a client of the host at addr (host:port).
func NewClient(addr string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the host is on the pod's loopback; never through the agent's egress proxy
	return &Client{BaseURL: "http://" + addr, HTTP: &http.Client{Transport: tr}}
}

// maxFrame bounds one frame of the answer: output is sent in the pieces the program wrote.
const maxFrame = 16 << 20

// Process is a program started through the host.
type Process struct {
	// Stdout and Stderr stream the program's output; read both (or neither) to the end.
	Stdout, Stderr io.Reader

	done    chan struct{}
	code    int
	err     error
	stopped bool
	cancel  context.CancelFunc
}

// Stopped reports, after Wait, whether the host stopped the program because the host itself
// was stopping (the pod is going away).
func (p *Process) Stopped() bool {
	<-p.done
	return p.stopped
}

// Wait returns the exit code once the program ended and its output was read. An error means
// the host could not be asked or the answer broke off; the code is then -1.
func (p *Process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

// Stop cancels the request: the host sends SIGTERM, then SIGKILL after the request's grace.
func (p *Process) Stop() { p.cancel() }

// Start asks the host to run req. The program runs until it exits, ctx ends or Stop is called.
func (c *Client) Start(ctx context.Context, req ExecRequest) (*Process, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode exec request: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+PathExec, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("build exec request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(hreq)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("reach the agent container's host: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("the agent container's host refused to run %q: %d %s", req.Args, resp.StatusCode, bytes.TrimSpace(msg))
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	p := &Process{Stdout: outR, Stderr: errR, done: make(chan struct{}), code: -1, cancel: cancel}
	go func() {
		defer close(p.done)
		defer func() { _ = resp.Body.Close() }()
		p.code, p.stopped, p.err = readFrames(resp.Body, outW, errW)
		_ = outW.CloseWithError(p.err)
		_ = errW.CloseWithError(p.err)
	}()
	return p, nil
}

// readFrames copies the frames' output to the pipes until the exit frame.
func readFrames(r io.Reader, stdout, stderr io.Writer) (code int, stopped bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxFrame)
	startErr := ""
	for sc.Scan() {
		var f Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return -1, false, fmt.Errorf("unreadable answer from the agent container's host: %w", err)
		}
		if len(f.Stdout) > 0 {
			if _, err := stdout.Write(f.Stdout); err != nil {
				return -1, false, err
			}
		}
		if len(f.Stderr) > 0 {
			if _, err := stderr.Write(f.Stderr); err != nil {
				return -1, false, err
			}
		}
		if f.Error != "" {
			startErr = f.Error
		}
		if f.Exit != nil {
			if startErr != "" {
				return *f.Exit, f.Stopped, &StartError{Msg: startErr}
			}
			return *f.Exit, f.Stopped, nil
		}
	}
	if err := sc.Err(); err != nil {
		return -1, false, fmt.Errorf("the agent container's host broke off: %w", err)
	}
	return -1, false, errors.New("the agent container's host broke off before the program exited")
}

// StartError: the host could not start the program (not found, not executable).
type StartError struct{ Msg string }

func (e *StartError) Error() string { return e.Msg }

// Output runs req to the end and returns its output and exit code.
func (c *Client) Output(ctx context.Context, req ExecRequest) (stdout, stderr []byte, code int, err error) {
	p, err := c.Start(ctx, req)
	if err != nil {
		return nil, nil, -1, err
	}
	var o, e bytes.Buffer
	errc := make(chan error, 1)
	go func() { _, err := io.Copy(&e, p.Stderr); errc <- err }()
	_, cerr := io.Copy(&o, p.Stdout)
	eerr := <-errc
	code, err = p.Wait()
	if err == nil {
		err = errors.Join(cerr, eerr)
	}
	return o.Bytes(), e.Bytes(), code, err
}

// Dir makes path (with its parents) in the agent's container and lists its entries.
func (c *Client) Dir(ctx context.Context, path string) ([]string, error) {
	var ans DirAnswer
	if err := c.post(ctx, PathDir, DirRequest{Path: path}, &ans); err != nil {
		return nil, err
	}
	return ans.Entries, nil
}

// Exit ends the host (and so the agent's container) with code.
func (c *Client) Exit(ctx context.Context, code int) error {
	return c.post(ctx, PathExit, ExitRequest{Code: code}, nil)
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("reach the agent container's host: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("the agent container's host answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	if out != nil {
		return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
	}
	return nil
}

// WaitReady polls the host's health endpoint until it answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	delay := 50 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+PathHealthz, nil)
		if err != nil {
			return err
		}
		resp, err := c.HTTP.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent container's host did not become ready: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond) // loopback: asking costs nothing, waiting does
	}
}
