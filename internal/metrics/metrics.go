// Package metrics holds Shepherd's own Prometheus metrics (docs/metrics.md lists every metric the
// manager exports: these, the SCM ones, and the controller-runtime ones it relies on). They are
// registered on controller-runtime's registry and served on the manager's metrics endpoint.
//
// Counters that grow with events live here, not in object status: a status write per counter
// change would cost an API write each (Actions Runner Controller moved its counters to metrics
// for the same reason).
//
// Session observations are made from the difference between the status a reconcile read and the
// status it wrote, after the write succeeded. The write carries the resourceVersion it was
// computed from, so two reconciles never both succeed with the same "before": every transition,
// first start and spend increment is counted once, also across manager restarts and leader
// changes.
package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/pricing"
)

// Checkout says how the checkout an agent first ran in was made; it labels the time to running.
type Checkout string

const (
	// CheckoutCold: the prepare step fetched the repository whole (it created the Project's
	// mirror, or cloned with no mirror to borrow from).
	CheckoutCold Checkout = "cold"
	// CheckoutWarm: the checkout was restored, or added from a mirror that was already there.
	CheckoutWarm Checkout = "warm"
	// CheckoutUnknown: the prepare step left no readable result.
	CheckoutUnknown Checkout = "unknown"
)

// Outcomes of a runner report on the channel.
const (
	ReportAccepted     = "accepted"
	ReportOutOfOrder   = "out_of_order"
	ReportInvalid      = "invalid"
	ReportUnauthorized = "unauthorized"
	ReportError        = "error"
)

// Outcomes of a notification delivery.
const (
	NotificationDelivered = "delivered"
	NotificationFailed    = "failed"
)

// Outcomes of a backlog query.
const (
	QueryOK    = "ok"
	QueryError = "error"
)

// Metrics are the manager's own metrics.
type Metrics struct {
	// Sessions is the number of AgentSessions by namespace, project and phase, as the Project
	// controller last counted them (every phase is set, 0 included).
	Sessions *prometheus.GaugeVec
	// PhaseTransitions counts phase changes by from and to ("None" for a new session).
	PhaseTransitions *prometheus.CounterVec
	// TimeToRunning is the time from a session's creation to its agent first running, by checkout
	// (cold, warm, unknown).
	TimeToRunning *prometheus.HistogramVec
	// TimeToPullRequest is the time from a session's creation to the manager first seeing its
	// pull request.
	TimeToPullRequest prometheus.Histogram
	// TimeToMerge is the time from a session's creation to its pull request merged.
	TimeToMerge prometheus.Histogram
	// APIWrites counts the manager's writes to the API server by kind, verb and subresource.
	APIWrites *prometheus.CounterVec
	// Notifications counts notification deliveries by destination type and outcome.
	Notifications *prometheus.CounterVec
	// AgentCost is the agents' spend in US dollars, by agent type and model.
	AgentCost *prometheus.CounterVec
	// AgentTokens counts tokens by agent type, model and kind (input, output, cache_read).
	AgentTokens *prometheus.CounterVec
	// RunnerReports counts runner reports received on the channel, by outcome.
	RunnerReports *prometheus.CounterVec
	// BacklogQueries counts tracker queries of Projects' backlogs, by outcome.
	BacklogQueries *prometheus.CounterVec
	// BacklogSpawned counts sessions the backlogs created.
	BacklogSpawned *prometheus.CounterVec
}

// DurationBuckets are the buckets of the session-duration histograms: a second to four hours.
var DurationBuckets = []float64{1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400}

// Phases are the phases the sessions gauge is set for (every one, so that a phase emptied shows
// 0 rather than vanishing).
var Phases = []agentsv1alpha1.SessionPhase{
	agentsv1alpha1.PhaseQueued, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhasePROpen,
	agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.PhaseChangesRequested,
	agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable, agentsv1alpha1.PhaseMerged, agentsv1alpha1.PhaseNeedsInput,
	agentsv1alpha1.PhaseStuck, agentsv1alpha1.PhaseErrored, agentsv1alpha1.PhaseStopped, agentsv1alpha1.PhaseDone,
}

