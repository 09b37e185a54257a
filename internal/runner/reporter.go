package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// reporter turns what the runner observes into reports. Activity state transitions are sent
// each, in order; everything else (activity time, session id, usage) is coalesced and sent at
// most once per debounce interval; a heartbeat tells the manager the runner is alive. A state
// transition cuts the debounce wait short once per interval (at most two sends per interval):
// the agent's start, right after the checkout's report, is the session's Working, not a second
// later.
type reporter struct {
	client    *runnerapi.Client
	debounce  time.Duration
	heartbeat time.Duration
	log       io.Writer

	mu           sync.Mutex
	seq          uint64
	activity     runnerapi.ActivityReport
	agentInfo    runnerapi.AgentReport
	summary      string
	usage        agent.Usage
	turns        int32
	workspace    *runnerapi.WorkspaceReport
	metered      *runnerapi.Metered
	loopReport   *runnerapi.LoopReport
	push         *runnerapi.PushReport
	queue        []runnerapi.Report
	dirty        bool
	activitySeen bool
	kick         chan struct{}
	urgent       chan struct{}
	sendMu       sync.Mutex
}

func newReporter(c *runnerapi.Client, task *runnerapi.Task, debounce, heartbeat time.Duration, log io.Writer) *reporter {
	r := &reporter{client: c, debounce: debounce, heartbeat: heartbeat, log: log, seq: task.LastSequence,
		turns: task.Usage.Turns, kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		agentInfo: runnerapi.AgentReport{SessionID: task.AgentSessionID}}
	if cost, err := strconv.ParseFloat(task.Usage.CostUSD, 64); err == nil {
		r.usage.CostUSD = cost
	}
	r.usage.InputTokens, r.usage.OutputTokens, r.usage.CacheReadTokens = task.Usage.InputTokens, task.Usage.OutputTokens, task.Usage.CacheReadTokens
	return r
}

// snapshot builds a full report of the current state; the caller holds mu.
func (r *reporter) snapshot(withActivity bool) runnerapi.Report {
	rep := runnerapi.Report{Time: time.Now(), Summary: r.summary}
	if withActivity && r.activitySeen {
		a := r.activity
		rep.Activity = &a
	}
	if r.agentInfo != (runnerapi.AgentReport{}) {
		a := r.agentInfo
		rep.Agent = &a
	}
	u := runnerapi.Usage{InputTokens: r.usage.InputTokens, OutputTokens: r.usage.OutputTokens,
		CacheReadTokens: r.usage.CacheReadTokens, Turns: r.turns}
	if r.usage.CostUSD > 0 {
		u.CostUSD = strconv.FormatFloat(r.usage.CostUSD, 'f', 6, 64)
	}
	u.Metered = r.metered
	rep.Usage = &u
	rep.Loop = r.loopReport
	rep.Workspace, rep.Push = r.workspace, r.push
	return rep
}

func (r *reporter) signal() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// setActivity records a state; a change of state, question, exit code or message is queued as
// its own report.
func (r *reporter) setActivity(state agentsv1alpha1.ActivityState, question, message string, exitCode *int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	changed := !r.activitySeen || r.activity.State != state || r.activity.Question != question || r.activity.Message != message ||
		(exitCode != nil) != (r.activity.ExitCode != nil)
	r.activitySeen = true
	r.activity = runnerapi.ActivityReport{State: state, LastActivityTime: now, Question: clip.To(question, 4096),
		Message: clip.To(message, 4096), ExitCode: exitCode}
	if changed {
		r.queue = append(r.queue, r.snapshot(true))
		r.dirty = false
		r.signal()
		select {
		case r.urgent <- struct{}{}:
		default:
		}
	}
}

// touch notes that the agent did something, without a state change.
func (r *reporter) touch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.activity.LastActivityTime = time.Now()
}

func (r *reporter) update(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	r.dirty = true
	r.signal()
}

// setMetered records the model proxy's totals; they go out with the next report.
func (r *reporter) setMetered(u modelproxy.Usage) {
	m := toMetered(u)
	r.update(func() { r.metered = m })
}

func (r *reporter) state() agentsv1alpha1.ActivityState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.activity.State
}

// loop sends queued and debounced reports until ctx ends.
func (r *reporter) loop(ctx context.Context) {
	hb := time.NewTicker(r.heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			// What this flush sends is no longer urgent.
			select {
			case <-r.urgent:
			default:
			}
			r.flush(ctx)
			// Coalesce what arrives during the debounce interval into the next report; a state
			// transition goes out at once, then the interval starts again.
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.debounce):
			case <-r.urgent:
				r.flush(ctx)
				select {
				case <-ctx.Done():
					return
				case <-time.After(r.debounce):
				}
			}
		case <-hb.C:
			r.mu.Lock()
			r.dirty = true
			r.mu.Unlock()
			r.flush(ctx)
		}
	}
}

// flush sends every queued report, then one snapshot when something else changed.
func (r *reporter) flush(ctx context.Context) {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.mu.Lock()
	reps := r.queue
	r.queue = nil
	if r.dirty {
		reps = append(reps, r.snapshot(true))
		r.dirty = false
	}
	r.mu.Unlock()
	for _, rep := range reps {
		if err := r.send(ctx, rep); err != nil {
			fmt.Fprintf(r.log, "shepherd-runner: report not delivered: %v\n", err)
		}
	}
}

func (r *reporter) send(ctx context.Context, rep runnerapi.Report) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return retry(ctx, "report", func() error {
		r.mu.Lock()
		r.seq++
		rep.Sequence = r.seq
		r.mu.Unlock()
		err := r.client.Report(ctx, rep)
		var ae *runnerapi.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.LastSequence > 0 {
			// Another process of this pod (prepare, or an earlier run) reported meanwhile:
			// continue after the manager's sequence and send again.
			r.mu.Lock()
			r.seq = max(r.seq, ae.LastSequence)
			rep.Sequence = r.seq + 1
			r.seq++
			r.mu.Unlock()
			return r.client.Report(ctx, rep)
		}
		return err
	})
}
