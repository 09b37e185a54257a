package scmmanager_test

// BenchmarkSCMEconomyManager: the SCM economy through the manager. N AgentSessions (default 1000)
// whose pull requests are open on the fake GitHub are followed for one simulated hour of the same
// activity as BenchmarkSCMEconomy (internal/scm/scmtest/economy: pushes with CI runs, reviews,
// review threads, merges), once with polling only and once with signed webhooks delivered over
// HTTP to the manager's webhook receiver. It reports the counted GitHub requests (REST requests
// that count against the limit plus GraphQL points, from the fake's counters) per session-hour,
// and the staleness of the sessions' status: the time from a change on the fake to the
// AgentSession's status.pullRequest showing it (head SHA, checks, review decision, unresolved
// threads, merged). In the same run it measures the two baselines of the SCM-level benchmark on
// the same schedule: the naive per-PR REST poll and Shepherd's Poller on its own.
//
// The manager is the real one: controller.Setup (as cmd/manager calls it, with cmd/manager's
// cache selectors, client rate limits and concurrent reconciles) against a kube-apiserver and
// etcd from envtest, with the runner channel and the webhook receiver listening on loopback.
// envtest has no kubelet and no agents, so the sessions are brought to their pull requests the
// way the envtest suite in internal/controller does it: the benchmark plays the kubelet (the
// agent pod's prepare result, its agent container running) and the runner (a pod-bound service
// account token, the task, an Active report, the pull request opened through the manager's
// channel, a Ready report). Each session's branch is the head of one of the fake's open pull
// requests, so the manager's CreatePullRequest finds and returns it. Reactions are the defaults
// (the CI failures and change requests of the hour queue messages for the agents; nothing reads
// them).
//
// Time: one simulated clock (scmtest.ManualClock) is the fake's clock, the forge adapter's and
// the Poller's (Config.PollerOptions.Clock) and the controllers' Now. The benchmark steps it one
// second at a time. After each step it waits, in real time, until the Poller has made the calls
// that were due and sleeps again, and until every session whose change the Poller has seen shows
// it in its status (read through a watch of its own). A change's staleness is the simulated time
// from the change to the step in which its status showed it, plus the real time that step took
// until the status showed it (the Poller's calls, the reconcile, the status write, the watch).
// Controller-runtime's own requeue delays stay in real time, so timers of the lifecycle (grace
// periods, stuck detection) are not compressed; nothing in this scenario waits for one.
//
//	KUBEBUILDER_ASSETS=$(hack/kube-binaries.sh envtest) go test ./test/bench/scmmanager/ \
//	    -run '^$' -bench BenchmarkSCMEconomyManager -benchtime 1x -timeout 30m [-sessions 50]
//
// or `make bench-scm-manager` (BENCH_SESSIONS=50 for a quick run).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"

	// The forge and tracker adapters, as the manager registers them.
	_ "github.com/shepherd-dev/shepherd/internal/adapters"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest/economy"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	"github.com/shepherd-dev/shepherd/test/builders"
)

var (
	flagSessions  = flag.Int("sessions", 1000, "AgentSessions, each with an open pull request")
	flagMinutes   = flag.Int("minutes", 60, "simulated minutes of activity")
	flagBaselines = flag.Bool("baselines", true, "also measure the naive REST poll and the SCM-level Poller on the same schedule")
	// The manager's Kubernetes client limits: cmd/manager's defaults.
	flagQPS   = flag.Float64("kube-api-qps", 100, "the manager's client QPS (cmd/manager --kube-api-qps)")
	flagBurst = flag.Int("kube-api-burst", 200, "the manager's client burst (cmd/manager --kube-api-burst)")
	flagMCR   = flag.Int("max-concurrent-reconciles", 4, "reconciles each controller runs at once (cmd/manager --max-concurrent-reconciles)")
)

// settleTimeout bounds the real time one simulated second may take to show what the Poller saw.
const settleTimeout = 30 * time.Second

const (
	projectName = "widgets"
	branchStem  = "shepherd/s" // session s-NNNN works on shepherd/s-NNNN, the fake's head branch
)

