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
	"path/filepath"
	"strings"

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

// PermissionSettings maps a permission mode to opencode flags and environment. `opencode run`
// rejects every permission request it would have to ask about, so "ask" means "refused" here.
func PermissionSettings(m agentsv1alpha1.PermissionMode) (args, env []string, err error) {
	switch m {
	case "", agentsv1alpha1.PermissionBypass:
		return []string{"--dangerously-skip-permissions"}, nil, nil
	case agentsv1alpha1.PermissionAcceptEdits:
		return nil, []string{ConfigEnv + `={"permission":{"edit":"allow","bash":"ask","webfetch":"ask"}}`}, nil
	case agentsv1alpha1.PermissionReadOnly:
		return nil, []string{ConfigEnv + `={"permission":{"edit":"deny","bash":"deny","webfetch":"ask"}}`}, nil
	}
	return nil, nil, fmt.Errorf("opencode: unknown permission mode %q", m)
}

// Command implements agent.Agent.
func (Adapter) Command(t agent.Turn) (agent.Command, error) {
	perm, env, err := PermissionSettings(t.Permission)
	if err != nil {
		return agent.Command{}, err
	}
	args := []string{"run", "--format", "json"}
	if t.Resume {
		if t.SessionID == "" {
			return agent.Command{}, fmt.Errorf("opencode: resuming needs the session id of the conversation")
		}
		args = append(args, "--session", t.SessionID)
	}
	if t.Model != "" {
		args = append(args, "--model", t.Model)
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
			Error  string          `json:"error"`
		} `json:"state"`
	} `json:"part"`
	Error *struct {
		Name string `json:"name"`
		Data struct {
			Message string `json:"message"`
		} `json:"data"`
	} `json:"error"`
}

func (p *parser) Line(raw []byte) []agent.Event {
	if strings.TrimSpace(string(raw)) == "" {
		return nil
	}
	p.lines++
	var l line
	if err := json.Unmarshal(raw, &l); err != nil {
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
				ev.Text = agent.Truncate(string(l.Part.State.Input), 512)
			}
			events = append(events, active, ev)
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
		msg := "session error"
		if l.Error != nil {
			msg = l.Error.Name
			if l.Error.Data.Message != "" {
				msg = l.Error.Data.Message
			}
		}
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
