package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// PrepareConfig is everything `runner prepare` takes (from flags; see cmd/runner).
type PrepareConfig struct {
	Workspace workspace.Options
	Channel   Channel
	// Self is the runner binary, used as git's credential helper.
	Self string
	// GitPath of git; "" looks it up on PATH.
	GitPath string
	// ResultFile receives the result as JSON, cut to 4 KiB (point it at /dev/termination-log so
	// the controller reads it from the pod status).
	ResultFile string
	// Log receives git's and the setup commands' output.
	Log *os.File
}

// ParseSetup reads the setup commands from their JSON flag.
func ParseSetup(raw string) ([]agentsv1alpha1.SetupCommand, error) {
	if raw == "" {
		return nil, nil
	}
	var cmds []agentsv1alpha1.SetupCommand
	if err := json.Unmarshal([]byte(raw), &cmds); err != nil {
		return nil, fmt.Errorf("setup commands must be a JSON list of {name, command, timeout}: %w", err)
	}
	for _, c := range cmds {
		if c.Name == "" || len(c.Command) == 0 {
			return nil, fmt.Errorf("setup command %q needs a name and a command", c.Name)
		}
	}
	return cmds, nil
}

// ParseSharedPaths reads the shared paths from their comma-separated flag (the API's pattern
// admits no comma in a path).
func ParseSharedPaths(raw string) ([]string, error) {
	var paths []string
	for _, p := range strings.Split(raw, ",") {
		if p = strings.TrimSpace(p); p != "" {
			paths = append(paths, p)
		}
	}
	if err := workspace.ValidateSharedPaths(paths); err != nil {
		return nil, err
	}
	return paths, nil
}

// Prepare makes the checkout and reports it. A failed setup is reported and returns no error.
func Prepare(ctx context.Context, cfg PrepareConfig) (*workspace.Result, error) {
	g := NewGit(cfg.GitPath, cfg.Self, cfg.Channel, cfg.Log)
	if cfg.Log != nil {
		cfg.Workspace.SetupOutput = cfg.Log
	}
	res, err := workspace.Prepare(ctx, g, cfg.Workspace)
	if err != nil {
		writeResult(cfg.ResultFile, map[string]string{"error": err.Error()})
		return nil, err
	}
	writeResult(cfg.ResultFile, res)
	if cfg.Channel.Enabled() {
		if err := reportPrepared(ctx, cfg.Channel, res); err != nil && cfg.Log != nil {
			// The checkout is ready either way; the controller also reads the result file.
			fmt.Fprintf(cfg.Log, "shepherd-runner: could not report the checkout to the manager: %v\n", err)
		}
	}
	return res, nil
}

func reportPrepared(ctx context.Context, ch Channel, res *workspace.Result) error {
	client, err := ch.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var task *runnerapi.Task
	if err := retry(ctx, "get task", func() error {
		var err error
		task, err = client.Task(ctx)
		return err
	}); err != nil {
		return err
	}
	rep := runnerapi.Report{Sequence: task.LastSequence + 1, Time: time.Now(), Workspace: workspaceReport(res.Facts, res.Path)}
	rep.Workspace.Restored = res.Restored
	rep.Workspace.Setup = &runnerapi.SetupReport{State: res.Setup.State, FailedCommand: res.Setup.FailedCommand,
		Error: agent.Truncate(res.Setup.Error, 4096)}
	return retry(ctx, "report checkout", func() error { return client.Report(ctx, rep) })
}

func workspaceReport(f workspace.Facts, path string) *runnerapi.WorkspaceReport {
	return &runnerapi.WorkspaceReport{Path: path, Branch: f.Branch, Head: f.Head, Dirty: f.Dirty, UnpushedCommits: int32(f.Unpushed)}
}

func writeResult(path string, v any) {
	if path == "" {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	if len(b) > 4096 {
		b, _ = json.Marshal(map[string]string{"error": "result too large for the termination message; see the container log"})
	}
	_ = os.WriteFile(path, b, 0o644)
}

// CopySelf copies the running binary to dest atomically (the init container that injects the
// runner into the agent container, as Tekton injects its entrypoint).
func CopySelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("open own binary: %w", err)
	}
	defer func() { _ = src.Close() }()
	tmp := dest + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return fmt.Errorf("copy runner: %w", err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("install %s: %w", dest, err)
	}
	return nil
}