func BenchmarkSCMEconomyManager(b *testing.B) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		b.Fatal("KUBEBUILDER_ASSETS is not set: run `make bench-scm-manager`, or set it to $(hack/kube-binaries.sh envtest)")
	}
	n, seconds := *flagSessions, *flagMinutes*60
	acts := economy.Schedule(n, seconds)
	logs := &lineCounter{}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.Level(zapcore.ErrorLevel)))
	for i := 0; i < b.N; i++ {
		began := time.Now()
		var naive, pollerPoll, pollerHooks economy.Result
		var baselineTime time.Duration
		if *flagBaselines {
			naive = economy.RunNaive(b, n, seconds, acts)
			pollerPoll = economy.RunPoller(b, "SCM Poller, polling only", n, seconds, acts, false)
			pollerHooks = economy.RunPoller(b, "SCM Poller, webhooks", n, seconds, acts, true)
			baselineTime = time.Since(began)
		}
		mPoll := runManager(b, n, seconds, acts, false, logs)
		mHooks := runManager(b, n, seconds, acts, true, logs)
		report(os.Stdout, n, seconds, acts, naive, pollerPoll, pollerHooks, mPoll, mHooks, baselineTime, time.Since(began), logs.n.Load())
		logs.mu.Lock()
		for _, l := range logs.first {
			fmt.Printf("manager error log: %s\n", l)
		}
		logs.mu.Unlock()
		hours := float64(n) * float64(seconds) / 3600
		b.ReportMetric(float64(mPoll.Counted())/hours, "polling-counted/session-h")
		b.ReportMetric(float64(mHooks.Counted())/hours, "webhooks-counted/session-h")
		b.ReportMetric(mPoll.worst.Seconds(), "polling-worst-staleness-s")
		b.ReportMetric(mHooks.worst.Seconds(), "webhooks-worst-staleness-s")
	}
}

// managerResult is one manager run.
type managerResult struct {
	economy.Result
	mode            string
	p50, p99, worst time.Duration
	procP50, procMx time.Duration // the real-time part of the staleness
	changes         int           // changes the status shows (measured)
	hidden          int           // changes the status does not show (a comment-only review, a repeated verdict, a CI run of an old head)
	missed          int           // changes never shown by the end
	timeouts        int           // steps that took longer than settleTimeout to show what the Poller saw
	reconciles      float64       // AgentSession reconciles during the hour
	scmOps          map[string]float64
	routes          map[string]int
	setup, hour     time.Duration
	phases          []string // setup phases and their wall time
	apiServer       string
}

// run is one manager run's world.
type run struct {
	b        *testing.B
	n        int
	webhooks bool
	clock    *scmtest.ManualClock
	world    *economy.World
	k8s      client.Client
	cs       *kubernetes.Clientset
	deps     *controller.Deps
	ns       string
	runner   string // the runner channel's URL
	obs      *observer
	tmp      string
}

func runManager(b *testing.B, n, seconds int, acts []economy.Activity, webhooks bool, logs *lineCounter) managerResult {
	b.Helper()
	logs.on.Store(true)
	defer logs.on.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	res := managerResult{mode: "polling only"}
	if webhooks {
		res.mode = "webhooks"
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		b.Fatalf("start envtest: %v", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			b.Logf("stop envtest: %v", err)
		}
	}()
	scheme := clientgoscheme.Scheme
	if err := agentsv1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	// The benchmark's own client (it plays the kubelet, the runners and the user) is not limited.
	driverCfg := rest.CopyConfig(cfg)
	driverCfg.QPS, driverCfg.Burst = 5000, 10000
	k8s, err := client.New(driverCfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(driverCfg)
	if err != nil {
		b.Fatal(err)
	}
	if v, err := cs.Discovery().ServerVersion(); err == nil {
		res.apiServer = v.GitVersion
	}

	start := time.Now().UTC().Truncate(time.Second)
	clock := scmtest.NewManualClock(start)
	webhookAddr, runnerAddr := freeAddr(b), freeAddr(b)
	opts := economy.Options{Clock: clock.Now, BranchPrefix: branchStem}
	if webhooks {
		opts.WebhookURL = "http://" + webhookAddr + "/"
	}
	world := economy.NewWorld(b, n, opts)
	r := &run{b: b, n: n, webhooks: webhooks, clock: clock, world: world, k8s: k8s, cs: cs, ns: "bench", runner: "http://" + runnerAddr, tmp: b.TempDir()}

	// The manager, as cmd/manager builds it.
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.QPS, mgrCfg.Burst = float32(*flagQPS), *flagBurst
	skip := true
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOptions(),
		// Two managers run in one process, one after the other (names may repeat).
		Controller: config.Controller{SkipNameValidation: &skip, MaxConcurrentReconciles: *flagMCR},
	})
	if err != nil {
		b.Fatal(err)
	}
	r.deps, err = controller.Setup(ctx, mgr, controller.Config{
		Options: controller.Options{
			RunnerImage: "shepherd-runner:bench", RunnerURL: r.runner,
			AgentImages: map[agentsv1alpha1.AgentType]string{agentsv1alpha1.AgentClaudeCode: "shepherd-agent-claude-code:bench"},
		},
		RunnerBindAddress:  runnerAddr,
		WebhookBindAddress: webhookAddr,
		Now:                clock.Now,
		// The production poll settings (1m, hints after 2s at most every 15s, details every 15m,
		// a 10m safety net while webhooks flow) on the simulated clock.
		PollerOptions: scm.PollerOptions{Clock: clock},
	})
	if err != nil {
		b.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-mgrDone:
			if err != nil {
				b.Logf("manager: %v", err)
			}
		case <-time.After(time.Minute):
			b.Logf("manager did not stop within a minute")
		}
	}()

	r.obs = newObserver(clock)
	r.watchSessions(ctx, driverCfg)
	r.setup(ctx, &res)
	mark := time.Now()
	r.warmUp(ctx)
	res.phases = append(res.phases, fmt.Sprintf("warm-up %s", time.Since(mark).Round(100*time.Millisecond)))
	res.setup = time.Since(began)

	// The hour.
	reconciles0 := counterSum("controller_runtime_reconcile_total", map[string]string{"controller": "agentsession"})
	ops0 := scmOps()
	world.Fake.ResetStats()
	hourBegan := time.Now()
	t0 := clock.Now()
	var maxAge time.Duration
	ai := 0
	for s := 0; s < seconds; s++ {
		r.obs.step(t0.Add(time.Duration(s) * time.Second))
		// What was due at this second is read first, then this second's changes happen.
		r.settle(ctx, &res)
		for ai < len(acts) && acts[ai].At == s {
			a := acts[ai]
			applied := world.Apply(b, a)
			r.expect(a, applied, &res)
			ai++
		}
		r.settle(ctx, &res)
		if s%5 == 0 {
			maxAge = max(maxAge, r.maxAge())
		}
	}
	res.hour = time.Since(hourBegan)
	logs.on.Store(false)
	st := world.Fake.Stats()
	res.Name = "manager, " + res.mode
	res.REST, res.NotMod, res.GQLQueries, res.GQLPoints = st.RESTCounted, st.NotModified, st.GraphQLQueries, st.GraphQLPoints
	for _, v := range st.Webhooks {
		res.Webhooks += v
	}
	res.routes = st.ByRoute
	res.MaxAge = maxAge
	res.reconciles = counterSum("controller_runtime_reconcile_total", map[string]string{"controller": "agentsession"}) - reconciles0
	res.scmOps = map[string]float64{}
	for k, v := range scmOps() {
		if d := v - ops0[k]; d > 0 {
			res.scmOps[k] = d
		}
	}
	r.obs.finish(&res)
	return res
}

