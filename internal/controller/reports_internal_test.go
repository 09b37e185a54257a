package controller

import (
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/test/benchcost"
)

// scanWorktree is ReportStore.Worktree as it was before the index: a scan of every session.
func scanWorktree(s *ReportStore, namespace, name string) (*runnerapi.WorkspaceReport, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *runnerapi.WorkspaceReport
	var at time.Time
	for k, r := range s.bySession {
		if k.Namespace != namespace || r.Worktree != name || r.Workspace == nil {
			continue
		}
		if best == nil || r.Received.After(at) {
			w := *r.Workspace
			best, at = &w, r.Received
		}
	}
	return best, at
}

// The index answers what a scan of every session answers, through random reports (new pods,
// Worktrees changing and named in several namespaces, reports without workspace facts), pull
// request asks and forgotten sessions.
func TestReportStoreWorktreeMatchesAScan(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	s := NewReportStore()
	namespaces := []string{"a", "b", "c"}
	worktrees := []string{"", "wt-1", "wt-2", "wt-3", "wt-4"}
	now := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	for op := 0; op < 5000; op++ {
		key := types.NamespacedName{Namespace: namespaces[rng.Intn(len(namespaces))], Name: fmt.Sprintf("s%d", rng.Intn(40))}
		now = now.Add(time.Second) // distinct times: the newest report is one
		switch r := rng.Intn(10); {
		case r < 7:
			var rep runnerapi.Report
			if rng.Intn(4) > 0 {
				rep.Workspace = &runnerapi.WorkspaceReport{Head: fmt.Sprintf("sha-%d", op), Missing: rng.Intn(5) == 0}
			}
			s.Update(key, types.UID(fmt.Sprintf("pod-%d", rng.Intn(3))), worktrees[rng.Intn(len(worktrees))], now, rep)
		case r < 8:
			s.AskPullRequest(key, runnerapi.PullRequestRequest{Title: "t"})
		default:
			s.Forget(key)
		}
		for _, ns := range namespaces {
			for _, wt := range worktrees[1:] {
				got, gotAt := s.Worktree(ns, wt)
				want, wantAt := scanWorktree(s, ns, wt)
				if (got == nil) != (want == nil) || !gotAt.Equal(wantAt) || got != nil && *got != *want {
					t.Fatalf("op %d, Worktree %s/%s: got %+v at %s, a scan %+v at %s", op, ns, wt, got, gotAt, want, wantAt)
				}
			}
		}
	}
	// Everything forgotten: nothing indexed.
	for k := range s.bySession {
		s.Forget(k)
	}
	if len(s.byWorktree) != 0 {
		t.Fatalf("%d Worktrees still indexed after every session was forgotten", len(s.byWorktree))
	}
}

// BenchmarkReportStoreWorktree: one Worktree's facts among n sessions each on its own Worktree
// (a fan-out), through the index and by a scan of every session, in the same run.
func BenchmarkReportStoreWorktree(b *testing.B) {
	fmt.Fprintf(os.Stdout, "\nReportStore.Worktree among n sessions, each on its own Worktree\n")
	fmt.Fprintf(os.Stdout, "%8s  %-6s %12s %10s   %s\n", "n", "way", "ns/lookup", "B/lookup", "vs scan (time)")
	for _, n := range []int{1000, 10000, 50000} {
		s := NewReportStore()
		now := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
		for i := 0; i < n; i++ {
			s.Update(types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("s%d", i)}, "pod", fmt.Sprintf("wt-%d", i), now,
				runnerapi.Report{Workspace: &runnerapi.WorkspaceReport{Head: "sha"}})
		}
		i := 0
		lookup := func(f func(*ReportStore, string, string) (*runnerapi.WorkspaceReport, time.Time)) func() {
			return func() {
				i++
				if w, _ := f(s, "team", fmt.Sprintf("wt-%d", i%n)); w == nil {
					b.Fatal("no facts")
				}
			}
		}
		scan := benchcost.Measure(10, 500*time.Millisecond, lookup(scanWorktree))
		index := benchcost.Measure(10, 500*time.Millisecond, lookup((*ReportStore).Worktree))
		for _, r := range []struct {
			way string
			c   benchcost.Cost
		}{{"scan", scan}, {"index", index}} {
			fmt.Fprintf(os.Stdout, "%8d  %-6s %12.0f %10.0f   %.4f×\n", n, r.way, r.c.NS, r.c.Bytes, r.c.NS/scan.NS)
		}
		b.ReportMetric(index.NS/scan.NS, fmt.Sprintf("time-ratio-%d", n))
	}
}
