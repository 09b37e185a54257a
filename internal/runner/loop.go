package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// maxWatchedCalls bounds the tool calls loopWatch remembers failures of.
const maxWatchedCalls = 64

// loopWatch notices an agent going round in circles: the same tool call (tool and input) failing
// again and again, and turns that leave the checkout as they found it. The manager ends the
// session at the Project's limits (docs/cost.md, runaway limits); the runner only counts.
type loopWatch struct {
	lastCall string
	// fails counts each call's failures since it last succeeded.
	fails map[string]int32
	order []string
	// worst is the call with the most failures in a row, and how many.
	worst      string
	worstFails int32
	// unchanged counts the turns in a row that changed nothing in the checkout.
	unchanged int32
}

func callKey(ev agent.Event) string { return ev.Tool + "\x00" + ev.Text }

// event folds a tool use or result in.
func (w *loopWatch) event(ev agent.Event) {
	switch ev.Kind {
	case agent.KindToolUse:
		w.lastCall = callKey(ev)
	case agent.KindToolResult:
		if w.lastCall == "" {
			return
		}
		if w.fails == nil {
			w.fails = map[string]int32{}
		}
		if !ev.IsError {
			delete(w.fails, w.lastCall)
		} else {
			if _, ok := w.fails[w.lastCall]; !ok {
				w.order = append(w.order, w.lastCall)
				if len(w.order) > maxWatchedCalls {
					delete(w.fails, w.order[0])
					w.order = w.order[1:]
				}
			}
			w.fails[w.lastCall]++
		}
		w.worst, w.worstFails = "", 0
		for k, n := range w.fails {
			if n > w.worstFails || n == w.worstFails && k < w.worst {
				w.worst, w.worstFails = k, n
			}
		}
		w.lastCall = ""
	}
}

// turnEnded counts a turn that left the checkout as it found it (before and after are
// checkoutDigest's).
func (w *loopWatch) turnEnded(before, after string) {
	if before != "" && before == after {
		w.unchanged++
	} else {
		w.unchanged = 0
	}
}

// report is what the manager needs to judge.
func (w *loopWatch) report() *runnerapi.LoopReport {
	r := &runnerapi.LoopReport{UnchangedTurns: w.unchanged, RepeatedFailures: w.worstFails}
	if w.worst != "" {
		tool, input, _ := cut0(w.worst)
		r.FailingCall = clip.Marked(tool+": "+callInput(input), 256, "…")
	}
	return r
}

// callInput is a tool call's input as a human reads it: a shell tool's command alone (the CLIs
// print {"command": "go test ./..."}, Codex {"cmd": …}), else the input as the CLI printed it.
func callInput(input string) string {
	var in map[string]json.RawMessage
	if len(input) > 0 && input[0] == '{' && json.Unmarshal([]byte(input), &in) == nil {
		for _, k := range []string{"command", "cmd"} {
			var cmd string
			if raw, ok := in[k]; ok && json.Unmarshal(raw, &cmd) == nil && cmd != "" {
				return cmd
			}
		}
	}
	return input
}

func cut0(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// checkoutDigest names the checkout's state: its head commit, and a digest of what is modified
// and how much (git status and the diff's line counts). A turn that changed nothing leaves it
// the same; a commit, a new file or an edit changes it. "" when git cannot tell.
func checkoutDigest(ctx context.Context, g *workspace.Git, dir string) string {
	head, err := g.Run(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	status, err := g.Run(ctx, dir, "status", "--porcelain=v1", "--untracked-files=all")
	if err != nil {
		return ""
	}
	stat, err := g.Run(ctx, dir, "diff", "HEAD", "--numstat", "--no-color", "--no-ext-diff")
	if err != nil {
		return ""
	}
	return digestOf(head, status, stat)
}

// digestOf is checkoutDigest's hash of what git said: HEAD, the status, the diff's numstat (a
// clean checkout: the last two empty).
func digestOf(head, status, stat string) string {
	h := sha256.Sum256([]byte(head + "\x00" + status + "\x00" + stat))
	return hex.EncodeToString(h[:16])
}
