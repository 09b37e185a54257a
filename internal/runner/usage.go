package runner

import (
	"encoding/json"
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
