package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time {
	t := metav1.NewTime(t0.Add(d))
	return &t
}

func TestNewRegistersOnce(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Collectors()).To(HaveLen(12))
	_, err = New(reg)
	g.Expect(err).To(HaveOccurred(), "a second registration of the same names is refused")
	// Known outcomes are exported at 0 before anything happens.
	g.Expect(testutil.ToFloat64(m.RunnerReports.WithLabelValues(ReportAccepted))).To(BeZero())
	g.Expect(testutil.CollectAndCount(m.Notifications)).To(Equal(4))
}

func TestObserveSessionWrite(t *testing.T) {
	agent := agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode, Model: "claude-sonnet-4-5"}
	cases := []struct {
		name          string
		before, after agentsv1alpha1.AgentSessionStatus
		checkout      Checkout
		transitions   map[[2]string]float64
		running       map[Checkout]uint64
		pr, merge     uint64
		cost          float64
		input, output float64
	}{
		{
			name:        "a new session is queued",
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseQueued},
			transitions: map[[2]string]float64{{"None", "Queued"}: 1},
		},
		{
			name:        "an unchanged phase is no transition",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, StartTime: at(time.Minute)},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, StartTime: at(time.Minute), Summary: "x"},
			transitions: map[[2]string]float64{},
		},
		{
			name:        "the agent runs for the first time in a cold checkout",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseSpawning},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, StartTime: at(90 * time.Second)},
			checkout:    CheckoutCold,
			transitions: map[[2]string]float64{{"Spawning", "Working"}: 1},
			running:     map[Checkout]uint64{CheckoutCold: 1},
		},
		{
			name:     "a checkout nobody described is unknown",
			before:   agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseSpawning},
			after:    agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, StartTime: at(time.Second)},
			running:  map[Checkout]uint64{CheckoutUnknown: 1},
			checkout: "",
			transitions: map[[2]string]float64{
				{"Spawning", "Working"}: 1,
			},
		},
		{
			name:        "a restore is not a first run",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseSpawning, StartTime: at(time.Second)},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, StartTime: at(time.Second)},
			checkout:    CheckoutWarm,
			transitions: map[[2]string]float64{{"Spawning", "Working"}: 1},
		},
		{
			name:        "the pull request appears",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhasePROpen, PullRequest: &agentsv1alpha1.PullRequestStatus{Number: 7}},
			transitions: map[[2]string]float64{{"Working", "PROpen"}: 1},
			pr:          1,
		},
		{
			name:        "the pull request merges",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseMergeable, PullRequest: &agentsv1alpha1.PullRequestStatus{Number: 7}},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseMerged, PhaseTransitionTime: at(time.Hour), PullRequest: &agentsv1alpha1.PullRequestStatus{Number: 7}},
			transitions: map[[2]string]float64{{"Mergeable", "Merged"}: 1},
			merge:       1,
		},
		{
			name:        "spend adds the difference",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, Usage: &agentsv1alpha1.UsageStatus{CostUSD: "0.50", InputTokens: 100, OutputTokens: 10}},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, Usage: &agentsv1alpha1.UsageStatus{CostUSD: "1.25", InputTokens: 400, OutputTokens: 10}},
			transitions: map[[2]string]float64{},
			cost:        0.75, input: 300,
		},
		{
			name:        "a count that went down adds nothing",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, Usage: &agentsv1alpha1.UsageStatus{CostUSD: "2", InputTokens: 100}},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, Usage: &agentsv1alpha1.UsageStatus{CostUSD: "0.1", InputTokens: 5}},
			transitions: map[[2]string]float64{},
		},
		{
			name:        "the first usage counts whole",
			before:      agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking},
			after:       agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, Usage: &agentsv1alpha1.UsageStatus{CostUSD: "0.25", OutputTokens: 42}},
			transitions: map[[2]string]float64{},
			cost:        0.25, output: 42,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m, err := New(nil)
			g.Expect(err).NotTo(HaveOccurred())
			tc.after.Agent = agent
			m.ObserveSessionWrite(SessionWrite{Created: t0, Before: &tc.before, After: &tc.after, Checkout: tc.checkout, Now: t0.Add(10 * time.Minute),
				ConfiguredModel: "claude-sonnet-4-5"})
			// Every (from, to) series exists from the start, at 0 unless it happened.
			g.Expect(testutil.CollectAndCount(m.PhaseTransitions)).To(Equal(TransitionPairs))
			var total float64
			for k, v := range tc.transitions {
				g.Expect(testutil.ToFloat64(m.PhaseTransitions.WithLabelValues(k[0], k[1]))).To(Equal(v))
				total += v
			}
			g.Expect(sumCounter(t, m.PhaseTransitions)).To(Equal(total), "nothing else counted")
			for _, c := range []Checkout{CheckoutCold, CheckoutWarm, CheckoutUnknown} {
				g.Expect(histogramCount(t, m.TimeToRunning.WithLabelValues(string(c)))).To(Equal(tc.running[c]), "time to running, %s", c)
			}
			g.Expect(histogramCount(t, m.TimeToPullRequest)).To(Equal(tc.pr))
			g.Expect(histogramCount(t, m.TimeToMerge)).To(Equal(tc.merge))
			g.Expect(testutil.ToFloat64(m.AgentCost.WithLabelValues("claude-code", "claude-sonnet-4-5"))).To(BeNumerically("~", tc.cost, 1e-9))
			g.Expect(testutil.ToFloat64(m.AgentTokens.WithLabelValues("claude-code", "claude-sonnet-4-5", "input"))).To(Equal(tc.input))
			g.Expect(testutil.ToFloat64(m.AgentTokens.WithLabelValues("claude-code", "claude-sonnet-4-5", "output"))).To(Equal(tc.output))
		})
	}
}

