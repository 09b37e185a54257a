// Package agent is the one interface every coding agent CLI is driven through, plus the registry
// that maps an api AgentType to its adapter. Each adapter lives in its own folder
// (internal/agent/<name>) and registers itself from init; internal/agent/all imports them all.
//
// An adapter only builds argument lists and parses output: the runner executes the command
// (never through a shell), streams its output, and turns the common events into reports.
package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Agent adapts one coding agent CLI.
type Agent interface {
	// Type is the name used in AgentSpec.Type.
	Type() agentsv1alpha1.AgentType
	// Capabilities say what the CLI can do headless.
	Capabilities() Capabilities
	// Command returns the program, arguments and environment for one turn: a first turn when
	// t.Resume is false, otherwise a turn that continues the same conversation.
	Command(t Turn) (Command, error)
	// NewParser returns a parser for the output of one turn's process.
	NewParser() Parser
}

// Capabilities describe an agent CLI's headless behaviour.
type Capabilities struct {
	// CanResume: a later turn continues the conversation of the earlier ones.
	CanResume bool
	// ResumeNeedsSessionID: resuming needs the conversation id the CLI printed (Claude Code,
	// Codex, OpenCode); Aider resumes from its chat-history file instead.
	ResumeNeedsSessionID bool
	// AutoCommits: the CLI commits its own edits (Aider).
	AutoCommits bool
	// ReportsCost: the CLI prints a cost in dollars, not only token counts.
	ReportsCost bool
}

// Turn is the input of one agent process.
type Turn struct {
	// Prompt is the task (first turn) or the follow-up message (resumed turn). It reaches the
	// CLI unchanged, as one argv element or on stdin.
	Prompt string
	// Resume continues the conversation; SessionID names it when the CLI needs an id.
	Resume    bool
	SessionID string
	// Model, empty for the CLI's default.
	Model string
	// Permission is what the agent may do without asking.
	Permission agentsv1alpha1.PermissionMode
	// ExtraArgs are appended unchanged.
	ExtraArgs []string
	// Workdir is the checkout.
	Workdir string
	// StateDir persists with the checkout but outside its working tree, for agent state such as
	// Aider's chat history.
	StateDir string
	// Home is the agent's home directory (on the session's volume, so it outlives the pod), for
	// CLIs that keep their conversations in a directory of their own (Codex's CODEX_HOME).
	Home string
	// ModelAPI, when set, is the runner's model proxy: the CLI must call it instead of its
	// default API, with PlaceholderKey as its key (the proxy adds the real one). The adapter
	// points the CLI at it with its own environment variables or flags.
	ModelAPI *ModelEndpoint
}

// ModelEndpoint is the runner's model proxy as a CLI reaches it.
type ModelEndpoint struct {
	// API is the wire protocol the proxy forwards.
	API agentsv1alpha1.ModelAPIKind
	// BaseURL is the proxy's root (http://127.0.0.1:8737): the proxy serves /v1/... under it.
	BaseURL string
}

// PlaceholderKey is the API key every CLI gets when the model proxy holds the real one: CLIs
// refuse to start without a key, and this one is worth nothing.
const PlaceholderKey = "shepherd-model-proxy-adds-the-key"

// ErrModelAPI says a CLI cannot speak the Project's model API.
var ErrModelAPI = errors.New("the agent cannot use this model API")

// Command is one process to start, with an argument list and no shell.
type Command struct {
	// Name of the program, looked up on PATH.
	Name string
	// Args after the program name.
	Args []string
	// Env holds KEY=VALUE pairs added to the runner's environment.
	Env []string
	// Stdin is written to the process's standard input, which is then closed. Prompts travel here
	// when a positional argument could be mistaken for a flag or be rewritten by the CLI.
	Stdin string
	// Dirs are directories that must exist before the CLI starts (the runner makes them in the
	// agent's container).
	Dirs []string
}

// Parser turns one turn's output, line by line, into common events. Parsers never panic on bad
// input: a malformed or truncated line becomes an Error event with Malformed set.
type Parser interface {
	// Line parses one line of output, without its newline.
	Line(line []byte) []Event
	// Finish is called once after the output ended and returns what only the end reveals (a
	// plain-text agent's turn result, a missing result).
	Finish() []Event
}

// Kind says what an Event carries.
type Kind string

const (
	// KindActivity: State says what the agent is doing.
	KindActivity Kind = "Activity"
	// KindToolUse: the agent used Tool; Text summarises its input.
	KindToolUse Kind = "ToolUse"
	// KindToolResult: the tool call Tool came back with Text (its output, bounded to
	// MaxToolResult); IsError marks a failed call.
	KindToolResult Kind = "ToolResult"
	// KindText: the agent said Text.
	KindText Kind = "Text"
	// KindQuestion: the agent asked the human Text.
	KindQuestion Kind = "Question"
	// KindTurnResult: the turn ended; Text is the agent's summary, IsError tells a failed turn.
	KindTurnResult Kind = "TurnResult"
	// KindError: something went wrong. Retrying marks an error the CLI retries by itself (an
	// activity, not a crash); Malformed marks output the parser could not read; Denied marks a
	// refused permission.
	KindError Kind = "Error"
	// KindUsage: cost and tokens of one turn (or one step of it); add them up, unless the event
	// is Cumulative.
	KindUsage Kind = "Usage"
	// KindSession: the agent's own conversation id and the model in use.
	KindSession Kind = "Session"
)

// MaxToolResult bounds the output a KindToolResult event carries: enough to read what a command
// printed, not a whole file the agent read.
const MaxToolResult = 4096

