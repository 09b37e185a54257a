package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/memlimit"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// run is what one side (bare pods or sessions) measured.
type runStats struct {
	// objectBytes is the mean size of a session's objects as the API serves them (JSON, without
	// managedFields), by kind: what etcd holds per session, roughly (pods are stored as protobuf).
	objectBytes map[string]int
	total       time.Duration   // first create call → last object ready/Working
	latencies   []time.Duration // per object: its create call → ready/Working
	writes      map[string]float64
	// manager only
	managerWrites   float64
	managerByKind   map[string]float64
	proc            procStats
	runnerFailures  int64
	runnerLastError string
	// forge is what the manager asked the fake GitHub during the run (the sessions' first
	// reads: their branches have no pull request).
	forge fakegithub.Stats
	// phases: per session, create → pod seen running, → runner reports accepted, → Working.
	toPod, toReports, toWorking []time.Duration
	// toWorktree: create → the session's Worktree Ready.
	toWorktree []time.Duration
	// done is how many objects got there; stoppedAt, when not zero, the timeout that stopped a
	// run before all did (the run is then a bound).
	done      int
	stoppedAt time.Duration
	// order: Spearman's rank correlation of creation order and Working order (1: in order).
	order float64
	// cpu is each component's CPU time during the run, from just before the first create to
	// the last object there (the manager's start-up is left out).
	cpu cpuSample
}

// managerComponent is the manager's entry in a run's cpu.
const managerComponent = "manager"

type result struct {
	n          int
	base, sess runStats
}

// creatingClient has the client settings under test.
func (c *cluster) creatingClient() (client.Client, error) {
	cfg := rest.CopyConfig(c.cfg)
	cfg.QPS, cfg.Burst = float32(c.o.qps), c.o.burst
	return client.New(cfg, client.Options{Scheme: scheme})
}

// createAll creates n objects with o.workers goroutines and records each create call's start.
func createAll(ctx context.Context, workers, n int, create func(ctx context.Context, i int) error) ([]time.Time, error) {
	starts := make([]time.Time, n)
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				starts[i] = time.Now()
				if err := create(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return starts, ctx.Err()
}

// readyTimes records the first time each named object passes ok, from an informer.
type readyTimes struct {
	mu   sync.Mutex
	at   map[string]time.Time
	want int
	done chan struct{}
}

func newReadyTimes(want int) *readyTimes {
	return &readyTimes{at: map[string]time.Time{}, want: want, done: make(chan struct{})}
}

func (r *readyTimes) mark(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.at[name]; ok {
		return
	}
	r.at[name] = time.Now()
	if len(r.at) == r.want {
		close(r.done)
	}
}

func (r *readyTimes) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

// wait waits for every object, printing progress every 10s. When ctx or timeout ends first it
// returns false and no error: the run is a bound (how many got there in that time), which the
// benchmark reports like a whole run; only the parent's end (an interrupt) is an error.
func (r *readyTimes) wait(ctx, parent context.Context, what string, timeout time.Duration, extra func() string) (bool, error) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	deadline := time.After(timeout)
	for {
		select {
		case <-r.done:
			return true, nil
		case <-ctx.Done():
			if parent.Err() != nil {
				return false, parent.Err()
			}
			logf("  stopped at the timeout: %d of %d %s after %s%s", r.count(), r.want, what, timeout, extra())
			return false, nil
		case <-deadline:
			logf("  stopped at the timeout: %d of %d %s after %s%s", r.count(), r.want, what, timeout, extra())
			return false, nil
		case <-t.C:
			logf("  %d/%d %s%s", r.count(), r.want, what, extra())
		}
	}
}

