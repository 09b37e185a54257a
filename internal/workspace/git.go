// Package workspace makes and inspects checkouts with the real git: clones (optionally borrowing
// objects from the Project's mirror with --reference), worktrees added from the mirror, restores
// of existing checkouts, branch creation and adoption, setup commands, and the facts the Worktree
// status reports (head, dirty, unpushed commits).
//
// Every git command is an argument list run without a shell. Credentials never appear in argv,
// in a URL or in .git/config: git asks a credential helper (the runner binary itself) that is
// configured per command with -c.
package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Minimum git versions. Clone mode needs --reference-if-able (2.11); worktree mode needs
// `rev-parse --absolute-git-dir` (2.13), which the runner uses in both modes to find the state
// it keeps in the checkout's git dir.
var (
	MinCloneVersion    = Version{2, 11}
	MinWorktreeVersion = Version{2, 13}
)

// Version is a git version (major.minor).
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than o.
func (v Version) Less(o Version) bool {
	return v.Major < o.Major || (v.Major == o.Major && v.Minor < o.Minor)
}

var versionRE = regexp.MustCompile(`git version (\d+)\.(\d+)`)

// ParseVersion reads the output of `git version`.
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("cannot read a version from %q", strings.TrimSpace(s))
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Version{major, minor}, nil
}

// Git runs git commands.
type Git struct {
	// Path of the git binary; "" looks up "git" on PATH.
	Path string
	// ConfigArgs are global options put before every subcommand, such as the -c pairs that set
	// the credential helper. They must hold no secret: they are visible in the process table.
	ConfigArgs []string
	// Env holds extra KEY=VALUE pairs.
	Env []string
	// Timeout bounds one command; 0 means 30 minutes (a large clone over a slow link).
	Timeout time.Duration
	// Log receives the commands run and their progress output; nil discards it.
	Log io.Writer
	// Exec runs the git process; nil runs it here. The runner sets it to run git in the agent's
	// container (agenthost), so that git never runs in the runner's trust domain on a repository
	// the agent can write (its hooks, fsmonitor and filters would run with the runner's rights).
	Exec Executor
}

// Executor runs one program with extra environment entries (added to its own) and waits for it.
// A program that ran and failed returns an error wrapping *ExitStatus.
type Executor func(ctx context.Context, dir string, env []string, stdin io.Reader, args []string, stdout, stderr io.Writer) error

// ExitStatus is a program's non-zero exit.
type ExitStatus struct{ Code int }

func (e *ExitStatus) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// LocalExec runs the program in this process's environment.
func LocalExec(ctx context.Context, dir string, env []string, stdin io.Reader, args []string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return fmt.Errorf("%w", &ExitStatus{Code: ee.ExitCode()})
	}
	return err
}

// Hardened is the configuration every git command of the runner and prepare runs with: no
// system or global configuration (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL below), no hooks, no
// fsmonitor, no credential helper of the image, and only the transports Shepherd uses (a local
// mirror and HTTP(S); never ext::, which runs a command, or ssh with a configured command).
var Hardened = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.sshCommand=false",
	"-c", "credential.helper=",
	"-c", "protocol.allow=never",
	"-c", "protocol.file.allow=always",
	"-c", "protocol.http.allow=always",
	"-c", "protocol.https.allow=always",
}

// HardenedEnv keeps the system's and the user's git configuration out, and git from prompting.
var HardenedEnv = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0"}

// Error is a failed git command with what it printed.
type Error struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if len(msg) > 2000 {
		msg = "…" + msg[len(msg)-2000:]
	}
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.Args, " "), e.Err, msg)
}

func (e *Error) Unwrap() error { return e.Err }

func (g *Git) bin() (string, error) {
	if g.Path != "" {
		return g.Path, nil
	}
	if g.Exec != nil {
		return "git", nil // looked up on the other side's PATH
	}
	p, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("git is not installed in this image (looked for it on PATH): %w", err)
	}
	return p, nil
}

// Run runs git with args in dir and returns its trimmed standard output.
func (g *Git) Run(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := g.run(ctx, dir, nil, args...)
	return strings.TrimSpace(out), err
}

func (g *Git) run(ctx context.Context, dir string, stdin io.Reader, args ...string) (string, error) {
	bin, err := g.bin()
	if err != nil {
		return "", err
	}
	timeout := g.Timeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Parallel checkout (one worker per core) writes a large tree about twice as fast on two
	// cores; it only changes how files are written, never what.
	full := append([]string{bin, "-c", "checkout.workers=0"}, Hardened...)
	full = append(append(full, g.ConfigArgs...), args...)
	// No prompt may ever wait for a human; LC_ALL=C keeps messages parseable.
	env := append(append([]string{"LC_ALL=C"}, HardenedEnv...), g.Env...)
	var stdout, stderr bytes.Buffer
	errOut := io.Writer(&stderr)
	if g.Log != nil {
		fmt.Fprintf(g.Log, "+ git %s\n", strings.Join(args, " "))
		errOut = io.MultiWriter(&stderr, g.Log)
	}
	execFn := g.Exec
	if execFn == nil {
		execFn = LocalExec
	}
	if err := execFn(ctx, dir, env, stdin, full, &stdout, errOut); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timeout %s)", ctx.Err(), timeout)
		}
		return stdout.String(), &Error{Args: args, Stderr: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// Version returns the installed git's version.
func (g *Git) Version(ctx context.Context) (Version, error) {
	out, err := g.Run(ctx, "", "version")
	if err != nil {
		return Version{}, err
	}
	return ParseVersion(out)
}

// ErrGitTooOld is returned when the installed git cannot do what the mode needs.
var ErrGitTooOld = errors.New("git is too old")

// CheckVersion refuses a git older than the mode needs, saying what to install.
func (g *Git) CheckVersion(ctx context.Context, worktreeMode bool) error {
	v, err := g.Version(ctx)
	if err != nil {
		return err
	}
	min, why := MinCloneVersion, "clone mode needs --reference-if-able"
	if worktreeMode {
		min, why = MinWorktreeVersion, "worktree mode needs `rev-parse --absolute-git-dir`"
	}
	if v.Less(min) {
		return fmt.Errorf("%w: found git %s, need %s or newer (%s); install a newer git in the agent image", ErrGitTooOld, v, min, why)
	}
	return nil
}

// refExists reports whether ref resolves to a commit in the repository at dir.
func (g *Git) refExists(ctx context.Context, dir, ref string) bool {
	_, err := g.Run(ctx, dir, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	return err == nil
}