// TransitionPairs is how many (from, to) series the transitions counter starts with.
// (None or a phase, to another phase): 16 × 15 less the 15 a phase to itself.
var TransitionPairs = len(Phases) * len(Phases)

// initTransitions creates every (from, to) series at 0. A counter series that first appears
// at 1 hides that increment from rate() and increase() (Prometheus has no sample before it), so
// the first merge, CI failure or escalation of a manager's life would not show on the dashboard
// or fire an alert. TransitionPairs fixed series, bounded whatever the sessions do.
func (m *Metrics) initTransitions() {
	for _, from := range append([]agentsv1alpha1.SessionPhase{""}, Phases...) {
		for _, to := range Phases {
			if from != to {
				m.PhaseTransitions.WithLabelValues(orNone(string(from)), string(to))
			}
		}
	}
}

// New creates the metrics and registers them on reg (nil registers nothing, for tests).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shepherd_sessions", Help: "AgentSessions by namespace, project and phase, as the Project controller last counted them.",
		}, []string{"namespace", "project", "phase"}),
		PhaseTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_session_phase_transitions_total", Help: "AgentSession phase changes, by from (None for a new session) and to phase.",
		}, []string{"from", "to"}),
		TimeToRunning: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shepherd_session_time_to_running_seconds",
			Help:    "Time from an AgentSession's creation to its agent first running, by checkout (cold: the repository was fetched whole; warm: restored or added from a present mirror).",
			Buckets: DurationBuckets,
		}, []string{"checkout"}),
		TimeToPullRequest: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shepherd_session_time_to_pull_request_seconds", Help: "Time from an AgentSession's creation to its pull request being seen open.",
			Buckets: DurationBuckets,
		}),
		TimeToMerge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shepherd_session_time_to_merge_seconds", Help: "Time from an AgentSession's creation to its pull request being merged.",
			Buckets: DurationBuckets,
		}),
		APIWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_api_writes_total", Help: "Writes the manager made to the Kubernetes API, by kind, verb and subresource.",
		}, []string{"kind", "verb", "subresource"}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_notifications_total", Help: "Notification deliveries by destination type (webhook, slack) and outcome (delivered, failed).",
		}, []string{"type", "outcome"}),
		AgentCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_agent_cost_usd_total", Help: "Agent spend in US dollars, by agent type and model: the model proxy's count at the price table's prices where there is a proxy, else the agents' own output.",
		}, []string{"agent", "model"}),
		AgentTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_agent_tokens_total", Help: "Agent tokens by agent type, model and kind (input, output, cache_read, cache_write): the model proxy's count where there is a proxy, else the agents' own output.",
		}, []string{"agent", "model", "kind"}),
		RunnerReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_runner_reports_total", Help: "Runner reports received on the channel, by outcome (accepted, out_of_order, invalid, unauthorized, error).",
		}, []string{"outcome"}),
		BacklogQueries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_backlog_queries_total", Help: "Tracker queries of a Project's backlog, by outcome (ok, error).",
		}, []string{"namespace", "project", "outcome"}),
		BacklogSpawned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_backlog_sessions_spawned_total", Help: "AgentSessions a Project's backlog created.",
		}, []string{"namespace", "project"}),
	}
	// Outcomes known in advance start at 0, so that rate() sees their first increment.
	for _, o := range []string{ReportAccepted, ReportOutOfOrder, ReportInvalid, ReportUnauthorized, ReportError} {
		m.RunnerReports.WithLabelValues(o)
	}
	for _, t := range []string{"webhook", "slack"} {
		for _, o := range []string{NotificationDelivered, NotificationFailed} {
			m.Notifications.WithLabelValues(t, o)
		}
	}
	m.initTransitions()
	if reg == nil {
		return m, nil
	}
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Collectors are every metric m holds, for registration and for the test that holds
// docs/metrics.md to them.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Sessions, m.PhaseTransitions, m.TimeToRunning, m.TimeToPullRequest, m.TimeToMerge,
		m.APIWrites, m.Notifications, m.AgentCost, m.AgentTokens, m.RunnerReports, m.BacklogQueries, m.BacklogSpawned}
}