// stats turns create starts and ready times into the run's latencies and total. Objects that
// never got there (a run stopped at its timeout) are left out of the latencies; the total is
// then until the last one that did.
func (r *readyTimes) stats(names []string, starts []time.Time) (time.Duration, []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first, last time.Time
	lat := make([]time.Duration, 0, len(names))
	for i, name := range names {
		if first.IsZero() || starts[i].Before(first) {
			first = starts[i]
		}
		at, ok := r.at[name]
		if !ok {
			continue
		}
		lat = append(lat, at.Sub(starts[i]))
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(first), lat
}

// order is how closely the objects got there in the order of names (their creation order):
// Spearman's rank correlation.
func (r *readyTimes) order(names []string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := make([]time.Time, len(names))
	for i, name := range names {
		done[i] = r.at[name]
	}
	return orderCorrelation(done)
}

// watchNamespace runs an informer of obj's kind in ns, calling f on every add and update.
func (c *cluster) watchNamespace(ctx context.Context, ns string, obj client.Object, f func(obj any)) error {
	inf, err := newInformer(ctx, c, ns, obj)
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, o any) { f(o) }}); err != nil {
		return err
	}
	return nil
}

// newInformer starts a controller-runtime cache of ns (unthrottled client) and returns the
// informer of obj's kind, synced.
func newInformer(ctx context.Context, c *cluster, ns string, obj client.Object) (crcache.Informer, error) {
	ca, err := crcache.New(c.cfg, crcache.Options{Scheme: scheme, DefaultNamespaces: map[string]crcache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	inf, err := ca.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache of %s did not sync", ns)
	}
	return inf, nil
}

// barePods creates n pods on the KWOK nodes with the creating client and waits until all are
// Ready: the cluster's own limit with these client settings.
func (c *cluster) barePods(ctx context.Context, o options, n int) (runStats, error) {
	ns := fmt.Sprintf("bench-pods-%d", n)
	fmt.Println()
	logf("=== N=%d: %d bare pods in %s", n, n, ns)
	if err := c.namespace(ctx, ns); err != nil {
		return runStats{}, err
	}
	defer func() {
		if err := c.deleteNamespace(context.WithoutCancel(ctx), ns); err != nil {
			logf("%v", err)
		}
	}()
	ready := newReadyTimes(n)
	if err := c.watchNamespace(ctx, ns, &corev1.Pod{}, func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && podReady(p) {
			ready.mark(p.Name)
		}
	}); err != nil {
		return runStats{}, err
	}
	cl, err := c.creatingClient()
	if err != nil {
		return runStats{}, err
	}
	before, err := apiRequests(ctx, c.cs)
	if err != nil {
		return runStats{}, err
	}
	cpuBefore := sampleCPU()
	sel, tol := kwokScheduling()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("pod-%05d", i)
	}
	runCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	starts, err := createAll(runCtx, o.workers, n, func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: ns, Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{
				NodeSelector: sel, Tolerations: tol, RestartPolicy: corev1.RestartPolicyNever,
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "agent", Image: "shepherd-test-agent:latest",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
			},
		}
		return cl.Create(ctx, pod)
	})
	if err != nil {
		return runStats{}, fmt.Errorf("create pods: %w", err)
	}
	complete, err := ready.wait(runCtx, ctx, "pods Ready", o.timeout, func() string { return "" })
	if err != nil {
		return runStats{}, err
	}
	if !complete {
		// The sessions' ratios need the whole baseline.
		return runStats{}, fmt.Errorf("%d of %d bare pods Ready after %s: the cluster itself is short", ready.count(), n, o.timeout)
	}
	after, err := apiRequests(ctx, c.cs)
	if err != nil {
		return runStats{}, err
	}
	st := runStats{writes: writes(before, after), done: n, cpu: cpuSince(cpuBefore)}
	st.total, st.latencies = ready.stats(names, starts)
	logf("  %d pods Ready in %s", n, st.total.Round(time.Millisecond))
	return st, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// The manager's local ports.
const (
	managerMetrics = "127.0.0.1:18080"
	managerProbes  = "127.0.0.1:18081"
	managerRunner  = "127.0.0.1:18090"
)