// cacheOptions are cmd/manager's cache selectors (cacheOptions there, all namespaces).
func cacheOptions() cache.Options {
	managed := labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Label: managed},
		&corev1.PersistentVolumeClaim{}: {Label: managed},
		&corev1.ServiceAccount{}:        {Label: managed},
		&networkingv1.NetworkPolicy{}:   {Label: managed},
	}}
}

// setup makes the namespace, the Project and the sessions, and brings every session to its open
// pull request as the envtest suite does: the kubelet's pod status, then the runner.
func (r *run) setup(ctx context.Context, res *managerResult) {
	b := r.b
	mark := time.Now()
	phase := func(name string) {
		res.phases = append(res.phases, fmt.Sprintf("%s %s", name, time.Since(mark).Round(100*time.Millisecond)))
		mark = time.Now()
	}
	must(b, r.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}))
	must(b, r.k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "github"},
		StringData: map[string]string{"token": "tok", "webhook": string(economy.WebhookSecret)},
	}))
	fake := r.world.Fake
	p := builders.MakeProject(projectName, r.ns).URL(fake.CloneURL(economy.Repo)).TokenSecret("github", "token").With(func(s *agentsv1alpha1.ProjectSpec) {
		s.SCM.APIURL = agentsv1alpha1.HTTPURL(fake.URL())
		if r.webhooks {
			s.SCM.WebhookSecretRef = &agentsv1alpha1.SecretKeyRef{Name: "github", Key: "webhook"}
		}
	}).Obj()
	must(b, r.k8s.Create(ctx, p))

	parallel(b, r.n, 16, func(i int) error {
		return r.k8s.Create(ctx, builders.MakeSession(sessionName(i), r.ns, projectName).Prompt(fmt.Sprintf("Work on item %d", i)).Obj())
	})
	phase("sessions created")
	// The agent ServiceAccount (the Project's) and every agent pod.
	waitFor(b, 5*time.Minute, "the agent ServiceAccount", func() (bool, error) {
		err := r.k8s.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: projectName + "-agent"}, &corev1.ServiceAccount{})
		return err == nil, client.IgnoreNotFound(err)
	})
	pods := map[string]*corev1.Pod{}
	waitFor(b, 10*time.Minute, "the agent pods", func() (bool, error) {
		var list corev1.PodList
		if err := r.k8s.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
			return false, err
		}
		for i := range list.Items {
			pods[list.Items[i].Name] = &list.Items[i]
		}
		return len(pods) >= r.n, nil
	})
	phase("agent pods created")
	parallel(b, r.n, 8, func(i int) error {
		pod := pods[sessionName(i)+"-agent"]
		if pod == nil {
			return fmt.Errorf("no agent pod for %s", sessionName(i))
		}
		return r.startAgent(ctx, i, pod)
	})
	phase("agents started")
	// Every session shows its pull request.
	waitFor(b, 10*time.Minute, "every session to show its pull request", func() (bool, error) {
		var list agentsv1alpha1.AgentSessionList
		if err := r.k8s.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
			return false, err
		}
		ok := 0
		for i := range list.Items {
			s := &list.Items[i]
			if pr := s.Status.PullRequest; pr != nil && pr.Number > 0 && s.Status.Phase == agentsv1alpha1.PhaseReviewPending {
				ok++
			}
		}
		return ok == r.n, nil
	})
	phase("pull requests shown")
}