// SessionWrite is what one successful status write of a session changed.
type SessionWrite struct {
	// Created is the session's creation time.
	Created time.Time
	// Before is the status the write replaced; After the status written.
	Before, After *agentsv1alpha1.AgentSessionStatus
	// Checkout is how the checkout was made, when After is the agent's first run.
	Checkout Checkout
	// Now is when the write succeeded.
	Now time.Time
	// ConfiguredModel is the model the session's spec asks for (the Project's agent.model or the
	// session's override); empty for the CLI's default. It bounds the model label: the agent
	// reports a model of its own choosing, and the label must not grow with what it says.
	ConfiguredModel string
}

// Model label values besides the configured models.
const (
	// ModelOther: the agent reported a model that is not the configured one.
	ModelOther = "other"
	// ModelDefault: no model configured (the CLI's own default), whatever the agent reported.
	ModelDefault = "default"
)

// modelLabel bounds the model label to the configured models, "default" and "other": the
// reported model when it is the configured one, or the configured one with a suffix (the alias
// claude-sonnet-4-5 reported as claude-sonnet-4-5-20250929 is labelled with the alias). Pure.
func modelLabel(configured, reported string) string {
	switch {
	case configured == "":
		return ModelDefault
	case reported == configured || strings.HasPrefix(reported, configured+"-") || reported == "":
		return configured
	}
	return ModelOther
}

// ObserveSessionWrite records what a session's status write changed: its phase transition, its
// first run, its first pull request, its merge, and its new spend.
func (m *Metrics) ObserveSessionWrite(w SessionWrite) {
	if m == nil || w.Before == nil || w.After == nil {
		return
	}
	b, a := w.Before, w.After
	if b.Phase != a.Phase && a.Phase != "" {
		m.PhaseTransitions.WithLabelValues(orNone(string(b.Phase)), string(a.Phase)).Inc()
	}
	if b.StartTime == nil && a.StartTime != nil {
		checkout := w.Checkout
		if checkout == "" {
			checkout = CheckoutUnknown
		}
		m.TimeToRunning.WithLabelValues(string(checkout)).Observe(since(w.Created, a.StartTime.Time))
	}
	if b.PullRequest == nil && a.PullRequest != nil {
		m.TimeToPullRequest.Observe(since(w.Created, w.Now))
	}
	if b.Phase != agentsv1alpha1.PhaseMerged && a.Phase == agentsv1alpha1.PhaseMerged {
		at := w.Now
		if a.PhaseTransitionTime != nil {
			at = a.PhaseTransitionTime.Time
		}
		m.TimeToMerge.Observe(since(w.Created, at))
	}
	if a.Usage != nil && a.Usage.Source == agentsv1alpha1.UsageFromProxy && len(a.Usage.Models) > 0 {
		m.observeModels(string(a.Agent.Type), w.ConfiguredModel, b.Usage, a.Usage)
		return
	}
	m.observeUsage(string(a.Agent.Type), modelLabel(w.ConfiguredModel, a.Agent.Model), b.Usage, a.Usage)
}

