package gemini

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/agent/agenttest"
)

func parseFile(t *testing.T, name string) []agent.Event {
	return agenttest.ParseFile(t, Adapter{}.NewParser(), name)
}

func kinds(events []agent.Event, k agent.Kind) []agent.Event { return agenttest.Kinds(events, k) }

func TestCommand(t *testing.T) {
	hostile := "--resume evil -m x\n$(id) `id` \"q\" 'q' ; | & ünï 🚀 @secret.txt"
	head := []string{"--output-format", "stream-json", "--approval-mode"}
	with := func(rest ...string) []string { return append(append([]string{}, head...), rest...) }
	tests := []struct {
		name string
		turn agent.Turn
		want []string
		env  []string
	}{
		{"first turn", agent.Turn{Prompt: hostile}, with("yolo", "--skip-trust"), Env},
		{"accept edits, a model", agent.Turn{Prompt: hostile, Permission: agentsv1alpha1.PermissionAcceptEdits, Model: "gemini-2.5-pro"},
			with("auto_edit", "--skip-trust", "--model", "gemini-2.5-pro"), Env},
		{"resumed read only, extra args after", agent.Turn{Prompt: hostile, Resume: true, SessionID: "86912650-9693-4498-830a-2be9db0ad0f7",
			Permission: agentsv1alpha1.PermissionReadOnly, ExtraArgs: []string{"--include-directories", "../docs"}},
			with("default", "--skip-trust", "--resume", "86912650-9693-4498-830a-2be9db0ad0f7", "--include-directories", "../docs"), Env},
		{"its home on the volume", agent.Turn{Prompt: hostile, Home: "/shepherd/workspace/homes/s"}, with("yolo", "--skip-trust"),
			append(append([]string{}, Env...), "GEMINI_CLI_HOME=/shepherd/workspace/homes/s")},
		{"through the model proxy", agent.Turn{Prompt: hostile, Permission: agentsv1alpha1.PermissionBypass,
			ModelAPI: &agent.ModelEndpoint{API: agentsv1alpha1.ModelAPIGemini, BaseURL: "http://127.0.0.1:8737"}},
			with("yolo", "--skip-trust"),
			append([]string{"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8737", "GEMINI_API_KEY=" + agent.PlaceholderKey}, Env...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd, err := Adapter{}.Command(tt.turn)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Name).To(Equal("gemini"))
			g.Expect(cmd.Args).To(Equal(tt.want))
			g.Expect(cmd.Stdin).To(Equal(hostile), "the prompt goes on stdin, unchanged, never on the command line")
			g.Expect(cmd.Env).To(Equal(tt.env))
			g.Expect(cmd.Dirs).To(BeEmpty())
		})
	}
	g := NewWithT(t)
	for _, api := range []agentsv1alpha1.ModelAPIKind{agentsv1alpha1.ModelAPIAnthropic, agentsv1alpha1.ModelAPIOpenAI} {
		_, err := Adapter{}.Command(agent.Turn{Prompt: "x", ModelAPI: &agent.ModelEndpoint{API: api, BaseURL: "http://127.0.0.1:8737"}})
		g.Expect(err).To(MatchError(agent.ErrModelAPI), "Gemini CLI speaks the Gemini API only, not %s", api)
	}
	_, err := Adapter{}.Command(agent.Turn{Prompt: "x", Resume: true})
	g.Expect(err).To(MatchError(ContainSubstring("session id")))
	_, err = Adapter{}.Command(agent.Turn{Prompt: "x", Permission: "Everything"})
	g.Expect(err).To(HaveOccurred())
	g.Expect(Adapter{}.Capabilities()).To(Equal(agent.Capabilities{CanResume: true, ResumeNeedsSessionID: true}))
}

// The fixtures are the real Gemini CLI's output (hack/agent-clis.versions) against the scripted
// model server, captured by `go test ./test/realagents -update-fixtures` (turn, retry_question,
// error) or by hand with the same setup (rejected: AcceptEdits, the model runs the shell, which
// auto_edit leaves out headless); malformed.jsonl is made up.

