package scm_test

// The SCM economy benchmark: 1000 open pull requests on the fake GitHub, one simulated hour of
// activity (pushes, CI runs, reviews, review threads, merges), the clock compressed. It measures,
// in the same run and on the same activity:
//
//   - naive: a per-PR REST poll every minute (the pull, its check runs, its combined status and
//     its reviews: what a `gh pr view` / `gh pr checks` loop does), without ETags;
//   - polling: Shepherd's Poller, no webhooks, poll interval 1m;
//   - webhooks: the Poller fed by the webhook handler (signed deliveries from the fake).
//
// The world, the schedule and the three runs live in internal/scm/scmtest/economy, shared with
// the same measurement through the whole manager (test/bench/scmmanager). Run it with:
//
//	go test ./internal/scm/ -run '^$' -bench BenchmarkSCMEconomy -benchtime 1x -timeout 30m
//
// It then measures the first reads of a fan-out (-scm.fanout new sessions, default 1000,
// registered at 10 a second with no pull request yet) against one lookup per session.
//
// Flags: -scm.prs (default 1000), -scm.minutes (default 60), -scm.fanout. A full run takes about
// 4½ minutes on 2 cores, most of it serving the naive poll's 240,000 requests.

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm/scmtest/economy"
)

var (
	benchPRs     = flag.Int("scm.prs", 1000, "open pull requests in the SCM economy benchmark")
	benchMinutes = flag.Int("scm.minutes", 60, "simulated minutes in the SCM economy benchmark")
	benchFanOut  = flag.Int("scm.fanout", 1000, "new sessions registered in the fan-out part of the SCM economy benchmark (0: skip it)")
)

func BenchmarkSCMEconomy(b *testing.B) {
	prs, seconds := *benchPRs, *benchMinutes*60
	acts := economy.Schedule(prs, seconds)
	for i := 0; i < b.N; i++ {
		naive := economy.RunNaive(b, prs, seconds, acts)
		polling := economy.RunPoller(b, "Shepherd, polling only", prs, seconds, acts, false)
		hooks := economy.RunPoller(b, "Shepherd, webhooks", prs, seconds, acts, true)
		prHours := float64(prs) * float64(seconds) / 3600
		out := os.Stdout
		fmt.Fprintf(out, "\nSCM economy: %d open pull requests, %d simulated minutes, %d changes (poll interval 1m)\n", prs, seconds/60, len(acts))
		fmt.Fprintf(out, "%-24s %10s %8s %8s %8s %10s %11s %10s %9s %13s %9s\n", "", "REST", "304s", "GQL q", "GQL pts",
			"counted", "per PR-h", "vs naive", "max age", "change p50/95", "max lat")
		for _, r := range []economy.Result{naive, polling, hooks} {
			per := float64(r.Counted()) / prHours
			fmt.Fprintf(out, "%-24s %10d %8d %8d %8d %10d %11.3f %9.2f%% %9s %6s/%-6s %9s\n", r.Name, r.REST, r.NotMod, r.GQLQueries, r.GQLPoints,
				r.Counted(), per, 100*float64(r.Counted())/float64(naive.Counted()), r.MaxAge, r.LatencyP50, r.LatencyP95, r.LatencyMax)
		}
		fmt.Fprintf(out, "webhook deliveries: %d; changes never observed: polling %d, webhooks %d\n", hooks.Webhooks, polling.MissedChanges, hooks.MissedChanges)
		// With webhooks, what a delivery states is seen as it arrives (its facts); what it does
		// not (a review decision, a failed job's log, a thread) is read within the hint delay.
		fmt.Fprintf(out, "with webhooks, change → first seen, by kind:")
		kinds := make([]string, 0, len(hooks.ByKind))
		for k := range hooks.ByKind {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			v := hooks.ByKind[k]
			fmt.Fprintf(out, " %s n=%d p50=%s max=%s;", strings.TrimSuffix(k, "/"), len(v), v[len(v)/2], v[len(v)-1])
		}
		fmt.Fprintf(out, "\n\n")
		if *benchFanOut > 0 {
			// A fan-out: the sessions' first reads, registered at 10 a second (a fast manager's
			// pace in make bench-fanout), against one lookup each.
			const perSecond = 10
			fanNaive := economy.RunFanOutNaive(b, *benchFanOut, perSecond)
			fan := economy.RunFanOutPoller(b, *benchFanOut, perSecond)
			fmt.Fprintf(out, "SCM economy of a fan-out: %d new sessions (no pull request yet) registered at %d a second\n", *benchFanOut, perSecond)
			fmt.Fprintf(out, "%-24s %10s %8s %8s %10s %12s %9s %20s\n", "", "REST", "GQL q", "GQL pts", "counted", "per session", "vs naive", "first read p50/p99/max")
			for _, r := range []economy.FanOut{fanNaive, fan} {
				fmt.Fprintf(out, "%-24s %10d %8d %8d %10d %12.3f %8.2f%% %20s\n", r.Name, r.REST, r.GQLQueries, r.GQLPoints, r.Counted(),
					float64(r.Counted())/float64(r.Sessions), 100*float64(r.Counted())/float64(fanNaive.Counted()),
					fmt.Sprintf("%s/%s/%s", r.FirstReadP50, r.FirstReadP99, r.FirstReadMax))
			}
			fmt.Fprintln(out)
			b.ReportMetric(float64(fan.Counted())/float64(fan.Sessions), "fanout-counted/session")
			if per := float64(fan.Counted()) / float64(fan.Sessions); per > 0.1 || fan.FirstReadMax > 2*time.Second {
				b.Errorf("fan-out: %.3f counted requests per session (target ≤ 0.1), first read at worst %s after registration (target ≤ 2s)", per, fan.FirstReadMax)
			}
		}
		b.ReportMetric(float64(polling.Counted())/prHours, "polling-counted/PR-h")
		b.ReportMetric(float64(hooks.Counted())/prHours, "webhooks-counted/PR-h")
		b.ReportMetric(float64(naive.Counted())/prHours, "naive-counted/PR-h")
		if per := float64(polling.Counted()) / prHours; per > 5 || polling.MaxAge > time.Minute {
			b.Errorf("polling only: %.3f counted requests per PR-hour (target ≤ 5), max age %s (target ≤ 1m)", per, polling.MaxAge)
		}
		if per := float64(hooks.Counted()) / prHours; per > 0.5 {
			b.Errorf("with webhooks: %.3f counted requests per PR-hour (target ≤ 0.5)", per)
		}
	}
}
