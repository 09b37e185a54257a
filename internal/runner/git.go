// Package runner is the in-pod half of Shepherd. The runner's container serves the pod's only
// way out to the forge and the model API (local.go), keeps the Project's mirror and spare
// checkouts (sidecar.go), and drives the agent turn by turn (run.go): it runs the agent CLI in
// the agent's container through that container's host (internal/agenthost), reports what the
// agent does to the manager, delivers follow-up messages as resumed turns, and pushes the branch
// and asks for the pull request. The checkout step (prepare.go) runs in the agent's trust domain.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shepherd-dev/shepherd/internal/agenthost"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// DefaultTokenFile is where the pod spec mounts the projected, audience-bound token (in the
// runner's container only).
const DefaultTokenFile = "/var/run/secrets/shepherd/token"

// Channel says how to reach the manager.
type Channel struct {
	ManagerURL string
	TokenFile  string
	CAFile     string
}

// Enabled reports whether a manager is configured.
func (c Channel) Enabled() bool { return c.ManagerURL != "" }

// Client returns the channel client.
func (c Channel) Client() (*runnerapi.Client, error) {
	if c.TokenFile == "" {
		c.TokenFile = DefaultTokenFile
	}
	return runnerapi.NewClient(c.ManagerURL, c.TokenFile, c.CAFile)
}

// LocalGit runs git in this container, for the repositories no agent can write (the mirror, the
// spares). Its remotes are the runner's own git endpoint, so it needs no credential.
func LocalGit(gitPath string, log io.Writer) *workspace.Git {
	return &workspace.Git{Path: gitPath, Timeout: 30 * time.Minute, Log: log}
}

// HostGit runs git in the agent's container, as the agent, for its checkout: the checkout's
// config, hooks and filters are the agent's to set, so git reads them only where the agent runs
// anyway. The checkout's top directory may belong to the runner (it made it, or moved a spare
// there), hence safe.directory; that is the agent's own domain.
func HostGit(host *agenthost.Client) *workspace.Git {
	return &workspace.Git{
		Path:       "git",
		Timeout:    30 * time.Minute,
		ConfigArgs: []string{"-c", "safe.directory=*"},
		Exec:       hostExecutor(host),
	}
}

// hostExecutor runs a program through the agent container's host.
func hostExecutor(host *agenthost.Client) workspace.Executor {
	return func(ctx context.Context, dir string, env []string, stdin io.Reader, args []string, stdout, stderr io.Writer) error {
		var in []byte
		if stdin != nil {
			var err error
			if in, err = io.ReadAll(io.LimitReader(stdin, 1<<20)); err != nil {
				return err
			}
		}
		out, errOut, code, err := host.Output(ctx, agenthost.ExecRequest{Args: args, Dir: dir, Env: env, Stdin: in})
		_, _ = stdout.Write(out)
		_, _ = stderr.Write(errOut)
		var se *agenthost.StartError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("%s", se.Msg)
		case err != nil:
			return err
		case code != 0:
			return &workspace.ExitStatus{Code: code}
		}
		return nil
	}
}

// retry calls f until it succeeds, fails with a non-retryable error, or ctx ends, backing off
// from 500ms to 10s.
func retry(ctx context.Context, what string, f func() error) error {
	delay := 500 * time.Millisecond
	for {
		err := f()
		if err == nil || !runnerapi.Retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Second)
	}
}
