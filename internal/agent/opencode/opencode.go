// Package opencode adapts OpenCode's headless mode:
//
//	opencode run --format json [--session ID] [--model provider/model] [--dangerously-skip-permissions]
//
// The message is read from stdin: `opencode run` joins positional words and quotes those with
// spaces, which would change the prompt, while piped stdin is taken as it is. Output is JSONL:
// step_start, text, reasoning, tool_use (part.tool, part.state), step_finish (part.tokens,
// part.cost) and error; nothing else (retries of the model API are not printed, and a
// permission `run` auto-rejected shows as a tool_use in state "error"). Every line carries
// sessionID.
package opencode

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

// Binary is the program name looked up on PATH.
const Binary = "opencode"

// ConfigEnv is OpenCode's variable for inline JSON configuration; the permission modes that
// are not Bypass are expressed through it.
const ConfigEnv = "OPENCODE_CONFIG_CONTENT"

func init() { agent.Register(Adapter{}) }

// Adapter is the opencode agent.
type Adapter struct{}

// Type implements agent.Agent.
func (Adapter) Type() agentsv1alpha1.AgentType { return agentsv1alpha1.AgentOpenCode }

// Capabilities implements agent.Agent.
func (Adapter) Capabilities() agent.Capabilities {
	return agent.Capabilities{CanResume: true, ResumeNeedsSessionID: true, ReportsCost: true}
}

// PermissionSettings maps a permission mode to opencode flags and configuration. `opencode run`
// rejects every permission request it would have to ask about, so "ask" means "refused" here.
func PermissionSettings(m agentsv1alpha1.PermissionMode) (args []string, config map[string]any, err error) {
	switch m {
	case "", agentsv1alpha1.PermissionBypass:
		return []string{"--dangerously-skip-permissions"}, nil, nil
	case agentsv1alpha1.PermissionAcceptEdits:
		return nil, map[string]any{"permission": map[string]any{"edit": "allow", "bash": "ask", "webfetch": "ask"}}, nil
	case agentsv1alpha1.PermissionReadOnly:
		return nil, map[string]any{"permission": map[string]any{"edit": "deny", "bash": "deny", "webfetch": "ask"}}, nil
	}
	return nil, nil, fmt.Errorf("opencode: unknown permission mode %q", m)
}

// ModelProvider is the name of the provider OpenCode is given for the runner's model proxy.
const ModelProvider = "shepherd"

// ModelConfig is the OpenCode configuration that points it at the runner's model proxy: a
// provider of its own on the AI SDK package for the API (both are built into OpenCode, so
// nothing is fetched at run time), listing the session's model, which OpenCode requires.
// model is the session's model ("claude-sonnet-4-5", or "provider/model": the provider part is
// replaced). It returns the configuration and the --model value.
func ModelConfig(m *agent.ModelEndpoint, model string) (map[string]any, string, error) {
	pkg := ""
	switch m.API {
	case agentsv1alpha1.ModelAPIAnthropic:
		pkg = "@ai-sdk/anthropic"
	case agentsv1alpha1.ModelAPIOpenAI:
		pkg = "@ai-sdk/openai"
	default:
		return nil, "", fmt.Errorf("%w: opencode cannot use %s", agent.ErrModelAPI, m.API)
	}
	if _, after, ok := strings.Cut(model, "/"); ok {
		model = after
	}
	if model == "" {
		return nil, "", fmt.Errorf("opencode: with agent.modelAPI, set agent.model (OpenCode needs the model its provider serves)")
	}
	cfg := map[string]any{
		"model":             ModelProvider + "/" + model,
		"enabled_providers": []string{ModelProvider},
		"provider": map[string]any{ModelProvider: map[string]any{
			"npm":     pkg,
			"name":    "Shepherd model proxy",
			"options": map[string]any{"baseURL": m.BaseURL + "/v1", "apiKey": agent.PlaceholderKey},
			"models":  map[string]any{model: map[string]any{"name": model, "tool_call": true}},
		}},
	}
	return cfg, ModelProvider + "/" + model, nil
}

// Command implements agent.Agent.
func (Adapter) Command(t agent.Turn) (agent.Command, error) {
	perm, config, err := PermissionSettings(t.Permission)
	if err != nil {
		return agent.Command{}, err
	}
	model := t.Model
	if t.ModelAPI != nil {
		mcfg, m, err := ModelConfig(t.ModelAPI, t.Model)
		if err != nil {
			return agent.Command{}, err
		}
		if config == nil {
			config = map[string]any{}
		}
		maps.Copy(config, mcfg)
		model = m
	}
	var env []string
	if config != nil {
		raw, err := json.Marshal(config)
		if err != nil {
			return agent.Command{}, fmt.Errorf("opencode: encode config: %w", err)
		}
		env = append(env, ConfigEnv+"="+string(raw))
	}
	args := []string{"run", "--format", "json"}
	if t.Resume {
		if t.SessionID == "" {
			return agent.Command{}, fmt.Errorf("opencode: resuming needs the session id of the conversation")
		}
		args = append(args, "--session", t.SessionID)
	}
	if model != "" {
		args = append(args, "--model", model)
	}
	args = append(args, perm...)
	args = append(args, t.ExtraArgs...)
	if t.Workdir != "" {
		// OpenCode takes its project directory, where its tools run, from $PWD when that is
		// set, not from the process's working directory: a PWD inherited from the runner (its
		// own directory, not the checkout) would make the agent edit and commit elsewhere.
		dir, err := filepath.Abs(t.Workdir)
		if err != nil {
			return agent.Command{}, fmt.Errorf("opencode: workdir: %w", err)
		}
		env = append(env, "PWD="+dir)
	}
	return agent.Command{Name: Binary, Args: args, Env: env, Stdin: t.Prompt}, nil
}