// startAgent plays the kubelet (prepare done, agent running) and the runner of session i: the
// task, an Active report, the pull request opened through the manager, a Ready report.
func (r *run) startAgent(ctx context.Context, i int, pod *corev1.Pod) error {
	branch := r.world.Branches[i]
	head := r.world.Fake.Branch(economy.Repo, branch)
	prepared := workspace.Result{
		Path: "/shepherd/workspace/worktrees/" + sessionName(i), Branch: branch, BranchAction: workspace.BranchCreated,
		Setup: workspace.SetupResult{State: agentsv1alpha1.SetupSucceeded},
		Facts: workspace.Facts{Branch: branch, Head: head},
	}
	msg, err := json.Marshal(prepared)
	if err != nil {
		return err
	}
	now := metav1.NewTime(r.clock.Now())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}}
		if c.Name == "prepare" {
			st.State.Terminated.Message = string(msg)
		}
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, st)
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	if err := r.k8s.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("pod status: %w", err)
	}

	tr, err := r.cs.CoreV1().ServiceAccounts(r.ns).CreateToken(ctx, projectName+"-agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{runnerapi.Audience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	file := filepath.Join(r.tmp, "token-"+strconv.Itoa(i))
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	c, err := runnerapi.NewClient(r.runner, file, "")
	if err != nil {
		return err
	}
	var task *runnerapi.Task
	if err := retry(ctx, func() (err error) { task, err = c.Task(ctx); return err }); err != nil {
		return fmt.Errorf("task: %w", err)
	}
	seq := task.LastSequence
	report := func(state agentsv1alpha1.ActivityState) error {
		seq++
		t := r.clock.Now()
		rep := runnerapi.Report{Sequence: seq, Time: t, Activity: &runnerapi.ActivityReport{State: state, LastActivityTime: t}}
		return retry(ctx, func() error { return c.Report(ctx, rep) })
	}
	if err := report(agentsv1alpha1.ActivityActive); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := retry(ctx, func() error {
		_, err := c.OpenPullRequest(ctx, runnerapi.PullRequestRequest{Branch: branch, Base: "main", Head: head, Title: "Work on " + sessionName(i), Body: "Done"})
		return err
	}); err != nil {
		return fmt.Errorf("open pull request: %w", err)
	}
	if err := report(agentsv1alpha1.ActivityReady); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// warmUp lets what the setup caused (the hints of the pull requests the runners opened) play
// out, so that the hour starts from every session showing its pull request as the forge has it.
func (r *run) warmUp(ctx context.Context) {
	for s := 1; s <= 30; s++ {
		r.obs.step(r.clock.Now().Add(time.Second))
		r.waitPoller(ctx)
	}
	waitFor(r.b, 2*time.Minute, "every session's status to agree with the Poller", func() (bool, error) {
		return len(r.disagreeing()) == 0, nil
	})
	r.obs.init(r.n)
}

// disagreeing lists the sessions whose status differs from what the Poller last read.
func (r *run) disagreeing() []string {
	var out []string
	for i := 0; i < r.n; i++ {
		name := sessionName(i)
		obs, ok := r.deps.Hub.Get(types.NamespacedName{Namespace: r.ns, Name: name})
		st, seen := r.obs.status(name)
		if !ok || obs.PullRequest == nil || !seen || hubView(obs.PullRequest) != st {
			out = append(out, name)
		}
	}
	return out
}

// expect records what a change should make the session's status show.
func (r *run) expect(a economy.Activity, applied economy.Applied, res *managerResult) {
	name := sessionName(a.PR)
	if !applied.Visible {
		res.hidden++
		return
	}
	var shown bool
	switch a.Kind {
	case economy.Push:
		shown = r.obs.change(name, fHead, applied.SHA)
		shown = r.obs.change(name, fChecks, string(agentsv1alpha1.ChecksPending)) || shown
	case economy.CI:
		v := agentsv1alpha1.ChecksPassing
		if a.Arg != "success" {
			v = agentsv1alpha1.ChecksFailing
		}
		shown = r.obs.change(name, fChecks, string(v))
	case economy.Review:
		switch a.Arg {
		case "APPROVED":
			shown = r.obs.change(name, fReview, string(agentsv1alpha1.ReviewApproved))
		case "CHANGES_REQUESTED":
			shown = r.obs.change(name, fReview, string(agentsv1alpha1.ReviewChangesRequested))
		}
	case economy.Thread:
		shown = r.obs.change(name, fThreads, strconv.Itoa(int(r.obs.truth(name).threads)+1))
	case economy.Merge:
		shown = r.obs.change(name, fState, string(agentsv1alpha1.PullRequestMerged))
	}
	if !shown {
		res.hidden++
	}
}

// waitPoller waits until the Poller has made the calls that were due and sleeps again.
func (r *run) waitPoller(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.clock.WaitSleepers(wctx, 1); err != nil {
		r.b.Fatalf("the Poller did not go back to sleep within 2 minutes at %s", r.clock.Now().Format(time.TimeOnly))
	}
}

// settle waits until the Poller sleeps again and every session whose pending change the Poller
// has read shows it in its status.
func (r *run) settle(ctx context.Context, res *managerResult) {
	r.waitPoller(ctx)
	deadline := time.Now().Add(settleTimeout)
	for {
		lag := r.obs.lagging(func(name string) (view, bool) {
			obs, ok := r.deps.Hub.Get(types.NamespacedName{Namespace: r.ns, Name: name})
			if !ok || obs.PullRequest == nil {
				return view{}, false
			}
			return hubView(obs.PullRequest), true
		})
		if lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			res.timeouts++
			return
		}
		r.obs.wait(10 * time.Millisecond)
	}
}

