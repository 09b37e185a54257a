// Package monitoring holds Shepherd's Prometheus Operator objects and Grafana dashboard
// (config/monitoring) and reads their PromQL: every alert's expression and every dashboard
// query, with Grafana's variables replaced by values Prometheus accepts. Tests parse each with
// the Prometheus parser, run the alerts on synthetic series with the Prometheus engine, and the
// controller suite checks every metric named against the manager's registry.
package monitoring

import (
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// Files are the kustomization's files.
//
//go:embed prometheus-rule.yaml grafana-dashboard.json servicemonitor.yaml kustomization.yaml
var Files embed.FS

// Expression is one PromQL expression and where it is.
type Expression struct {
	Source string // "alert ShepherdManagerDown", "panel 4 (Time to pull request) A"
	Expr   string
}

// Alert is one rule of the PrometheusRule.
type Alert struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// Alerts are the PrometheusRule's rules.
func Alerts() ([]Alert, error) {
	b, err := Files.ReadFile("prometheus-rule.yaml")
	if err != nil {
		return nil, err
	}
	var rule struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   any    `json:"metadata"`
		Spec       struct {
			Groups []struct {
				Name  string  `json:"name"`
				Rules []Alert `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &rule); err != nil {
		return nil, fmt.Errorf("prometheus-rule.yaml: %w", err)
	}
	var out []Alert
	for _, g := range rule.Spec.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// Dashboard is the part of the Grafana dashboard that holds queries.
type Dashboard struct {
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// ReadDashboard decodes grafana-dashboard.json.
func ReadDashboard() (Dashboard, error) {
	var d Dashboard
	b, err := Files.ReadFile("grafana-dashboard.json")
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(b, &d)
}

// grafanaVariables are what Grafana substitutes before a query reaches Prometheus.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h", `"$namespace"`, `".*"`,
)

// labelValues is Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// Expressions are every alert expression and dashboard query, as Prometheus receives them. A
// variable query label_values(m, l) contributes the selector m.
func Expressions() ([]Expression, error) {
	alerts, err := Alerts()
	if err != nil {
		return nil, err
	}
	var out []Expression
	for _, a := range alerts {
		out = append(out, Expression{Source: "alert " + a.Alert, Expr: strings.TrimSpace(a.Expr)})
	}
	d, err := ReadDashboard()
	if err != nil {
		return nil, err
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, Expression{Source: fmt.Sprintf("panel %d (%s) %s", p.ID, p.Title, t.RefID), Expr: grafanaVariables.Replace(t.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if v.Type != "query" || !ok {
			continue
		}
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, s)
		}
		out = append(out, Expression{Source: "variable " + v.Name, Expr: m[1]})
	}
	return out, nil
}

var promql = parser.NewParser(parser.Options{})

// Parse parses e with the Prometheus parser.
func Parse(e string) (parser.Expr, error) { return promql.ParseExpr(e) }

// MetricNames are the metric names e selects, sorted.
func MetricNames(e string) ([]string, error) {
	expr, err := Parse(e)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			seen[vs.Name] = true
		}
		return nil
	})
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// histogramSuffixes are the series names a histogram exposes besides its own.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// BaseName is the metric a series name belongs to: a histogram's _bucket, _sum and _count are
// its name's when known holds that name.
func BaseName(series string, known func(string) bool) string {
	if known(series) {
		return series
	}
	for _, s := range histogramSuffixes {
		if b, ok := strings.CutSuffix(series, s); ok && known(b) {
			return b
		}
	}
	return series
}