// sessions runs the real manager, creates n AgentSessions with the creating client and waits
// until every one is Working, the runners simulated.
func (c *cluster) sessions(ctx context.Context, o options, forge *scenario.FakeGitHub, n int, report func(runStats)) (runStats, error) {
	ns := fmt.Sprintf("bench-sessions-%d", n)
	fmt.Println()
	logf("=== N=%d: %d AgentSessions in %s", n, n, ns)
	// The manager first: an earlier run's namespace may be waiting for its finalizers.
	mgr, err := startManager(ctx, o, c.kubeconfig, ns, n)
	if err != nil {
		return runStats{}, err
	}
	if err := c.namespace(ctx, ns); err != nil {
		mgr.stop()
		return runStats{}, err
	}
	pvName := ns + "-workspace"
	// The benchmark's namespace goes fast: the manager stops first and the Worktrees' finalizers
	// are dropped (their checkouts are on a volume KWOK never mounted). Through the manager, as a
	// user's deletion goes, 5000 sessions took about 40 minutes on this machine: the cleanup of
	// one N would then cost more than the next N's run.
	defer func() {
		ctx := context.WithoutCancel(ctx)
		mgr.stop()
		if err := c.dropNamespace(ctx, ns, o.workers); err != nil {
			logf("%v", err)
		}
		_ = c.cl.Delete(ctx, projectVolume(pvName))
	}()
	if err := c.cl.Delete(ctx, projectVolume(pvName)); client.IgnoreNotFound(err) != nil {
		return runStats{}, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.cl.Get(ctx, client.ObjectKey{Name: pvName}, &corev1.PersistentVolume{})), nil
	}); err != nil {
		return runStats{}, fmt.Errorf("old volume %s still there: %w", pvName, err)
	}
	if err := c.cl.Create(ctx, projectVolume(pvName)); err != nil {
		return runStats{}, fmt.Errorf("create volume %s: %w", pvName, err)
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: ns}, StringData: map[string]string{"token": forge.Token()}}
	if err := c.cl.Create(ctx, secret); err != nil {
		return runStats{}, err
	}
	sel, tol := kwokScheduling()
	project := &agentsv1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns},
		Spec: agentsv1alpha1.ProjectSpec{
			Repository: agentsv1alpha1.RepositorySpec{
				URL:         agentsv1alpha1.RepositoryURL(forge.CloneURL()),
				Credentials: &agentsv1alpha1.RepositoryCredentials{SecretRef: &agentsv1alpha1.SecretKeyRef{Name: "forge", Key: "token"}},
			},
			SCM:   agentsv1alpha1.SCMSpec{Provider: agentsv1alpha1.SCMGitHub, APIURL: agentsv1alpha1.HTTPURL(forge.APIURL())},
			Agent: agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentClaudeCode},
			Workspace: agentsv1alpha1.WorkspaceSpec{Mode: agentsv1alpha1.WorkspaceWorktree, Storage: &agentsv1alpha1.StorageSpec{
				StorageClassName: ptr.To(benchClass), AccessMode: string(corev1.ReadWriteMany),
			}},
			Scheduling: &agentsv1alpha1.SchedulingSpec{NodeSelector: sel, Tolerations: tol},
			// The simulated runners report once, a real agent's runner goes on reporting its
			// activity: with the defaults (idle after 5 minutes, stuck after 10) the sessions
			// Working first would turn Idle and Stuck while later ones start, writes no real
			// fan-out makes (at N=10,000 on 2026-12-06, 5948 sessions went Stuck during the run).
			Activity: &agentsv1alpha1.ActivitySpec{IdleAfter: &metav1.Duration{Duration: 24 * time.Hour}, StuckAfter: &metav1.Duration{Duration: 48 * time.Hour}},
			Events:   &agentsv1alpha1.EventsSpec{Routine: o.routineEvents},
		},
	}
	if err := c.cl.Create(ctx, project); err != nil {
		return runStats{}, fmt.Errorf("create the Project: %w", err)
	}
	if err := scenario.WaitProjectReady(ctx, c.cl, client.ObjectKeyFromObject(project), 2*time.Minute); err != nil {
		return runStats{}, fmt.Errorf("%w (manager log: %s)", err, mgr.logFile)
	}

	runCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	run, err := startRunners(runCtx, c.cs, ns, "http://"+managerRunner, filepath.Join(o.workDir, "tokens"), o.workers)
	if err != nil {
		return runStats{}, err
	}
	working := newReadyTimes(n)
	if err := c.watchNamespace(runCtx, ns, &agentsv1alpha1.AgentSession{}, func(obj any) {
		if s, ok := obj.(*agentsv1alpha1.AgentSession); ok && s.Status.Phase == agentsv1alpha1.PhaseWorking {
			working.mark(s.Name)
		}
	}); err != nil {
		return runStats{}, err
	}
	// Worktrees are named after their sessions.
	wtReady := newReadyTimes(n)
	if err := c.watchNamespace(runCtx, ns, &agentsv1alpha1.Worktree{}, func(obj any) {
		if w, ok := obj.(*agentsv1alpha1.Worktree); ok && w.Status.Phase == agentsv1alpha1.WorktreeReady {
			wtReady.mark(w.Name)
		}
	}); err != nil {
		return runStats{}, err
	}
	cl, err := c.creatingClient()
	if err != nil {
		return runStats{}, err
	}
	before, err := apiRequests(ctx, c.cs)
	if err != nil {
		return runStats{}, err
	}
	mgrBefore, byBefore, err := managerWrites(ctx, "http://"+managerMetrics+"/metrics")
	if err != nil {
		return runStats{}, err
	}
	forge.Server.ResetStats()
	cpuBefore, mgrCPUBefore := sampleCPU(), time.Duration(0)
	if p, err := readProc(mgr.cmd.Process.Pid); err == nil {
		mgrCPUBefore = p.cpu
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s-%05d", i)
	}
	starts, err := createAll(runCtx, o.workers, n, func(ctx context.Context, i int) error {
		s := &agentsv1alpha1.AgentSession{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: ns},
			Spec: agentsv1alpha1.AgentSessionSpec{
				ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "bench"},
				Prompt:     fmt.Sprintf("Benchmark task %d: change nothing.", i),
			},
		}
		return cl.Create(ctx, s)
	})
	if err != nil {
		return runStats{}, fmt.Errorf("create sessions: %w", err)
	}
	extra := func() string {
		return fmt.Sprintf(" (runners started %d, failed %d %s)", run.started.Load(), run.failures.Load(), run.lastErr())
	}
	complete, err := working.wait(runCtx, ctx, "sessions Working", o.timeout, extra)
	if err != nil {
		return runStats{}, fmt.Errorf("%w (manager log: %s)", err, mgr.logFile)
	}
	after, err := apiRequests(ctx, c.cs)
	if err != nil {
		return runStats{}, err
	}
	mgrAfter, byAfter, err := managerWrites(ctx, "http://"+managerMetrics+"/metrics")
	if err != nil {
		return runStats{}, err
	}
	st := runStats{writes: writes(before, after), managerWrites: mgrAfter - mgrBefore, managerByKind: map[string]float64{},
		runnerFailures: run.failures.Load(), runnerLastError: run.lastErr(), done: working.count(), cpu: cpuSince(cpuBefore), forge: forge.Server.Stats()}
	if !complete {
		st.stoppedAt = o.timeout
	}
	for k, v := range byAfter {
		if d := v - byBefore[k]; d > 0 {
			st.managerByKind[k] = d
		}
	}
	if st.proc, err = readProc(mgr.cmd.Process.Pid); err != nil {
		return runStats{}, err
	}
	st.cpu[managerComponent] = st.proc.cpu - mgrCPUBefore
	st.objectBytes = objectSizes(ctx, c.cl, ns)
	st.total, st.latencies = working.stats(names, starts)
	st.order = working.order(names)
	working.mu.Lock()
	wtReady.mu.Lock()
	for i, name := range names {
		seen, done := run.times(name)
		if seen.IsZero() || done.IsZero() {
			continue
		}
		st.toPod = append(st.toPod, seen.Sub(starts[i]))
		st.toReports = append(st.toReports, done.Sub(seen))
		st.toWorking = append(st.toWorking, working.at[name].Sub(done))
		if at, ok := wtReady.at[name]; ok {
			st.toWorktree = append(st.toWorktree, at.Sub(starts[i]))
		}
	}
	wtReady.mu.Unlock()
	working.mu.Unlock()
	logf("  %d of %d sessions Working in %s; manager peak RSS %d MiB, %s CPU", st.done, n, st.total.Round(time.Millisecond),
		st.proc.peakRSS>>20, st.proc.cpu.Round(100*time.Millisecond))
	report(st)
	return st, nil
}

