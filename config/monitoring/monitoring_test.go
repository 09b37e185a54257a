package monitoring

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/promqltest"
)

// Every expression parses, and names at least one metric.
func TestEveryExpressionParses(t *testing.T) {
	exprs, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 20 {
		t.Fatalf("%d expressions; the dashboard and the alerts hold more", len(exprs))
	}
	for _, e := range exprs {
		names, err := MetricNames(e.Expr)
		if err != nil {
			t.Errorf("%s: %q: %v", e.Source, e.Expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s names no metric", e.Source)
		}
	}
	if _, err := MetricNames(`sum(rate(x[5m])`); err == nil {
		t.Fatal("a broken expression parsed")
	}
}

// Every alert has a severity, a summary and a description, and a for duration.
func TestAlertsAreComplete(t *testing.T) {
	alerts, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if a.Labels["severity"] == "" || a.Annotations["summary"] == "" || a.Annotations["description"] == "" || a.For == "" {
			t.Errorf("%s: severity, summary, description and for are all required", a.Alert)
		}
	}
}

var alertRef = regexp.MustCompile(`ALERT\(([A-Za-z]+)\)`)

// testdata/alerts.promqltest runs on the Prometheus engine with each ALERT(Name) replaced by the
// alert's expression; every alert has a firing case and a quiet one.
func TestAlertsOnSyntheticSeries(t *testing.T) {
	alerts, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, a := range alerts {
		exprs[a.Alert] = strings.Join(strings.Fields(a.Expr), " ")
	}
	raw, err := os.ReadFile("testdata/alerts.promqltest")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	fires, quiet := map[string]bool{}, map[string]bool{}
	for i, line := range lines {
		m := alertRef.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(line, "eval ") {
			continue
		}
		e, ok := exprs[m[1]]
		if !ok {
			t.Fatalf("testdata/alerts.promqltest:%d: no alert %s", i+1, m[1])
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  ") {
			fires[m[1]] = true
		} else {
			quiet[m[1]] = true
		}
		lines[i] = strings.Replace(line, m[0], e, 1)
	}
	for name := range exprs {
		if !fires[name] || !quiet[name] {
			t.Errorf("%s: testdata/alerts.promqltest needs a case where it fires and one where it is quiet", name)
		}
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	promqltest.RunTest(t, strings.Join(lines, "\n"), engine)
}
