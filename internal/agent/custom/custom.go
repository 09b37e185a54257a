// Package custom runs an agent CLI Shepherd has no adapter for (agent type custom): the image
// and command a team names, which reports either in Shepherd's JSON-lines agent protocol or in
// the output format of a CLI Shepherd drives (a wrapper around Claude Code, say).
//
// The command runs as it is written, without a shell, in the checkout, once per turn. The prompt
// (the task, or a follow-up message) arrives on standard input; the environment says the rest:
//
//	SHEPHERD_RESUME            "true" when the turn continues the conversation, else "false"
//	SHEPHERD_SESSION_ID        the conversation id the agent reported (a session event), or ""
//	SHEPHERD_MODEL             agent.model, or ""
//	SHEPHERD_PERMISSION_MODE   Bypass, AcceptEdits or ReadOnly
//	SHEPHERD_STATE_DIR         a directory that persists with the checkout, outside its tree
//	SHEPHERD_MODEL_API         with agent.modelAPI: Anthropic, OpenAI or Gemini
//	SHEPHERD_MODEL_BASE_URL    the runner's model proxy, which adds the real key
//	SHEPHERD_MODEL_API_KEY     a placeholder key worth nothing (the real one never reaches the agent)
//
// The protocol (Output Shepherd) is one JSON object per line of standard output, by "type":
//
//	{"type":"session","id":"conv-1","model":"my-model"}
//	{"type":"text","text":"Looking at the failing test."}
//	{"type":"tool_call","tool":"bash","input":"go test ./..."}
//	{"type":"tool_result","tool":"bash","output":"FAIL ...","error":true}
//	{"type":"usage","input_tokens":1200,"output_tokens":150,"cache_read_tokens":300,"cost_usd":0.0125}
//	{"type":"error","text":"rate limited","retrying":true}
//	{"type":"question","text":"Which database should I use?"}
//	{"type":"result","text":"Fixed the test.","error":false}
//
// A line that is not a JSON object is the agent's plain text. A turn ends with its result line
// (error true for a failed turn) and the process's exit; usage lines add up unless they carry
// "cumulative": true (the conversation's running totals). docs/adding-an-agent.md has the whole contract.
package custom

import (
	"encoding/json"
	"fmt"
	"strings"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/clip"
)

func init() { agent.Register(Adapter{}) }

// Adapter is the custom agent. Unconfigured (as registered) it has no command and parses the
// Shepherd protocol; agent.ForTask configures it from the task.
type Adapter struct {
	command []string
	output  agentsv1alpha1.CustomOutput
}

// Type implements agent.Agent.
func (Adapter) Type() agentsv1alpha1.AgentType { return agentsv1alpha1.AgentCustom }

// Capabilities implements agent.Agent: every turn may continue the conversation (the agent keeps
// what it needs in SHEPHERD_STATE_DIR or its home, and gets the id it reported).
func (Adapter) Capabilities() agent.Capabilities {
	return agent.Capabilities{CanResume: true, ReportsCost: true}
}

// Configure implements agent.Configurable.
func (Adapter) Configure(c *agent.Custom) (agent.Agent, error) {
	if c == nil || len(c.Command) == 0 || c.Command[0] == "" {
		return nil, fmt.Errorf("agent type custom needs agent.custom.command: the program the agent's image runs")
	}
	out := c.Output
	if out == "" {
		out = agentsv1alpha1.CustomOutputShepherd
	}
	if _, err := parserFor(out); err != nil {
		return nil, err
	}
	return Adapter{command: append([]string(nil), c.Command...), output: out}, nil
}

// Command implements agent.Agent.
func (a Adapter) Command(t agent.Turn) (agent.Command, error) {
	if len(a.command) == 0 {
		return agent.Command{}, fmt.Errorf("agent type custom needs agent.custom.command")
	}
	perm := t.Permission
	if perm == "" {
		perm = agentsv1alpha1.PermissionBypass
	}
	env := []string{
		"SHEPHERD_RESUME=" + fmt.Sprint(t.Resume),
		"SHEPHERD_SESSION_ID=" + t.SessionID,
		"SHEPHERD_MODEL=" + t.Model,
		"SHEPHERD_PERMISSION_MODE=" + string(perm),
		"SHEPHERD_STATE_DIR=" + t.StateDir,
	}
	if m := t.ModelAPI; m != nil {
		env = append(env, "SHEPHERD_MODEL_API="+string(m.API), "SHEPHERD_MODEL_BASE_URL="+m.BaseURL,
			"SHEPHERD_MODEL_API_KEY="+agent.PlaceholderKey)
	}
	var dirs []string
	if t.StateDir != "" {
		dirs = append(dirs, t.StateDir)
	}
	args := append(append([]string(nil), a.command[1:]...), t.ExtraArgs...)
	return agent.Command{Name: a.command[0], Args: args, Env: env, Stdin: t.Prompt, Dirs: dirs}, nil
}

// NewParser implements agent.Agent.
func (a Adapter) NewParser() agent.Parser {
	out := a.output
	if out == "" {
		out = agentsv1alpha1.CustomOutputShepherd
	}
	p, err := parserFor(out)
	if err != nil {
		return &parser{}
	}
	return p
}

