package codex

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
	hostile := "-m gpt-evil\n$(id) `id` \"q\" 'q' ; | & ünï 🚀"
	head := append([]string{"exec", "--json", "--skip-git-repo-check"}, OfflineArgs()...)
	with := func(rest ...string) []string { return append(append([]string{}, head...), rest...) }
	tests := []struct {
		name string
		turn agent.Turn
		want []string
		env  []string
		dirs []string
	}{
		{"first turn", agent.Turn{Prompt: hostile},
			with("--dangerously-bypass-approvals-and-sandbox", "-"), nil, nil},
		{"accept edits", agent.Turn{Prompt: hostile, Permission: agentsv1alpha1.PermissionAcceptEdits, Model: "gpt-5-codex"},
			with("--sandbox", "workspace-write", "-m", "gpt-5-codex", "-"), nil, nil},
		{"resumed read only", agent.Turn{Prompt: hostile, Resume: true, SessionID: "thread-1", Permission: agentsv1alpha1.PermissionReadOnly,
			ExtraArgs: []string{"-c", "model_reasoning_effort=high"}},
			with("--sandbox", "read-only", "-c", "model_reasoning_effort=high", "resume", "thread-1", "-"), nil, nil},
		{"CODEX_HOME in the agent's home, which outlives the pod", agent.Turn{Prompt: hostile, Home: "/shepherd/workspace/homes/s"},
			with("--dangerously-bypass-approvals-and-sandbox", "-"), []string{"CODEX_HOME=/shepherd/workspace/homes/s/.codex"},
			[]string{"/shepherd/workspace/homes/s/.codex"}},
		{"through the model proxy", agent.Turn{Prompt: hostile, ModelAPI: &agent.ModelEndpoint{API: agentsv1alpha1.ModelAPIOpenAI, BaseURL: "http://127.0.0.1:8737"}},
			with("--dangerously-bypass-approvals-and-sandbox", "-c", `model_provider="shepherd"`,
				"-c", `model_providers.shepherd={name="Shepherd model proxy",base_url="http://127.0.0.1:8737/v1",wire_api="responses",env_key="OPENAI_API_KEY"}`, "-"),
			[]string{"OPENAI_API_KEY=" + agent.PlaceholderKey}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd, err := Adapter{}.Command(tt.turn)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Name).To(Equal("codex"))
			g.Expect(cmd.Args).To(Equal(tt.want))
			g.Expect(cmd.Stdin).To(Equal(hostile))
			g.Expect(cmd.Env).To(Equal(tt.env))
			g.Expect(cmd.Dirs).To(Equal(tt.dirs))
		})
	}
	_, err := Adapter{}.Command(agent.Turn{Prompt: "x", ModelAPI: &agent.ModelEndpoint{API: agentsv1alpha1.ModelAPIAnthropic}})
	NewWithT(t).Expect(err).To(MatchError(agent.ErrModelAPI), "Codex speaks the OpenAI API only")
	_, err = Adapter{}.Command(agent.Turn{Prompt: "x", Resume: true})
	NewWithT(t).Expect(err).To(HaveOccurred())
}

// The fixtures are the real Codex's output (hack/agent-clis.versions) against the scripted model
// server, captured by `go test ./test/realagents -update-fixtures`; malformed.jsonl is made up.

// threadID is the thread_id of the fixture's first line.
func threadID(t *testing.T, name string) string {
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		ThreadID string `json:"thread_id"`
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	if err := json.Unmarshal([]byte(first), &l); err != nil || l.ThreadID == "" {
		t.Fatalf("%s: no thread_id on the first line: %v", name, err)
	}
	return l.ThreadID
}

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.jsonl")
	id := threadID(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession, SessionID: id}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(2))
	g.Expect(tools[0].Tool).To(Equal("file_change"))
	g.Expect(tools[0].Text).To(HavePrefix("add /"))
	g.Expect(tools[0].Text).To(HaveSuffix("/hello.txt"))
	g.Expect(tools[1].Tool).To(Equal("command_execution"))
	g.Expect(tools[1].Text).To(ContainSubstring("git commit -m 'Add hello'"))
	// Two model requests at the scripted server's 1200 in (300 of them cached) / 80 out; the
	// thread's totals, which for a first turn are the turn's.
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage, Cumulative: true, SessionID: id,
		Usage: &agent.Usage{InputTokens: 1800, CacheReadTokens: 600, OutputTokens: 160}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
}

func TestParseRetryAndQuestion(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "retry_question.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(ConsistOf(agent.Event{Kind: agent.KindError, Retrying: true,
		Text: "Reconnecting... 1/5 (stream disconnected before completion: upstream overloaded)"}))
	g.Expect(kinds(events, agent.KindQuestion)).To(ConsistOf(agent.Event{Kind: agent.KindQuestion,
		Text: "Should deleted widgets return 404 or 410?"}))
	// A resumed thread reports its running total: the first turn's 2 requests and this one.
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage, Cumulative: true,
		SessionID: threadID(t, "retry_question.jsonl"), Usage: &agent.Usage{InputTokens: 2700, CacheReadTokens: 900, OutputTokens: 240}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(HaveField("IsError", false)))
}

func TestParseRefusedRequest(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "error.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(1))
	g.Expect(errs[0].Retrying).To(BeFalse(), "only Reconnecting... is a retry; this error is final")
	g.Expect(errs[0].Text).To(ContainSubstring("the scripted server refused this request"))
	res := kinds(events, agent.KindTurnResult)
	g.Expect(res).To(HaveLen(1))
	g.Expect(res[0].IsError).To(BeTrue())
	g.Expect(res[0].Text).To(ContainSubstring("the scripted server refused this request"))
}

func TestParseMalformedAndTruncated(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "malformed.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(3))
	for _, e := range errs {
		g.Expect(e.Malformed).To(BeTrue())
	}
	g.Expect(errs[2].Text).To(ContainSubstring("without turn.completed"))
}

// turn.completed whose unneeded fields changed type still yields the outcome and the usage.
func TestTurnCompletedSurvivesChangedUnneededFields(t *testing.T) {
	g := NewWithT(t)
	p := Adapter{}.NewParser()
	p.Line([]byte(`{"type":"thread.started","thread_id":"t-1"}`))
	p.Line([]byte(`{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"Done: tests pass.","changes":"none"}}`))
	events := p.Line([]byte(`{"type":"turn.completed","usage":{"input_tokens":120,"cached_input_tokens":20,"output_tokens":30,"reasoning_tokens":"n/a"},"duration":{"ms":5}}`))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Done: tests pass."}))
	g.Expect(kinds(events, agent.KindUsage)).To(HaveLen(1))
	g.Expect(kinds(events, agent.KindUsage)[0].Usage).To(Equal(&agent.Usage{InputTokens: 100, CacheReadTokens: 20, OutputTokens: 30}))
}