// objectSizes samples up to 50 of each kind a session makes in ns and returns their mean size
// in bytes, JSON as served, managedFields left out (the API server strips them from the cache's
// view too; they are a few hundred bytes more in etcd).
func objectSizes(ctx context.Context, cl client.Client, ns string) map[string]int {
	out := map[string]int{}
	for kind, list := range map[string]client.ObjectList{
		"AgentSession": &agentsv1alpha1.AgentSessionList{}, "Worktree": &agentsv1alpha1.WorktreeList{}, "Pod": &corev1.PodList{},
	} {
		if err := cl.List(ctx, list, client.InNamespace(ns), client.Limit(50)); err != nil {
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil || len(items) == 0 {
			continue
		}
		total := 0
		for _, o := range items {
			obj := o.(client.Object)
			obj.SetManagedFields(nil)
			b, err := json.Marshal(obj)
			if err == nil {
				total += len(b)
			}
		}
		out[kind] = total / len(items)
	}
	return out
}

// manager is the manager process of one run.
type manager struct {
	cmd     *exec.Cmd
	logFile string
	exited  chan struct{}
}

// startManager builds (once) and starts cmd/manager against the cluster, watching ns only, and
// waits for its health probe.
func startManager(ctx context.Context, o options, kubeconfig, ns string, n int) (*manager, error) {
	bin := filepath.Join(o.workDir, "manager")
	if err := command(ctx, 10*time.Minute, "go", "build", "-o", bin, "./cmd/manager"); err != nil {
		return nil, err
	}
	// A manager left by an interrupted run would answer the probes in this one's place.
	for _, addr := range []string{managerMetrics, managerProbes, managerRunner} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s is taken (a manager of an interrupted run? pkill -f %s): %w", addr, bin, err)
		}
		_ = l.Close()
	}
	logFile := filepath.Join(o.workDir, fmt.Sprintf("manager-%d.log", n))
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	argv := []string{bin,
		"--kubeconfig=" + kubeconfig, "--watch-namespaces=" + ns, "--leader-elect=false",
		"--metrics-bind-address=" + managerMetrics, "--metrics-secure=false", "--health-probe-bind-address=" + managerProbes,
		// Profiles on loopback, for a run that needs a look inside (go tool pprof http://127.0.0.1:18082/debug/pprof/goroutine).
		"--pprof-bind-address=127.0.0.1:18082",
		// Plain HTTP on loopback: the simulated runners are this process (KWOK pods run
		// nothing to verify a certificate with); TLS's cost is not what this benchmark measures.
		"--runner-bind-address=" + managerRunner, "--runner-url=http://" + managerRunner, "--runner-tls=false", "--webhook-bind-address=0",
		// KWOK pods run nothing: no egress proxy to point them at.
		"--egress-proxy-url=none",
		// The fake GitHub listens on loopback, which the manager's outbound guard refuses.
		"--outbound-allow-cidrs=127.0.0.0/8",
		fmt.Sprintf("--kube-api-qps=%g", o.managerQPS), fmt.Sprintf("--kube-api-burst=%d", o.managerBurst),
		fmt.Sprintf("--max-concurrent-reconciles=%d", o.reconciles),
	}
	var cg *memlimit.Cgroup
	if o.memLimit > 0 {
		c, err := memlimit.NewCgroup(memlimit.Root, fmt.Sprintf("shepherd-bench-fanout-%d", n), o.memLimit)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("--manager-memory-limit: %w", err)
		}
		cg, argv = &c, c.JoinArgs(argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group (Ctrl-C reaches the benchmark, which stops it in order), and killed
	// with the benchmark if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		if cg != nil {
			_ = cg.Remove()
		}
		return nil, err
	}
	m := &manager{cmd: cmd, logFile: logFile, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		if cg != nil {
			if err := cg.Remove(); err != nil {
				logf("  remove the manager's cgroup %s: %v", cg.Dir, err)
			}
		}
		close(m.exited)
	}()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-m.exited:
			return false, fmt.Errorf("the manager exited; its log: %s", logFile)
		default:
		}
		conn, err := net.DialTimeout("tcp", managerProbes, time.Second)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		resp, err := http.Get("http://" + managerProbes + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("the manager did not become ready: %w (log: %s)", err, logFile)
	}
	logf("  manager started (pid %d, log %s)", cmd.Process.Pid, logFile)
	if cg != nil {
		logf("  manager in memory cgroup %s, limit %d MiB (its soft limit: the log's \"Soft memory limit\")", cg.Dir, o.memLimit>>20)
	}
	return m, nil
}

