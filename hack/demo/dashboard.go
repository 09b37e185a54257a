package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/shepherd-dev/shepherd/hack/dashboard"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// dashboardShot records the manager's metrics while the demo's session runs (--dashboard) and
// draws config/monitoring/grafana-dashboard.json from them into a PNG (docs/metrics.md).
type dashboardShot struct {
	png, chromium string
	rec           *dashboard.Recorder
	stop          context.CancelFunc
	done          chan struct{}
}

// scrapeEvery is the recorder's interval (Prometheus' own default is a minute; the demo lasts
// about one).
const scrapeEvery = 2 * time.Second

func startDashboard(ctx context.Context, cs kubernetes.Interface, png, chromium, dir string) (*dashboardShot, error) {
	scraper, err := scenario.NewMetricsScraper(ctx, cs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rec, err := dashboard.NewRecorder(filepath.Join(dir, "tsdb"), scraper.Scrape)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	d := &dashboardShot{png: png, chromium: chromium, rec: rec, stop: stop, done: make(chan struct{})}
	go func() { defer close(d.done); rec.Run(rctx, scrapeEvery) }()
	return d, nil
}

// finish stops recording, draws the dashboard and screenshots it; it returns what it did.
func (d *dashboardShot) finish(ctx context.Context, dir string) (string, error) {
	select { // two more scrapes: the last phase's metrics
	case <-time.After(2 * scrapeEvery):
	case <-ctx.Done():
	}
	d.stop()
	<-d.done
	defer func() { _ = d.rec.Close() }()
	start, end, scrapes, lastErr := d.rec.Window()
	if scrapes < 2 {
		return "", fmt.Errorf("the dashboard: %d scrapes of the manager's metrics (last error: %w)", scrapes, lastErr)
	}
	raw, err := os.ReadFile(filepath.Join("config", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		return "", err
	}
	db, err := dashboard.Parse(raw)
	if err != nil {
		return "", err
	}
	drawn := dashboard.Evaluate(ctx, db, d.rec.Queryable(), start, end, scrapeEvery)
	var page bytes.Buffer
	sub := fmt.Sprintf("config/monitoring/grafana-dashboard.json, each panel's PromQL on the manager's metrics scraped every %s during make run-local's demo session (%s, %d scrapes); drawn by hack/dashboard, not Grafana",
		scrapeEvery, end.Sub(start).Round(time.Second), scrapes)
	const width = 1600
	if err := dashboard.HTML(&page, db.Title, sub, drawn, width); err != nil {
		return "", err
	}
	html, err := filepath.Abs(filepath.Join(dir, "dashboard.html"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(html, page.Bytes(), 0o644); err != nil {
		return "", err
	}
	if err := dashboard.Screenshot(ctx, d.chromium, html, d.png, width, dashboard.Height(db)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (%d scrapes over %s; the page: %s)", d.png, scrapes, end.Sub(start).Round(time.Second), html), nil
}
