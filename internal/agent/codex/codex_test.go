package codex

import (
	"os"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

func parseFile(t *testing.T, name string) []agent.Event {
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	return agent.ParseAll(Adapter{}.NewParser(), f)
}

func kinds(events []agent.Event, k agent.Kind) []agent.Event {
	var out []agent.Event
	for _, e := range events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func TestCommand(t *testing.T) {
	hostile := "-m gpt-evil\n$(id) `id` \"q\" 'q' ; | & ünï 🚀"
	tests := []struct {
		name string
		turn agent.Turn
		want []string
	}{
		{"first turn", agent.Turn{Prompt: hostile},
			[]string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-"}},
		{"accept edits", agent.Turn{Prompt: hostile, Permission: agentsv1alpha1.PermissionAcceptEdits, Model: "gpt-5-codex"},
			[]string{"exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write", "-m", "gpt-5-codex", "-"}},
		{"resumed read only", agent.Turn{Prompt: hostile, Resume: true, SessionID: "thread-1", Permission: agentsv1alpha1.PermissionReadOnly,
			ExtraArgs: []string{"-c", "model_reasoning_effort=high"}},
			[]string{"exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only", "-c", "model_reasoning_effort=high",
				"resume", "thread-1", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd, err := Adapter{}.Command(tt.turn)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Name).To(Equal("codex"))
			g.Expect(cmd.Args).To(Equal(tt.want))
			g.Expect(cmd.Stdin).To(Equal(hostile))
		})
	}
	_, err := Adapter{}.Command(agent.Turn{Prompt: "x", Resume: true})
	NewWithT(t).Expect(err).To(HaveOccurred())
}

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession, SessionID: "0199a213-81c0-7800-8aa1-bbab2a035a53"}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(2))
	g.Expect(tools[0].Tool).To(Equal("command_execution"))
	g.Expect(tools[1]).To(Equal(agent.Event{Kind: agent.KindToolUse, Tool: "file_change", Text: "update /w/README.md"}))
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{InputTokens: 315, CacheReadTokens: 24448, OutputTokens: 122}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
}

func TestParseRetriesThenFailure(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "retry_fail.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(2))
	g.Expect(errs[0].Retrying).To(BeTrue())
	g.Expect(errs[0].Text).To(HavePrefix("Reconnecting... 1/5"))
	res := kinds(events, agent.KindTurnResult)
	g.Expect(res).To(HaveLen(1))
	g.Expect(res[0].IsError).To(BeTrue())
	g.Expect(res[0].Text).To(ContainSubstring("stream disconnected"))
}

func TestParseQuestion(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "question.jsonl")
	g.Expect(kinds(events, agent.KindQuestion)).To(ConsistOf(agent.Event{Kind: agent.KindQuestion,
		Text: "Which one should I change, `config/dev.yaml` or `config/prod.yaml`?"}))
	// request_user_input is the structured form.
	p := Adapter{}.NewParser()
	g.Expect(p.Line([]byte(`{"type":"request_user_input","id":"turn-1","call_id":"call_1","questions":[{"id":"q1","header":"Scope","question":"Also update the docs?","options":[]}]}`))).
		To(ConsistOf(agent.Event{Kind: agent.KindQuestion, Text: "Also update the docs?"}))
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
