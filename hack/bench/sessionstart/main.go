// Command sessionstart measures a session's start on the local cluster's real node (issue 8,
// benchmark 3): the time from the AgentSession's create call to the agent process running in a
// ready checkout, cold (the first session of a new Project: its mirror is empty) and warm (a
// Project whose mirror exists), on the generated large repository of the runner issue
// (test/benchrepo: 50,000 files, 5,000 commits, ~340 MB packed). `make bench-session-start` runs
// it; it prints its setup and ratios against baselines measured in the same run, and asserts
// nothing.
//
// What it does:
//   - brings the cluster up as hack/run-local.sh does (localcluster up --kwok-nodes=0, this
//     tree's manager, runner and test-agent images loaded, config/default applied, the manager
//     rolled to the image just loaded); -setup=false uses the running cluster as it is;
//   - serves the repository from the in-repo fake GitHub (test/fakegithub: the real `git
//     http-backend` behind GitHub's token check) on the node's IP, and the same repository
//     without credentials from test/gitserver for the baselines;
//   - runs the agent as the test agent image's fake Claude Code (test/fakeagent): it prints its
//     init event (with its working directory) and sleeps, so the benchmark measures Shepherd,
//     not a model; the agent pods request -cpu (1), as the baselines' pods do: a pod without a
//     CPU request gets the lowest CPU weight, and on a machine busy with other work its git
//     would measure the neighbours;
//   - cold: a new Project and its first session, -cold times; warm: -warm sessions on the last
//     of those Projects, one at a time, each stopped (its pod gone, its checkout kept) before the
//     next. -between=delete deletes each instead: on the machine this was written on, a checkout
//     made right after another's removal took several times longer, for git by hand as for
//     Shepherd, which measures the node's file system rather than the start;
//   - warm with spares: -spares N sets the Project's spec.workspace.spareWorktrees, one
//     unmeasured session makes the first spares, then -warm more sessions, each claiming a spare
//     the previous session's runner made while its agent ran (its stop waits for that);
//   - baselines, in the same run on the same node: a bare pod that only starts the agent (the
//     node's pod-start latency), and bare pods doing the same git work themselves with the same
//     image, no Shepherd in between: `git clone --mirror` then `git worktree add` on a new volume
//     (cold), `git worktree add` from a mirror on the volume (warm);
//   - prints p50/p99/min/max, the breakdown, the ratios, the manager's own time-to-running
//     metric, and deletes its namespace (the cluster stays up).
//
// The signal: "agent running" is the timestamp the container runtime gave the agent's first
// line of output (its init event, printed once the process runs in the checkout), read from the
// container log; "Working" is when a watch saw the session's status.phase become Working (the
// runner reported the agent Active and the pod runs; AgentRunning=True is set with it).
//
//	go run ./hack/bench/sessionstart [-cold 3] [-warm 20] [-baseline 5] [-setup=false]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/shepherd-dev/shepherd/test/benchrepo"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

type options struct {
	repo       string
	cache      string
	work       string
	spec       benchrepo.Spec
	cold, warm int
	baseline   int
	spares     int
	namespace  string
	kubeconfig string
	containerd string
	cpu        resource.Quantity
	between    string
	setup      bool
	keep       bool
	timeout    time.Duration
}

// bench is one run.
type bench struct {
	o    options
	out  io.Writer
	env  clusterEnv
	info setupInfo
	pods *podWatch
	cri  *criReader

	nodeIP   string
	gh       *fakegithub.Server
	plain    *gitserver.Server
	forgeURL string // the repository on the fake GitHub (token required)
	plainURL string // the same repository without credentials, for the baselines
	packMB   float64

	samples []sample
	// metrics: the manager's histogram before and after the sessions.
	metricsBefore, metricsAfter timeToRunning
	metricsErr                  error
}

func main() {
	os.Exit(mainExit())
}