// maxAge is the age of the oldest observation the Poller holds for a session.
func (r *run) maxAge() time.Duration {
	now := r.clock.Now()
	var oldest time.Duration
	for i := 0; i < r.n; i++ {
		if obs, ok := r.deps.Hub.Get(types.NamespacedName{Namespace: r.ns, Name: sessionName(i)}); ok && !obs.CheckedAt.IsZero() {
			oldest = max(oldest, now.Sub(obs.CheckedAt))
		}
	}
	return oldest
}

// watchSessions feeds the observer from a watch of its own on the sessions (as `kubectl get -w`
// would see them), separate from the manager's cache.
func (r *run) watchSessions(ctx context.Context, cfg *rest.Config) {
	c, err := cache.New(cfg, cache.Options{Scheme: clientgoscheme.Scheme, DefaultNamespaces: map[string]cache.Config{r.ns: {}}})
	if err != nil {
		r.b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &agentsv1alpha1.AgentSession{})
	if err != nil {
		r.b.Fatal(err)
	}
	onSession := func(o any) {
		if s, ok := o.(*agentsv1alpha1.AgentSession); ok {
			r.obs.update(s)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onSession,
		UpdateFunc: func(_, o any) { onSession(o) },
	}); err != nil {
		r.b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		r.b.Fatal("session watch did not sync")
	}
}

// The status fields a change shows in.
type field int

const (
	fState field = iota
	fHead
	fChecks
	fReview
	fThreads
	nFields
)

// view is what a session's status.pullRequest says (or what the Poller read, in the same terms).
type view struct {
	state, head, checks, review string
	threads                     int32
}

func (v view) get(f field) string {
	switch f {
	case fState:
		return v.state
	case fHead:
		return v.head
	case fChecks:
		return v.checks
	case fReview:
		return v.review
	}
	return strconv.Itoa(int(v.threads))
}

func (v *view) set(f field, s string) {
	switch f {
	case fState:
		v.state = s
	case fHead:
		v.head = s
	case fChecks:
		v.checks = s
	case fReview:
		v.review = s
	case fThreads:
		n, _ := strconv.Atoi(s)
		v.threads = int32(n)
	}
}

func statusView(pr *agentsv1alpha1.PullRequestStatus) view {
	v := view{state: string(pr.State), head: pr.HeadSHA, checks: string(pr.Checks), review: string(pr.ReviewDecision), threads: pr.UnresolvedThreads}
	if v.state == "" {
		v.state = string(agentsv1alpha1.PullRequestOpen)
	}
	return v
}

// hubView is what the Poller read, in the status's terms (as the controller maps it).
func hubView(pr *scm.PullRequest) view {
	v := view{state: string(pr.State), head: pr.HeadSHA, checks: string(pr.Checks.State), review: string(pr.ReviewDecision)}
	if v.state == "" {
		v.state = string(agentsv1alpha1.PullRequestOpen)
	}
	if v.checks == "" {
		v.checks = string(agentsv1alpha1.ChecksNone)
	}
	if v.review == "" {
		v.review = string(agentsv1alpha1.ReviewNone)
	}
	for _, t := range pr.Threads {
		if !t.Outdated {
			v.threads++
		}
	}
	return v
}

