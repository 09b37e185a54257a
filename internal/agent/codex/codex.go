// Package codex adapts Codex's non-interactive mode:
//
//	codex exec --json --skip-git-repo-check <sandbox flags> [-m M] -                  (first turn)
//	codex exec --json --skip-git-repo-check <sandbox flags> [-m M] resume <THREAD> -  (resumed)
//
// The prompt is read from stdin ("-"). Exec-level flags go before the resume subcommand, where
// codex reads them. Output is JSONL: thread.started (thread_id), turn.started, item.started /
// item.updated / item.completed (agent_message, reasoning, command_execution, file_change,
// mcp_tool_call, web_search, todo_list, error), turn.completed (usage), turn.failed, and error:
// "Reconnecting... n/5" while the CLI retries the model API by itself, any other message when
// it gives up (turn.failed follows). In exec mode codex has no way to ask the human: its
// request_user_input tool answers "unavailable in Default mode", so a question is the final
// message ending with a question mark. The usage of turn.completed is the thread's running
// total (input_tokens include cached_input_tokens), so its events are Cumulative.
package codex

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

// Binary is the program name looked up on PATH.
const Binary = "codex"

func init() { agent.Register(Adapter{}) }

// Adapter is the codex agent.
type Adapter struct{}

// Type implements agent.Agent.
func (Adapter) Type() agentsv1alpha1.AgentType { return agentsv1alpha1.AgentCodex }

// Capabilities implements agent.Agent.
func (Adapter) Capabilities() agent.Capabilities {
	return agent.Capabilities{CanResume: true, ResumeNeedsSessionID: true}
}

// PermissionArgs maps a permission mode to codex's sandbox flags. In exec mode codex never asks
// for approval, so what the sandbox refuses stays refused. Bypass drops codex's own sandbox: the
// pod is the sandbox, and codex's Landlock/seccomp sandbox is often unavailable in a restricted
// container anyway.
func PermissionArgs(m agentsv1alpha1.PermissionMode) ([]string, error) {
	switch m {
	case "", agentsv1alpha1.PermissionBypass:
		return []string{"--dangerously-bypass-approvals-and-sandbox"}, nil
	case agentsv1alpha1.PermissionAcceptEdits:
		return []string{"--sandbox", "workspace-write"}, nil
	case agentsv1alpha1.PermissionReadOnly:
		return []string{"--sandbox", "read-only"}, nil
	}
	return nil, fmt.Errorf("codex: unknown permission mode %q", m)
}

// Command implements agent.Agent.
func (Adapter) Command(t agent.Turn) (agent.Command, error) {
	perm, err := PermissionArgs(t.Permission)
	if err != nil {
		return agent.Command{}, err
	}
	args := append([]string{"exec", "--json", "--skip-git-repo-check"}, OfflineArgs()...)
	args = append(args, perm...)
	if t.Model != "" {
		args = append(args, "-m", t.Model)
	}
	margs, env, err := ModelSettings(t.ModelAPI)
	if err != nil {
		return agent.Command{}, err
	}
	args = append(args, margs...)
	args = append(args, t.ExtraArgs...)
	if t.Resume {
		if t.SessionID == "" {
			return agent.Command{}, fmt.Errorf("codex: resuming needs the thread id of the conversation")
		}
		args = append(args, "resume", t.SessionID)
	}
	args = append(args, "-")
	var dirs []string
	if t.Home != "" {
		// Codex keeps its threads in CODEX_HOME, which must exist. The image's own is on its
		// read-only root file system and goes with the pod; the agent's home is on the volume, so
		// a new pod resumes the thread.
		home := filepath.Join(t.Home, ".codex")
		env, dirs = append(env, "CODEX_HOME="+home), []string{home}
	}
	return agent.Command{Name: Binary, Args: args, Env: env, Stdin: t.Prompt, Dirs: dirs}, nil
}

// OfflineArgs keep Codex from reaching anything but its model API, whatever CODEX_HOME holds
// (the image's config.toml says the same; a CODEX_HOME on the volume starts empty): no update
// check, no plugins (a `git ls-remote` of github.com at start), no remote plugins
// (api.github.com), no analytics.
func OfflineArgs() []string {
	return []string{
		"-c", "check_for_update_on_startup=false",
		"-c", "features.plugins=false",
		"-c", "features.remote_plugin=false",
		"-c", "analytics.enabled=false",
	}
}

// ModelProvider is the name of the model provider Codex is given for the runner's model proxy.
const ModelProvider = "shepherd"

// ModelSettings points Codex at the runner's model proxy: OPENAI_BASE_URL alone is ignored by
// Codex (it tries its own host over WebSockets), so a provider of its own, on the Responses
// wire API, with the key in OPENAI_API_KEY. Codex's exec flags come before `resume`, where it
// reads them.
func ModelSettings(m *agent.ModelEndpoint) (args, env []string, err error) {
	if m == nil {
		return nil, nil, nil
	}
	if m.API != agentsv1alpha1.ModelAPIOpenAI {
		return nil, nil, fmt.Errorf("%w: codex speaks the OpenAI API, not %s", agent.ErrModelAPI, m.API)
	}
	provider := fmt.Sprintf(`model_providers.%s={name=%q,base_url=%q,wire_api="responses",env_key="OPENAI_API_KEY"}`,
		ModelProvider, "Shepherd model proxy", m.BaseURL+"/v1")
	return []string{"-c", fmt.Sprintf("model_provider=%q", ModelProvider), "-c", provider},
		[]string{"OPENAI_API_KEY=" + agent.PlaceholderKey}, nil
}

