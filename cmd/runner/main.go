// Command runner is the in-pod half of Shepherd. See docs/runner.md.
//
//	runner copy-self  --to /shepherd/bin/runner
//	runner prepare    --mode Worktree --path ... --mirror ... --remote-url ... --branch ... --base ... [--shared-paths ... --shared-dir ...]
//	runner run        --workdir ... --manager-url ... [--spare-worktrees N --mirror ... --base ...]
//	runner credential get            (git's credential helper; git runs it, not people)
//	runner mirror     --mirror ... --remote-url ...
//	runner remove     --mode ... --path ... [--mirror ...]
//
// Every flag can also be set through the environment variable named in its help, so the
// controller can build the pod spec from either.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
	"github.com/shepherd-dev/shepherd/internal/runner"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

func main() { os.Exit(main1()) }

// main1 runs the subcommand and returns the exit code, so that deferred cleanups run before
// main exits.
func main1() int {
	if len(os.Args) < 2 {
		usage()
		return 2
	}
	if os.Args[1] != "copy-self" {
		ensureHome()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var code int
	var err error
	switch os.Args[1] {
	case "copy-self":
		err = copySelf(os.Args[2:])
	case "prepare":
		err = prepare(ctx, os.Args[2:])
	case "run":
		code, err = run(ctx, os.Args[2:])
	case "credential":
		op := ""
		if len(os.Args) > 2 {
			op = os.Args[len(os.Args)-1]
		}
		err = runner.Credential(ctx, op, os.Stdin, os.Stdout, runner.Channel{
			ManagerURL: os.Getenv(runner.EnvManagerURL), TokenFile: os.Getenv(runner.EnvTokenFile), CAFile: os.Getenv(runner.EnvCAFile)})
	case "mirror":
		err = mirror(ctx, os.Args[2:])
	case "remove":
		err = remove(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return 0
	default:
		fmt.Fprintf(os.Stderr, "runner: unknown subcommand %q\n", os.Args[1])
		usage()
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "runner %s: %v\n", os.Args[1], err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func usage() {
	//nolint:dupword // a list of subcommands, not repeated words
	fmt.Fprintln(os.Stderr, `usage: runner <copy-self|prepare|run|credential|mirror|remove> [flags]
  copy-self   copy this binary into a shared volume (init container)
  prepare     make or restore the checkout and run the setup commands (init container)
  run         run the agent, report to the manager, deliver messages, push and request the PR
  credential  git credential helper (asks the manager for a short-lived credential)
  mirror      create or fetch the Project's mirror
  remove      remove a checkout, keeping its branch
Run 'runner <subcommand> -h' for its flags; docs/runner.md explains them.`)
}

// env returns the environment value of name, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envBool(name string) bool {
	v := strings.ToLower(os.Getenv(name))
	return v == "1" || v == "true" || v == "yes"
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

func channelFlags(fs *flag.FlagSet) *runner.Channel {
	ch := &runner.Channel{}
	fs.StringVar(&ch.ManagerURL, "manager-url", env("SHEPHERD_MANAGER_URL", ""), "URL of the manager's runner endpoint (env SHEPHERD_MANAGER_URL); empty: no channel")
	fs.StringVar(&ch.TokenFile, "token-file", env("SHEPHERD_TOKEN_FILE", runner.DefaultTokenFile), "projected service account token, audience "+`"shepherd-runner"`+" (env SHEPHERD_TOKEN_FILE)")
	fs.StringVar(&ch.CAFile, "ca-file", env("SHEPHERD_CA_FILE", ""), "CA bundle that signs the manager's certificate (env SHEPHERD_CA_FILE)")
	return ch
}

func self() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}

func copySelf(args []string) error {
	fs := flag.NewFlagSet("copy-self", flag.ExitOnError)
	to := fs.String("to", env("SHEPHERD_COPY_TO", "/shepherd/bin/runner"), "destination of the runner binary (env SHEPHERD_COPY_TO)")
	_ = fs.Parse(args)
	return runner.CopySelf(*to)
}

func prepare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prepare", flag.ExitOnError)
	var o workspace.Options
	mode := fs.String("mode", env("SHEPHERD_WORKSPACE_MODE", string(agentsv1alpha1.WorkspaceWorktree)), "Worktree or Clone (env SHEPHERD_WORKSPACE_MODE)")
	fs.StringVar(&o.Path, "path", env("SHEPHERD_CHECKOUT_PATH", ""), "absolute path of the checkout (env SHEPHERD_CHECKOUT_PATH)")
	fs.StringVar(&o.MirrorPath, "mirror", env("SHEPHERD_MIRROR_PATH", ""), "absolute path of the Project's bare mirror; required for Worktree, optional reference for Clone (env SHEPHERD_MIRROR_PATH)")
	fs.StringVar(&o.RemoteURL, "remote-url", env("SHEPHERD_REMOTE_URL", ""), "repository URL, without credentials (env SHEPHERD_REMOTE_URL)")
	fs.StringVar(&o.Branch, "branch", env("SHEPHERD_BRANCH", ""), "branch to work on (env SHEPHERD_BRANCH)")
	fs.StringVar(&o.Base, "base", env("SHEPHERD_BASE", "main"), "branch, tag or commit a new branch starts from (env SHEPHERD_BASE)")
	fs.BoolVar(&o.Adopt, "adopt", envBool("SHEPHERD_ADOPT"), "take over the branch when it already exists on the remote (env SHEPHERD_ADOPT)")
	setup := fs.String("setup", env("SHEPHERD_SETUP", ""), `setup commands as JSON: [{"name":"deps","command":["npm","ci"],"timeout":"10m"}] (env SHEPHERD_SETUP)`)
	shared := fs.String("shared-paths", env("SHEPHERD_SHARED_PATHS", ""), "comma-separated paths of the checkout linked to the Project's cache, e.g. node_modules,web/node_modules (env SHEPHERD_SHARED_PATHS)")
	fs.StringVar(&o.SharedDir, "shared-dir", env("SHEPHERD_SHARED_DIR", ""), "absolute path of the Project's cache the shared paths link to; required with --shared-paths (env SHEPHERD_SHARED_DIR)")
	resultFile := fs.String("result-file", env("SHEPHERD_RESULT_FILE", ""), "write the result as JSON here, e.g. /dev/termination-log (env SHEPHERD_RESULT_FILE)")
	gitPath := fs.String("git", env("SHEPHERD_GIT", ""), "git binary; empty looks it up on PATH (env SHEPHERD_GIT)")
	timeout := fs.Duration("timeout", envDuration("SHEPHERD_PREPARE_TIMEOUT", 60*time.Minute), "give up after this long (env SHEPHERD_PREPARE_TIMEOUT)")
	ch := channelFlags(fs)
	_ = fs.Parse(args)
	o.Mode = agentsv1alpha1.WorkspaceMode(*mode)
	cmds, err := runner.ParseSetup(*setup)
	if err != nil {
		return err
	}
	o.Setup = cmds
	if o.SharedPaths, err = runner.ParseSharedPaths(*shared); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := runner.Prepare(ctx, runner.PrepareConfig{Workspace: o, Channel: *ch, Self: self(), GitPath: *gitPath, ResultFile: *resultFile, Log: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "checkout %s ready on %s at %s (restored: %t, branch %s, setup %s)\n",
		res.Path, res.Branch, res.Facts.Head, res.Restored, res.BranchAction, res.Setup.State)
	if res.Setup.State == agentsv1alpha1.SetupFailed {
		fmt.Fprintf(os.Stdout, "setup command %q failed; the checkout is usable:\n%s\n", res.Setup.FailedCommand, res.Setup.Error)
	}
	return nil
}

func run(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var cfg runner.RunConfig
	fs.StringVar(&cfg.Workdir, "workdir", env("SHEPHERD_CHECKOUT_PATH", ""), "the prepared checkout (env SHEPHERD_CHECKOUT_PATH)")
	fs.StringVar(&cfg.GitPath, "git", env("SHEPHERD_GIT", ""), "git binary; empty looks it up on PATH (env SHEPHERD_GIT)")
	fs.DurationVar(&cfg.PollWait, "poll-wait", envDuration("SHEPHERD_POLL_WAIT", 30*time.Second), "how long one long poll for messages waits (env SHEPHERD_POLL_WAIT)")
	fs.DurationVar(&cfg.Debounce, "debounce", envDuration("SHEPHERD_DEBOUNCE", time.Second), "least time between coalesced reports (env SHEPHERD_DEBOUNCE)")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", envDuration("SHEPHERD_HEARTBEAT", 30*time.Second), "interval of heartbeat reports (env SHEPHERD_HEARTBEAT)")
	fs.DurationVar(&cfg.StopGrace, "stop-grace", envDuration("SHEPHERD_STOP_GRACE", 10*time.Second), "time between SIGTERM and SIGKILL for the agent on stop (env SHEPHERD_STOP_GRACE)")
	spares := fs.Int("spare-worktrees", envInt("SHEPHERD_SPARE_WORKTREES", -1), "spare worktrees of the mirror to keep ready for the next sessions, made after the agent started; 0 removes any, -1 leaves them alone (env SHEPHERD_SPARE_WORKTREES)")
	mirror := fs.String("mirror", env("SHEPHERD_MIRROR_PATH", ""), "the Project's bare mirror; required with --spare-worktrees (env SHEPHERD_MIRROR_PATH)")
	base := fs.String("base", env("SHEPHERD_BASE", "main"), "branch, tag or commit the spares are checked out at (env SHEPHERD_BASE)")
	ch := channelFlags(fs)
	_ = fs.Parse(args)
	if cfg.Workdir == "" {
		return 2, errors.New("--workdir is required")
	}
	if *spares >= 0 {
		if *mirror == "" {
			return 2, errors.New("--spare-worktrees needs --mirror")
		}
		cfg.Spares = &workspace.Spares{Mirror: *mirror, Dir: workspace.SpareDir(cfg.Workdir), Base: *base, Count: *spares}
	}
	cfg.Channel, cfg.Self = *ch, self()
	return runner.Run(ctx, cfg)
}

func mirror(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mirror", flag.ExitOnError)
	path := fs.String("mirror", env("SHEPHERD_MIRROR_PATH", ""), "absolute path of the bare mirror (env SHEPHERD_MIRROR_PATH)")
	remote := fs.String("remote-url", env("SHEPHERD_REMOTE_URL", ""), "repository URL (env SHEPHERD_REMOTE_URL)")
	gitPath := fs.String("git", env("SHEPHERD_GIT", ""), "git binary (env SHEPHERD_GIT)")
	ch := channelFlags(fs)
	_ = fs.Parse(args)
	g := runner.NewGit(*gitPath, self(), *ch, os.Stderr)
	if err := g.CheckVersion(ctx, true); err != nil {
		return err
	}
	return workspace.UpdateMirror(ctx, g, *path, *remote)
}

func remove(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("remove", flag.ExitOnError)
	mode := fs.String("mode", env("SHEPHERD_WORKSPACE_MODE", string(agentsv1alpha1.WorkspaceWorktree)), "Worktree or Clone")
	path := fs.String("path", env("SHEPHERD_CHECKOUT_PATH", ""), "the checkout to remove")
	mirrorPath := fs.String("mirror", env("SHEPHERD_MIRROR_PATH", ""), "the mirror (worktree mode)")
	gitPath := fs.String("git", env("SHEPHERD_GIT", ""), "git binary")
	_ = fs.Parse(args)
	if *path == "" {
		return errors.New("--path is required")
	}
	return workspace.Remove(ctx, runner.NewGit(*gitPath, "", runner.Channel{}, os.Stderr), agentsv1alpha1.WorkspaceMode(*mode), *path, *mirrorPath)
}

// ensureHome creates $HOME when it is missing: Shepherd points it at a directory on the workspace
// volume (so agents' conversations survive a pod restore), which nothing else creates.
func ensureHome() {
	home := os.Getenv("HOME")
	if home == "" || home == "/" {
		return
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "runner: cannot create HOME %s: %v\n", home, err)
	}
}
