// Package runner is the in-pod half of Shepherd: it prepares the checkout, runs the agent CLI
// turn by turn through its adapter, reports what the agent does to the manager, delivers
// follow-up messages as resumed turns, and pushes the branch and asks for the pull request.
package runner

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// Environment variables through which the runner hands the channel settings to its own
// credential-helper process (git runs the helper; the values are paths and a URL, no secret).
const (
	EnvManagerURL = "SHEPHERD_MANAGER_URL"
	EnvTokenFile  = "SHEPHERD_TOKEN_FILE"
	EnvCAFile     = "SHEPHERD_CA_FILE"
)

// DefaultTokenFile is where the pod spec mounts the projected, audience-bound token.
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

// NewGit returns a git runner whose commands ask the runner binary self for credentials, through
// the manager. The helper list is reset first, so no helper of the image (a credential store
// on disk) is consulted or written.
func NewGit(gitPath, self string, ch Channel, log *os.File) *workspace.Git {
	g := &workspace.Git{Path: gitPath, Timeout: 30 * time.Minute}
	if log != nil {
		g.Log = log
	}
	if ch.Enabled() && self != "" {
		g.ConfigArgs = []string{
			"-c", "credential.helper=",
			"-c", "credential.helper=!" + shellQuote(self) + " credential",
			"-c", "credential.useHttpPath=true",
		}
		tokenFile := ch.TokenFile
		if tokenFile == "" {
			tokenFile = DefaultTokenFile
		}
		g.Env = []string{EnvManagerURL + "=" + ch.ManagerURL, EnvTokenFile + "=" + tokenFile, EnvCAFile + "=" + ch.CAFile}
	}
	return g
}

// shellQuote quotes s for the POSIX shell git runs a "!" credential helper with. Only the
// runner's own path goes through it.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

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