func TestTimeToRunningMeasuresFromCreation(t *testing.T) {
	g := NewWithT(t)
	m, err := New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	m.ObserveSessionWrite(SessionWrite{Created: t0, Before: &agentsv1alpha1.AgentSessionStatus{},
		After: &agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking, StartTime: at(90 * time.Second)}, Checkout: CheckoutWarm})
	g.Expect(histogramSum(t, m.TimeToRunning.WithLabelValues("warm"))).To(Equal(90.0))
}

func TestSetSessions(t *testing.T) {
	g := NewWithT(t)
	m, err := New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	m.SetSessions("ns", "widgets", map[string]int32{"Working": 2, "Queued": 1})
	g.Expect(testutil.ToFloat64(m.Sessions.WithLabelValues("ns", "widgets", "Working"))).To(Equal(2.0))
	g.Expect(testutil.CollectAndCount(m.Sessions)).To(Equal(len(Phases)), "every phase is exported, 0 included")
	m.SetSessions("ns", "widgets", map[string]int32{"Merged": 3})
	g.Expect(testutil.ToFloat64(m.Sessions.WithLabelValues("ns", "widgets", "Working"))).To(BeZero())
	m.SetSessions("ns", "gadgets", map[string]int32{"Working": 1})
	m.ForgetProject("ns", "widgets")
	g.Expect(testutil.CollectAndCount(m.Sessions)).To(Equal(len(Phases)), "only gadgets is left")
}

func TestCountingClient(t *testing.T) {
	g := NewWithT(t)
	m, err := New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(agentsv1alpha1.AddToScheme(scheme)).To(Succeed())
	inner := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&agentsv1alpha1.AgentSession{}).Build()
	c := &CountingClient{Client: inner, M: m}
	ctx := context.Background()

	sess := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	g.Expect(c.Create(ctx, sess)).To(Succeed())
	orig := sess.DeepCopy()
	sess.Status.Phase = agentsv1alpha1.PhaseQueued
	g.Expect(c.Status().Patch(ctx, sess, client.MergeFrom(orig))).To(Succeed())
	orig = sess.DeepCopy()
	sess.Annotations = map[string]string{"x": "y"}
	g.Expect(c.Patch(ctx, sess, client.MergeFrom(orig))).To(Succeed())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	g.Expect(c.Create(ctx, pod)).To(Succeed())
	g.Expect(c.Delete(ctx, pod)).To(Succeed())
	g.Expect(c.Delete(ctx, pod)).NotTo(Succeed(), "a refused write still counts")
	var got agentsv1alpha1.AgentSession
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sess), &got)).To(Succeed())

	for _, w := range []struct {
		kind, verb, sub string
		n               float64
	}{
		{"agentsession", "create", "", 1}, {"agentsession", "patch", "status", 1}, {"agentsession", "patch", "", 1},
		{"pod", "create", "", 1}, {"pod", "delete", "", 2},
	} {
		g.Expect(testutil.ToFloat64(m.APIWrites.WithLabelValues(w.kind, w.verb, w.sub))).To(Equal(w.n), "%s %s %s", w.kind, w.verb, w.sub)
	}
	g.Expect(testutil.CollectAndCount(m.APIWrites)).To(Equal(5), "reads are not counted")
}

func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	return histogram(t, o).GetSampleCount()
}