// sessionID is the session_id of the fixture's first line.
func sessionID(t *testing.T, name string) string {
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		SessionID string `json:"session_id"`
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	if err := json.Unmarshal([]byte(first), &l); err != nil || l.SessionID == "" {
		t.Fatalf("%s: no session_id on the first line: %v", name, err)
	}
	return l.SessionID
}

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession,
		SessionID: sessionID(t, "turn.jsonl"), Model: "gemini-2.5-pro"}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(2))
	g.Expect(tools[0].Tool).To(Equal("write_file"))
	g.Expect(tools[0].Text).To(ContainSubstring("hello.txt"))
	g.Expect(tools[1].Tool).To(Equal("run_shell_command"))
	g.Expect(tools[1].Text).To(ContainSubstring(`"command":"git add -- hello.txt && git commit -m 'Add hello'"`))
	results := kinds(events, agent.KindToolResult)
	g.Expect(results).To(HaveLen(2))
	g.Expect(results[0]).To(Equal(agent.Event{Kind: agent.KindToolResult, Tool: "write_file"}), "the file tool prints no output")
	g.Expect(results[1].Tool).To(Equal("run_shell_command"), "the result is named by its call's id")
	g.Expect(results[1].Text).To(ContainSubstring("Add hello\n 1 file changed"))
	g.Expect(results[1].IsError).To(BeFalse())
	// The text came in two pieces: one Text event for the whole message.
	g.Expect(kinds(events, agent.KindText)).To(ConsistOf(agent.Event{Kind: agent.KindText, Text: "Added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Added hello.txt and committed it."}))
	// Three model requests at the scripted server's 1200 prompt tokens (300 of them cached) and
	// 80 out: the process's own count, not cumulative.
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{InputTokens: 2700, CacheReadTokens: 900, OutputTokens: 240}}))
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindActivity)).NotTo(BeEmpty())
}

func TestParseRetryAndQuestion(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "retry_question.jsonl")
	const question = "Should deleted widgets return 404 or 410?"
	// The model called ask_user, which the CLI does not offer headless ("not found"), then
	// asked in its final text: both are the question.
	g.Expect(kinds(events, agent.KindQuestion)).To(HaveExactElements(
		agent.Event{Kind: agent.KindQuestion, Text: question}, agent.Event{Kind: agent.KindQuestion, Text: question}))
	g.Expect(kinds(events, agent.KindToolResult)).To(ConsistOf(And(HaveField("Tool", AskTool), HaveField("IsError", true),
		HaveField("Text", ContainSubstring(`Tool "ask_user" not found`)))))
	// The CLI retried a 503 and a 429 by itself and printed nothing of it on stdout.
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(HaveField("SessionID", sessionID(t, "turn.jsonl"))),
		"the resumed session keeps its id")
	// A resumed session counts from zero: this process's two requests only.
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{InputTokens: 1800, CacheReadTokens: 600, OutputTokens: 160}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult,
		Text: "I checked the handlers.\n\n" + question}))
}

func TestParseRefusedRequest(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "error.jsonl")
	res := kinds(events, agent.KindTurnResult)
	g.Expect(res).To(HaveLen(1))
	g.Expect(res[0].IsError).To(BeTrue())
	g.Expect(res[0].Text).To(ContainSubstring("the scripted server refused this request"))
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage, Usage: &agent.Usage{}}))
	for _, e := range kinds(events, agent.KindError) {
		g.Expect(e.Retrying).To(BeFalse())
	}
}

// auto_edit leaves the shell out headless: the model's call comes back "not found", and the
// turn goes on.
func TestParseRejectedTool(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "rejected.jsonl")
	g.Expect(kinds(events, agent.KindToolResult)).To(ConsistOf(And(HaveField("Tool", "run_shell_command"), HaveField("IsError", true),
		HaveField("Text", ContainSubstring(`Tool "run_shell_command" not found`)))))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Done."}))
}

