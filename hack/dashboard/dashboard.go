// Package dashboard records the manager's metrics while the demo runs and draws
// config/monitoring/grafana-dashboard.json from them: each panel's own PromQL, evaluated by the
// Prometheus engine over what was scraped, as an HTML page that headless Chromium turns into the
// screenshot in docs/metrics.md. It is a preview of the dashboard, not Grafana: the queries, the
// layout (gridPos), the legends and the units are the dashboard's; the drawing is ours.
package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

// Recorder scrapes metrics on an interval into a Prometheus TSDB in a temporary directory.
type Recorder struct {
	db     *tsdb.DB
	dir    string
	scrape func(context.Context) (string, error)

	mu         sync.Mutex
	start, end time.Time
	scrapes    int
	lastErr    error
}

// NewRecorder opens the TSDB in dir (a directory of its own, removed by Close).
func NewRecorder(dir string, scrape func(context.Context) (string, error)) (*Recorder, error) {
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = int64(24 * time.Hour / time.Millisecond)
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	if err != nil {
		return nil, err
	}
	return &Recorder{db: db, dir: dir, scrape: scrape}, nil
}

// Run scrapes every interval until ctx ends.
func (r *Recorder) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Recorder) once(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := r.scrape(sctx)
	now := time.Now()
	if err == nil {
		err = r.Append([]byte(body), now)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.lastErr = err
		return
	}
	if r.start.IsZero() {
		r.start = now
	}
	r.end = now
	r.scrapes++
}

// Append stores one scrape (Prometheus text exposition) at t.
func (r *Recorder) Append(body []byte, t time.Time) error {
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	app := r.db.Appender(context.Background())
	ms := t.UnixMilli()
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = app.Rollback()
			return err
		}
		if e != textparse.EntrySeries {
			continue
		}
		_, ts, v := p.Series()
		var l labels.Labels
		p.Labels(&l)
		at := ms
		if ts != nil {
			at = *ts
		}
		if _, err := app.Append(0, l, at, v); err != nil {
			_ = app.Rollback()
			return err
		}
	}
	return app.Commit()
}

// Window is the time the recorder has samples for, and how many scrapes it took.
func (r *Recorder) Window() (start, end time.Time, scrapes int, lastErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.start, r.end, r.scrapes, r.lastErr
}

// Queryable is what the recorder holds, for the Prometheus engine.
func (r *Recorder) Queryable() storage.Queryable { return r.db }

// Close closes the TSDB and removes its directory.
func (r *Recorder) Close() error {
	err := r.db.Close()
	return errors.Join(err, os.RemoveAll(r.dir))
}

// Dashboard is the part of a Grafana dashboard the preview draws.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is one panel of the dashboard.
type Panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// Series is one line of a panel: its legend and its points.
type Series struct {
	Legend string
	Points []promql.FPoint
}

// Drawn is a panel with what its queries returned.
type Drawn struct {
	Panel
	Series []Series
	Err    string
}

// grafanaVars are the dashboard's variables as the preview sets them: every namespace, the
// window as the range, a minute as the rate interval (four scrapes of a 15 s interval).
func grafanaVars(expr string, window time.Duration) string {
	r := strings.NewReplacer(`$namespace`, `.*`, `$__rate_interval`, `1m`, `$__interval`, `15s`,
		`$__range`, fmt.Sprintf("%ds", max(int(window.Seconds()), 60)))
	return r.Replace(expr)
}

var legendRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// legend fills a Grafana legend format ({{label}}) from a series' labels.
func legend(format string, l labels.Labels) string {
	if format == "" {
		return l.String()
	}
	return legendRE.ReplaceAllStringFunc(format, func(m string) string {
		return l.Get(legendRE.FindStringSubmatch(m)[1])
	})
}

