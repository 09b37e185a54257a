package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/gitproxy"
	"github.com/shepherd-dev/shepherd/internal/metrics"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnertls"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Config is what Setup needs beyond the manager.
type Config struct {
	Options
	// RunnerBindAddress serves the runner channel (":8090"); "0" disables it.
	RunnerBindAddress string
	// WebhookBindAddress serves forge webhooks (":8091"); "0" disables it.
	WebhookBindAddress string
	// WebhookMaxBody caps a webhook delivery (0: webhook.DefaultMaxBody).
	WebhookMaxBody int64
	// RunnerTLSNames are the DNS names and IP addresses agent pods reach the runner channel at;
	// set, the channel serves TLS with a certificate of the manager's own CA (kept in the
	// RunnerTLSSecret of ManagerNamespace) and agent pods verify it. Empty: plain HTTP.
	RunnerTLSNames []string
	// Now is the clock (tests).
	Now func() time.Time
	// Prices is the price table (pricing.Load of --price-table); nil uses the shipped defaults.
	Prices *pricing.Table
	// PollerOptions tune the forge polling (tests compress time with them). Their Clock, when
	// set, is the forge adapters' and pollers' clock (the Hub's).
	PollerOptions scm.PollerOptions
	// NotifyPolicy bounds notification retries.
	NotifyPolicy *notify.Policy
	// ActionHook is called around every action of a session's decision (tests only: the
	// crash-point harness stops the manager there).
	ActionHook ActionHook
	// UIBindAddress serves the aggregated API of transcripts and the dashboard (":9445", behind
	// the APIService v1alpha1.ui.agents.shepherd.dev); "0" or empty disables it. It needs
	// RunnerTLSNames (its certificate is the runner channel's, whose names must include the UI
	// Service's) and the API server's aggregation layer.
	UIBindAddress string
	// PodName is this replica's pod (in ManagerNamespace): the leader labels it LabelUIServing.
	PodName string
	// LeaderLease is the leader-election Lease when the manager runs under leader election:
	// every replica then serves the runner channel and the webhook receiver, a standby
	// forwarding each request to the leader the Lease names (LeaderLabels).
	LeaderLease types.NamespacedName
}

