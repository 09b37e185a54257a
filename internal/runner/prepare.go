package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// PrepareConfig is everything `runner prepare` takes (from flags; see cmd/runner). Prepare is
// the checkout step: it runs in the agent's image as the agent's user, before the agent starts,
// with no token and no credential; its git reaches the forge through the runner's local server.
type PrepareConfig struct {
	Workspace workspace.Options
	// RunnerAddr is the runner's local server: prepare waits until the runner says the volume is
	// ready (the mirror fetched, a spare moved into place), then tells it the result. Empty
	// waits for nobody (tests of the checkout alone).
	RunnerAddr string
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
	g := &workspace.Git{Path: cfg.GitPath, Timeout: 30 * time.Minute,
		// The checkout's top directory was made by the runner (another user); in the agent's
		// own domain that is safe.
		ConfigArgs: []string{"-c", "safe.directory=*"}}
	// A local fetch from the mirror (the runner's) runs upload-pack in the mirror, where git
	// drops command-line settings: the exception must be a global setting. Only this one: the
	// hardened git reads no other global or system configuration.
	if global, err := trustAllGlobal(); err == nil {
		g.Env = append(g.Env, "GIT_CONFIG_GLOBAL="+global)
	} else {
		return nil, err
	}
	if cfg.Log != nil {
		g.Log = cfg.Log
		cfg.Workspace.SetupOutput = cfg.Log
	}
	// fail records why no checkout came out, for the controller (the result file) and for the
	// runner, which ends the agent's container with it: the step runs beside that container.
	fail := func(err error) (*workspace.Result, error) {
		writeResult(cfg.ResultFile, map[string]string{"error": err.Error()})
		if cfg.RunnerAddr != "" {
			if perr := postPrepared(ctx, cfg.RunnerAddr, Prepared{Error: clip.To(err.Error(), 4096)}); perr != nil && cfg.Log != nil {
				fmt.Fprintf(cfg.Log, "shepherd-runner: could not tell the runner about the failure: %v\n", perr)
			}
		}
		return nil, err
	}
	var volume workspace.VolumeResult
	if cfg.RunnerAddr != "" {
		var err error
		if volume, err = WaitLocal(ctx, cfg.RunnerAddr); err != nil {
			return fail(err)
		}
	}
	res, err := workspace.Prepare(ctx, g, cfg.Workspace)
	if err != nil {
		return fail(err)
	}
	// In worktree mode the runner fetched the mirror: it knows whether that was the whole
	// repository (the manager labels the start cold or warm by it).
	res.FullFetch = res.FullFetch || volume.FullFetch
	if err := trustCheckout(res.Path); err != nil && cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "shepherd-runner: %v; the agent's own git may refuse the checkout\n", err)
	}
	writeResult(cfg.ResultFile, res)
	if cfg.RunnerAddr != "" {
		if err := postPrepared(ctx, cfg.RunnerAddr, Prepared{Result: *res}); err != nil && cfg.Log != nil {
			// The checkout is ready either way; the controller also reads the result file.
			fmt.Fprintf(cfg.Log, "shepherd-runner: could not tell the runner about the checkout: %v\n", err)
		}
	}
	return res, nil
}

// trustCheckout marks the checkout safe in the agent's git configuration ($HOME/.gitconfig):
// its top directory belongs to the runner's user, and git refuses to work in a repository
// another user owns unless told it is safe. Only that one path is added.
func trustCheckout(path string) error {
	home := os.Getenv("HOME")
	if home == "" || home == "/" {
		return errors.New("no HOME to record the checkout as safe in")
	}
	cfg := filepath.Join(home, ".gitconfig")
	line := "\tdirectory = " + path + "\n"
	raw, err := os.ReadFile(cfg)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", cfg, err)
	}
	if strings.Contains(string(raw), line) {
		return nil
	}
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", cfg, err)
	}
	defer func() { _ = f.Close() }()
	_, err = f.WriteString("[safe]\n" + line)
	return err
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

// trustAllGlobal writes a global git configuration that only trusts every repository's owner
// (safe.directory=*), in the container's temporary directory.
func trustAllGlobal() (string, error) {
	path := filepath.Join(os.TempDir(), "shepherd-prepare.gitconfig")
	if err := os.WriteFile(path, []byte("[safe]\n\tdirectory = *\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// AgentGitConfig is the system git configuration of the agent's containers (GIT_CONFIG_SYSTEM):
// the mirror and a claimed spare checkout are the runner's (another uid), and git refuses a
// repository another user owns ("dubious ownership"). Command-line and environment settings do
// not reach the git that serves a local fetch (git clears them for another repository), so the
// exception is a system setting. It includes the image's own /etc/gitconfig. In the agent's
// domain it trusts nothing it should not: the repositories there are the session's own checkout
// and the runner's mirror (read-only); the runner's own git never reads this file
// (workspace.HardenedEnv sets GIT_CONFIG_NOSYSTEM).
const AgentGitConfig = `# Written by the runner (copy-self --git-config) for the agent's containers.
[include]
	path = /etc/gitconfig
[safe]
	directory = *
`

// WriteAgentGitConfig writes AgentGitConfig to path, readable by all.
func WriteAgentGitConfig(path string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(AgentGitConfig), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	return nil
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