// pendingChange is a change not shown yet.
type pendingChange struct {
	value string
	sim   time.Time // when it happened (simulated)
	real  time.Time // when it happened (real)
}

type track struct {
	status  view
	seen    bool
	truth   view
	pending [nFields][]pendingChange
}

// observer follows the sessions' status and matches it with the changes made on the fake.
type observer struct {
	clock *scmtest.ManualClock

	mu       sync.Mutex
	stepReal time.Time // when the current simulated second began, in real time
	tracks   map[string]*track
	waiting  map[string]bool // sessions with pending changes
	armed    bool
	lat      []time.Duration
	proc     []time.Duration
	notify   chan struct{}
}

func newObserver(clock *scmtest.ManualClock) *observer {
	return &observer{clock: clock, tracks: map[string]*track{}, waiting: map[string]bool{}, notify: make(chan struct{}, 1)}
}

func (o *observer) track(name string) *track {
	t := o.tracks[name]
	if t == nil {
		t = &track{}
		o.tracks[name] = t
	}
	return t
}

// step moves the simulated clock to t.
func (o *observer) step(t time.Time) {
	o.mu.Lock()
	o.stepReal = time.Now()
	o.mu.Unlock()
	o.clock.Set(t)
}

// init starts the measurement: the truth is what every status shows now.
func (o *observer) init(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := 0; i < n; i++ {
		t := o.track(sessionName(i))
		t.truth = t.status
	}
	o.armed = true
}

func (o *observer) status(name string) (view, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.track(name)
	return t.status, t.seen
}

func (o *observer) truth(name string) view {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.track(name).truth
}