// Event is one thing the agent did, in the common vocabulary of every adapter.
type Event struct {
	Kind Kind `json:"kind"`
	// State of a KindActivity event.
	State agentsv1alpha1.ActivityState `json:"state,omitempty"`
	// Tool named by a KindToolUse event.
	Tool string `json:"tool,omitempty"`
	// Text: tool input summary, said text, question, summary or error message.
	Text      string `json:"text,omitempty"`
	IsError   bool   `json:"isError,omitempty"`
	Retrying  bool   `json:"retrying,omitempty"`
	Malformed bool   `json:"malformed,omitempty"`
	Denied    bool   `json:"denied,omitempty"`
	Usage     *Usage `json:"usage,omitempty"`
	// Cumulative marks a KindUsage event whose Usage is the running total of the conversation
	// named by SessionID, not this turn's share: Codex reports a resumed thread's totals. The
	// runner subtracts the total it saw last for that conversation.
	Cumulative bool   `json:"cumulative,omitempty"`
	SessionID  string `json:"sessionID,omitempty"`
	Model      string `json:"model,omitempty"`
}

// Usage is what one turn or step cost.
type Usage struct {
	CostUSD         float64 `json:"costUSD,omitempty"`
	InputTokens     int64   `json:"inputTokens,omitempty"`
	OutputTokens    int64   `json:"outputTokens,omitempty"`
	CacheReadTokens int64   `json:"cacheReadTokens,omitempty"`
}

// Add accumulates o into u.
func (u *Usage) Add(o Usage) {
	u.CostUSD += o.CostUSD
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheReadTokens += o.CacheReadTokens
}

var (
	mu       sync.RWMutex
	registry = map[agentsv1alpha1.AgentType]Agent{}
)

// Register makes an adapter available under its Type. Adapters call it from init.
func Register(a Agent) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[a.Type()]; dup {
		panic(fmt.Sprintf("agent %q registered twice", a.Type()))
	}
	registry[a.Type()] = a
}

// Custom is a custom agent's settings (agent type custom): the command it runs and the output
// format it prints.
type Custom struct {
	Command []string
	Output  agentsv1alpha1.CustomOutput
}

// Configurable is an adapter that takes per-task settings: the custom agent.
type Configurable interface {
	// Configure returns the adapter for a task with these settings.
	Configure(c *Custom) (Agent, error)
}

// ForTask returns the adapter for t, configured with c when the adapter takes settings.
func ForTask(t agentsv1alpha1.AgentType, c *Custom) (Agent, error) {
	a, err := Get(t)
	if err != nil {
		return nil, err
	}
	if cfg, ok := a.(Configurable); ok {
		return cfg.Configure(c)
	}
	return a, nil
}

// Get returns the adapter for t.
func Get(t agentsv1alpha1.AgentType) (Agent, error) {
	mu.RLock()
	defer mu.RUnlock()
	a, ok := registry[t]
	if !ok {
		return nil, fmt.Errorf("unknown agent type %q (known: %s)", t, strings.Join(typeNames(), ", "))
	}
	return a, nil
}

// Types lists the registered agent types, sorted.
func Types() []agentsv1alpha1.AgentType {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]agentsv1alpha1.AgentType, 0, len(registry))
	for _, n := range typeNames() {
		out = append(out, agentsv1alpha1.AgentType(n))
	}
	return out
}

func typeNames() []string {
	names := make([]string, 0, len(registry))
	for t := range registry {
		names = append(names, string(t))
	}
	sort.Strings(names)
	return names
}

// MaxLine bounds one line of agent output; longer lines are cut and reported as malformed.
const MaxLine = 8 << 20

// ParseAll feeds every line of r to p and returns all events, Finish included.
// Tests and tools use it; the runner feeds lines as they arrive.
func ParseAll(p Parser, r io.Reader) []Event {
	var events []Event
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := ReadLine(br)
		if len(line) > 0 || err == nil {
			events = append(events, p.Line(line)...)
		}
		if err != nil {
			break
		}
	}
	return append(events, p.Finish()...)
}

// ReadLine reads one line without its newline, cutting it at MaxLine (the rest of the line is
// discarded). It returns io.EOF after the last line.
func ReadLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	cut := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !cut && len(buf)+len(chunk) <= MaxLine {
			buf = append(buf, chunk...)
		} else if !cut {
			buf = append(buf, chunk[:MaxLine-len(buf)]...)
			cut = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(buf) == 0 {
				return nil, err
			}
			return bytes.TrimRight(buf, "\r\n"), nil
		}
		return bytes.TrimRight(buf, "\r\n"), nil
	}
}

// QuestionFromText applies the question heuristic shared by the adapters whose CLIs have no
// headless way to ask: when the agent's final text ends with a question mark (ignoring trailing
// markdown emphasis), its last paragraph is the question for the human. It returns "" otherwise.
func QuestionFromText(s string) string {
	s = strings.TrimSpace(s)
	trimmed := strings.TrimRight(s, "*_` \t\n")
	if !strings.HasSuffix(trimmed, "?") && !strings.HasSuffix(trimmed, "？") {
		return ""
	}
	paras := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n\n")
	q := strings.TrimSpace(paras[len(paras)-1])
	return clip.To(q, 4096)
}

// MalformedLine is the event for output a parser could not read.
func MalformedLine(agent string, line []byte, err error) Event {
	return Event{Kind: KindError, Malformed: true,
		Text: fmt.Sprintf("%s: unreadable output line (%v): %s", agent, err, clip.To(string(line), 200))}
}
