//go:build integration

package realagents_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/shepherd-dev/shepherd/test/realagents"
)

// The contract between each pinned CLI and its parser: the events the parser reads and the
// fields it takes from them. A new CLI version that renames or drops one fails here, by name,
// before the parser silently reads zeros. Keep these lists in step with the parsers in
// internal/agent/<name> (and docs/agents.md).

// rule says: some output line matches where (path → string value), and every line that does
// carries each of need. A path is dotted; "[]" steps into every element of a list, and a path
// through a list is present when it is present in one element.
type rule struct {
	where map[string]string
	need  []string
}

var claudeContract = []rule{
	{where: map[string]string{"type": "system", "subtype": "init"}, need: []string{"session_id", "model"}},
	{where: map[string]string{"type": "system", "subtype": "api_retry"}, need: []string{"attempt", "max_retries", "retry_delay_ms", "error"}},
	{where: map[string]string{"type": "assistant", "message.content[].type": "text"}, need: []string{"message.content[].text"}},
	{where: map[string]string{"type": "assistant", "message.content[].type": "tool_use"}, need: []string{"message.content[].name", "message.content[].input"}},
	{where: map[string]string{"type": "user", "message.content[].type": "tool_result"}},
	{where: map[string]string{"type": "result", "subtype": "success"}, need: []string{"is_error", "result", "session_id", "total_cost_usd",
		"model_usage_since_last_result",
		"usage.input_tokens", "usage.output_tokens", "usage.cache_read_input_tokens", "usage.cache_creation_input_tokens", "permission_denials"}},
}

var codexContract = []rule{
	{where: map[string]string{"type": "thread.started"}, need: []string{"thread_id"}},
	{where: map[string]string{"type": "turn.started"}},
	{where: map[string]string{"type": "item.started", "item.type": "command_execution"}, need: []string{"item.command", "item.status"}},
	{where: map[string]string{"type": "item.completed", "item.type": "command_execution"}, need: []string{"item.command", "item.status", "item.exit_code"}},
	{where: map[string]string{"type": "item.completed", "item.type": "file_change"}, need: []string{"item.changes[].path", "item.changes[].kind"}},
	{where: map[string]string{"type": "item.completed", "item.type": "agent_message"}, need: []string{"item.text"}},
	{where: map[string]string{"type": "error"}, need: []string{"message"}},
	{where: map[string]string{"type": "turn.completed"}, need: []string{"usage.input_tokens", "usage.cached_input_tokens", "usage.output_tokens"}},
	{where: map[string]string{"type": "turn.failed"}, need: []string{"error.message"}},
}

var opencodeContract = []rule{
	{where: map[string]string{"type": "step_start"}, need: []string{"sessionID"}},
	{where: map[string]string{"type": "text"}, need: []string{"sessionID", "part.text"}},
	{where: map[string]string{"type": "tool_use"}, need: []string{"part.tool", "part.state.status", "part.state.input"}},
	{where: map[string]string{"type": "step_finish"}, need: []string{"part.cost", "part.tokens.input", "part.tokens.output",
		"part.tokens.reasoning", "part.tokens.cache.read", "part.tokens.cache.write"}},
	{where: map[string]string{"type": "error"}, need: []string{"sessionID", "error.name", "error.data.message"}},
}

var geminiContract = []rule{
	{where: map[string]string{"type": "init"}, need: []string{"session_id", "model"}},
	{where: map[string]string{"type": "message", "role": "assistant"}, need: []string{"content", "delta"}},
	{where: map[string]string{"type": "tool_use"}, need: []string{"tool_name", "tool_id", "parameters"}},
	{where: map[string]string{"type": "tool_result", "status": "success"}, need: []string{"tool_id"}},
	{where: map[string]string{"type": "tool_result", "status": "error"}, need: []string{"tool_id", "error.type", "error.message"}},
	{where: map[string]string{"type": "result", "status": "success"}, need: []string{"stats.input_tokens", "stats.output_tokens",
		"stats.cached", "stats.input"}},
	{where: map[string]string{"type": "result", "status": "error"}, need: []string{"error.message"}},
}

func checkContract(t *testing.T, c cliCase, lines [][]byte) {
	t.Helper()
	pinned, err := realagents.Pinned()
	if err != nil {
		t.Fatal(err)
	}
	cli := pinned[realagents.Binary[c.typ]]
	var objs []map[string]any
	for _, l := range lines {
		var o map[string]any
		if err := json.Unmarshal(l, &o); err != nil {
			t.Errorf("%s@%s printed a line that is not a JSON object (%v): %.200s", cli.Package, cli.Version, err, l)
			continue
		}
		objs = append(objs, o)
	}
	for _, r := range c.contract {
		matched := 0
		for _, o := range objs {
			if !r.matches(o) {
				continue
			}
			matched++
			for _, p := range r.need {
				if len(values(o, p)) == 0 {
					t.Errorf("%s@%s: its %s event has no %q, which internal/agent/%s reads; update the parser, its fixtures and docs/agents.md (see \"Bumping a CLI\")",
						cli.Package, cli.Version, r, p, c.fixtures)
				}
			}
		}
		if matched == 0 {
			t.Errorf("%s@%s printed no %s event in these turns; internal/agent/%s relies on it (see docs/agents.md, \"Bumping a CLI\")",
				cli.Package, cli.Version, r, c.fixtures)
		}
	}
}

func (r rule) matches(o map[string]any) bool {
	for p, want := range r.where {
		found := false
		for _, v := range values(o, p) {
			if s, ok := v.(string); ok && s == want {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (r rule) String() string {
	var parts []string
	for p, v := range r.where {
		parts = append(parts, fmt.Sprintf("%s=%s", p, v))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}

// values returns the non-null values at a dotted path, stepping into every list element at "[]".
func values(v any, path string) []any {
	if path == "" {
		if v == nil {
			return nil
		}
		return []any{v}
	}
	head, rest, _ := strings.Cut(path, ".")
	list := strings.HasSuffix(head, "[]")
	head = strings.TrimSuffix(head, "[]")
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	next, ok := obj[head]
	if !ok || next == nil {
		return nil
	}
	if !list {
		return values(next, rest)
	}
	elems, ok := next.([]any)
	if !ok {
		return nil
	}
	var out []any
	for _, e := range elems {
		out = append(out, values(e, rest)...)
	}
	return out
}

func TestContractPaths(t *testing.T) {
	var o map[string]any
	if err := json.Unmarshal([]byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"Bash","input":{}}]},"n":null}`), &o); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"type": 1, "message.content[].type": 2, "message.content[].name": 1, "message.content[].input": 1,
		"message.missing": 0, "n": 0, "type[]": 0} {
		if got := len(values(o, path)); got != want {
			t.Errorf("values(%q) = %d values, want %d", path, got, want)
		}
	}
	r := rule{where: map[string]string{"type": "assistant", "message.content[].type": "tool_use"}}
	if !r.matches(o) {
		t.Error("the rule should match a line with a tool_use block")
	}
	if (rule{where: map[string]string{"type": "user"}}).matches(o) {
		t.Error("the rule should not match another type")
	}
}
