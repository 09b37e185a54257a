// Package claudecode adapts Claude Code's print mode:
//
//	claude -p --output-format stream-json --verbose --permission-mode <mode> [--model M] [--resume ID]
//
// with the prompt on stdin (so a prompt that starts with "-" is never read as a flag). Output is
// one JSON object per line: system/init (session id, model), system/api_retry (the CLI retries
// the model API by itself), assistant messages (text and tool_use blocks; an API error the CLI
// gave up on arrives as one with is_api_error_message), user messages (tool results) and a final
// result (summary, cost, tokens; errors[] when an error_* subtype has no summary).
//
// In print mode the CLI offers no AskUserQuestion tool and refuses it when the model calls it
// anyway; such a call still carries the model's question, and a final result ending with a
// question mark is one too.
package claudecode

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

// Binary is the program name looked up on PATH.
const Binary = "claude"

// AskTool is Claude Code's tool for asking the user a structured question.
const AskTool = "AskUserQuestion"

func init() { agent.Register(Adapter{}) }

// Adapter is the claude-code agent.
type Adapter struct{}

// Type implements agent.Agent.
func (Adapter) Type() agentsv1alpha1.AgentType { return agentsv1alpha1.AgentClaudeCode }

// Capabilities implements agent.Agent.
func (Adapter) Capabilities() agent.Capabilities {
	return agent.Capabilities{CanResume: true, ResumeNeedsSessionID: true, ReportsCost: true}
}

// PermissionFlag maps a Shepherd permission mode to --permission-mode. ReadOnly is Claude Code's
// plan mode: it reads and plans, and edits nothing.
func PermissionFlag(m agentsv1alpha1.PermissionMode) (string, error) {
	switch m {
	case "", agentsv1alpha1.PermissionBypass:
		return "bypassPermissions", nil
	case agentsv1alpha1.PermissionAcceptEdits:
		return "acceptEdits", nil
	case agentsv1alpha1.PermissionReadOnly:
		return "plan", nil
	}
	return "", fmt.Errorf("claude-code: unknown permission mode %q", m)
}

// Command implements agent.Agent.
func (Adapter) Command(t agent.Turn) (agent.Command, error) {
	mode, err := PermissionFlag(t.Permission)
	if err != nil {
		return agent.Command{}, err
	}
	args := []string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", mode}
	if t.Model != "" {
		args = append(args, "--model", t.Model)
	}
	if t.Resume {
		if t.SessionID == "" {
			return agent.Command{}, fmt.Errorf("claude-code: resuming needs the session id of the conversation")
		}
		args = append(args, "--resume", t.SessionID)
	}
	args = append(args, t.ExtraArgs...)
	env, err := ModelEnv(t.ModelAPI)
	if err != nil {
		return agent.Command{}, err
	}
	return agent.Command{Name: Binary, Args: args, Env: env, Stdin: t.Prompt}, nil
}

// ModelEnv points Claude Code at the runner's model proxy: it appends /v1/messages to
// ANTHROPIC_BASE_URL and sends ANTHROPIC_API_KEY as x-api-key.
func ModelEnv(m *agent.ModelEndpoint) ([]string, error) {
	if m == nil {
		return nil, nil
	}
	if m.API != agentsv1alpha1.ModelAPIAnthropic {
		return nil, fmt.Errorf("%w: claude-code speaks the Anthropic API, not %s", agent.ErrModelAPI, m.API)
	}
	return []string{"ANTHROPIC_BASE_URL=" + m.BaseURL, "ANTHROPIC_API_KEY=" + agent.PlaceholderKey}, nil
}

// NewParser implements agent.Agent.
func (Adapter) NewParser() agent.Parser { return &parser{} }

type parser struct {
	sawResult bool
	lines     int
	// tools names the tool of each call id seen, for its result; bounded by maxToolIDs.
	tools map[string]string
}

// maxToolIDs bounds the call ids a parser remembers (a turn makes tens of calls).
const maxToolIDs = 4096

type contentBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result: the call it answers, its content (a string or text blocks), and whether the
	// tool failed.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type message struct {
	Model   string         `json:"model"`
	Content []contentBlock `json:"content"`
}