// NewParser implements agent.Agent.
func (Adapter) NewParser() agent.Parser { return &parser{} }

type parser struct {
	threadID    string
	lastMessage string
	ended       bool
	lines       int
}

type item struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Text     string `json:"text"`
	Command  string `json:"command"`
	Output   string `json:"aggregated_output"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code"`
	Message  string `json:"message"`
	Server   string `json:"server"`
	Tool     string `json:"tool"`
	Query    string `json:"query"`
	Changes  []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
}

type line struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Item     *item  `json:"item"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error   *struct{ Message string } `json:"error"`
	Message string                    `json:"message"`
}

// reconnecting starts the message of an error event codex recovers from by itself.
const reconnecting = "Reconnecting..."

func (p *parser) Line(raw []byte) []agent.Event {
	if strings.TrimSpace(string(raw)) == "" {
		return nil
	}
	p.lines++
	var l line
	// Field by field: a field that changed type in a new CLI release is left out, and the
	// line's outcome and cost are still read (agent.DecodeLenient).
	if _, err := agent.DecodeLenient(raw, &l); err != nil {
		return []agent.Event{agent.MalformedLine("codex", raw, err)}
	}
	active := agent.Event{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}
	switch l.Type {
	case "thread.started":
		p.threadID = l.ThreadID
		return []agent.Event{{Kind: agent.KindSession, SessionID: l.ThreadID}, active}
	case "turn.started":
		return []agent.Event{active}
	case "item.started", "item.updated":
		if l.Item == nil {
			return nil
		}
		if l.Item.Type == "command_execution" && l.Type == "item.started" {
			return []agent.Event{active, {Kind: agent.KindToolUse, Tool: "command_execution", Text: clip.To(l.Item.Command, 512)}}
		}
		return []agent.Event{active}
	case "item.completed":
		if l.Item == nil {
			return nil
		}
		return p.completed(*l.Item)
	case "turn.completed":
		p.ended = true
		var events []agent.Event
		if l.Usage != nil {
			// The thread's totals: a resumed thread counts its earlier turns again.
			events = append(events, agent.Event{Kind: agent.KindUsage, Cumulative: true, SessionID: p.threadID, Usage: &agent.Usage{
				InputTokens: l.Usage.InputTokens - l.Usage.CachedInputTokens, CacheReadTokens: l.Usage.CachedInputTokens,
				OutputTokens: l.Usage.OutputTokens}})
		}
		if q := agent.QuestionFromText(p.lastMessage); q != "" {
			events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
		}
		return append(events, agent.Event{Kind: agent.KindTurnResult, Text: p.lastMessage})
	case "turn.failed":
		p.ended = true
		msg := "turn failed"
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		return []agent.Event{{Kind: agent.KindTurnResult, Text: msg, IsError: true}}
	case "error":
		// Codex reports its own reconnect attempts here ("Reconnecting... 2/5 (...)"); the turn
		// goes on. Any other error is final: turn.failed follows with the same message.
		return []agent.Event{{Kind: agent.KindError, Retrying: strings.HasPrefix(l.Message, reconnecting), Text: clip.To(l.Message, 4096)}}
	}
	return nil
}

func (p *parser) completed(it item) []agent.Event {
	active := agent.Event{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}
	switch it.Type {
	case "agent_message":
		p.lastMessage = it.Text
		return []agent.Event{active, {Kind: agent.KindText, Text: it.Text}}
	case "command_execution":
		if it.Status == "declined" {
			return []agent.Event{{Kind: agent.KindError, Denied: true, Text: "command declined: " + clip.To(it.Command, 300)}}
		}
		failed := it.Status == "failed" || (it.ExitCode != nil && *it.ExitCode != 0)
		return []agent.Event{active, {Kind: agent.KindToolResult, Tool: "command_execution",
			Text: clip.To(it.Output, agent.MaxToolResult), IsError: failed}}
	case "file_change":
		var paths []string
		for _, c := range it.Changes {
			paths = append(paths, c.Kind+" "+c.Path)
		}
		return []agent.Event{active, {Kind: agent.KindToolUse, Tool: "file_change", Text: clip.To(strings.Join(paths, ", "), 512)}}
	case "mcp_tool_call":
		return []agent.Event{active, {Kind: agent.KindToolUse, Tool: it.Server + "." + it.Tool}}
	case "web_search":
		return []agent.Event{active, {Kind: agent.KindToolUse, Tool: "web_search", Text: it.Query}}
	case "error":
		return []agent.Event{{Kind: agent.KindError, Text: it.Message}}
	}
	return []agent.Event{active}
}

func (p *parser) Finish() []agent.Event {
	if p.ended {
		return nil
	}
	return []agent.Event{{Kind: agent.KindError, Malformed: true,
		Text: fmt.Sprintf("codex: output ended after %d lines without turn.completed or turn.failed", p.lines)}}
}
