// Package gemini adapts Gemini CLI's headless mode:
//
//	gemini --output-format stream-json --approval-mode <yolo|auto_edit|default> --skip-trust [--model M] [--resume ID]
//
// with the prompt on stdin: without --prompt and with stdin not a terminal, the CLI runs
// headless and takes what it reads as the prompt, unchanged (as an argument, a prompt starting
// with "-" is refused: `-p "--resume evil"` gives "Not enough arguments following: p"). Output is one JSON object per line: init (session_id, model),
// message (the user's prompt, then the model's text as role "assistant" pieces with delta true),
// tool_use (tool_name, tool_id, parameters), tool_result (tool_id, status, output, error), error
// (severity, message: a loop detected, an invalid stream) and result (status, error, stats).
// Retries of the model API are not printed (they go to stderr), so a long outage shows as a
// silent turn.
//
// Headless, the CLI leaves out every tool that would ask for approval: under auto_edit the
// shell, under default every tool that changes anything, and always its ask_user tool. A model
// that calls one anyway gets a tool_result error "Tool ... not found". A question is therefore
// the final text ending with a question mark, or an ask_user call the model made anyway.
//
// The result's stats are the process's own (a resumed session starts counting from zero):
// input_tokens is the prompt tokens including the cached ones, cached the cached ones, input the
// others, output_tokens the candidates' tokens (thoughts are not in it). No cost is printed.
package gemini

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

// Binary is the program name looked up on PATH.
const Binary = "gemini"

// AskTool is Gemini CLI's tool for asking the user, which it does not offer headless.
const AskTool = "ask_user"

func init() { agent.Register(Adapter{}) }

// Adapter is the gemini agent.
type Adapter struct{}

// Type implements agent.Agent.
func (Adapter) Type() agentsv1alpha1.AgentType { return agentsv1alpha1.AgentGemini }

// Capabilities implements agent.Agent.
func (Adapter) Capabilities() agent.Capabilities {
	return agent.Capabilities{CanResume: true, ResumeNeedsSessionID: true}
}

// ApprovalMode maps a permission mode to --approval-mode. Headless, the CLI offers the model
// only the tools the mode runs without asking: yolo all of them, auto_edit the file tools but
// not the shell, default only those that read (the plan mode would still let the model write
// plans under its home, and offers exit_plan_mode).
func ApprovalMode(m agentsv1alpha1.PermissionMode) (string, error) {
	switch m {
	case "", agentsv1alpha1.PermissionBypass:
		return "yolo", nil
	case agentsv1alpha1.PermissionAcceptEdits:
		return "auto_edit", nil
	case agentsv1alpha1.PermissionReadOnly:
		return "default", nil
	}
	return "", fmt.Errorf("gemini: unknown permission mode %q", m)
}

// Command implements agent.Agent.
func (Adapter) Command(t agent.Turn) (agent.Command, error) {
	mode, err := ApprovalMode(t.Permission)
	if err != nil {
		return agent.Command{}, err
	}
	// --skip-trust: the checkout is the session's own. An untrusted folder makes a headless run
	// exit (and would override the approval mode to default).
	args := []string{"--output-format", "stream-json", "--approval-mode", mode, "--skip-trust"}
	if t.Model != "" {
		args = append(args, "--model", t.Model)
	}
	if t.Resume {
		if t.SessionID == "" {
			return agent.Command{}, fmt.Errorf("gemini: resuming needs the session id of the conversation")
		}
		args = append(args, "--resume", t.SessionID)
	}
	args = append(args, t.ExtraArgs...)
	env, err := ModelEnv(t.ModelAPI)
	if err != nil {
		return agent.Command{}, err
	}
	env = append(env, Env...)
	if t.Home != "" {
		// The CLI keeps its sessions (which --resume reads), settings and project registry in
		// $GEMINI_CLI_HOME/.gemini, else $HOME/.gemini: on the volume, so a new pod resumes.
		env = append(env, "GEMINI_CLI_HOME="+t.Home)
	}
	return agent.Command{Name: Binary, Args: args, Env: env, Stdin: t.Prompt}, nil
}