func (m *manager) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// printResult prints one N's table.
func printResult(r result) {
	fmt.Println()
	fmt.Printf("=== result, N=%d\n", r.n)
	b, s := r.base, r.sess
	bl, sl := sortDurations(b.latencies), sortDurations(s.latencies)
	fmt.Printf("%-44s %14s %14s %8s\n", "", "bare pods", "sessions", "ratio")
	row := func(name string, base, sess time.Duration) {
		fmt.Printf("%-44s %14s %14s %7.2fx\n", name, base.Round(time.Millisecond), sess.Round(time.Millisecond), float64(sess)/float64(max(base, 1)))
	}
	if s.stoppedAt > 0 {
		fmt.Printf("STOPPED at the timeout: %d of %d sessions Working after %s (%.2f a second); the rows below are of those %d\n",
			s.done, r.n, s.stoppedAt, float64(s.done)/s.stoppedAt.Seconds(), s.done)
	}
	row("total: first create → all Ready / Working", b.total, s.total)
	row("per object p50", percentile(bl, 0.50), percentile(sl, 0.50))
	row("per object p99", percentile(bl, 0.99), percentile(sl, 0.99))
	row("per object max", percentile(bl, 1), percentile(sl, 1))
	fmt.Printf("%-44s %14s %14.3f\n", "Working in creation order (Spearman's ρ)", "", s.order)
	for _, ph := range []struct {
		name string
		d    []time.Duration
	}{
		{"  create → agent pod seen running", s.toPod},
		{"  create → Worktree Ready", s.toWorktree},
		{"  pod running → runner's reports accepted", s.toReports},
		{"  reports accepted → Working seen", s.toWorking},
	} {
		d := sortDurations(ph.d)
		fmt.Printf("%-44s %14s %14s   (p99 %s)\n", ph.name+" p50", "", percentile(d, 0.5).Round(time.Millisecond), percentile(d, 0.99).Round(time.Millisecond))
	}
	bw, sw := total(b.writes)/float64(r.n), total(s.writes)/float64(r.n)
	fmt.Printf("%-44s %14.2f %14.2f %7.2fx\n", "API writes per object (API server, everyone)", bw, sw, sw/max(bw, 0.001))
	fmt.Printf("%-44s %14s %14.2f\n", "manager's writes per session (its counter)", "", s.managerWrites/float64(r.n))
	fmt.Printf("%-44s %14s %14s\n", "forge requests per session (fake GitHub)", "", fmt.Sprintf("%.3f (%d GraphQL queries, %d points, %d REST)",
		float64(s.forge.GraphQLPoints+s.forge.RESTCounted)/float64(r.n), s.forge.GraphQLQueries, s.forge.GraphQLPoints, s.forge.RESTCounted))
	fmt.Printf("%-44s %14s %14d MiB\n", "manager peak RSS", "", s.proc.peakRSS>>20)
	fmt.Printf("%-44s %14s %14s\n", "bytes per object (JSON as served)", "", fmt.Sprintf("session %d, Worktree %d, pod %d",
		s.objectBytes["AgentSession"], s.objectBytes["Worktree"], s.objectBytes["Pod"]))
	fmt.Printf("%-44s %14s %14.1f s\n", "manager CPU", "", s.proc.cpu.Seconds())
	fmt.Printf("%-44s %14s %14s %8s\n", "CPU per object during the run (ms)", "bare pods", "sessions", "ratio")
	for _, c := range append(components, struct{ name, comm string }{benchmarkComponent, ""}, struct{ name, comm string }{managerComponent, ""}) {
		bc, sc := b.cpu[c.name].Seconds()*1000/float64(r.n), s.cpu[c.name].Seconds()*1000/float64(r.n)
		if c.name == managerComponent {
			fmt.Printf("  %-42s %14s %14.1f\n", c.name, "", sc) // no manager in the bare pods' run
			continue
		}
		fmt.Printf("  %-42s %14.1f %14.1f %7.2fx\n", c.name, bc, sc, sc/max(bc, 0.001))
	}
	if s.runnerFailures > 0 {
		fmt.Printf("simulated runners that failed: %d (last: %s)\n", s.runnerFailures, s.runnerLastError)
	}
	fmt.Println("API writes per object by resource and verb (API server):")
	keys := map[string]bool{}
	for k := range b.writes {
		keys[k] = true
	}
	for k := range s.writes {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		fmt.Printf("  %-42s %14.2f %14.2f\n", k, b.writes[k]/float64(r.n), s.writes[k]/float64(r.n))
	}
	fmt.Println("the manager's writes per session by kind and verb (shepherd_api_writes_total):")
	mk := make([]string, 0, len(s.managerByKind))
	for k := range s.managerByKind {
		mk = append(mk, k)
	}
	sort.Strings(mk)
	for _, k := range mk {
		fmt.Printf("  %-42s %14s %14.2f\n", k, "", s.managerByKind[k]/float64(r.n))
	}
}

