package custom_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/agent/agenttest"
	_ "github.com/shepherd-dev/shepherd/internal/agent/claudecode"
	_ "github.com/shepherd-dev/shepherd/internal/agent/custom"
	_ "github.com/shepherd-dev/shepherd/internal/agent/gemini"
)

func configured(t *testing.T, c *agent.Custom) agent.Agent {
	t.Helper()
	a, err := agent.ForTask(agentsv1alpha1.AgentCustom, c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCommand(t *testing.T) {
	a := configured(t, &agent.Custom{Command: []string{"/opt/agent/run", "--fast"}})
	for _, tc := range []struct {
		name string
		turn agent.Turn
		env  []string
	}{
		{"a first turn", agent.Turn{Prompt: "Fix it; rm -rf /", Model: "m1", StateDir: "/ws/.state", ExtraArgs: []string{"--x"}},
			[]string{"SHEPHERD_RESUME=false", "SHEPHERD_SESSION_ID=", "SHEPHERD_MODEL=m1", "SHEPHERD_PERMISSION_MODE=Bypass", "SHEPHERD_STATE_DIR=/ws/.state"}},
		{"a resumed turn through the model proxy", agent.Turn{Prompt: "And the docs", Resume: true, SessionID: "conv-1",
			Permission: agentsv1alpha1.PermissionReadOnly, ModelAPI: &agent.ModelEndpoint{API: agentsv1alpha1.ModelAPIOpenAI, BaseURL: "http://127.0.0.1:8737"}},
			[]string{"SHEPHERD_RESUME=true", "SHEPHERD_SESSION_ID=conv-1", "SHEPHERD_MODEL=", "SHEPHERD_PERMISSION_MODE=ReadOnly", "SHEPHERD_STATE_DIR=",
				"SHEPHERD_MODEL_API=OpenAI", "SHEPHERD_MODEL_BASE_URL=http://127.0.0.1:8737", "SHEPHERD_MODEL_API_KEY=" + agent.PlaceholderKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, err := a.Command(tc.turn)
			if err != nil {
				t.Fatal(err)
			}
			wantArgs := append([]string{"--fast"}, tc.turn.ExtraArgs...)
			if cmd.Name != "/opt/agent/run" || !slices.Equal(cmd.Args, wantArgs) {
				t.Errorf("argv: %s %q", cmd.Name, cmd.Args)
			}
			if cmd.Stdin != tc.turn.Prompt {
				t.Errorf("the prompt travels on stdin, unchanged: %q", cmd.Stdin)
			}
			if !slices.Equal(cmd.Env, tc.env) {
				t.Errorf("env:\n got %q\nwant %q", cmd.Env, tc.env)
			}
		})
	}
}

func TestConfigure(t *testing.T) {
	for _, c := range []*agent.Custom{nil, {}, {Command: []string{""}}} {
		if _, err := agent.ForTask(agentsv1alpha1.AgentCustom, c); err == nil || !strings.Contains(err.Error(), "agent.custom.command") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := agent.ForTask(agentsv1alpha1.AgentCustom, &agent.Custom{Command: []string{"x"}, Output: "Morse"}); err == nil {
		t.Error("an unknown output format is refused")
	}
	// A wrapper that prints Claude Code's stream-json is read with Claude Code's parser.
	a := configured(t, &agent.Custom{Command: []string{"wrap-claude"}, Output: agentsv1alpha1.CustomOutputClaudeCode})
	events := agent.ParseAll(a.NewParser(), strings.NewReader(
		`{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}`+"\n"+
			`{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"s-1","total_cost_usd":0.01}`+"\n"))
	if r := agenttest.Kinds(events, agent.KindTurnResult); len(r) != 1 || r[0].Text != "Done." {
		t.Errorf("Claude Code's output through the custom agent: %+v", events)
	}
	// Other agents take no settings.
	if _, err := agent.ForTask(agentsv1alpha1.AgentClaudeCode, nil); err != nil {
		t.Error(err)
	}
}

func TestParseTurn(t *testing.T) {
	a := configured(t, &agent.Custom{Command: []string{"agent"}})
	events := agenttest.ParseFile(t, a.NewParser(), "turn.jsonl")
	if s := agenttest.Kinds(events, agent.KindSession); len(s) != 1 || s[0].SessionID != "conv-7f3a" || s[0].Model != "my-model-1" {
		t.Errorf("session: %+v", s)
	}
	texts := agenttest.Kinds(events, agent.KindText)
	if len(texts) != 2 || texts[0].Text != "Reading the repository layout." {
		t.Errorf("plain lines are the agent's text: %+v", texts)
	}
	uses := agenttest.Kinds(events, agent.KindToolUse)
	if len(uses) != 2 || uses[0].Text != "go test ./..." || uses[1].Text != `{"path":"handler.go","old":"500","new":"200"}` {
		t.Errorf("tool calls: %+v", uses)
	}
	results := agenttest.Kinds(events, agent.KindToolResult)
	if len(results) != 2 || !results[0].IsError || results[1].IsError {
		t.Errorf("tool results: %+v", results)
	}
	if e := agenttest.Kinds(events, agent.KindError); len(e) != 1 || !e[0].Retrying || e[0].Malformed {
		t.Errorf("a retried error is an activity: %+v", e)
	}
	var total agent.Usage
	for _, u := range agenttest.Kinds(events, agent.KindUsage) {
		total.Add(*u.Usage)
	}
	if total.InputTokens != 2000 || total.OutputTokens != 240 || total.CacheReadTokens != 300 || total.CostUSD < 0.0194 || total.CostUSD > 0.0196 {
		t.Errorf("usage adds up: %+v", total)
	}
	if q := agenttest.Kinds(events, agent.KindQuestion); len(q) != 1 || q[0].Text != "Should I also update the API docs?" {
		t.Errorf("question: %+v", q)
	}
	if r := agenttest.Kinds(events, agent.KindTurnResult); len(r) != 1 || r[0].IsError || !strings.HasPrefix(r[0].Text, "Fixed the handler") {
		t.Errorf("result: %+v", r)
	}
}

func TestParseMistakes(t *testing.T) {
	a := configured(t, &agent.Custom{Command: []string{"agent"}})
	for _, tc := range []struct{ name, out, want string }{
		{"no result line", `{"type":"text","text":"hi"}`, "without a result line"},
		{"an unknown type", `{"type":"telemetry"}` + "\n" + `{"type":"result","text":"ok"}`, `unknown line type "telemetry"`},
		{"broken JSON", `{"type":"text","text":` + "\n" + `{"type":"result","text":"ok"}`, "unreadable output line"},
		{"a negative count", `{"type":"usage","output_tokens":-5}` + "\n" + `{"type":"result"}`, "negative count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := agent.ParseAll(a.NewParser(), strings.NewReader(tc.out))
			errs := agenttest.Kinds(events, agent.KindError)
			if len(errs) != 1 || !errs[0].Malformed || !strings.Contains(errs[0].Text, tc.want) {
				t.Errorf("%+v", errs)
			}
		})
	}
	events := agent.ParseAll(a.NewParser(), strings.NewReader(`{"type":"result","text":"It failed: no tests.","error":true}`))
	if r := agenttest.Kinds(events, agent.KindTurnResult); len(r) != 1 || !r[0].IsError {
		t.Errorf("a failed turn: %+v", events)
	}
}

func TestWrappedGemini(t *testing.T) {
	a := configured(t, &agent.Custom{Command: []string{"wrap-gemini"}, Output: agentsv1alpha1.CustomOutputGemini})
	gem, err := agent.Get(agentsv1alpha1.AgentGemini)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%T", a.NewParser()) != fmt.Sprintf("%T", gem.NewParser()) {
		t.Errorf("a Gemini wrapper is read with Gemini CLI's parser: %T", a.NewParser())
	}
}
