package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// DefaultSetupTimeout applies to a setup command without its own timeout (the CRD default).
const DefaultSetupTimeout = 10 * time.Minute

// SetupResult reports the setup commands apart from the checkout: a failure leaves the checkout
// usable.
type SetupResult struct {
	State         agentsv1alpha1.SetupState `json:"state"`
	FailedCommand string                    `json:"failedCommand,omitempty"`
	// Error is the failure and the last lines of the failed command's output.
	Error string `json:"error,omitempty"`
	// Skipped is true when the same commands already succeeded in this checkout (a restore).
	Skipped bool `json:"skipped,omitempty"`
}

type setupRecord struct {
	Hash   string      `json:"hash"`
	Result SetupResult `json:"result"`
}

// RunSetup runs the commands in dir, in order, each with its timeout, stopping at the first
// failure. The outcome is recorded in stateDir so that a restore does not run commands that
// already succeeded. It returns an error only when it could not record the outcome.
func RunSetup(ctx context.Context, dir, stateDir string, cmds []agentsv1alpha1.SetupCommand, out io.Writer) (SetupResult, error) {
	return runSetup(ctx, dir, stateDir, cmds, sharedSetup{}, out)
}

// sharedSetup is what the setup commands of a checkout with shared paths depend on.
type sharedSetup struct {
	// Paths and Dir: the commands' success is recorded for these shared paths. Sharing a path,
	// or no longer sharing it, leaves the checkout without what the commands made there, so they
	// run again.
	Paths []string
	Dir   string
}

// sharedSetup is the shared paths' part of the setup.
func (o *Options) sharedSetup() sharedSetup {
	if len(o.SharedPaths) == 0 {
		return sharedSetup{}
	}
	paths := slices.Clone(o.SharedPaths)
	slices.Sort(paths)
	return sharedSetup{Paths: paths, Dir: o.SharedDir}
}

func runSetup(ctx context.Context, dir, stateDir string, cmds []agentsv1alpha1.SetupCommand, shared sharedSetup, out io.Writer) (SetupResult, error) {
	if len(cmds) == 0 {
		return SetupResult{State: agentsv1alpha1.SetupSucceeded}, nil
	}
	if out == nil {
		out = io.Discard
	}
	raw, _ := json.Marshal(cmds)
	if len(shared.Paths) > 0 {
		// Without shared paths the hash stays that of the commands alone, as records written
		// before shared paths existed have it.
		raw, _ = json.Marshal(struct {
			Commands []agentsv1alpha1.SetupCommand `json:"commands"`
			Shared   sharedSetup                   `json:"shared"`
		}{cmds, shared})
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])
	recordPath := filepath.Join(stateDir, "setup.json")
	var prev setupRecord
	if b, err := os.ReadFile(recordPath); err == nil && json.Unmarshal(b, &prev) == nil &&
		prev.Hash == hash && prev.Result.State == agentsv1alpha1.SetupSucceeded {
		return SetupResult{State: agentsv1alpha1.SetupSucceeded, Skipped: true}, nil
	}
	if len(shared.Paths) > 0 {
		// The commands fill the Project's cache, which every checkout of the Project uses: two
		// sessions preparing at once must not install into it together.
		fmt.Fprintf(out, "setup: taking the shared cache's lock %s.lock (one setup at a time per Project)\n", shared.Dir)
		lock, err := AcquireLock(ctx, shared.Dir+".lock")
		if err != nil {
			return SetupResult{State: agentsv1alpha1.SetupFailed, Error: err.Error()}, nil
		}
		defer func() { _ = lock.Release() }()
	}
	res := SetupResult{State: agentsv1alpha1.SetupSucceeded}
	for _, c := range cmds {
		if err := runSetupCommand(ctx, dir, c, out); err != nil {
			res = SetupResult{State: agentsv1alpha1.SetupFailed, FailedCommand: c.Name, Error: err.Error()}
			break
		}
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return res, fmt.Errorf("create state dir: %w", err)
	}
	b, _ := json.Marshal(setupRecord{Hash: hash, Result: res})
	if err := os.WriteFile(recordPath, b, 0o644); err != nil {
		return res, fmt.Errorf("record setup result: %w", err)
	}
	return res, nil
}

func runSetupCommand(ctx context.Context, dir string, c agentsv1alpha1.SetupCommand, out io.Writer) error {
	if len(c.Command) == 0 {
		return fmt.Errorf("setup command %q is empty", c.Name)
	}
	timeout := DefaultSetupTimeout
	if c.Timeout != nil && c.Timeout.Duration > 0 {
		timeout = c.Timeout.Duration
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail := &Tail{Max: 20}
	fmt.Fprintf(out, "setup %s: %s\n", c.Name, strings.Join(c.Command, " "))
	cmd := exec.CommandContext(ctx, c.Command[0], c.Command[1:]...)
	cmd.Dir = dir
	w := io.MultiWriter(out, tail)
	cmd.Stdout, cmd.Stderr = w, w
	// Its own process group, so a timeout kills what the command started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s", timeout)
	}
	return fmt.Errorf("%w\n%s", err, tail.String())
}

// Tail keeps the last Max lines written to it.
type Tail struct {
	Max     int
	mu      sync.Mutex
	lines   []string
	partial string
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.partial + string(p)
	parts := strings.Split(s, "\n")
	t.partial = parts[len(parts)-1]
	t.lines = append(t.lines, parts[:len(parts)-1]...)
	if over := len(t.lines) - t.Max; over > 0 {
		t.lines = t.lines[over:]
	}
	return len(p), nil
}

// String returns the kept lines, the unterminated last one included, bounded to 3 KiB.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if t.partial != "" {
		lines = append(append([]string{}, lines...), t.partial)
	}
	s := strings.Join(lines, "\n")
	if len(s) > 3072 {
		s = s[len(s)-3072:]
	}
	return s
}
