package claudecode

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
	hostile := "fix `rm -rf /`; $(whoami) && echo \"quoted\" 'single'\n--resume evil\nünïcødé 🚀"
	tests := []struct {
		name string
		turn agent.Turn
		want []string
	}{
		{"first turn", agent.Turn{Prompt: hostile, Permission: agentsv1alpha1.PermissionBypass},
			[]string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"}},
		{"default permission is bypass", agent.Turn{Prompt: "x"},
			[]string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"}},
		{"resumed with model and extra args", agent.Turn{Prompt: hostile, Resume: true, SessionID: "abc", Model: "claude-opus-4-1",
			Permission: agentsv1alpha1.PermissionAcceptEdits, ExtraArgs: []string{"--max-turns", "5"}},
			[]string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits",
				"--model", "claude-opus-4-1", "--resume", "abc", "--max-turns", "5"}},
		{"read only is plan mode", agent.Turn{Prompt: "x", Permission: agentsv1alpha1.PermissionReadOnly},
			[]string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "plan"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd, err := Adapter{}.Command(tt.turn)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Name).To(Equal("claude"))
			g.Expect(cmd.Args).To(Equal(tt.want))
			g.Expect(cmd.Stdin).To(Equal(tt.turn.Prompt), "the prompt travels on stdin, unchanged")
		})
	}
	g := NewWithT(t)
	_, err := Adapter{}.Command(agent.Turn{Prompt: "x", Resume: true})
	g.Expect(err).To(MatchError(ContainSubstring("session id")))
	_, err = Adapter{}.Command(agent.Turn{Prompt: "x", Permission: "Everything"})
	g.Expect(err).To(HaveOccurred())
}

// The fixtures are the real Claude Code's output (hack/agent-clis.versions) against the scripted
// model server, captured by `go test ./test/realagents -update-fixtures` (turn, retry_question,
// error) or by hand with the same setup (denied: plan mode; resume_unknown: --resume of an id
// that does not exist). malformed.jsonl is made up: the CLI never prints it on purpose.

// firstSessionID is the session_id of the fixture's first line.
func firstSessionID(t *testing.T, name string) string {
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
	id := firstSessionID(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(Equal([]agent.Event{
		{Kind: agent.KindSession, SessionID: id, Model: "claude-sonnet-4-5"}, {Kind: agent.KindSession, SessionID: id}}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(2))
	g.Expect(tools[0].Tool).To(Equal("Write"))
	g.Expect(tools[0].Text).To(ContainSubstring("hello.txt"))
	g.Expect(tools[1].Tool).To(Equal("Bash"))
	g.Expect(tools[1].Text).To(ContainSubstring("git commit"))
	// Three model requests at the scripted server's 1200 in (300 cached) / 80 out, at
	// claude-sonnet-4-5 list prices.
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{CostUSD: 0.01467, InputTokens: 3600, OutputTokens: 240, CacheReadTokens: 900}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult,
		Text: "Added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
}

func TestParseRetryAndQuestion(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "retry_question.jsonl")
	// A 529 and a 429, each retried by the CLI: activity, not a crash.
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(2))
	for _, e := range errs {
		g.Expect(e.Retrying).To(BeTrue())
	}
	g.Expect(errs[0].Text).To(And(HavePrefix("model API retry 1/10 in "), HaveSuffix("529 overloaded")))
	g.Expect(errs[1].Text).To(And(HavePrefix("model API retry 2/10 in "), HaveSuffix("429 rate_limit")))
	// The refused AskUserQuestion call and the final text both carry the question.
	g.Expect(kinds(events, agent.KindQuestion)).To(HaveEach(agent.Event{Kind: agent.KindQuestion,
		Text: "Should deleted widgets return 404 or 410?"}))
	g.Expect(kinds(events, agent.KindQuestion)).To(HaveLen(2))
	// A resumed conversation: total_cost_usd (0.02445) includes the first turn; this turn's
	// share is model_usage_since_last_result.
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{CostUSD: 0.00978, InputTokens: 2400, OutputTokens: 160, CacheReadTokens: 600}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(HaveField("IsError", false)))
}

func TestParseRefusedRequest(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "error.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(1))
	g.Expect(errs[0].Retrying).To(BeFalse())
	g.Expect(errs[0].Text).To(Equal("Failed to authenticate. API Error: 403 the scripted server refused this request"))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, IsError: true,
		Text: "Failed to authenticate. API Error: 403 the scripted server refused this request"}))
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage, Usage: &agent.Usage{}}),
		"nothing new was spent; the conversation's running cost is not this turn's")
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
}

func TestParseResumeOfUnknownSession(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "resume_unknown.jsonl")
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, IsError: true,
		Text: "No conversation found with session ID: 0f8fad5b-d9cb-469f-a165-70867728950e"}))
}

func TestParsePermissionDenied(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "denied.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(ConsistOf(agent.Event{Kind: agent.KindError, Denied: true, Text: "permission denied for Bash"}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult,
		Text: "I could not commit in plan mode."}))
}

func TestParseMalformedAndTruncated(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "malformed.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(3), "a bad line, a truncated line and the missing result")
	for _, e := range errs {
		g.Expect(e.Malformed).To(BeTrue())
	}
	g.Expect(errs[0].Text).To(ContainSubstring("not json at all"))
	g.Expect(errs[2].Text).To(ContainSubstring("without a result event"))
	g.Expect(kinds(events, agent.KindTurnResult)).To(BeEmpty())
}

// A result line whose unneeded fields changed type (a new CLI release) still ends the turn with
// its outcome and cost; before, the whole line was unreadable and the turn had no result.
func TestResultSurvivesChangedUnneededFields(t *testing.T) {
	g := NewWithT(t)
	p := Adapter{}.NewParser()
	events := p.Line([]byte(`{"type":"result","subtype":"success","is_error":false,"result":"Added the greeting.","total_cost_usd":0.25,` +
		`"duration_ms":"1234","errors":{"unexpected":true},"permission_denials":{"count":0},"num_turns":"3",` +
		`"usage":{"input_tokens":100,"output_tokens":"20","cache_read_input_tokens":50}}`))
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty(), "nothing reported unreadable")
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Added the greeting."}))
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{CostUSD: 0.25, InputTokens: 100, CacheReadTokens: 50}}), "cost and the tokens still readable")
	g.Expect(kinds(p.Line([]byte(`{"type":"result","subtype":`)), agent.KindError)).To(HaveLen(1), "a truncated line is still unreadable")
}