// Setup wires the three reconcilers, the runner channel, the forge hub and webhook receiver, and
// the notification dispatcher into mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config) (*Deps, error) {
	if err := servedKinds(mgr.GetRESTMapper()); err != nil {
		return nil, err
	}
	if err := SetupIndexes(ctx, mgr); err != nil {
		return nil, err
	}
	events := make(chan event.GenericEvent, 4096)
	wake := func(key types.NamespacedName) {
		send(events, &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
	}
	projectEvents := make(chan event.GenericEvent, 256)
	deps, gitTransport, err := newDeps(mgr, cfg, wake, projectEvents)
	if err != nil {
		return nil, err
	}
	if err := setupNotifier(mgr, cfg, deps); err != nil {
		return nil, err
	}

	var locator *leaderLocator
	if cfg.LeaderLease.Name != "" {
		locator = &leaderLocator{reader: mgr.GetAPIReader(), lease: cfg.LeaderLease, elected: mgr.Elected(), now: time.Now}
	}
	handler, err := setupRunnerChannel(ctx, mgr, cfg, deps, gitTransport, locator, projectEvents)
	if err != nil {
		return nil, err
	}
	if err := setupWebhooks(mgr, cfg, deps, locator); err != nil {
		return nil, err
	}
	if err := setupUI(ctx, mgr, cfg, deps); err != nil {
		return nil, err
	}

	sessions := &AgentSessionReconciler{Deps: deps, Events: events, ActionHook: cfg.ActionHook}
	if handler != nil {
		sessions.Wake = handler.Wake
	}
	if err := (&ProjectReconciler{Deps: deps, Events: projectEvents}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the Project controller: %w", err)
	}
	if err := (&BudgetPolicyReconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the BudgetPolicy controller: %w", err)
	}
	if err := (&AgentTaskReconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the AgentTask controller: %w", err)
	}
	worktreeEvents := make(chan event.GenericEvent, 256)
	deps.Reports.OnWorktreeChange = func(key types.NamespacedName) {
		send(worktreeEvents, &agentsv1alpha1.Worktree{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
	}
	if err := (&WorktreeReconciler{Deps: deps, Events: worktreeEvents}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the Worktree controller: %w", err)
	}
	if err := sessions.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the AgentSession controller: %w", err)
	}
	return deps, nil
}

// newDeps makes what the reconcilers and the servers share: the counting client, the Secret
// reader, the forge hub (added to mgr), the runner reports and the notification results, which
// wake the objects they concern; and the git proxy's transport through the outbound guard.
func newDeps(mgr ctrl.Manager, cfg Config, wake func(types.NamespacedName), projectEvents chan event.GenericEvent) (*Deps, http.RoundTripper, error) {
	scmMetrics, err := sharedSCMMetrics()
	if err != nil {
		return nil, nil, fmt.Errorf("register SCM metrics: %w", err)
	}
	m, err := sharedMetrics()
	if err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	pollerOpts := cfg.PollerOptions
	pollerOpts.OnChange = wake
	// The Hub gives every connection its clock (the poller's and the adapter's): a clock in
	// PollerOptions would otherwise be replaced by the real one.
	hub := scm.NewHub(scm.HubOptions{Metrics: scmMetrics, Clock: pollerOpts.Clock, Poller: pollerOpts, Logger: mgr.GetLogger().WithName("scm")})
	if err := mgr.Add(hub); err != nil {
		return nil, nil, fmt.Errorf("add SCM hub: %w", err)
	}
	reports := NewReportStore()
	reports.OnChange = wake
	deliveries := newDeliveryResults()
	deliveries.onSession = wake
	deliveries.onProject = func(key types.NamespacedName) {
		send(projectEvents, &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
	}
	deps := &Deps{
		Client:     &metrics.CountingClient{Client: mgr.GetClient(), M: m},
		APIReader:  mgr.GetAPIReader(),
		Scheme:     mgr.GetScheme(),
		Recorder:   mgr.GetEventRecorder("shepherd"),
		Secrets:    &SecretReader{Meta: mgr.GetClient(), API: mgr.GetAPIReader()},
		Hub:        hub,
		Reports:    reports,
		Deliveries: deliveries,
		Issues: newIssueWatch(wake, func(key types.NamespacedName) {
			send(projectEvents, &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
		}),
		Transcripts: &transcript.Store{},
		Prices:      pricing.Defaults(),
		Now:         cfg.Now,
		Options:     cfg.Options,
		Metrics:     m,
		SCMMetrics:  scmMetrics,
	}
	if cfg.Prices != nil {
		deps.Prices = *cfg.Prices
	}
	var gitTransport http.RoundTripper // nil: the git proxy's default
	if g := cfg.Outbound; g != nil {
		deps.Outbound = g.Transport()
		gitTransport = gitproxy.NewTransport(g.DialContext)
	}
	return deps, gitTransport, nil
}

// setupRunnerChannel adds the runner channel's server (nil when it is off): token reviews on a
// client of their own, TLS with the manager's own CA when RunnerTLSNames are set, and, under
// leader election, forwarding from a standby to the leader.
func setupRunnerChannel(ctx context.Context, mgr ctrl.Manager, cfg Config, deps *Deps, gitTransport http.RoundTripper,
	locator *leaderLocator, projectEvents chan event.GenericEvent) (*runnerapi.Handler, error) {
	if cfg.RunnerBindAddress == "" || cfg.RunnerBindAddress == "0" {
		return nil, nil
	}
	// The reviews have a client and a rate of their own: tokens from every pod cannot spend
	// the reconcilers' share of the API server (docs/security.md, the runner channel).
	reviewCfg := rest.CopyConfig(mgr.GetConfig())
	reviewCfg.QPS, reviewCfg.Burst = reviewQPS, reviewBurst
	reviewClient, err := client.New(reviewCfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, fmt.Errorf("token review client: %w", err)
	}
	handler, err := runnerapi.NewHandler(runnerapi.HandlerOptions{
		Backend:      &RunnerBackend{Deps: deps},
		Reviewer:     runnerapi.NewTokenReviewer(reviewClient),
		GitTransport: gitTransport,
		Pods:         mgr.GetClient(),
		LivePods:     mgr.GetAPIReader(),
		Identify:     runnerapi.StandardIdentify(PodNames),
		Log:          mgr.GetLogger().WithName("runnerapi"),
	})
	if err != nil {
		return nil, fmt.Errorf("runner channel: %w", err)
	}
	srv := &httpServer{name: "runner channel", addr: cfg.RunnerBindAddress, handler: countReports(handler, deps.Metrics), cancelOnStop: true}
	scheme := "http"
	if len(cfg.RunnerTLSNames) > 0 {
		certs := &runnertls.Certificates{}
		deps.RunnerCA = newRunnerCA()
		deps.runnerCerts = certs
		sync := &certSync{client: mgr.GetClient(), reader: mgr.GetAPIReader(), namespace: cfg.ManagerNamespace, names: cfg.RunnerTLSNames,
			certs: certs, ca: deps.RunnerCA, now: deps.now, onCA: func() {
				requeueAllProjects(ctx, mgr.GetClient(), projectEvents)
				deps.caChanged()
			}}
		if err := mgr.Add(sync); err != nil {
			return nil, fmt.Errorf("add runner TLS: %w", err)
		}
		srv.tls, srv.ready, scheme = certs.ServerConfig(), deps.RunnerCA.wait, "https"
	}
	if locator != nil {
		tr := &leaderTransport{ca: deps.RunnerCA, serverName: runnerServerName(cfg.RunnerURL)}
		srv.handler = &toLeader{name: srv.name, locator: locator, portLabel: LabelLeaderRunnerPort, local: srv.handler,
			scheme: scheme, transport: tr.get, budget: runnerForwardBudget, slots: make(chan struct{}, runnerForwardSlots),
			log: mgr.GetLogger().WithName("runnerapi")}
		srv.anyReplica = true
	}
	if err := mgr.Add(srv); err != nil {
		return nil, fmt.Errorf("add runner channel: %w", err)
	}
	return handler, nil
}

// setupWebhooks adds the webhook receiver's server, forwarding from a standby to the leader under
// leader election (the Poller the hints feed runs there).
func setupWebhooks(mgr ctrl.Manager, cfg Config, deps *Deps, locator *leaderLocator) error {
	if cfg.WebhookBindAddress == "" || cfg.WebhookBindAddress == "0" {
		return nil
	}
	wh, err := webhook.NewHandler(webhook.Options{
		Lookup:  webhookTargets(deps),
		MaxBody: cfg.WebhookMaxBody,
		OnHint: func(h scm.Hint) {
			deps.Hub.Notify(h)
			deps.Issues.hint(h, deps.now())
		},
		Metrics: deps.SCMMetrics,
		Logger:  mgr.GetLogger().WithName("webhook"),
	})
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	srv := &httpServer{name: "webhook receiver", addr: cfg.WebhookBindAddress, handler: wh, limits: webhookLimits}
	if locator != nil {
		tr := &leaderTransport{}
		srv.handler = &toLeader{name: srv.name, locator: locator, portLabel: LabelLeaderWebhookPort, local: wh,
			scheme: "http", transport: tr.get, budget: webhookForwardBudget, slots: make(chan struct{}, webhookForwardSlots),
			log: mgr.GetLogger().WithName("webhook")}
		srv.anyReplica = true
	}
	if err := mgr.Add(srv); err != nil {
		return fmt.Errorf("add webhook receiver: %w", err)
	}
	return nil
}

// How a standby hands requests to the leader. A leader that releases its Lease (a rollout, a
// drain, a deleted pod) is replaced within a couple of seconds; one that died holds the Lease for
// its duration (15 s). The runner's calls allow 20 s; a forge waits 10 s for a delivery's answer.
const (
	runnerForwardBudget  = 15 * time.Second
	runnerForwardSlots   = 64
	webhookForwardBudget = 8 * time.Second
	webhookForwardSlots  = 16
)

// The token reviewer's client: its own rate, above the channel's own pace of reviews (50 a second
// in bursts of 200, runnerapi.HandlerOptions), so that the client never queues what the channel
// let through.
const (
	reviewQPS   = 60
	reviewBurst = 200
)

// requeueAllProjects asks every Project to reconcile (the runner CA they publish changed).
func requeueAllProjects(ctx context.Context, c client.Client, ch chan event.GenericEvent) {
	var list agentsv1alpha1.ProjectList
	if err := c.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List Projects to publish the runner CA")
		return
	}
	for i := range list.Items {
		send(ch, &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
}

// send queues a reconcile request for obj without blocking the caller (a webhook, a runner
// report, a notification worker) when the channel is full.
func send(ch chan event.GenericEvent, obj client.Object) {
	ev := event.GenericEvent{Object: obj}
	select {
	case ch <- ev:
	default:
		go func() { ch <- ev }()
	}
}

// The metrics are registered on controller-runtime's registry once per process: a manager set up
// again in the same process (a restart, as the envtest suite does, or a second replica in a
// leader-election test) shares them instead of failing on a duplicate registration.
var (
	scmMetricsOnce sync.Once
	scmMetrics     *scm.Metrics
	scmMetricsErr  error

	metricsOnce   sync.Once
	sharedMetric  *metrics.Metrics
	sharedMetricE error
)

func sharedSCMMetrics() (*scm.Metrics, error) {
	scmMetricsOnce.Do(func() { scmMetrics, scmMetricsErr = scm.NewMetrics(ctrlmetrics.Registry) })
	return scmMetrics, scmMetricsErr
}

func sharedMetrics() (*metrics.Metrics, error) {
	metricsOnce.Do(func() { sharedMetric, sharedMetricE = metrics.New(ctrlmetrics.Registry) })
	return sharedMetric, sharedMetricE
}

// countReports counts the runner reports the channel answers, by outcome. The channel decides
// (authentication, validation, sequence order); this only reads the status it answered with.
func countReports(next http.Handler, m *metrics.Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != runnerapi.PathReports {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		m.ObserveRunnerReport(reportOutcome(sw.status))
	})
}

// reportOutcome maps the channel's answer to a report to its outcome. Pure.
func reportOutcome(status int) string {
	switch {
	case status < 300:
		return metrics.ReportAccepted
	case status == http.StatusConflict:
		return metrics.ReportOutOfOrder
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnsupportedMediaType:
		return metrics.ReportInvalid
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return metrics.ReportUnauthorized
	}
	return metrics.ReportError
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// webhookTargets finds the Project a webhook path names, in the manager's cache, and its
// webhook secret. The path's namespace is the only one read: a delivery is never verified with
// another namespace's secret, whatever repository its body names.
func webhookTargets(d *Deps) func(context.Context, types.NamespacedName) (webhook.Target, error) {
	return func(ctx context.Context, key types.NamespacedName) (webhook.Target, error) {
		p := &agentsv1alpha1.Project{}
		if err := d.Client.Get(ctx, key, p); err != nil {
			return webhook.Target{}, webhook.ErrUnknownProject
		}
		if p.Spec.SCM.WebhookSecretRef == nil || !p.DeletionTimestamp.IsZero() {
			return webhook.Target{}, webhook.ErrUnknownProject
		}
		repo, err := scm.ParseRepoURL(string(p.Spec.Repository.URL))
		if err != nil {
			return webhook.Target{}, webhook.ErrUnknownProject
		}
		secret, err := d.Secrets.Key(ctx, p.Namespace, *p.Spec.SCM.WebhookSecretRef, "spec.scm.webhookSecretRef")
		if err != nil {
			return webhook.Target{}, webhook.ErrUnknownProject
		}
		return webhook.Target{Repo: repo, Secret: secret}, nil
	}
}

// httpServer serves a handler on the leader only: runner reports and webhooks feed the
// reconcilers' in-memory state, which only the leader's reconcilers read. A standby refuses the
// connection and the runner retries; forges redeliver failed webhooks and polling catches up.
type httpServer struct {
	name    string
	addr    string
	handler http.Handler
	// tls, when set, serves TLS; ready, when set, is waited for before listening (the first
	// certificate).
	tls   *tls.Config
	ready <-chan struct{}
	// limits, when set, bound the server for callers on the internet (the webhook receiver).
	limits *serverLimits
	// anyReplica serves on every replica (its handler forwards to the leader); otherwise only
	// the leader listens.
	anyReplica bool
	// cancelOnStop ends the requests in flight when the server stops (their context is the
	// server's): a runner's long poll or its wait for a pull request then fails at once, and the
	// runner asks the next leader, instead of holding this one's shutdown.
	cancelOnStop bool
}

// serverLimits bound what one client, or many, can make a server hold.
type serverLimits struct {
	// ReadTimeout bounds reading a whole request (headers and body); WriteTimeout the answer.
	ReadTimeout, WriteTimeout time.Duration
	// MaxConns bounds the connections open at once; more wait to be accepted.
	MaxConns int
}

// webhookLimits are the receiver's: deliveries are small and answered at once (GitHub waits
// 10 s for an answer), so a connection that is slower than that is not a forge.
var webhookLimits = &serverLimits{ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second, MaxConns: 512}

var _ manager.LeaderElectionRunnable = (*httpServer)(nil)

func (s *httpServer) NeedLeaderElection() bool { return !s.anyReplica }

func (s *httpServer) Start(ctx context.Context) error {
	if s.ready != nil {
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil
		}
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", s.name, s.addr, err)
	}
	if s.tls != nil {
		l = tls.NewListener(l, s.tls)
	}
	// Headers are small: 64 KiB is eight times what a forge or the runner sends.
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	if s.cancelOnStop {
		srv.BaseContext = func(net.Listener) context.Context { return ctx }
	}
	if lim := s.limits; lim != nil {
		srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = 5*time.Second, lim.ReadTimeout, lim.WriteTimeout, time.Minute
		l = netutil.LimitListener(l, lim.MaxConns)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	ctrl.Log.WithName(s.name).Info("Serving", "address", l.Addr().String())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("%s: %w", s.name, err)
	}
}

// servedKinds checks that the API server serves every Shepherd kind the controllers watch: a
// release that adds a kind (BudgetPolicy) needs its CRD applied first, which `helm upgrade` does
// not do. Without this the manager would wait for a cache that never syncs and say less.
func servedKinds(mapper meta.RESTMapper) error {
	for _, kind := range []string{"Project", "Worktree", "AgentSession", "BudgetPolicy", "AgentTask"} {
		gk := schema.GroupKind{Group: agentsv1alpha1.GroupVersion.Group, Kind: kind}
		if _, err := mapper.RESTMapping(gk, agentsv1alpha1.GroupVersion.Version); err != nil {
			return fmt.Errorf("the API server does not serve %s (%w): apply this release's CRDs first "+
				"(kubectl apply --server-side -f charts/shepherd/crds/, or the release manifest; docs/operations.md)", gk, err)
		}
	}
	return nil
}
