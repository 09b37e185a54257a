// Command fanout is the fan-out benchmark of docs/performance.md (make bench-fanout): N
// AgentSessions applied at once on the local cluster's KWOK nodes, against N bare pods created
// with the same client settings on the same nodes (the cluster's own limit), in the same run.
//
// KWOK nodes run no process, so the runners are simulated by a load client of the runner
// channel: for each agent pod that KWOK marks running it does what the kubelet and the runner
// would do over the network: a TokenRequest bound to the pod (the kubelet's projected token),
// then the runner's first calls (task, the prepare report with the workspace facts, the first
// Active report). The manager is the real binary (cmd/manager), run on this machine against the
// cluster so that its peak RSS and CPU seconds can be read from /proc.
//
// It prints its setup, then per N: time until every session is Working against the bare-pod
// time, p50/p99 per-session latency, API writes per session (from the API server's metrics, by
// resource, and the manager's own counter), and the manager's peak RSS and CPU seconds.
//
//	go run ./hack/bench/fanout --sessions=1000,5000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

type options struct {
	sessions     []int
	qps          float64
	burst        int
	managerQPS   float64
	managerBurst int
	reconciles   int
	workers      int
	// memLimit, when set, runs the manager in a memory cgroup of that many bytes, as a
	// container with that limit (its soft limit follows: --memory-limit-ratio).
	memLimit     int64
	timeout      time.Duration
	localcluster string
	keepCluster  bool
	workDir      string
	// routineEvents is the Project's spec.events.routine (Record or Omit).
	routineEvents agentsv1alpha1.RoutineEvents
}

func parseFlags() (options, error) {
	var o options
	var sessions string
	flag.StringVar(&sessions, "sessions", "1000,5000,10000", "comma-separated N: the runs, in order")
	flag.Float64Var(&o.qps, "qps", 100, "client QPS of the manager (--kube-api-qps) and of the benchmark's creating client")
	flag.IntVar(&o.burst, "burst", 200, "client burst of the manager (--kube-api-burst) and of the creating client")
	flag.Float64Var(&o.managerQPS, "manager-qps", 0, "the manager's --kube-api-qps when it should differ from --qps (0: the same)")
	flag.IntVar(&o.managerBurst, "manager-burst", 0, "the manager's --kube-api-burst when it should differ from --burst (0: the same)")
	flag.IntVar(&o.reconciles, "reconciles", 16, "the manager's --max-concurrent-reconciles")
	var memLimit string
	flag.StringVar(&memLimit, "manager-memory-limit", "", "run the manager in a memory cgroup with this limit (a quantity: 320Mi), as in a container; empty: none (needs root)")
	flag.IntVar(&o.workers, "workers", 32, "goroutines creating objects (the client's rate limiter is shared)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound of each run (bare pods or sessions)")
	flag.StringVar(&o.localcluster, "localcluster", "go run ./hack/localcluster", "the local cluster tool")
	flag.BoolVar(&o.keepCluster, "keep-cluster", true, "leave the cluster up at the end (false: tear it down)")
	flag.StringVar(&o.workDir, "work-dir", filepath.Join(os.TempDir(), "shepherd-bench-fanout"), "manager binary, logs and runner tokens")
	var routine string
	flag.StringVar(&routine, "routine-events", "Record", "the Project's spec.events.routine: Record (the default) or Omit (no routine Kubernetes Event for the sessions and their Worktrees)")
	flag.Parse()
	switch r := agentsv1alpha1.RoutineEvents(routine); r {
	case agentsv1alpha1.RoutineEventsRecord, agentsv1alpha1.RoutineEventsOmit:
		o.routineEvents = r
	default:
		return o, fmt.Errorf("--routine-events: %q is neither Record nor Omit", routine)
	}
	for _, s := range strings.Split(sessions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 20000 {
			return o, fmt.Errorf("--sessions: %q is not a number between 1 and 20000", s)
		}
		o.sessions = append(o.sessions, n)
	}
	if memLimit != "" {
		q, err := resource.ParseQuantity(memLimit)
		if err != nil || q.Value() < 64<<20 {
			return o, fmt.Errorf("--manager-memory-limit: %q is not a quantity of at least 64Mi", memLimit)
		}
		o.memLimit = q.Value()
	}
	if o.managerQPS == 0 {
		o.managerQPS = o.qps
	}
	if o.managerBurst == 0 {
		o.managerBurst = o.burst
	}
	if o.qps <= 0 || o.burst < 1 || o.workers < 1 || o.reconciles < 1 {
		return o, fmt.Errorf("--qps, --burst, --workers and --reconciles must be positive")
	}
	return o, nil
}

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(2)
	}
	// The benchmark's own informers log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options) error {
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run from the repository root (make bench-fanout)")
	}
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return err
	}
	maxN := 0
	for _, n := range o.sessions {
		maxN = max(maxN, n)
	}
	// 110 pods per KWOK node; a few nodes of headroom so that the scheduler is never short.
	nodes := maxN/100 + 2
	c, err := startCluster(ctx, o, nodes)
	if err != nil {
		return err
	}
	defer c.close(o.keepCluster)

	forge, err := startForge(o.workDir)
	if err != nil {
		return err
	}
	defer forge.Close()

	fmt.Println()
	fmt.Println("=== setup")
	fmt.Printf("machine      %d CPUs (%s), %s\n", runtime.NumCPU(), cpuModel(), memTotal())
	fmt.Printf("cluster      Kubernetes %s (kube-apiserver, etcd %s, scheduler, controller-manager), KWOK %s: %d fake nodes, 110 pods each; components' client QPS 1000\n",
		c.versions.kube, c.versions.etcd, c.versions.kwok, nodes)
	fmt.Printf("clients      QPS %g, burst %d for the client creating the pods or the sessions (%d goroutines); the manager QPS %g, burst %d (--kube-api-qps/--kube-api-burst)\n",
		o.qps, o.burst, o.workers, o.managerQPS, o.managerBurst)
	fmt.Printf("manager      cmd/manager built from this tree, on this machine, --max-concurrent-reconciles=%d, label-selected caches\n", o.reconciles)
	fmt.Printf("sessions     Project in Worktree mode on one ReadWriteMany volume, scheduled on the KWOK nodes (spec.scheduling), fake GitHub at %s, routine events %s\n", forge.APIURL(), o.routineEvents)
	fmt.Printf("runners      simulated: TokenRequest bound to the pod, GET task, prepare report (workspace facts), Active report\n")
	fmt.Printf("Go           %s\n", runtime.Version())

	var results []result
	for _, n := range o.sessions {
		base, err := c.barePods(ctx, o, n)
		if err != nil {
			return fmt.Errorf("bare pods, N=%d: %w", n, err)
		}
		// The result is printed before the sessions' namespace goes: deleting thousands of
		// sessions takes minutes, and an interrupted cleanup must not lose the numbers.
		_, err = c.sessions(ctx, o, forge, n, func(sess runStats) {
			results = append(results, result{n: n, base: base, sess: sess})
			printResult(results[len(results)-1])
		})
		if err != nil {
			return fmt.Errorf("sessions, N=%d: %w", n, err)
		}
	}
	printSummary(results)
	return nil
}

// startForge serves the fake GitHub on the loopback interface: only the manager, on this machine,
// talks to it (KWOK pods run nothing).
func startForge(string) (*scenario.FakeGitHub, error) {
	return scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: "127.0.0.1"})
}
