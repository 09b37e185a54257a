package opencode

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
	g := NewWithT(t)
	hostile := "--session other\n\"quoted words\" 'x' $(id) ünï 🚀"
	cmd, err := Adapter{}.Command(agent.Turn{Prompt: hostile})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Name).To(Equal("opencode"))
	g.Expect(cmd.Args).To(Equal([]string{"run", "--format", "json", "--dangerously-skip-permissions"}))
	g.Expect(cmd.Stdin).To(Equal(hostile))
	g.Expect(cmd.Env).To(BeEmpty())

	cmd, err = Adapter{}.Command(agent.Turn{Prompt: "x", Resume: true, SessionID: "ses_1", Model: "anthropic/claude-sonnet-4-5",
		Permission: agentsv1alpha1.PermissionAcceptEdits})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Args).To(Equal([]string{"run", "--format", "json", "--session", "ses_1", "--model", "anthropic/claude-sonnet-4-5"}))
	g.Expect(cmd.Env).To(ConsistOf(ContainSubstring(`"bash":"ask"`)))

	cmd, err = Adapter{}.Command(agent.Turn{Prompt: "x", Permission: agentsv1alpha1.PermissionReadOnly})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Env).To(ConsistOf(ContainSubstring(`"edit":"deny"`)))

	_, err = Adapter{}.Command(agent.Turn{Prompt: "x", Resume: true})
	g.Expect(err).To(HaveOccurred())

	// OpenCode's tools run in $PWD, not in the process's working directory: the checkout is
	// passed as PWD, after (so over) anything inherited.
	cmd, err = Adapter{}.Command(agent.Turn{Prompt: "x", Workdir: "/work/checkout", Permission: agentsv1alpha1.PermissionReadOnly})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Env).To(ConsistOf(ContainSubstring(`"edit":"deny"`), "PWD=/work/checkout"))
}

// The fixtures are the real OpenCode's output (hack/agent-clis.versions) against the scripted
// model server, captured by `go test ./test/realagents -update-fixtures` (turn, retry_question,
// error) or by hand with the same setup (rejected: AcceptEdits, the model runs bash);
// malformed.jsonl is made up.

// sessionID is the sessionID of the fixture's first line.
func sessionID(t *testing.T, name string) string {
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		SessionID string `json:"sessionID"`
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	if err := json.Unmarshal([]byte(first), &l); err != nil || l.SessionID == "" {
		t.Fatalf("%s: no sessionID on the first line: %v", name, err)
	}
	return l.SessionID
}

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession, SessionID: sessionID(t, "turn.jsonl")}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(2))
	g.Expect(tools[0].Tool).To(Equal("write"))
	g.Expect(tools[0].Text).To(ContainSubstring("hello.txt"))
	g.Expect(tools[1].Tool).To(Equal("bash"))
	g.Expect(tools[1].Text).To(ContainSubstring("git commit"))
	// Three steps, one per model request, each at the scripted 1200 in / 300 cached / 80 out,
	// priced by the provider's model entry (3 and 15 $/Mtok, cache reads 0.3).
	total := agent.Usage{}
	for _, e := range kinds(events, agent.KindUsage) {
		total.Add(*e.Usage)
	}
	g.Expect(kinds(events, agent.KindUsage)).To(HaveLen(3))
	g.Expect(total.CostUSD).To(BeNumerically("~", 3*0.00489, 1e-9))
	g.Expect(total).To(Equal(agent.Usage{CostUSD: total.CostUSD, InputTokens: 3600, OutputTokens: 240, CacheReadTokens: 900}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
}

func TestParseQuestion(t *testing.T) {
	g := NewWithT(t)
	// OpenCode retried the scripted 529 without printing anything about it.
	events := parseFile(t, "retry_question.jsonl")
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindQuestion)).To(ConsistOf(agent.Event{Kind: agent.KindQuestion,
		Text: "Should deleted widgets return 404 or 410?"}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(HaveField("IsError", false)))
}

func TestParseRefusedRequest(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "error.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(HaveField("SessionID", sessionID(t, "error.jsonl"))))
	g.Expect(kinds(events, agent.KindError)).To(ConsistOf(agent.Event{Kind: agent.KindError, Text: "the scripted server refused this request"}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, IsError: true,
		Text: "the scripted server refused this request"}))
}

func TestParseRejectedPermission(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "rejected.jsonl")
	g.Expect(kinds(events, agent.KindError)).To(ConsistOf(agent.Event{Kind: agent.KindError, Denied: true,
		Text: "bash: The user rejected permission to use this specific tool call."}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult}))
}

func TestParseMalformedAndTruncated(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "malformed.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(1))
	g.Expect(errs[0].Malformed).To(BeTrue())
	g.Expect(errs[0].Text).To(ContainSubstring("trunc"))
	// Output that never started a step is reported too.
	p := Adapter{}.NewParser()
	g.Expect(p.Line([]byte("{"))).To(HaveLen(1))
	fin := p.Finish()
	g.Expect(fin).To(HaveLen(1))
	g.Expect(fin[0].Malformed).To(BeTrue())
}

// An error event keeps its text whatever its shape: without a name, with a message of its own,
// as a bare string; never an empty error.
func TestErrorEventKeepsItsText(t *testing.T) {
	for raw, want := range map[string]string{
		`{"type":"error","error":{"name":"APIError","data":{"message":"rate limited"}}}`: "rate limited",
		`{"type":"error","error":{"data":{"message":"model not found"}}}`:                "model not found",
		`{"type":"error","error":{"message":"socket hang up"}}`:                          "socket hang up",
		`{"type":"error","error":{"name":"ProviderAuthError"}}`:                          "ProviderAuthError",
		`{"type":"error","error":"connection refused"}`:                                  "connection refused",
		`{"type":"error","error":{"data":"quota exceeded"}}`:                             "quota exceeded",
		`{"type":"error","error":{"code":429}}`:                                          `session error: {"code":429}`,
		`{"type":"error"}`:                                                               "session error",
	} {
		p := Adapter{}.NewParser()
		events := kinds(p.Line([]byte(raw)), agent.KindError)
		if len(events) != 1 || events[0].Text != want || events[0].Malformed {
			t.Errorf("%s: %+v, want the text %q", raw, events, want)
		}
		if res := kinds(p.Finish(), agent.KindTurnResult); len(res) != 1 || !res[0].IsError || res[0].Text != want {
			t.Errorf("%s: the turn result %+v, want an error with %q", raw, res, want)
		}
	}
}

// step_finish whose unneeded fields changed type still yields the cost.
func TestStepFinishSurvivesChangedUnneededFields(t *testing.T) {
	g := NewWithT(t)
	p := Adapter{}.NewParser()
	p.Line([]byte(`{"type":"step_start","sessionID":"s1","part":{"type":"step-start"}}`))
	events := p.Line([]byte(`{"type":"step_finish","sessionID":"s1","part":{"type":"step-finish","reason":{"kind":"stop"},"cost":0.02,"tokens":{"input":10,"output":5,"reasoning":0,"cache":{"read":1,"write":"0"}}}}`))
	g.Expect(kinds(events, agent.KindUsage)).To(HaveLen(1))
	g.Expect(kinds(events, agent.KindUsage)[0].Usage).To(Equal(&agent.Usage{CostUSD: 0.02, InputTokens: 10, OutputTokens: 5, CacheReadTokens: 1}))
}