// NewParser implements agent.Agent.
func (Adapter) NewParser() agent.Parser { return &parser{} }

type parser struct {
	sessionID string
	lastText  string
	errors    []string
	steps     int
	lines     int
}

type line struct {
	Type      string `json:"type"`
	SessionID string `json:"sessionID"`
	Part      *struct {
		Type   string  `json:"type"`
		Text   string  `json:"text"`
		Tool   string  `json:"tool"`
		Reason string  `json:"reason"`
		Cost   float64 `json:"cost"`
		Tokens *struct {
			Input     int64 `json:"input"`
			Output    int64 `json:"output"`
			Reasoning int64 `json:"reasoning"`
			Cache     struct {
				Read  int64 `json:"read"`
				Write int64 `json:"write"`
			} `json:"cache"`
		} `json:"tokens"`
		State *struct {
			Status string          `json:"status"`
			Input  json.RawMessage `json:"input"`
			Output string          `json:"output"`
			Error  string          `json:"error"`
		} `json:"state"`
	} `json:"part"`
	// Error is decoded by errorText: an object with a name and data.message as OpenCode
	// prints it today, but also without a name, with a message of its own, or a bare string.
	Error json.RawMessage `json:"error"`
}

// errorText is an error event's text: data.message, else message, else name, else the error
// itself as printed; never empty.
func errorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil && strings.TrimSpace(s) != "" {
		return s
	}
	var e struct {
		Name    string          `json:"name"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if _, err := agent.DecodeLenient(raw, &e); err == nil {
		var data struct {
			Message string `json:"message"`
		}
		_, _ = agent.DecodeLenient(e.Data, &data)
		var dataText string
		_ = json.Unmarshal(e.Data, &dataText)
		for _, t := range []string{data.Message, dataText, e.Message, e.Name} {
			if strings.TrimSpace(t) != "" {
				return t
			}
		}
	}
	if t := strings.TrimSpace(string(raw)); t != "" && t != "null" && t != "{}" {
		return "session error: " + clip.To(t, 512)
	}
	return "session error"
}

func (p *parser) Line(raw []byte) []agent.Event {
	if strings.TrimSpace(string(raw)) == "" {
		return nil
	}
	p.lines++
	var l line
	// Field by field: a field that changed type in a new CLI release is left out, and the
	// line's outcome and cost are still read (agent.DecodeLenient).
	if _, err := agent.DecodeLenient(raw, &l); err != nil {
		return []agent.Event{agent.MalformedLine("opencode", raw, err)}
	}
	var events []agent.Event
	if l.SessionID != "" && l.SessionID != p.sessionID {
		p.sessionID = l.SessionID
		events = append(events, agent.Event{Kind: agent.KindSession, SessionID: l.SessionID})
	}
	active := agent.Event{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}
	switch l.Type {
	case "step_start":
		p.steps++
		events = append(events, active)
	case "text":
		if l.Part != nil && strings.TrimSpace(l.Part.Text) != "" {
			p.lastText = l.Part.Text
			events = append(events, active, agent.Event{Kind: agent.KindText, Text: l.Part.Text})
		}
	case "reasoning":
		events = append(events, active)
	case "tool_use":
		if l.Part != nil {
			ev := agent.Event{Kind: agent.KindToolUse, Tool: l.Part.Tool}
			if l.Part.State != nil {
				ev.Text = clip.To(string(l.Part.State.Input), 512)
			}
			events = append(events, active, ev)
			// OpenCode prints a tool part once it finished: its output (or error) comes with it.
			if st := l.Part.State; st != nil && (st.Status == "completed" || st.Status == "error") {
				out := st.Output
				if st.Status == "error" {
					out = st.Error
				}
				events = append(events, agent.Event{Kind: agent.KindToolResult, Tool: l.Part.Tool,
					Text: clip.To(out, agent.MaxToolResult), IsError: st.Status == "error"})
			}
			if l.Part.State != nil && l.Part.State.Status == "error" && strings.Contains(l.Part.State.Error, "rejected") {
				events = append(events, agent.Event{Kind: agent.KindError, Denied: true, Text: l.Part.Tool + ": " + l.Part.State.Error})
			}
		}
	case "step_finish":
		if l.Part != nil {
			u := agent.Usage{CostUSD: l.Part.Cost}
			if l.Part.Tokens != nil {
				u.InputTokens = l.Part.Tokens.Input + l.Part.Tokens.Cache.Write
				u.OutputTokens = l.Part.Tokens.Output + l.Part.Tokens.Reasoning
				u.CacheReadTokens = l.Part.Tokens.Cache.Read
			}
			events = append(events, agent.Event{Kind: agent.KindUsage, Usage: &u})
		}
	case "error":
		msg := errorText(l.Error)
		p.errors = append(p.errors, msg)
		events = append(events, agent.Event{Kind: agent.KindError, Text: msg})
	}
	return events
}

// Finish reports the turn result: opencode has no result event, the turn ends when the process
// does, and its summary is the last text part.
func (p *parser) Finish() []agent.Event {
	if p.steps == 0 && len(p.errors) == 0 {
		return []agent.Event{{Kind: agent.KindError, Malformed: true,
			Text: fmt.Sprintf("opencode: output ended after %d lines without a step", p.lines)}}
	}
	if len(p.errors) > 0 {
		return []agent.Event{{Kind: agent.KindTurnResult, IsError: true, Text: strings.Join(p.errors, "\n")}}
	}
	var events []agent.Event
	if q := agent.QuestionFromText(p.lastText); q != "" {
		events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
	}
	return append(events, agent.Event{Kind: agent.KindTurnResult, Text: p.lastText})
}