func histogramSum(t *testing.T, o prometheus.Observer) float64 {
	t.Helper()
	return histogram(t, o).GetSampleSum()
}

func histogram(t *testing.T, o prometheus.Observer) *dto.Histogram {
	t.Helper()
	var out dto.Metric
	if err := o.(prometheus.Metric).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram()
}

// An agent reporting a new model name with every report leaves the series bounded: the
// configured model, "default" and "other".
func TestAttackRandomModelNamesKeepTheSeriesBounded(t *testing.T) {
	g := NewWithT(t)
	m, err := New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Now()
	for i := range 1000 {
		for _, configured := range []string{"claude-sonnet-4-5", ""} {
			before := agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking}
			after := agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseWorking,
				Agent: agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode, Model: fmt.Sprintf("model-%d-%s", i, strings.Repeat("x", i%50))},
				Usage: &agentsv1alpha1.UsageStatus{CostUSD: "0.01", InputTokens: 1, OutputTokens: 1}}
			m.ObserveSessionWrite(SessionWrite{Created: t0, Before: &before, After: &after, Now: t0, ConfiguredModel: configured})
		}
	}
	g.Expect(testutil.CollectAndCount(m.AgentCost)).To(Equal(2), "other (under the configured model) and default")
	g.Expect(testutil.ToFloat64(m.AgentCost.WithLabelValues("claude-code", ModelOther))).To(BeNumerically("~", 10, 1e-6))
	g.Expect(testutil.CollectAndCount(m.AgentTokens)).To(Equal(4))
	g.Expect(modelLabel("claude-sonnet-4-5", "claude-sonnet-4-5-20250929")).To(Equal("claude-sonnet-4-5"))
	g.Expect(modelLabel("claude-sonnet-4-5", "claude-sonnet-4-5")).To(Equal("claude-sonnet-4-5"))
	g.Expect(modelLabel("gpt-5", "claude")).To(Equal(ModelOther))
}

// sumCounter adds up every series of a counter vector.
func sumCounter(t *testing.T, c *prometheus.CounterVec) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, TransitionPairs+1)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

// The transitions counter starts with every series at 0, so that rate() and increase() see the
// first transition of each kind (a series born at 1 has no earlier sample to rise from).
func TestTransitionsStartAtZero(t *testing.T) {
	m, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.PhaseTransitions); n != TransitionPairs || n != 225 {
		t.Fatalf("%d transition series, want %d", n, TransitionPairs)
	}
	for _, k := range [][2]string{{"PROpen", "CIFailed"}, {"Mergeable", "Merged"}, {"None", "Queued"}, {"Working", "NeedsInput"}} {
		if v := testutil.ToFloat64(m.PhaseTransitions.WithLabelValues(k[0], k[1])); v != 0 {
			t.Errorf("%v starts at %v", k, v)
		}
	}
}

// TestMeteredSpendByModel: a metered session's spend is added model by model, from the proxy's
// split, with the model label bounded as for reported usage.
func TestMeteredSpendByModel(t *testing.T) {
	g := NewWithT(t)
	m, err := New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	before := &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, Models: []agentsv1alpha1.ModelUsageStatus{
		{Model: "claude-sonnet-4-5-20250929", InputTokens: 100, CostUSD: "1"}}}
	after := &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, Models: []agentsv1alpha1.ModelUsageStatus{
		{Model: "claude-sonnet-4-5-20250929", InputTokens: 300, CacheWriteTokens: 50, CostUSD: "1.5"},
		{Model: "my-llama", OutputTokens: 7}}}
	a := agentsv1alpha1.AgentSessionStatus{Agent: agentsv1alpha1.AgentStatus{Type: "claude-code"}, Usage: after}
	m.ObserveSessionWrite(SessionWrite{Before: &agentsv1alpha1.AgentSessionStatus{Usage: before}, After: &a, ConfiguredModel: "claude-sonnet-4-5"})
	g.Expect(testutil.ToFloat64(m.AgentCost.WithLabelValues("claude-code", "claude-sonnet-4-5"))).To(BeNumerically("~", 0.5, 1e-9))
	g.Expect(testutil.ToFloat64(m.AgentTokens.WithLabelValues("claude-code", "claude-sonnet-4-5", "input"))).To(Equal(200.0))
	g.Expect(testutil.ToFloat64(m.AgentTokens.WithLabelValues("claude-code", "claude-sonnet-4-5", "cache_write"))).To(Equal(50.0))
	g.Expect(testutil.ToFloat64(m.AgentTokens.WithLabelValues("claude-code", ModelOther, "output"))).To(Equal(7.0))
}
