package controller_test

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/config/monitoring"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// docMetric is one row of a table in docs/metrics.md.
type docMetric struct{ name, typ string }

var docRow = regexp.MustCompile("^\\| `([a-z_:]+)` \\| (counter|gauge|histogram) \\|")

// documentedMetrics parses the metric tables of docs/metrics.md.
func documentedMetrics() []docMetric {
	GinkgoHelper()
	f, err := os.Open(filepath.Join(repoRoot(), "docs", "metrics.md"))
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	var out []docMetric
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := docRow.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, docMetric{name: m[1], typ: m[2]})
		}
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return out
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// collectorNames are the names of the metrics a collector describes, registered or not.
func collectorNames(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	var out []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// exportedShepherdMetrics are the names of every metric Shepherd's code defines: the manager's
// own and the SCM ones (every exported collector field of scm.Metrics).
func exportedShepherdMetrics() []string {
	var out []string
	for _, c := range mgr.deps.Metrics.Collectors() {
		out = append(out, collectorNames(c)...)
	}
	v := reflect.ValueOf(mgr.deps.SCMMetrics).Elem()
	for i := range v.NumField() {
		if c, ok := v.Field(i).Interface().(prometheus.Collector); ok {
			out = append(out, collectorNames(c)...)
		}
	}
	sort.Strings(out)
	return out
}

// gather reads the manager's registry.
func gather() map[string]*dto.MetricFamily {
	fams, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// sample sums the series of a family whose labels include want: a counter's or gauge's value, a
// histogram's sample count. ok is false when no series matches.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, w := range want {
			if labels[k] != w {
				match = false
			}
		}
		if !match {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, ok
}

// movement is how a metric shows its event: the series to look at, and what moving means.
type movement struct {
	labels map[string]string
	// moved compares the series before and after the events; nil: the sum grew.
	moved func(before float64, hadBefore bool, after float64) bool
}

// changed: a gauge appeared or took another value.
func changed(before float64, hadBefore bool, after float64) bool {
	return !hadBefore || before != after
}

// atLeastOne: a gauge counts what the test made.
func atLeastOne(_ float64, _ bool, after float64) bool { return after >= 1 }

var _ = Describe("Metrics", Serial, func() {
	It("exports every metric docs/metrics.md names and nothing it does not, and each moves when its event happens", func() {
		doc := documentedMetrics()
		Expect(doc).NotTo(BeEmpty())
		var documented []string
		for _, d := range doc {
			if strings.HasPrefix(d.name, "shepherd_") {
				documented = append(documented, d.name)
			}
		}
		By("the doc names exactly the shepherd_* metrics the code defines")
		Expect(exportedShepherdMetrics()).To(ConsistOf(documented))

		w := newWorld()
		const model = "claude-test"
		// openItems is what the pollers follow while the session's pull request is open; a merged
		// session is let go.
		var openItems float64
		moves := map[string]movement{
			"shepherd_sessions":                             {labels: map[string]string{"namespace": w.ns}, moved: atLeastOne},
			"shepherd_session_phase_transitions_total":      {labels: map[string]string{"from": "Spawning", "to": "Working"}},
			"shepherd_session_time_to_running_seconds":      {labels: map[string]string{"checkout": "cold"}},
			"shepherd_session_time_to_pull_request_seconds": {},
			"shepherd_session_time_to_merge_seconds":        {},
			"shepherd_api_writes_total":                     {labels: map[string]string{"kind": "agentsession", "verb": "create"}},
			"shepherd_agent_cost_usd_total":                 {labels: map[string]string{"agent": "claude-code", "model": model}},
			"shepherd_agent_tokens_total":                   {labels: map[string]string{"agent": "claude-code", "model": model, "kind": "input"}},
			"shepherd_runner_reports_total":                 {labels: map[string]string{"outcome": "accepted"}},
			"shepherd_notifications_total":                  {labels: map[string]string{"type": "webhook", "outcome": "delivered"}},
			"shepherd_backlog_queries_total":                {labels: map[string]string{"namespace": w.ns, "outcome": "ok"}},
			"shepherd_backlog_sessions_spawned_total":       {labels: map[string]string{"namespace": w.ns}},
			"shepherd_scm_requests_total":                   {labels: map[string]string{"op": "issues.list"}},
			"shepherd_scm_rest_not_modified_total":          {},
			"shepherd_scm_graphql_points_total":             {},
			"shepherd_scm_ratelimit_remaining":              {moved: changed},
			"shepherd_scm_ratelimit_waits_total":            {labels: map[string]string{"reason": "secondary"}},
			"shepherd_scm_ratelimit_wait_seconds_total":     {labels: map[string]string{"reason": "secondary"}},
			"shepherd_scm_webhook_deliveries_total":         {labels: map[string]string{"outcome": "accepted"}},
			"shepherd_scm_poller_items":                     {moved: func(_ float64, _ bool, after float64) bool { return after < openItems }},
			"shepherd_scm_poller_max_age_seconds":           {moved: changed},
			"controller_runtime_reconcile_time_seconds":     {labels: map[string]string{"controller": "project"}},
			"controller_runtime_reconcile_errors_total":     {labels: map[string]string{"controller": "project"}},
			"controller_runtime_reconcile_total":            {labels: map[string]string{"controller": "agentsession"}},
		}
		for _, d := range doc {
			Expect(moves).To(HaveKey(d.name), "docs/metrics.md names %s: drive its event in this test", d.name)
		}
		before := gather()

		By("a labelled issue becomes a backlog session (queries, spawns, API writes, forge requests)")
		rcv := newReceiver("s3cret", http.StatusOK)
		issue := w.issue("Measure everything", "agent", "ready")
		// The configured model bounds the model label (an agent reports what it likes).
		create(w.backlogProject(1).With(withWebhook(w, rcv.URL)).With(func(s *agentsv1alpha1.ProjectSpec) { s.Agent.Model = model }).Obj())
		Eventually(backlogSessions(w.ns)).Should(ConsistOf("widgets-" + issue))

		By("its agent starts in a cold checkout and reports its spend")
		a := w.backlogAgent("widgets-" + issue)
		a.prepare = prepared(a.br)
		a.prepare.FullFetch = true
		a.start()
		a.report(agentsv1alpha1.ActivityActive, func(r *runnerapi.Report) {
			r.Agent = &runnerapi.AgentReport{Model: model}
			r.Usage = &runnerapi.Usage{CostUSD: "0.42", InputTokens: 1000, OutputTokens: 200}
		})
		a.expect(agentsv1alpha1.PhaseWorking)
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Usage.CostUSD", "0.42"))

		By("its pull request opens (webhooks, GraphQL polling) and merges (a notification)")
		a.openPR()
		a.report(agentsv1alpha1.ActivityReady)
		a.expect(agentsv1alpha1.PhaseMergeable)
		Eventually(func() float64 {
			openItems, _ = sample(gather(), "shepherd_scm_poller_items", nil)
			return openItems
		}).Should(BeNumerically(">=", 1), "the poller follows the open pull request")
		_, err := gh.Merge(w.full, a.pr, "squash")
		Expect(err).NotTo(HaveOccurred())
		a.expect(agentsv1alpha1.PhaseMerged)
		Eventually(rcv.types).Should(ContainElement(string(agentsv1alpha1.EventPRMerged)))

		By("asked twice, the unchanged repository and backlog are answered 304")
		w.requery()
		w.requery()

		By("GitHub imposes a secondary rate limit on the next request: it waits and retries")
		gh.ForceSecondaryLimit(1, http.StatusTooManyRequests, time.Second)
		w.requery()

		By("the API server refuses to recreate a Project's agent ServiceAccount (its namespace is being deleted): the reconcile returns the error")
		q := newWorld()
		create(q.project().Obj())
		Eventually(projectConditions(q.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		// envtest runs no namespace controller: the namespace stays Terminating and refuses new objects.
		Expect(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: q.ns}})).To(Succeed())
		deleteIfExists(&corev1.ServiceAccount{ObjectMeta: objMeta(q.ns, "widgets-agent")})

		for _, d := range doc {
			mv := moves[d.name]
			was, had := sample(before, d.name, mv.labels)
			Eventually(func(g Gomega) {
				fams := gather()
				g.Expect(fams).To(HaveKey(d.name), "%s is exported", d.name)
				g.Expect(strings.ToLower(fams[d.name].GetType().String())).To(Equal(d.typ), "%s is a %s", d.name, d.typ)
				now, ok := sample(fams, d.name, mv.labels)
				g.Expect(ok).To(BeTrue(), "%s has a series with labels %v", d.name, mv.labels)
				moved := mv.moved
				if moved == nil {
					moved = func(b float64, _ bool, a float64) bool { return a > b }
				}
				g.Expect(moved(was, had, now)).To(BeTrue(), "%s%v moved: before %v (present %v), now %v", d.name, mv.labels, was, had, now)
			}).Should(Succeed())
		}
		for name := range gather() {
			if strings.HasPrefix(name, "shepherd_") {
				Expect(documented).To(ContainElement(name), "the manager exports %s: document it in docs/metrics.md", name)
			}
		}
	})

	It("exports every metric config/monitoring's alerts and dashboard name", func() {
		known := map[string]bool{"up": true} // up: Prometheus's own series per scrape target
		for _, n := range exportedShepherdMetrics() {
			known[n] = true
		}
		for n := range gather() {
			known[n] = true
		}
		// controller-runtime's metrics are registered whether or not they have a series yet (the
		// work queue's depth has none while its queue is empty): registering a name already taken
		// fails, so a probe tells.
		isKnown := func(name string) bool {
			if known[name] {
				return true
			}
			probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe"})
			if ctrlmetrics.Registry.Register(probe) != nil {
				return true
			}
			ctrlmetrics.Registry.Unregister(probe)
			return false
		}
		exprs, err := monitoring.Expressions()
		Expect(err).NotTo(HaveOccurred())
		Expect(exprs).NotTo(BeEmpty())
		for _, e := range exprs {
			names, err := monitoring.MetricNames(e.Expr)
			Expect(err).NotTo(HaveOccurred(), e.Source)
			for _, n := range names {
				Expect(isKnown(monitoring.BaseName(n, isKnown))).To(BeTrue(), "%s names %s, which the manager does not export", e.Source, n)
			}
		}
	})
})