// update takes a session as the watch delivered it.
func (o *observer) update(s *agentsv1alpha1.AgentSession) {
	if s.Status.PullRequest == nil {
		return
	}
	v := statusView(s.Status.PullRequest)
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.track(s.Name)
	t.status, t.seen = v, true
	if o.armed {
		o.resolveLocked(s.Name, t, now)
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// resolveLocked settles the pending changes the status shows: the last pending change of a
// field whose value the status shows, and every earlier one of that field (superseded).
func (o *observer) resolveLocked(name string, t *track, now time.Time) {
	sim := o.clock.Now()
	for f := field(0); f < nFields; f++ {
		ps := t.pending[f]
		k := -1
		for i := range ps {
			if ps[i].value == t.status.get(f) {
				k = i
			}
		}
		for _, p := range ps[:k+1] {
			proc := now.Sub(maxTime(o.stepReal, p.real))
			o.lat = append(o.lat, sim.Sub(p.sim)+proc)
			o.proc = append(o.proc, proc)
		}
		t.pending[f] = ps[k+1:]
	}
	for f := field(0); f < nFields; f++ {
		if len(t.pending[f]) > 0 {
			o.waiting[name] = true
			return
		}
	}
	delete(o.waiting, name)
}

// change records that field f of a session's pull request now has value v on the fake. It
// reports whether that changes what the status should show.
func (o *observer) change(name string, f field, v string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.track(name)
	if t.truth.get(f) == v {
		return false
	}
	t.truth.set(f, v)
	t.pending[f] = append(t.pending[f], pendingChange{value: v, sim: o.clock.Now(), real: time.Now()})
	o.resolveLocked(name, t, time.Now())
	return true
}

// lagging counts the sessions with a pending change that the Poller has read and the status
// does not show yet.
func (o *observer) lagging(read func(name string) (view, bool)) int {
	o.mu.Lock()
	names := make([]string, 0, len(o.waiting))
	for name := range o.waiting {
		names = append(names, name)
	}
	o.mu.Unlock()
	lag := 0
	for _, name := range names {
		hv, ok := read(name)
		if !ok {
			continue
		}
		o.mu.Lock()
		t := o.track(name)
		for f := field(0); f < nFields; f++ {
			if hv.get(f) == t.status.get(f) {
				continue
			}
			for _, p := range t.pending[f] {
				if p.value == hv.get(f) {
					lag++
					break
				}
			}
		}
		o.mu.Unlock()
	}
	return lag
}

// wait blocks until a status changes or d passed.
func (o *observer) wait(d time.Duration) {
	select {
	case <-o.notify:
	case <-time.After(d):
	}
}

func (o *observer) finish(res *managerResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.tracks {
		for f := field(0); f < nFields; f++ {
			res.missed += len(t.pending[f])
		}
	}
	res.changes = len(o.lat)
	sort.Slice(o.lat, func(i, j int) bool { return o.lat[i] < o.lat[j] })
	sort.Slice(o.proc, func(i, j int) bool { return o.proc[i] < o.proc[j] })
	if len(o.lat) > 0 {
		res.p50 = o.lat[len(o.lat)/2]
		res.p99 = o.lat[min(len(o.lat)-1, len(o.lat)*99/100)]
		res.worst = o.lat[len(o.lat)-1]
		res.procP50 = o.proc[len(o.proc)/2]
		res.procMx = o.proc[len(o.proc)-1]
	}
	res.LatencyP50, res.LatencyMax = res.p50, res.worst
}

// report prints the setup and the results.
func report(out io.Writer, n, seconds int, acts []economy.Activity, naive, pollerPoll, pollerHooks economy.Result,
	mPoll, mHooks managerResult, baselineTime, total time.Duration, errorLogs int64) {
	hours := float64(n) * float64(seconds) / 3600
	kinds := map[string]int{}
	for _, a := range acts {
		kinds[a.Kind]++
	}
	fmt.Fprintf(out, "\nSCM economy through the manager: %d AgentSessions with open pull requests, %d simulated minutes\n", n, seconds/60)
	fmt.Fprintf(out, "setup:\n")
	fmt.Fprintf(out, "  %s %s/%s, GOMAXPROCS %d, %d CPUs; kube-apiserver %s (envtest); %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.GOMAXPROCS(0), runtime.NumCPU(), mPoll.apiServer, deps("sigs.k8s.io/controller-runtime", "github.com/google/go-github/v88"))
	fmt.Fprintf(out, "  schedule (shared with BenchmarkSCMEconomy): %d changes: %d pushes each starting a CI run, %d CI conclusions, %d reviews, %d review threads, %d merges\n",
		len(acts), kinds[economy.Push], kinds[economy.CI], kinds[economy.Review], kinds[economy.Thread], kinds[economy.Merge])
	fmt.Fprintf(out, "  manager: controller.Setup as cmd/manager (cache selectors, client %g QPS / burst %d, %d reconciles at once per controller),\n", *flagQPS, *flagBurst, *flagMCR)
	fmt.Fprintf(out, "    default reactions, Project poll interval 1m, Poller defaults (hints after 2s, at most one hint-driven call per 15s, details every 15m, 10m safety net while webhooks flow)\n")
	fmt.Fprintf(out, "  sessions brought to ReviewPending through the real channel: pod status as the kubelet, pod-bound token, task, Active, OpenPullRequest, Ready\n")
	fmt.Fprintf(out, "  webhooks: signed by the fake, POSTed to the manager's webhook receiver on loopback; fake budgets 10M/h (GitHub's: 5,000 REST + 5,000 points)\n")
	fmt.Fprintf(out, "  time: one simulated clock for the fake, the adapter, the Poller and the controllers' Now, stepped 1s at a time; each step waits (real time)\n")
	fmt.Fprintf(out, "    until the Poller sleeps again and every status whose change the Poller read shows it; staleness = simulated delay + that real time\n")
	fmt.Fprintf(out, "  baselines measured in this run on the same schedule: naive REST poll every minute, SCM-level Poller (change → OnChange)\n")
	fmt.Fprintf(out, "  wall time: baselines %s, manager polling (setup %s, hour %s), manager webhooks (setup %s, hour %s), total %s; manager error logs: %d\n",
		baselineTime.Round(time.Second), mPoll.setup.Round(time.Second), mPoll.hour.Round(time.Second), mHooks.setup.Round(time.Second), mHooks.hour.Round(time.Second),
		total.Round(time.Second), errorLogs)
	fmt.Fprintf(out, "\n%-28s %8s %6s %6s %8s %8s %11s %9s %9s %8s %15s %9s\n", "", "REST", "304s", "GQL q", "GQL pts",
		"counted", "per sess-h", "vs naive", "vs Poller", "max age", "stale p50/p99", "worst")
	ratio := func(a, b int) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f%%", 100*float64(a)/float64(b))
	}
	pollerRatio := func(a, b int) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", float64(a)/float64(b))
	}
	row := func(r economy.Result, vsPoller economy.Result, p50, p99 string) {
		fmt.Fprintf(out, "%-28s %8d %6d %6d %8d %8d %11.3f %9s %9s %8s %7s/%-7s %9s\n", r.Name, r.REST, r.NotMod, r.GQLQueries, r.GQLPoints,
			r.Counted(), float64(r.Counted())/hours, ratio(r.Counted(), naive.Counted()), pollerRatio(r.Counted(), vsPoller.Counted()),
			r.MaxAge.Round(time.Second), p50, p99, round(r.LatencyMax))
	}
	d := func(x time.Duration) string { return round(x).String() }
	if naive.Name != "" {
		// Without ETags the naive poll's staleness is its interval.
		row(naive, economy.Result{}, "-", d(naive.LatencyMax))
		row(pollerPoll, pollerPoll, d(pollerPoll.LatencyP50), d(pollerPoll.LatencyP95))
		row(pollerHooks, pollerHooks, d(pollerHooks.LatencyP50), d(pollerHooks.LatencyP95))
	}
	row(mPoll.Result, pollerPoll, d(mPoll.p50), d(mPoll.p99))
	row(mHooks.Result, pollerHooks, d(mHooks.p50), d(mHooks.p99))
	fmt.Fprintf(out, "(SCM Poller rows: staleness is change → the Poller's OnChange, p95 in the p99 column, as BenchmarkSCMEconomy measures it)\n")
	for _, m := range []managerResult{mPoll, mHooks} {
		per := float64(m.Counted()) / hours
		target := 5.0
		if m.mode == "webhooks" {
			target = 0.5
		}
		verdict := "met"
		if per > target {
			verdict = "NOT met"
		}
		fmt.Fprintf(out, "\nmanager, %s: %.3f counted requests per session-hour (target ≤ %g: %s); worst staleness %s, p99 %s, p50 %s\n",
			m.mode, per, target, verdict, round(m.worst), round(m.p99), round(m.p50))
		fmt.Fprintf(out, "  status changes measured %d, not shown by design %d, never shown %d; steps over %s: %d; real-time part of the staleness p50 %s, max %s\n",
			m.changes, m.hidden, m.missed, settleTimeout, m.timeouts, m.procP50.Round(time.Millisecond), m.procMx.Round(time.Millisecond))
		fmt.Fprintf(out, "  webhook deliveries %d; AgentSession reconciles during the hour %.0f; setup: %s\n", m.Webhooks, m.reconciles, strings.Join(m.phases, ", "))
		fmt.Fprintf(out, "  SCM calls by the manager during the hour (shepherd_scm_requests_total): %s\n", formatCounts(m.scmOps))
		fmt.Fprintf(out, "  REST routes on the fake (304s included): %s\n", formatCounts(m.routes))
	}
	fmt.Fprintln(out)
}

// formatCounts lists counts by name, sorted by name, as "name count, ...".
func formatCounts[V int | float64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+strconv.FormatFloat(float64(m[k]), 'f', 0, 64))
	}
	return strings.Join(parts, ", ")
}