func mainExit() int {
	closeInheritedOnExec()
	var o options
	wd, _ := os.Getwd()
	flag.StringVar(&o.repo, "repo", wd, "the Shepherd checkout (where hack/localcluster and config/default are)")
	flag.StringVar(&o.cache, "cache", benchrepo.DefaultCache(), "where the generated repository is kept (shared with bench-workspace)")
	flag.StringVar(&o.work, "dir", defaultWorkDir(), "where the forge's data goes (emptied first)")
	flag.IntVar(&o.spec.Files, "files", benchrepo.Large.Files, "files in the generated repository")
	flag.IntVar(&o.spec.Commits, "commits", benchrepo.Large.Commits, "commits in the generated repository")
	flag.IntVar(&o.spec.AssetKB, "asset-kb", benchrepo.Large.AssetKB, "size of the binary asset each commit rewrites (drives the history's size)")
	flag.IntVar(&o.cold, "cold", 3, "cold samples: each a new Project and its first session")
	flag.IntVar(&o.warm, "warm", 20, "warm samples: sessions on a Project whose mirror exists, one at a time")
	flag.IntVar(&o.spares, "spares", 1, "after the warm samples, set the Project's spec.workspace.spareWorktrees to this and take -warm more samples, each claiming the spare the previous session's runner made (0: skip)")
	flag.IntVar(&o.baseline, "baseline", 5, "samples of each warm baseline (bare pod start, git worktree add by hand); the cold baseline runs -cold times")
	flag.StringVar(&o.namespace, "namespace", "shepherd-bench-session-start", "the benchmark's namespace (recreated, deleted at the end)")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "the cluster's kubeconfig (default: localcluster env)")
	flag.StringVar(&o.containerd, "containerd", "", "the node's containerd socket, for the runtime's times (default: the local cluster's, beside the kubeconfig)")
	cpu := flag.String("cpu", "1", "the CPU the agent pods request (the Projects' spec.agent.resources, and the baselines' pods): without a request a pod runs at the lowest CPU weight and starves behind any busy process of the machine")
	flag.StringVar(&o.between, "between", "stop", "how a measured session ends before the next sample: stop (its pod goes, its checkout stays) or delete (its checkout is removed too)")
	flag.BoolVar(&o.setup, "setup", true, "bring the cluster up, load this tree's images and deploy the manager first; false: use the running cluster as it is")
	flag.BoolVar(&o.keep, "keep", false, "keep the namespace at the end")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of each sample")
	flag.Parse()
	q, err := resource.ParseQuantity(*cpu)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-session-start: -cpu: %v\n", err)
		return 2
	}
	o.cpu = q
	if o.between != "stop" && o.between != "delete" {
		fmt.Fprintf(os.Stderr, "bench-session-start: -between must be stop or delete, not %q\n", o.between)
		return 2
	}
	if o.cold < 1 || o.warm < 1 || o.baseline < 1 {
		fmt.Fprintln(os.Stderr, "bench-session-start: -cold, -warm and -baseline must be at least 1")
		return 2
	}
	if o.spares < 0 || o.spares > 8 {
		fmt.Fprintln(os.Stderr, "bench-session-start: -spares must be between 0 and 8 (the API's bounds)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{o: o, out: os.Stdout}
	err = b.run(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(ctx.Err(), context.Canceled):
		fmt.Fprintln(os.Stderr, "bench-session-start: interrupted")
		return 130
	default:
		fmt.Fprintf(os.Stderr, "bench-session-start: %v\n", err)
		return 1
	}
}

// closeInheritedOnExec marks the descriptors this process inherited above stderr (a lock file
// that `flock <file> make bench-session-start` holds, say) close-on-exec: `localcluster up`
// starts the cluster's components detached, and a component that inherited the lock's descriptor
// would hold the lock for as long as the cluster runs. This process keeps them open.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func defaultWorkDir() string {
	if c := os.Getenv("SHEPHERD_CACHE"); c != "" {
		return filepath.Join(c, "bench-session-start")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "shepherd", "bench-session-start")
}

func (b *bench) section(format string, args ...any) {
	fmt.Fprintf(b.out, "\n=== bench-session-start: %s (%s)\n", fmt.Sprintf(format, args...), time.Now().Format("15:04:05"))
}