// parserFor is the parser of an output format: Shepherd's protocol, or a driven CLI's.
func parserFor(out agentsv1alpha1.CustomOutput) (agent.Parser, error) {
	var typ agentsv1alpha1.AgentType
	switch out {
	case agentsv1alpha1.CustomOutputShepherd:
		return &parser{}, nil
	case agentsv1alpha1.CustomOutputClaudeCode:
		typ = agentsv1alpha1.AgentClaudeCode
	case agentsv1alpha1.CustomOutputCodex:
		typ = agentsv1alpha1.AgentCodex
	case agentsv1alpha1.CustomOutputOpenCode:
		typ = agentsv1alpha1.AgentOpenCode
	case agentsv1alpha1.CustomOutputGemini:
		typ = agentsv1alpha1.AgentGemini
	default:
		return nil, fmt.Errorf("agent.custom.output %q is not Shepherd, ClaudeCode, Codex, OpenCode or Gemini", out)
	}
	a, err := agent.Get(typ)
	if err != nil {
		return nil, fmt.Errorf("agent.custom.output %s: %w", out, err)
	}
	return a.NewParser(), nil
}

// parser reads Shepherd's JSON-lines agent protocol.
type parser struct {
	lines  int
	result bool
}

// line is one protocol line; fields are read leniently (a field of the wrong type is left out).
type line struct {
	Type            string          `json:"type"`
	ID              string          `json:"id"`
	Model           string          `json:"model"`
	Text            string          `json:"text"`
	Tool            string          `json:"tool"`
	Input           json.RawMessage `json:"input"`
	Output          string          `json:"output"`
	Error           bool            `json:"error"`
	Retrying        bool            `json:"retrying"`
	InputTokens     int64           `json:"input_tokens"`
	OutputTokens    int64           `json:"output_tokens"`
	CacheReadTokens int64           `json:"cache_read_tokens"`
	CostUSD         float64         `json:"cost_usd"`
	Cumulative      bool            `json:"cumulative"`
}

// Line implements agent.Parser.
func (p *parser) Line(raw []byte) []agent.Event {
	text := strings.TrimSpace(string(raw))
	if text == "" {
		return nil
	}
	p.lines++
	active := agent.Event{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}
	if !strings.HasPrefix(text, "{") {
		return []agent.Event{active, {Kind: agent.KindText, Text: clip.To(text, agent.MaxToolResult)}}
	}
	var l line
	if _, err := agent.DecodeLenient(raw, &l); err != nil {
		return []agent.Event{agent.MalformedLine("custom agent", raw, err)}
	}
	switch l.Type {
	case "session":
		if l.ID == "" && l.Model == "" {
			return nil
		}
		return []agent.Event{{Kind: agent.KindSession, SessionID: clip.To(l.ID, 256), Model: clip.To(l.Model, 128)}}
	case "text":
		if strings.TrimSpace(l.Text) == "" {
			return []agent.Event{active}
		}
		return []agent.Event{active, {Kind: agent.KindText, Text: clip.To(l.Text, agent.MaxToolResult)}}
	case "tool_call":
		return []agent.Event{active, {Kind: agent.KindToolUse, Tool: clip.To(l.Tool, 128), Text: clip.To(inputText(l.Input), 512)}}
	case "tool_result":
		return []agent.Event{active, {Kind: agent.KindToolResult, Tool: clip.To(l.Tool, 128), Text: clip.To(l.Output, agent.MaxToolResult), IsError: l.Error}}
	case "usage":
		if l.InputTokens < 0 || l.OutputTokens < 0 || l.CacheReadTokens < 0 || l.CostUSD < 0 {
			return []agent.Event{{Kind: agent.KindError, Malformed: true, Text: "custom agent: a usage line with a negative count: " + clip.To(text, 200)}}
		}
		u := agent.Usage{InputTokens: l.InputTokens, OutputTokens: l.OutputTokens, CacheReadTokens: l.CacheReadTokens, CostUSD: l.CostUSD}
		return []agent.Event{{Kind: agent.KindUsage, Usage: &u, Cumulative: l.Cumulative, SessionID: clip.To(l.ID, 256)}}
	case "error":
		msg := l.Text
		if strings.TrimSpace(msg) == "" {
			msg = "the agent reported an error"
		}
		return []agent.Event{{Kind: agent.KindError, Text: clip.To(msg, 4096), Retrying: l.Retrying}}
	case "question":
		if strings.TrimSpace(l.Text) == "" {
			return nil
		}
		return []agent.Event{{Kind: agent.KindQuestion, Text: clip.To(l.Text, 4096)}}
	case "result":
		p.result = true
		return []agent.Event{{Kind: agent.KindTurnResult, Text: clip.To(l.Text, 16384), IsError: l.Error}}
	}
	return []agent.Event{{Kind: agent.KindError, Malformed: true,
		Text: fmt.Sprintf("custom agent: unknown line type %q (see docs/adding-an-agent.md): %s", clip.To(l.Type, 64), clip.To(text, 200))}}
}

// inputText is a tool call's input: a string as it is, anything else as its JSON.
func inputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// Finish implements agent.Parser: a turn without a result line is said to be one.
func (p *parser) Finish() []agent.Event {
	if p.result {
		return nil
	}
	return []agent.Event{{Kind: agent.KindError, Malformed: true,
		Text: fmt.Sprintf("custom agent: output ended after %d lines without a result line (see docs/adding-an-agent.md)", p.lines)}}
}