func printSummary(results []result) {
	fmt.Println()
	fmt.Println("=== summary (issue 23 targets: time ratio ÷ write ratio ≤ 1.0 at every N, the time ratio at 5000 no higher than at 1000;")
	fmt.Println("    p99 ≤ 1.5× p50; ≤ 6 of Shepherd's stored writes per session and ≤ 2 events beyond a bare pod's; peak RSS ≤ 300 MiB at 5000, ≤ 500 MiB at 10,000)")
	fmt.Printf("%6s %11s %11s %7s %7s %8s %8s %9s %9s %7s %9s %8s %9s %8s\n", "N", "bare pods", "sessions", "time×", "write×", "time÷wr", "apiCPU×",
		"p50", "p99", "p99/p50", "stored/s", "events/s", "peak RSS", "CPU")
	var stopped []string
	for _, r := range results {
		sl := sortDurations(r.sess.latencies)
		p50, p99 := percentile(sl, 0.5), percentile(sl, 0.99)
		sessTotal, mark := r.sess.total, ""
		if r.sess.stoppedAt > 0 {
			// A bound: the whole N at the rate the run kept until its timeout.
			sessTotal, mark = time.Duration(float64(r.sess.stoppedAt)*float64(r.n)/float64(max(r.sess.done, 1))), "*"
			stopped = append(stopped, fmt.Sprintf("N=%d stopped at the timeout with %d Working after %s: its total is extrapolated at that rate,"+
				" its percentiles are of the %d, its writes per session are of all %d (the %d not yet Working included)", r.n, r.sess.done, r.sess.stoppedAt, r.sess.done, r.n, r.n-r.sess.done))
		}
		timeRatio := float64(sessTotal) / float64(max(r.base.total, 1))
		writeRatio := total(r.sess.writes) / max(total(r.base.writes), 0.001)
		apiRatio := r.sess.cpu[components[0].name].Seconds() / max(r.base.cpu[components[0].name].Seconds(), 0.001)
		own, events := shepherdStored(r.sess.writes)
		_, baseEvents := shepherdStored(r.base.writes)
		fmt.Printf("%6d %11s %11s %6.2fx %6.2fx %8.2f %7.2fx %9s %9s %7.2f %9.2f %8.2f %5d MiB %7.1fs\n", r.n,
			r.base.total.Round(100*time.Millisecond), sessTotal.Round(100*time.Millisecond).String()+mark, timeRatio, writeRatio, timeRatio/max(writeRatio, 0.001), apiRatio,
			p50.Round(100*time.Millisecond), p99.Round(100*time.Millisecond), float64(p99)/float64(max(p50, 1)),
			own/float64(r.n), (events-baseEvents)/float64(r.n), r.sess.proc.peakRSS>>20, r.sess.proc.cpu.Seconds())
	}
	fmt.Println("apiCPU×: the kube-apiserver's CPU time during the sessions' run over the bare pods' (the same N)")
	for _, s := range stopped {
		fmt.Println("* " + s)
	}
}