func (b *bench) line(format string, args ...any) {
	fmt.Fprintf(b.out, "  %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) run(ctx context.Context) error {
	b.info.hostCPUs = runtime.NumCPU()
	b.info.loadStart = loadAvg()
	started := time.Now()

	b.section("the repository (test/benchrepo, cached in %s)", b.o.cache)
	bare, err := benchrepo.Ensure(b.o.cache, b.o.spec, b.out)
	if err != nil {
		return err
	}
	b.packMB = float64(benchrepo.DiskKB(filepath.Join(bare, "objects"), false)) / 1024
	b.line("%s: %d files at HEAD, %d commits, %.0f MB packed", bare, b.o.spec.Files, b.o.spec.Commits, b.packMB)

	if err := b.setUp(ctx); err != nil {
		return err
	}
	if err := b.readSetup(ctx); err != nil {
		return err
	}

	b.section("the namespace %s and the forge", b.o.namespace)
	if err := b.resetNamespace(ctx); err != nil {
		return err
	}
	defer b.cleanUp()
	if err := b.startForge(ctx, bare); err != nil {
		return err
	}
	defer b.stopForge()
	if err := b.createForgeSecret(ctx); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	b.pods = watchPods(wctx, b.env.cs, b.o.namespace)
	sock := b.o.containerd
	if sock == "" {
		sock = filepath.Join(filepath.Dir(b.env.kubeconfig), "containerd", "containerd.sock")
	}
	if b.cri, err = dialCRI(ctx, sock); err != nil {
		b.line("no runtime times in the breakdown: %v", err)
	} else {
		defer func() { _ = b.cri.Close() }()
	}

	// The manager was just rolled to this tree's image: its Service may still route to nothing
	// for a few seconds (the first run of this scrape met "connection refused").
	for deadline := time.Now().Add(time.Minute); ; {
		b.metricsBefore, b.metricsErr = b.scrapeTimeToRunning(ctx)
		if b.metricsErr == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err := b.measure(ctx); err != nil {
		return err
	}
	if b.metricsErr == nil {
		b.metricsAfter, b.metricsErr = b.scrapeTimeToRunning(ctx)
	}
	b.info.loadEnd = loadAvg()
	b.report(time.Since(started))
	return nil
}

// measure runs the samples in an order that spreads the machine's changing load over the
// groups: the bare pod starts, then Shepherd's cold starts each followed by a cold start by hand,
// then Shepherd's warm starts with a warm start by hand after every few.
func (b *bench) measure(ctx context.Context) error {
	b.section("baseline: a bare pod that starts the agent (%d samples)", b.o.baseline)
	for i := 1; i <= b.o.baseline; i++ {
		if err := b.record(b.podStartSample(ctx, fmt.Sprintf("pod-start-%d", i))); err != nil {
			return err
		}
		if i == 1 {
			b.info.gitImage = b.gitInImage(ctx, fmt.Sprintf("pod-start-%d", i))
		}
		if err := b.deletePod(ctx, fmt.Sprintf("pod-start-%d", i)); err != nil {
			return err
		}
	}

	b.section("cold: a new Project and its first session (%d samples), each followed by a cold start by hand", b.o.cold)
	var project, handClaim string
	for i := 1; i <= b.o.cold; i++ {
		project = fmt.Sprintf("cold-%d", i)
		if err := b.createProject(ctx, project); err != nil {
			return err
		}
		name := project + "-s1"
		if err := b.record(b.sessionSample(ctx, groupShepherdCold, project, name)); err != nil {
			return err
		}
		if err := b.endSession(ctx, name); err != nil {
			return err
		}
		handClaim = fmt.Sprintf("hand-cold-%d", i)
		if err := b.record(b.handColdSample(ctx, handClaim)); err != nil {
			return err
		}
		if err := b.deletePod(ctx, handClaim); err != nil {
			return err
		}
	}

	every := max(1, b.o.warm/b.o.baseline)
	b.section("warm: %d sessions on Project %s (its mirror exists), one at a time; a warm start by hand after every %d", b.o.warm, project, every)
	hand := 0
	for i := 1; i <= b.o.warm; i++ {
		if err := b.measuredSession(ctx, groupShepherdWarm, project, fmt.Sprintf("warm-%02d", i)); err != nil {
			return err
		}
		if i%every == 0 && hand < b.o.baseline {
			hand++
			pod := fmt.Sprintf("hand-warm-%d", hand)
			if err := b.record(b.handWarmSample(ctx, pod, handClaim)); err != nil {
				return err
			}
			if err := b.deletePod(ctx, pod); err != nil {
				return err
			}
		}
	}
	if b.o.spares == 0 {
		return nil
	}
	b.section("warm with spare worktrees: spec.workspace.spareWorktrees=%d on Project %s, one unmeasured session to make the first spare, then %d sessions",
		b.o.spares, project, b.o.warm)
	if err := b.setSpares(ctx, project, b.o.spares); err != nil {
		return err
	}
	// The first session after the change finds no spare yet (none was asked for); its runner
	// makes them once its agent runs, and its stop waits for that (the runner's spare grace).
	if _, err := b.sessionSample(ctx, groupShepherdSpare, project, "spare-00"); err != nil {
		return fmt.Errorf("spare-00: %w", err)
	}
	if err := b.endSession(ctx, "spare-00"); err != nil {
		return err
	}
	for i := 1; i <= b.o.warm; i++ {
		if err := b.measuredSession(ctx, groupShepherdSpare, project, fmt.Sprintf("spare-%02d", i)); err != nil {
			return err
		}
	}
	return nil
}

// measuredSession records one session's start in group and ends the session before the next.
func (b *bench) measuredSession(ctx context.Context, group, project, name string) error {
	if err := b.record(b.sessionSample(ctx, group, project, name)); err != nil {
		return err
	}
	return b.endSession(ctx, name)
}

// record keeps a sample and prints it.
func (b *bench) record(s sample, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	b.samples = append(b.samples, s)
	b.line("%s", s.summary())
	return nil
}

// cleanUp deletes the namespace (unless -keep), whatever happened; the cluster stays up.
func (b *bench) cleanUp() {
	if b.o.keep {
		b.line("namespace %s kept (-keep): kubectl delete namespace %s", b.o.namespace, b.o.namespace)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	started := time.Now()
	if err := b.deleteNamespace(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "bench-session-start: cleaning up: %v\n", err)
		return
	}
	fmt.Fprintf(b.out, "\nnamespace %s deleted in %.1fs (the cluster stays up: make cluster-down stops it)\n", b.o.namespace, time.Since(started).Seconds())
}