type line struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	// api_retry
	Attempt     int             `json:"attempt"`
	MaxRetries  int             `json:"max_retries"`
	RetryDelay  float64         `json:"retry_delay_ms"`
	ErrorStatus int             `json:"error_status"`
	Error       json.RawMessage `json:"error"`
	// IsAPIErrorMessage marks an assistant message the CLI made up to carry a model API error.
	IsAPIErrorMessage bool `json:"is_api_error_message"`
	// assistant / user: an object; system events such as permission_denied carry a string
	// message instead, so it is decoded by type.
	Message json.RawMessage `json:"message"`
	// result; Errors explains an error_* subtype that has no result text. total_cost_usd is the
	// conversation's running cost (a resumed session starts from its earlier turns' cost);
	// model_usage_since_last_result holds this process's own share per model.
	SinceLastResult map[string]struct {
		CostUSD float64 `json:"costUSD"`
	} `json:"model_usage_since_last_result"`
	IsError           bool     `json:"is_error"`
	Result            string   `json:"result"`
	Errors            []string `json:"errors"`
	TotalCostUSD      float64  `json:"total_cost_usd"`
	PermissionDenials []struct {
		ToolName string `json:"tool_name"`
	} `json:"permission_denials"`
	Usage *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
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
		return []agent.Event{agent.MalformedLine("claude-code", raw, err)}
	}
	switch l.Type {
	case "system":
		switch l.Subtype {
		case "init":
			return []agent.Event{
				{Kind: agent.KindSession, SessionID: l.SessionID, Model: l.Model},
				{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive},
			}
		case "api_retry":
			status := ""
			if l.ErrorStatus != 0 {
				status = fmt.Sprintf("%d ", l.ErrorStatus)
			}
			return []agent.Event{{Kind: agent.KindError, Retrying: true,
				Text: fmt.Sprintf("model API retry %d/%d in %.0fms: %s%s", l.Attempt, l.MaxRetries, l.RetryDelay, status, errorText(l.Error))}}
		}
		return nil
	case "assistant":
		if len(l.Message) == 0 {
			return nil
		}
		var msg message
		if _, err := agent.DecodeLenient(l.Message, &msg); err != nil {
			return []agent.Event{agent.MalformedLine("claude-code", raw, err)}
		}
		events := []agent.Event{{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}}
		if l.IsAPIErrorMessage {
			// The model API refused the request for good; the result that follows ends the turn.
			var texts []string
			for _, b := range msg.Content {
				if b.Type == "text" {
					texts = append(texts, b.Text)
				}
			}
			return []agent.Event{{Kind: agent.KindError, Text: clip.To(strings.Join(texts, "\n"), 4096)}}
		}
		for _, b := range msg.Content {
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) != "" {
					events = append(events, agent.Event{Kind: agent.KindText, Text: b.Text})
				}
			case "tool_use":
				if p.tools == nil {
					p.tools = map[string]string{}
				}
				if len(p.tools) < maxToolIDs && b.ID != "" {
					p.tools[b.ID] = b.Name
				}
				events = append(events, agent.Event{Kind: agent.KindToolUse, Tool: b.Name, Text: clip.To(string(b.Input), 512)})
				if b.Name == AskTool {
					if q := askQuestion(b.Input); q != "" {
						events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
					}
				}
			}
		}
		return events
	case "user":
		events := []agent.Event{{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}}
		var msg message
		if len(l.Message) == 0 || l.Message[0] != '{' {
			return events
		}
		if _, err := agent.DecodeLenient(l.Message, &msg); err != nil {
			return events
		}
		for _, b := range msg.Content {
			if b.Type == "tool_result" {
				events = append(events, agent.Event{Kind: agent.KindToolResult, Tool: p.tools[b.ToolUseID],
					Text: clip.To(resultText(b.Content), agent.MaxToolResult), IsError: b.IsError})
			}
		}
		return events
	case "result":
		p.sawResult = true
		var events []agent.Event
		u := agent.Usage{CostUSD: l.TotalCostUSD}
		if l.SinceLastResult != nil {
			u.CostUSD = 0
			for _, m := range l.SinceLastResult {
				u.CostUSD += m.CostUSD
			}
		}
		if l.Usage != nil {
			u.InputTokens = l.Usage.InputTokens + l.Usage.CacheCreationInputTokens
			u.OutputTokens = l.Usage.OutputTokens
			u.CacheReadTokens = l.Usage.CacheReadInputTokens
		}
		events = append(events, agent.Event{Kind: agent.KindUsage, Usage: &u})
		if l.SessionID != "" {
			events = append(events, agent.Event{Kind: agent.KindSession, SessionID: l.SessionID})
		}
		if len(l.PermissionDenials) > 0 {
			var tools []string
			for _, d := range l.PermissionDenials {
				tools = append(tools, d.ToolName)
			}
			events = append(events, agent.Event{Kind: agent.KindError, Denied: true,
				Text: "permission denied for " + strings.Join(tools, ", ")})
		}
		isErr := l.IsError || (l.Subtype != "" && l.Subtype != "success")
		if !isErr {
			if q := agent.QuestionFromText(l.Result); q != "" {
				events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
			}
		}
		summary := l.Result
		if isErr && summary == "" {
			summary = strings.Join(l.Errors, "\n")
		}
		if isErr && summary == "" {
			summary = "turn ended with " + l.Subtype
		}
		return append(events, agent.Event{Kind: agent.KindTurnResult, Text: summary, IsError: isErr})
	}
	return nil
}

func (p *parser) Finish() []agent.Event {
	if p.sawResult {
		return nil
	}
	return []agent.Event{{Kind: agent.KindError, Malformed: true,
		Text: fmt.Sprintf("claude-code: output ended after %d lines without a result event", p.lines)}}
}

// askQuestion joins the questions of an AskUserQuestion tool input.
func askQuestion(input json.RawMessage) string {
	var in struct {
		Question  string `json:"question"`
		Questions []struct {
			Question string `json:"question"`
		} `json:"questions"`
	}
	if json.Unmarshal(input, &in) != nil {
		return ""
	}
	qs := []string{}
	if in.Question != "" {
		qs = append(qs, in.Question)
	}
	for _, q := range in.Questions {
		if q.Question != "" {
			qs = append(qs, q.Question)
		}
	}
	return clip.To(strings.Join(qs, "\n"), 4096)
}

// resultText is a tool_result's content: a string, or the text of its blocks.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []contentBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

func errorText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "unknown error"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return clip.To(string(raw), 300)
}