// observeModels adds a metered session's spend model by model (the proxy's split), each model
// labelled as modelLabel bounds it. A model whose cost is unknown adds tokens only.
func (m *Metrics) observeModels(agent, configured string, before, after *agentsv1alpha1.UsageStatus) {
	prev := map[string]agentsv1alpha1.ModelUsageStatus{}
	if before != nil && before.Source == agentsv1alpha1.UsageFromProxy {
		for _, x := range before.Models {
			prev[x.Model] = x
		}
	}
	for _, x := range after.Models {
		p := prev[x.Model]
		label := modelLabel(configured, x.Model)
		if d := pricing.ParseUSD(x.CostUSD) - pricing.ParseUSD(p.CostUSD); d > 0 {
			m.AgentCost.WithLabelValues(agent, label).Add(d)
		}
		m.addTokens(agent, label, x.InputTokens-p.InputTokens, x.OutputTokens-p.OutputTokens, x.CacheReadTokens-p.CacheReadTokens, x.CacheWriteTokens-p.CacheWriteTokens)
	}
}

func (m *Metrics) addTokens(agent, model string, input, output, cacheRead, cacheWrite int64) {
	for _, k := range []struct {
		kind string
		d    int64
	}{{"input", input}, {"output", output}, {"cache_read", cacheRead}, {"cache_write", cacheWrite}} {
		if k.d > 0 {
			m.AgentTokens.WithLabelValues(agent, model, k.kind).Add(float64(k.d))
		}
	}
}

// observeUsage adds the spend between two usage snapshots. A snapshot that went down (an agent
// whose count restarted) adds nothing until it passes the old value.
func (m *Metrics) observeUsage(a, model string, before, after *agentsv1alpha1.UsageStatus) {
	if after == nil {
		return
	}
	var prev agentsv1alpha1.UsageStatus
	if before != nil {
		prev = *before
	}
	if d := pricing.ParseUSD(after.CostUSD) - pricing.ParseUSD(prev.CostUSD); d > 0 {
		m.AgentCost.WithLabelValues(a, model).Add(d)
	}
	m.addTokens(a, model, after.InputTokens-prev.InputTokens, after.OutputTokens-prev.OutputTokens, after.CacheReadTokens-prev.CacheReadTokens, after.CacheWriteTokens-prev.CacheWriteTokens)
}

// SetSessions sets one Project's sessions gauge from its counts by phase.
func (m *Metrics) SetSessions(namespace, project string, byPhase map[string]int32) {
	if m == nil {
		return
	}
	for _, p := range Phases {
		m.Sessions.WithLabelValues(namespace, project, string(p)).Set(float64(byPhase[string(p)]))
	}
	for p, n := range byPhase {
		m.Sessions.WithLabelValues(namespace, project, p).Set(float64(n))
	}
}

// ForgetProject drops the series of a deleted Project.
func (m *Metrics) ForgetProject(namespace, project string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"namespace": namespace, "project": project}
	m.Sessions.DeletePartialMatch(labels)
	m.BacklogQueries.DeletePartialMatch(labels)
	m.BacklogSpawned.DeletePartialMatch(labels)
}

// ObserveNotification counts one finished delivery.
func (m *Metrics) ObserveNotification(destination, outcome string) {
	if m == nil {
		return
	}
	m.Notifications.WithLabelValues(destination, outcome).Inc()
}

// ObserveRunnerReport counts one runner report by outcome.
func (m *Metrics) ObserveRunnerReport(outcome string) {
	if m == nil {
		return
	}
	m.RunnerReports.WithLabelValues(outcome).Inc()
}

// ObserveBacklogQuery counts one backlog query and the sessions it spawned.
func (m *Metrics) ObserveBacklogQuery(namespace, project, outcome string, spawned int) {
	if m == nil {
		return
	}
	m.BacklogQueries.WithLabelValues(namespace, project, outcome).Inc()
	if spawned > 0 {
		m.BacklogSpawned.WithLabelValues(namespace, project).Add(float64(spawned))
	}
}

func since(from, to time.Time) float64 {
	return max(to.Sub(from).Seconds(), 0)
}

func orNone(s string) string {
	if s == "" {
		return "None"
	}
	return s
}