// Env is what every turn runs with. Without GEMINI_CLI_NO_RELAUNCH the CLI starts a second
// Node.js process to raise its heap limit to half of the machine's memory (not the pod's):
// one process starts faster and gets the runner's signals directly. Telemetry is off by
// default; the variable overrides any settings file that turns it on.
//
// Its shell tool runs commands with GIT_CONFIG_SYSTEM and GIT_CONFIG_GLOBAL set to /dev/null,
// so the agent container's system configuration (internal/runner AgentGitConfig: the checkout
// and the mirror belong to the runner's uid, and git refuses a repository another user owns)
// does not reach the agent's git, and `git commit` fails with "dubious ownership". It keeps
// the command-scope entries of GIT_CONFIG_COUNT, adding its own after them: safe.directory is
// honoured there (a protected scope), so it goes in as the first one.
var Env = []string{"GEMINI_CLI_NO_RELAUNCH=true", "GEMINI_TELEMETRY_ENABLED=false",
	"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*"}

// ModelEnv points Gemini CLI at the runner's model proxy: GOOGLE_GEMINI_BASE_URL replaces the
// API's host (the CLI appends /v1beta/models/...; a plain http URL is accepted for loopback
// only) and GEMINI_API_KEY is sent as x-goog-api-key. This version takes a base URL without a
// settings file that selects the API key ("security.auth.selectedType": "gemini-api-key") for
// another kind of login, which headless mode then refuses ("Invalid auth method selected"): the
// agent image's /etc/gemini-cli/settings.json selects it.
func ModelEnv(m *agent.ModelEndpoint) ([]string, error) {
	if m == nil {
		return nil, nil
	}
	if m.API != agentsv1alpha1.ModelAPIGemini {
		return nil, fmt.Errorf("%w: gemini speaks the Gemini API, not %s", agent.ErrModelAPI, m.API)
	}
	return []string{"GOOGLE_GEMINI_BASE_URL=" + m.BaseURL, "GEMINI_API_KEY=" + agent.PlaceholderKey}, nil
}

// NewParser implements agent.Agent.
func (Adapter) NewParser() agent.Parser { return &parser{} }

type parser struct {
	// text is the model's message being streamed; last the last whole message since the last
	// tool call, the turn's summary.
	text      strings.Builder
	streaming bool
	last      string
	// tools names the tool of each call id seen, for its result; bounded by maxToolIDs.
	tools map[string]string
	ended bool
	lines int
}

// maxToolIDs bounds the call ids a parser remembers (a turn makes tens of calls).
const maxToolIDs = 4096

// maxText bounds the model's message the parser gathers from its pieces.
const maxText = 1 << 20

type line struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Model     string          `json:"model"`
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Delta     bool            `json:"delta"`
	ToolName  string          `json:"tool_name"`
	ToolID    string          `json:"tool_id"`
	Params    json.RawMessage `json:"parameters"`
	Status    string          `json:"status"`
	Output    string          `json:"output"`
	Severity  string          `json:"severity"`
	Message   string          `json:"message"`
	// Error is decoded by errorOf: {type, message} as the CLI prints it, or a bare string.
	Error json.RawMessage `json:"error"`
	Stats *struct {
		InputTokens  int64  `json:"input_tokens"`
		OutputTokens int64  `json:"output_tokens"`
		Cached       int64  `json:"cached"`
		Input        *int64 `json:"input"`
	} `json:"stats"`
}

// errorOf reads a tool_result's or result's error: its type and message.
func errorOf(raw json.RawMessage) (typ, msg string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return "", s
	}
	var e struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if _, err := agent.DecodeLenient(raw, &e); err == nil {
		return e.Type, e.Message
	}
	return "", clip.To(string(raw), 512)
}