// scmOps sums shepherd_scm_requests_total by kind/op/outcome.
func scmOps() map[string]float64 {
	out := map[string]float64{}
	for _, m := range metricFamily("shepherd_scm_requests_total") {
		l := labelMap(m)
		out[l["kind"]+" "+l["op"]+" "+l["outcome"]] += m.GetCounter().GetValue()
	}
	return out
}

// counterSum sums a counter of controller-runtime's registry over the series matching want.
func counterSum(name string, want map[string]string) float64 {
	var sum float64
	for _, m := range metricFamily(name) {
		l := labelMap(m)
		ok := true
		for k, v := range want {
			if l[k] != v {
				ok = false
			}
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func metricFamily(name string) []*dto.Metric {
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// deps names the versions go.mod requires of the modules.
func deps(paths ...string) string {
	mod, err := os.ReadFile(filepath.Join(repoRoot(), "go.mod"))
	if err != nil {
		return ""
	}
	var parts []string
	for _, line := range strings.Split(string(mod), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && slices.Contains(paths, f[0]) {
			parts = append(parts, f[0]+" "+f[1])
		}
	}
	return strings.Join(parts, ", ")
}

// round keeps a tenth of a second.
func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

func sessionName(i int) string { return fmt.Sprintf("s-%04d", i) }

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// parallel runs f for 0..n-1 on workers goroutines and fails on the first error.
func parallel(b *testing.B, n, workers int, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- fmt.Errorf("%s: %w", sessionName(i), err)
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// waitFor polls cond every 200ms until it holds, failing after timeout.
func waitFor(b *testing.B, timeout time.Duration, what string, cond func() (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			b.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("waiting for %s: not within %s", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// retry retries a runner call that failed for a reason that passes (the manager's cache has not
// seen the pod running yet, a conflict), a bounded number of times.
func retry(ctx context.Context, f func() error) error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = f(); err == nil {
			return nil
		}
		var api *runnerapi.APIError
		passing := runnerapi.Retryable(err) || errors.As(err, &api) && (api.Status == 403 || api.Status == 404 || api.Status == 409)
		if !passing {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}

// lineCounter counts the manager's error log lines and keeps the first few.
type lineCounter struct {
	on    atomic.Bool
	n     atomic.Int64
	mu    sync.Mutex
	first []string
}

func (c *lineCounter) Write(p []byte) (int, error) {
	if !c.on.Load() {
		return len(p), nil // the shutdown's "context canceled" is not news
	}
	c.n.Add(int64(strings.Count(string(p), "\n")))
	c.mu.Lock()
	if len(c.first) < 5 {
		c.first = append(c.first, strings.TrimSpace(string(p)))
	}
	c.mu.Unlock()
	return len(p), nil
}
