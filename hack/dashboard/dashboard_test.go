package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// scrape is a manager's exposition at minute i of a session's life: Working, then PROpen, then
// Merged, with the histograms and counters the panels read.
func scrape(i int) string {
	phase := map[bool]string{true: "Working", false: "PROpen"}[i < 3]
	if i >= 6 {
		phase = "Merged"
	}
	merged := 0
	if i >= 6 {
		merged = 1
	}
	return fmt.Sprintf(`# TYPE shepherd_sessions gauge
shepherd_sessions{namespace="demo",project="greeter",phase=%q} 1
# TYPE shepherd_session_phase_transitions_total counter
shepherd_session_phase_transitions_total{namespace="demo",project="greeter",to="Merged"} %d
# TYPE shepherd_scm_requests_total counter
shepherd_scm_requests_total{provider="github",outcome="ok"} %d
# TYPE workqueue_depth gauge
workqueue_depth{name="agentsession"} %d
`, phase, merged, 10*i, i%2)
}

func TestEvaluatesTheDashboardsOwnQueries(t *testing.T) {
	g := NewWithT(t)
	r, err := NewRecorder(t.TempDir(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(r.Close()).To(Succeed()) }()
	start := time.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	// Every 15 s (Prometheus' usual interval): scrape(i) is the state at minute i.
	for i := range 40 {
		g.Expect(r.Append([]byte(scrape(i/4)), start.Add(time.Duration(i)*15*time.Second))).To(Succeed())
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "config", "monitoring", "grafana-dashboard.json"))
	g.Expect(err).NotTo(HaveOccurred())
	d, err := Parse(raw)
	g.Expect(err).NotTo(HaveOccurred())
	drawn := Evaluate(context.Background(), d, r.Queryable(), start, start.Add(9*time.Minute), 30*time.Second)
	g.Expect(drawn).To(HaveLen(len(d.Panels)))
	byTitle := map[string]Drawn{}
	for _, p := range drawn {
		g.Expect(p.Err).To(BeEmpty(), p.Title)
		byTitle[p.Title] = p
	}
	var legends []string
	for _, s := range byTitle["Sessions by phase"].Series {
		legends = append(legends, s.Legend)
	}
	g.Expect(legends).To(ConsistOf("Merged", "PROpen", "Working"), "the legend format {{phase}} filled from the series")
	g.Expect(byTitle["Forge requests by outcome"].Series).To(HaveLen(1))
	g.Expect(byTitle["Forge requests by outcome"].Series[0].Legend).To(Equal("github ok"))

	var page bytes.Buffer
	g.Expect(HTML(&page, "Shepherd", "the demo", drawn, 1600)).To(Succeed())
	html := page.String()
	for _, p := range d.Panels {
		g.Expect(html).To(ContainSubstring(strings.ReplaceAll(p.Title, "&", "&amp;")))
	}
	g.Expect(strings.Count(html, "<polyline")).To(BeNumerically(">=", 5))
	// Merged (range): one merge (increase() extrapolates to the window's edges, as in Grafana).
	g.Expect(html).To(MatchRegexp(`<h2>Merged \(range\)</h2>\s*<div class="stat">1(\.0\d*)?</div>`))
	g.Expect(Height(d)).To(BeNumerically(">", 1000))
}
