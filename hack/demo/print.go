package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/test/scenario"
)

// printer writes the demo's story: sections, and lines stamped with the wall clock and the time
// since the session was created. The phase watcher, the scenario, the notification receiver and
// the log saver write from their own goroutines.
type printer struct {
	mu      sync.Mutex
	w       io.Writer
	started time.Time
}

func newPrinter(w io.Writer) *printer { return &printer{w: w} }

// start marks the session's creation: later lines carry the time since.
func (p *printer) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = time.Now()
}

func (p *printer) section(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\n=== demo: %s (%s)\n", fmt.Sprintf(format, args...), time.Now().Format("15:04:05"))
}

// line is a stamped line.
func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	stamp := now.Format("15:04:05")
	if !p.started.IsZero() {
		stamp += fmt.Sprintf(" %+7.1fs", now.Sub(p.started).Seconds())
	}
	text := fmt.Sprintf(format, args...)
	fmt.Fprintf(p.w, "  %s  %s\n", stamp, strings.ReplaceAll(text, "\n", "\n  "))
}

// plain is an unstamped line.
func (p *printer) plain(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// phase prints a phase as it passes, with how long the one before lasted and what the status
// says about the pull request.
func (p *printer) phase(t scenario.Transition, prev *scenario.Transition) {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %-16s", t.Phase)
	if prev != nil {
		fmt.Fprintf(&b, " (%s lasted %.1fs)", prev.Phase, t.At.Sub(prev.At).Seconds())
	}
	st := t.Session.Status
	if pr := st.PullRequest; pr != nil {
		fmt.Fprintf(&b, "  PR #%d", pr.Number)
		if pr.Checks != "" {
			fmt.Fprintf(&b, " CI %s", pr.Checks)
		}
		if pr.ReviewDecision != "" {
			fmt.Fprintf(&b, " review %s", pr.ReviewDecision)
		}
	} else if st.PodName != "" {
		fmt.Fprintf(&b, "  pod %s", st.PodName)
	}
	p.line("%s", b.String())
}
