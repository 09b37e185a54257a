// Command runner is the in-pod half of Shepherd. See docs/runner.md.
//
//	runner copy-self  --to /shepherd/bin/runner
//	runner run        --workdir ... --manager-url ... [--volume-mode ... --mirror ... --spare-worktrees N ...]
//	                  the runner's container (a native sidecar): the local git and model endpoints,
//	                  the mirror and spares, and the agent's turns
//	runner prepare    --mode Worktree --path ... --mirror ... --remote-url ... --branch ... --base ...
//	                  the checkout step, in the agent's image as the agent's user
//	runner host       the agent container's main process: runs the agent CLI and git when asked
//	runner remove     --mode=<mode> --path=<checkout>
//
// Every flag can also be set through the environment variable named in its help, so the
// controller can build the pod spec from either.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
	"github.com/shepherd-dev/shepherd/internal/agenthost"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
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
	if os.Args[1] == "prepare" || os.Args[1] == "host" {
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
	case "host":
		code, err = host(ctx, os.Args[2:])
	case "probe":
		err = probe(ctx, os.Args[2:])
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
	fmt.Fprintln(os.Stderr, `usage: runner <copy-self|run|prepare|host|remove> [flags]
  copy-self   copy this binary into a shared volume (init container)
  run         the runner's container: serve git and the model API to the pod, keep the mirror,
              run the agent's turns, report to the manager, push and request the PR
  prepare     make or restore the checkout and run the setup commands (beside the agent's container, as the agent)
  host        the agent container's main process: run programs for the runner, as the agent
  probe       the runner container's postStart hook: succeeds once the agent's mounts are ready
  remove      remove a checkout's files
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
	fs.StringVar(&ch.ManagerURL, "manager-url", env("SHEPHERD_MANAGER_URL", ""), "URL of the manager's runner endpoint (env SHEPHERD_MANAGER_URL)")
	fs.StringVar(&ch.TokenFile, "token-file", env("SHEPHERD_TOKEN_FILE", runner.DefaultTokenFile), "projected service account token, audience "+`"shepherd-runner"`+" (env SHEPHERD_TOKEN_FILE)")
	fs.StringVar(&ch.CAFile, "ca-file", env("SHEPHERD_CA_FILE", ""), "CA bundle that signs the manager's certificate (env SHEPHERD_CA_FILE)")
	return ch
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func copySelf(args []string) error {
	fs := flag.NewFlagSet("copy-self", flag.ExitOnError)
	to := fs.String("to", env("SHEPHERD_COPY_TO", "/shepherd/bin/runner"), "destination of the runner binary (env SHEPHERD_COPY_TO)")
	gitConfig := fs.String("git-config", env("SHEPHERD_GIT_CONFIG", ""), "also write the agent containers' system git configuration here (env SHEPHERD_GIT_CONFIG)")
	_ = fs.Parse(args)
	if *gitConfig != "" {
		if err := runner.WriteAgentGitConfig(*gitConfig); err != nil {
			return err
		}
	}
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
	runnerAddr := fs.String("runner-addr", env("SHEPHERD_RUNNER_ADDR", runner.DefaultListen), "the runner's local server, waited for before the checkout; empty waits for none (env SHEPHERD_RUNNER_ADDR)")
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
	res, err := runner.Prepare(ctx, runner.PrepareConfig{Workspace: o, RunnerAddr: *runnerAddr, GitPath: *gitPath, ResultFile: *resultFile, Log: os.Stderr})
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
	fs.StringVar(&cfg.Workdir, "workdir", env("SHEPHERD_CHECKOUT_PATH", ""), "the session's checkout, as the agent's container sees it (env SHEPHERD_CHECKOUT_PATH)")
	fs.StringVar(&cfg.AgentHome, "agent-home", env("SHEPHERD_AGENT_HOME", ""), "the agent's home in its container (env SHEPHERD_AGENT_HOME)")
	fs.StringVar(&cfg.Listen, "listen", env("SHEPHERD_LISTEN", runner.DefaultListen), "the runner's local server on the pod's loopback (env SHEPHERD_LISTEN)")
	fs.StringVar(&cfg.HostAddr, "host-addr", env("SHEPHERD_HOST_ADDR", agenthost.DefaultAddr), "the agent container's host (env SHEPHERD_HOST_ADDR)")
	fs.StringVar(&cfg.PreparedFile, "prepared-file", env("SHEPHERD_PREPARED_FILE", ""), "where the checkout step's outcome is kept for a restarted runner: a file in the pod's own scratch space (env SHEPHERD_PREPARED_FILE)")
	fs.StringVar(&cfg.StateDir, "state-dir", env("SHEPHERD_STATE_DIR", ""), "the runner's own state, out of the agent's reach (env SHEPHERD_STATE_DIR)")
	fs.BoolVar(&cfg.ServeOnly, "serve-only", envBool("SHEPHERD_SERVE_ONLY"), "serve git to the checkout step until stopped, with no session: a checkout pod (env SHEPHERD_SERVE_ONLY)")
	fs.StringVar(&cfg.GitPath, "git", env("SHEPHERD_GIT", ""), "git binary; empty looks it up on PATH (env SHEPHERD_GIT)")
	fs.DurationVar(&cfg.PollWait, "poll-wait", envDuration("SHEPHERD_POLL_WAIT", 30*time.Second), "how long one long poll for messages waits (env SHEPHERD_POLL_WAIT)")
	fs.DurationVar(&cfg.Debounce, "debounce", envDuration("SHEPHERD_DEBOUNCE", time.Second), "least time between coalesced reports (env SHEPHERD_DEBOUNCE)")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", envDuration("SHEPHERD_HEARTBEAT", 30*time.Second), "interval of heartbeat reports (env SHEPHERD_HEARTBEAT)")
	fs.DurationVar(&cfg.StopGrace, "stop-grace", envDuration("SHEPHERD_STOP_GRACE", 10*time.Second), "time between SIGTERM and SIGKILL for the agent on stop (env SHEPHERD_STOP_GRACE)")
	mode := fs.String("volume-mode", env("SHEPHERD_VOLUME_MODE", ""), "Worktree or Clone: make the volume ready for the checkout step (the mirror, the checkout's directory); empty makes nothing (env SHEPHERD_VOLUME_MODE)")
	mirror := fs.String("mirror", env("SHEPHERD_MIRROR_PATH", ""), "the Project's bare mirror, fetched before the checkout step in worktree mode (env SHEPHERD_MIRROR_PATH)")
	checkout := fs.String("checkout-dir", env("SHEPHERD_CHECKOUT_DIR", ""), "the checkout's directory on the volume, made for the agent's containers (env SHEPHERD_CHECKOUT_DIR)")
	dirs := fs.String("agent-dirs", env("SHEPHERD_AGENT_DIRS", ""), "more directories made for the agent's containers, comma-separated (its home) (env SHEPHERD_AGENT_DIRS)")
	spares := fs.Int("spare-worktrees", envInt("SHEPHERD_SPARE_WORKTREES", -1), "spare worktrees of the mirror to keep ready for the next sessions, made after the agent started; 0 removes any, -1 leaves them alone (env SHEPHERD_SPARE_WORKTREES)")
	base := fs.String("base", env("SHEPHERD_BASE", "main"), "branch, tag or commit the spares are checked out at (env SHEPHERD_BASE)")
	modelAPI := fs.String("model-api", env("SHEPHERD_MODEL_API", ""), "Anthropic or OpenAI: serve the model proxy for that API; empty serves none (env SHEPHERD_MODEL_API)")
	modelURL := fs.String("model-url", env("SHEPHERD_MODEL_URL", ""), "the model API's upstream base URL (env SHEPHERD_MODEL_URL)")
	modelKey := fs.String("model-key-file", env("SHEPHERD_MODEL_KEY_FILE", ""), "file holding the model API key (env SHEPHERD_MODEL_KEY_FILE)")
	maxRequests := fs.Int64("model-max-requests", int64(envInt("SHEPHERD_MODEL_MAX_REQUESTS", 0)), "the session's model request budget; 0 is none (env SHEPHERD_MODEL_MAX_REQUESTS)")
	maxTokens := fs.Int64("model-max-tokens", int64(envInt("SHEPHERD_MODEL_MAX_TOKENS", 0)), "the session's model token budget; 0 is none (env SHEPHERD_MODEL_MAX_TOKENS)")
	egressProxy := fs.String("egress-proxy", env("SHEPHERD_EGRESS_PROXY", ""), "the egress proxy the runner reaches a named model API through (env SHEPHERD_EGRESS_PROXY)")
	copyTo := fs.String("copy-to", env("SHEPHERD_COPY_TO", ""), "first copy the runner binary here, for the agent's containers (env SHEPHERD_COPY_TO)")
	gitConfig := fs.String("git-config", env("SHEPHERD_GIT_CONFIG", ""), "first write the agent containers' system git configuration here (env SHEPHERD_GIT_CONFIG)")
	ch := channelFlags(fs)
	_ = fs.Parse(args)
	// Before anything is served: the postStart hook, and so the agent's containers, wait for the
	// local server, which starts after these.
	if *gitConfig != "" {
		if err := runner.WriteAgentGitConfig(*gitConfig); err != nil {
			return 1, err
		}
	}
	if *copyTo != "" {
		if err := runner.CopySelf(*copyTo); err != nil {
			return 1, err
		}
	}
	if cfg.Workdir == "" && !cfg.ServeOnly {
		return 2, errors.New("--workdir is required")
	}
	if *mode != "" {
		v := &workspace.Volume{Mode: agentsv1alpha1.WorkspaceMode(*mode), Mirror: *mirror, Checkout: *checkout, Dirs: splitList(*dirs)}
		if v.Checkout == "" {
			return 2, errors.New("--volume-mode needs --checkout-dir")
		}
		if v.Mode == agentsv1alpha1.WorkspaceWorktree {
			if v.Mirror == "" {
				return 2, errors.New("--volume-mode=Worktree needs --mirror")
			}
			v.Spares = workspace.SpareDir(v.Checkout)
		}
		cfg.Volume = v
	}
	if *spares >= 0 {
		if *mirror == "" || *checkout == "" {
			return 2, errors.New("--spare-worktrees needs --mirror and --checkout-dir")
		}
		cfg.Spares = &workspace.Spares{Mirror: *mirror, Dir: workspace.SpareDir(*checkout), Base: *base, Count: *spares}
	}
	if *modelAPI != "" {
		cfg.Model = &runner.ModelConfig{API: agentsv1alpha1.ModelAPIKind(*modelAPI), Upstream: *modelURL, KeyFile: *modelKey,
			Limits: modelproxy.Limits{MaxRequests: *maxRequests, MaxTokens: *maxTokens}, EgressProxy: *egressProxy, TokenFile: ch.TokenFile}
	}
	cfg.Channel = *ch
	// What the runner makes on the volume (the agent's directories, the spares) is the pod's
	// group's to write: the agent, another user in that group, works in them.
	syscall.Umask(0o002)
	code, err := runner.Run(ctx, cfg)
	if ctx.Err() == nil {
		// A native sidecar that exits is restarted by the kubelet. The agent's container
		// carries the verdict (the runner made its host exit with the code); the runner waits
		// for the kubelet to stop it once the agent's container has ended.
		fmt.Fprintf(os.Stderr, "runner: the session's agent ended (code %d); waiting to be stopped\n", code)
		// Run tells the host; an early failure may not have: the agent's container must end too.
		exitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = agenthost.NewClient(cfg.HostAddr).Exit(exitCtx, max(code, 1))
		cancel()
		<-ctx.Done()
		return 0, err
	}
	return code, err
}

// host serves the agent container's host until the runner asks it to exit (with the runner's
// verdict as its code) or the pod stops it.
func host(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("host", flag.ExitOnError)
	listen := fs.String("listen", env("SHEPHERD_HOST_LISTEN", agenthost.DefaultAddr), "address on the pod's loopback (env SHEPHERD_HOST_LISTEN)")
	_ = fs.Parse(args)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return 1, fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := agenthost.NewServer()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	code := 0
	go func() {
		select {
		case code = <-srv.Exited():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Serve(ctx, l); err != nil {
		return 1, err
	}
	return code, nil
}

// probe is the runner container's postStart hook: it succeeds once the runner made what the
// agent's containers mount final (the kubelet then starts them).
func probe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	addr := fs.String("addr", runner.DefaultListen, "the runner's local server")
	wait := fs.Duration("wait", 4*time.Second, "how long to wait for the runner's mounts to be ready before failing (the runner container's postStart hook)")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	return runner.Probe(ctx, *addr)
}

func remove(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("remove", flag.ExitOnError)
	mode := fs.String("mode", env("SHEPHERD_WORKSPACE_MODE", string(agentsv1alpha1.WorkspaceWorktree)), "Worktree or Clone")
	path := fs.String("path", env("SHEPHERD_CHECKOUT_PATH", ""), "the checkout to remove")
	_ = fs.Parse(args)
	if *path == "" {
		return errors.New("--path is required")
	}
	return workspace.Remove(ctx, nil, agentsv1alpha1.WorkspaceMode(*mode), *path, "")
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