// A tool the CLI's policy refuses (policy_violation) is a denied permission.
func TestParsePolicyViolationIsDenied(t *testing.T) {
	g := NewWithT(t)
	p := Adapter{}.NewParser()
	p.Line([]byte(`{"type":"tool_use","tool_name":"run_shell_command","tool_id":"c1","parameters":{"command":"rm -rf /"}}`))
	events := p.Line([]byte(`{"type":"tool_result","tool_id":"c1","status":"error","error":{"type":"policy_violation","message":"Tool execution denied by policy."}}`))
	g.Expect(kinds(events, agent.KindToolResult)).To(ConsistOf(agent.Event{Kind: agent.KindToolResult, Tool: "run_shell_command",
		Text: "Tool execution denied by policy.", IsError: true}))
	g.Expect(kinds(events, agent.KindError)).To(ConsistOf(agent.Event{Kind: agent.KindError, Denied: true,
		Text: "run_shell_command: Tool execution denied by policy."}))
}

func TestParseMalformedAndTruncated(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "malformed.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(3))
	for _, e := range errs {
		g.Expect(e.Malformed).To(BeTrue())
	}
	g.Expect(errs[2].Text).To(ContainSubstring("without a result"))
	// The message still being streamed when the output ended is said, not lost.
	g.Expect(kinds(events, agent.KindText)).To(ConsistOf(agent.Event{Kind: agent.KindText, Text: "Half a sentence"}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(BeEmpty())

	// An unknown --resume id: the CLI prints to stderr only.
	g.Expect(agent.ParseAll(Adapter{}.NewParser(), strings.NewReader(""))).To(ConsistOf(And(HaveField("Malformed", true),
		HaveField("Text", ContainSubstring("after 0 lines")))))
}

// A result whose unneeded fields changed type still yields the outcome and the usage; a whole
// message (no delta) is said at once.
func TestResultSurvivesChangedUnneededFields(t *testing.T) {
	g := NewWithT(t)
	p := Adapter{}.NewParser()
	events := p.Line([]byte(`{"type":"init","session_id":"s-1","model":"auto-gemini-3"}`))
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession, SessionID: "s-1"}),
		"the CLI's routing is not a model")
	events = p.Line([]byte(`{"type":"message","role":"assistant","content":"Done: tests pass.","timestamp":5}`))
	g.Expect(kinds(events, agent.KindText)).To(ConsistOf(agent.Event{Kind: agent.KindText, Text: "Done: tests pass."}))
	events = p.Line([]byte(`{"type":"result","status":"success","stats":{"input_tokens":120,"output_tokens":30,"cached":20,"duration_ms":"5ms","models":[]}}`))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Done: tests pass."}))
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{InputTokens: 100, CacheReadTokens: 20, OutputTokens: 30}}), "input is the prompt less the cached, when input is missing")
	g.Expect(p.Finish()).To(BeEmpty())

	// An error result with its error as a bare string, or none.
	p = Adapter{}.NewParser()
	events = p.Line([]byte(`{"type":"result","status":"error","error":"quota exhausted"}`))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "quota exhausted", IsError: true}))
	p = Adapter{}.NewParser()
	events = p.Line([]byte(`{"type":"result","status":"cancelled"}`))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult,
		Text: "turn ended with status cancelled", IsError: true}))
	// A warning the CLI prints (a loop it detected) is an error event, not a retry.
	g.Expect(p.Line([]byte(`{"type":"error","severity":"warning","message":"Loop detected, stopping execution"}`))).To(ConsistOf(
		agent.Event{Kind: agent.KindError, Text: "Loop detected, stopping execution"}))
}

// The summary is the text after the last tool call: text before a call is said, not kept.
func TestSummaryIsTheTextAfterTheLastToolCall(t *testing.T) {
	g := NewWithT(t)
	p := Adapter{}.NewParser()
	p.Line([]byte(`{"type":"message","role":"assistant","content":"Let me look.","delta":true}`))
	events := p.Line([]byte(`{"type":"tool_use","tool_name":"read_file","tool_id":"r1","parameters":{"file_path":"a"}}`))
	g.Expect(kinds(events, agent.KindText)).To(ConsistOf(HaveField("Text", "Let me look.")))
	p.Line([]byte(`{"type":"tool_result","tool_id":"r1","status":"success","output":"a"}`))
	events = p.Line([]byte(`{"type":"result","status":"success","stats":{}}`))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult}))
}