// Evaluate runs every panel's queries over [start, end] with one point per step.
func Evaluate(ctx context.Context, d Dashboard, q storage.Queryable, start, end time.Time, step time.Duration) []Drawn {
	ng := promql.NewEngine(promql.EngineOpts{MaxSamples: 5_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	var out []Drawn
	for _, p := range d.Panels {
		dr := Drawn{Panel: p}
		for _, t := range p.Targets {
			qry, err := ng.NewRangeQuery(ctx, q, nil, grafanaVars(t.Expr, end.Sub(start)), start, end, step)
			if err != nil {
				dr.Err = err.Error()
				continue
			}
			res := qry.Exec(ctx)
			if res.Err != nil {
				dr.Err = res.Err.Error()
				qry.Close()
				continue
			}
			m, err := res.Matrix()
			if err == nil {
				for _, s := range m {
					// A copy: the engine pools its point slices and reuses them once the query closes.
					dr.Series = append(dr.Series, Series{Legend: legend(t.LegendFormat, s.Metric), Points: append([]promql.FPoint(nil), s.Floats...)})
				}
			}
			qry.Close()
		}
		sort.SliceStable(dr.Series, func(i, j int) bool { return dr.Series[i].Legend < dr.Series[j].Legend })
		out = append(out, dr)
	}
	return out
}

// format prints v in a Grafana unit.
func format(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	switch unit {
	case "s":
		if v >= 60 {
			return fmt.Sprintf("%.1f min", v/60)
		}
		return fmt.Sprintf("%.1f s", v)
	case "percentunit":
		return fmt.Sprintf("%.0f%%", v*100)
	case "currencyUSD":
		return fmt.Sprintf("$%.2f", v)
	case "ops", "reqps":
		return fmt.Sprintf("%.3g/s", v)
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

var palette = []string{"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#37872d", "#e0b400"}

// polylines draws a panel's series as SVG polylines in a w×h box.
func polylines(series []Series, w, h float64) (lines []template.HTML, lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	var t0, t1 int64 = math.MaxInt64, math.MinInt64
	for _, s := range series {
		for _, p := range s.Points {
			if math.IsNaN(p.F) || math.IsInf(p.F, 0) {
				continue
			}
			lo, hi = math.Min(lo, p.F), math.Max(hi, p.F)
			t0, t1 = min(t0, p.T), max(t1, p.T)
		}
	}
	if math.IsInf(lo, 1) {
		return nil, 0, 0, false
	}
	lo = math.Min(lo, 0)
	if hi == lo {
		hi = lo + 1
	}
	if t1 == t0 {
		t1 = t0 + 1
	}
	for i, s := range series {
		var pts []string
		for _, p := range s.Points {
			if math.IsNaN(p.F) || math.IsInf(p.F, 0) {
				continue
			}
			x := float64(p.T-t0) / float64(t1-t0) * w
			y := h - (p.F-lo)/(hi-lo)*h
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		lines = append(lines, template.HTML(fmt.Sprintf(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, //nolint:gosec // numbers and a palette color only
			palette[i%len(palette)], strings.Join(pts, " "))))
	}
	return lines, lo, hi, true
}

func last(s Series) float64 {
	for i := len(s.Points) - 1; i >= 0; i-- {
		if !math.IsNaN(s.Points[i].F) {
			return s.Points[i].F
		}
	}
	return math.NaN()
}

// view is one panel as the page template draws it.
type view struct {
	Drawn
	Kind            string // chart, stat or table
	Lines           []template.HTML
	Min, Max, Stat  string
	Legends         []legendRow
	Col, Row, W, H  int
	Empty, HasChart bool
	PlotW, PlotH    float64
	TableRows       []legendRow
	ErrText         string
}

type legendRow struct {
	Color, Name, Value string
}

// rowPx is Grafana's grid row height; a column is 1/24 of the page.
const rowPx = 30

// HTML draws the panels as a page width pixels wide.
func HTML(w io.Writer, title, subtitle string, drawn []Drawn, width int) error {
	colPx := float64(width-16) / 24
	var views []view
	for _, d := range drawn {
		v := view{Drawn: d, Col: d.GridPos.X + 1, Row: d.GridPos.Y + 1, W: d.GridPos.W, H: d.GridPos.H, ErrText: d.Err}
		v.PlotW, v.PlotH = colPx*float64(d.GridPos.W)-90, float64(d.GridPos.H*rowPx)-90
		unit := d.FieldConfig.Defaults.Unit
		for i, s := range d.Series {
			v.Legends = append(v.Legends, legendRow{palette[i%len(palette)], s.Legend, format(last(s), unit)})
		}
		switch d.Type {
		case "stat":
			v.Kind = "stat"
			total := 0.0
			for _, s := range d.Series {
				if x := last(s); !math.IsNaN(x) {
					total += x
				}
			}
			v.Stat = format(total, unit)
			if len(d.Series) == 0 {
				v.Stat = format(0, unit)
			}
		case "table":
			v.Kind = "table"
			v.TableRows = v.Legends
		default:
			v.Kind = "chart"
			lines, lo, hi, ok := polylines(d.Series, v.PlotW, v.PlotH)
			v.Lines, v.HasChart = lines, ok
			v.Min, v.Max = format(lo, unit), format(hi, unit)
		}
		v.Empty = len(d.Series) == 0
		views = append(views, v)
	}
	return page.Execute(w, map[string]any{"Title": title, "Subtitle": subtitle, "Views": views, "Width": width, "RowPx": rowPx})
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { margin: 0; background: #111217; color: #ccccdc; font: 13px/1.3 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; width: {{.Width}}px; }
header { padding: 10px 8px 4px; } h1 { font-size: 18px; margin: 0; color: #fff; } .sub { color: #8e8e99; font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(24, 1fr); grid-auto-rows: {{.RowPx}}px; gap: 6px; padding: 8px; }
.panel { background: #181b1f; border: 1px solid #2c3235; border-radius: 3px; padding: 6px 8px; overflow: hidden; position: relative; }
.panel h2 { font-size: 13px; margin: 0 0 4px; color: #d8d9da; font-weight: 500; }
.stat { font-size: 52px; color: #73bf69; text-align: center; margin-top: 40px; font-weight: 500; }
.axis { position: absolute; left: 8px; font-size: 10px; color: #8e8e99; }
.legend { font-size: 11px; color: #ccccdc; max-height: 48px; overflow: hidden; }
.legend span.sw { display: inline-block; width: 10px; height: 3px; margin: 0 4px 2px 0; vertical-align: middle; }
.legend div { display: inline-block; margin-right: 12px; white-space: nowrap; }
table { width: 100%; border-collapse: collapse; font-size: 12px; } td, th { border-bottom: 1px solid #2c3235; padding: 4px; text-align: left; }
.nodata { color: #8e8e99; text-align: center; margin-top: 60px; } .err { color: #f2495c; font-size: 11px; }
svg { display: block; margin-left: 56px; }
</style></head><body>
<header><h1>{{.Title}}</h1><div class="sub">{{.Subtitle}}</div></header>
<div class="grid">
{{range .Views}}<div class="panel" style="grid-column: {{.Col}} / span {{.W}}; grid-row: {{.Row}} / span {{.H}};">
<h2>{{.Title}}</h2>
{{if .ErrText}}<div class="err">{{.ErrText}}</div>{{end}}
{{if eq .Kind "stat"}}<div class="stat">{{.Stat}}</div>
{{else if eq .Kind "table"}}{{if .Empty}}<div class="nodata">No data</div>{{else}}<table><tr><th>Series</th><th>Value</th></tr>{{range .TableRows}}<tr><td>{{.Name}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{else}}{{if .HasChart}}<div class="axis" style="top: 28px">{{.Max}}</div><div class="axis" style="top: {{printf "%.0f" .PlotH}}px; margin-top: 22px">{{.Min}}</div>
<svg width="{{printf "%.0f" .PlotW}}" height="{{printf "%.0f" .PlotH}}" viewBox="0 0 {{printf "%.0f" .PlotW}} {{printf "%.0f" .PlotH}}"><rect width="100%" height="100%" fill="none" stroke="#2c3235"/>{{range .Lines}}{{.}}{{end}}</svg>
<div class="legend">{{range .Legends}}<div><span class="sw" style="background: {{.Color}}"></span>{{.Name}} {{.Value}}</div>{{end}}</div>
{{else}}<div class="nodata">No data</div>{{end}}{{end}}
</div>
{{end}}</div></body></html>
`))

// Screenshot renders the page at htmlPath with headless Chromium into pngPath.
func Screenshot(ctx context.Context, chromium, htmlPath, pngPath string, width, height int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	profile, err := os.MkdirTemp("", "chromium-profile-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(profile) }()
	// The flags that keep Chromium off the network (this machine has none) and out of the way.
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir="+profile, fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+pngPath, "file://"+htmlPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chromium: %w: %s", err, out)
	}
	if _, err := os.Stat(pngPath); err != nil {
		return fmt.Errorf("chromium wrote no screenshot: %w: %s", err, out)
	}
	return nil
}

// Parse reads a dashboard.
func Parse(raw []byte) (Dashboard, error) {
	var d Dashboard
	err := json.Unmarshal(raw, &d)
	return d, err
}

// Height is the page's height in pixels for the panels.
func Height(d Dashboard) int {
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	return 60 + rows*(rowPx+6) + 16
}
