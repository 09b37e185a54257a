package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// conversationTotals remembers the running totals a CLI last reported for each conversation,
// so that a turn whose CLI reports the conversation's totals (agent.Event.Cumulative) is
// counted for its own share only. It lives next to the agent state dir, in the checkout's git
// dir, so a restored pod continues from it.
type conversationTotals struct {
	path string
}

func newConversationTotals(stateDir string) conversationTotals {
	return conversationTotals{path: filepath.Join(filepath.Dir(stateDir), "usage-totals.json")}
}

// share returns what total adds to the last total seen for the conversation id, and records
// total. A total below the last one (a CLI that started counting anew) counts whole.
func (c conversationTotals) share(id string, total agent.Usage) (agent.Usage, error) {
	totals := map[string]agent.Usage{}
	if raw, err := os.ReadFile(c.path); err == nil {
		_ = json.Unmarshal(raw, &totals)
	}
	last := totals[id]
	d := agent.Usage{
		CostUSD:         total.CostUSD - last.CostUSD,
		InputTokens:     total.InputTokens - last.InputTokens,
		OutputTokens:    total.OutputTokens - last.OutputTokens,
		CacheReadTokens: total.CacheReadTokens - last.CacheReadTokens,
	}
	if d.CostUSD < 0 || d.InputTokens < 0 || d.OutputTokens < 0 || d.CacheReadTokens < 0 {
		d = total
	}
	totals[id] = total
	raw, err := json.Marshal(totals)
	if err != nil {
		return d, err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return d, err
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return d, err
	}
	return d, os.Rename(tmp, c.path)
}

// toMetered copies the model proxy's totals into the report's shape.
func toMetered(u modelproxy.Usage) *runnerapi.Metered {
	m := &runnerapi.Metered{Requests: u.Requests, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens, Unmetered: u.Unmetered}
	if len(u.ByModel) > 0 {
		m.ByModel = make(map[string]runnerapi.MeteredModel, len(u.ByModel))
		for name, x := range u.ByModel {
			m.ByModel[name] = runnerapi.MeteredModel{Requests: x.Requests, InputTokens: x.InputTokens, OutputTokens: x.OutputTokens,
				CacheReadTokens: x.CacheReadTokens, CacheWriteTokens: x.CacheWriteTokens}
		}
	}
	return m
}

// fromMetered is toMetered's inverse, for the usage a task carries over.
func fromMetered(m runnerapi.Metered) modelproxy.Usage {
	u := modelproxy.Usage{Requests: m.Requests, InputTokens: m.InputTokens, OutputTokens: m.OutputTokens,
		CacheReadTokens: m.CacheReadTokens, CacheWriteTokens: m.CacheWriteTokens, Unmetered: m.Unmetered}
	if len(m.ByModel) > 0 {
		u.ByModel = make(map[string]modelproxy.ModelUsage, len(m.ByModel))
		for name, x := range m.ByModel {
			u.ByModel[name] = modelproxy.ModelUsage{Requests: x.Requests, InputTokens: x.InputTokens, OutputTokens: x.OutputTokens,
				CacheReadTokens: x.CacheReadTokens, CacheWriteTokens: x.CacheWriteTokens}
		}
	}
	return u
}

// meteredFile keeps the model proxy's totals in the runner's state dir (on the workspace volume,
// out of the agent's reach): a restarted runner, or the session's next pod, continues from them
// even when its last report never reached the manager.
const meteredFile = "metered.json"

// saveMetered writes the totals after each request, atomically; a failure is logged and the
// manager's copy (the reports) remains.
func saveMetered(stateDir string, u modelproxy.Usage, log io.Writer) {
	if stateDir == "" {
		return
	}
	b, err := json.Marshal(u)
	if err == nil {
		err = os.MkdirAll(stateDir, 0o700)
	}
	if err == nil {
		tmp := filepath.Join(stateDir, meteredFile+".tmp")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(stateDir, meteredFile))
		}
	}
	if err != nil && log != nil {
		fmt.Fprintf(log, "shepherd-runner: could not keep the model usage in %s: %v\n", stateDir, err)
	}
}

// loadMetered reads what saveMetered kept; nil when there is nothing (or nothing readable).
func loadMetered(stateDir string) *modelproxy.Usage {
	if stateDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(stateDir, meteredFile))
	if err != nil {
		return nil
	}
	var u modelproxy.Usage
	if json.Unmarshal(b, &u) != nil || u.Requests < 0 || u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.CacheWriteTokens < 0 {
		return nil
	}
	return &u
}

// carriedUsage is what a new runner's proxy continues from: the manager's last word or the
// runner's own file, whichever counted more requests (the file is ahead when a report was lost;
// the manager when the volume was replaced). Totals only grow, so more requests is newer.
func carriedUsage(fromTask *runnerapi.Metered, fromFile *modelproxy.Usage) *modelproxy.Usage {
	var task *modelproxy.Usage
	if fromTask != nil {
		u := fromMetered(*fromTask)
		task = &u
	}
	switch {
	case task == nil:
		return fromFile
	case fromFile == nil:
		return task
	case fromFile.Requests > task.Requests || fromFile.Requests == task.Requests && fromFile.Tokens() > task.Tokens():
		return fromFile
	}
	return task
}