func (p *parser) Line(raw []byte) []agent.Event {
	if strings.TrimSpace(string(raw)) == "" {
		return nil
	}
	p.lines++
	var l line
	// Field by field: a field that changed type in a new CLI release is left out, and the
	// line's outcome and usage are still read (agent.DecodeLenient).
	if _, err := agent.DecodeLenient(raw, &l); err != nil {
		return []agent.Event{agent.MalformedLine("gemini", raw, err)}
	}
	active := agent.Event{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}
	if l.Type == "message" && l.Role == "assistant" {
		if p.text.Len()+len(l.Content) <= maxText {
			p.text.WriteString(l.Content)
		}
		p.streaming = true
		if !l.Delta {
			return append([]agent.Event{active}, p.flush()...)
		}
		return []agent.Event{active}
	}
	// Any other line ends the message being streamed.
	events := p.flush()
	switch l.Type {
	case "init":
		ev := agent.Event{Kind: agent.KindSession, SessionID: l.SessionID}
		// Without --model the CLI routes each request itself and names no model ("auto").
		if !strings.HasPrefix(l.Model, "auto") {
			ev.Model = l.Model
		}
		events = append(events, ev, active)
	case "message":
		events = append(events, active)
	case "tool_use":
		p.last = ""
		if p.tools == nil {
			p.tools = map[string]string{}
		}
		if len(p.tools) < maxToolIDs && l.ToolID != "" {
			p.tools[l.ToolID] = l.ToolName
		}
		events = append(events, active, agent.Event{Kind: agent.KindToolUse, Tool: l.ToolName, Text: clip.To(string(l.Params), 512)})
		if l.ToolName == AskTool {
			if q := askQuestion(l.Params); q != "" {
				events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
			}
		}
	case "tool_result":
		typ, msg := errorOf(l.Error)
		failed := l.Status == "error" || msg != ""
		out := l.Output
		if out == "" {
			out = msg
		}
		events = append(events, active, agent.Event{Kind: agent.KindToolResult, Tool: p.tools[l.ToolID],
			Text: clip.To(out, agent.MaxToolResult), IsError: failed})
		if typ == "policy_violation" {
			events = append(events, agent.Event{Kind: agent.KindError, Denied: true,
				Text: clip.To(p.tools[l.ToolID]+": "+msg, 4096)})
		}
	case "error":
		msg := l.Message
		if msg == "" {
			msg = "gemini: error (" + l.Severity + ")"
		}
		events = append(events, agent.Event{Kind: agent.KindError, Text: clip.To(msg, 4096)})
	case "result":
		p.ended = true
		if l.Stats != nil {
			u := agent.Usage{OutputTokens: l.Stats.OutputTokens, CacheReadTokens: l.Stats.Cached}
			if l.Stats.Input != nil {
				u.InputTokens = *l.Stats.Input
			} else {
				u.InputTokens = max(l.Stats.InputTokens-l.Stats.Cached, 0)
			}
			events = append(events, agent.Event{Kind: agent.KindUsage, Usage: &u})
		}
		if l.Status != "success" {
			_, msg := errorOf(l.Error)
			if msg == "" {
				msg = "turn ended with status " + l.Status
			}
			return append(events, agent.Event{Kind: agent.KindTurnResult, Text: clip.To(msg, 4096), IsError: true})
		}
		if q := agent.QuestionFromText(p.last); q != "" {
			events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
		}
		events = append(events, agent.Event{Kind: agent.KindTurnResult, Text: p.last})
	}
	return events
}

// flush ends the model's message being streamed: it is said, and it is the turn's summary
// unless a tool call follows.
func (p *parser) flush() []agent.Event {
	if !p.streaming {
		return nil
	}
	text := p.text.String()
	p.text.Reset()
	p.streaming = false
	if strings.TrimSpace(text) == "" {
		return nil
	}
	p.last = text
	return []agent.Event{{Kind: agent.KindText, Text: text}}
}

// Finish reports what only the end shows: a message still being streamed, and output that ended
// without a result (the CLI exited first: an unknown --resume id prints to stderr only).
func (p *parser) Finish() []agent.Event {
	events := p.flush()
	if p.ended {
		return events
	}
	return append(events, agent.Event{Kind: agent.KindError, Malformed: true,
		Text: fmt.Sprintf("gemini: output ended after %d lines without a result event", p.lines)})
}

// askQuestion joins the questions of an ask_user call.
func askQuestion(params json.RawMessage) string {
	var in struct {
		Questions []struct {
			Question string `json:"question"`
		} `json:"questions"`
	}
	if _, err := agent.DecodeLenient(params, &in); err != nil {
		return ""
	}
	var qs []string
	for _, q := range in.Questions {
		if strings.TrimSpace(q.Question) != "" {
			qs = append(qs, q.Question)
		}
	}
	return clip.To(strings.Join(qs, "\n"), 4096)
}
