package claudecode

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

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)[0]).To(Equal(agent.Event{Kind: agent.KindSession,
		SessionID: "3f1c9f0e-5a8e-4c4e-9a55-7f0d2d1b6a10", Model: "claude-sonnet-4-5"}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(1))
	g.Expect(tools[0].Tool).To(Equal("Bash"))
	g.Expect(tools[0].Text).To(ContainSubstring("git commit"))
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{CostUSD: 0.0123, InputTokens: 1092, OutputTokens: 52, CacheReadTokens: 2000}}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult,
		Text: "I added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
}

func TestParseRetryAndQuestion(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "retry_question.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(3))
	g.Expect(errs[0].Retrying).To(BeTrue(), "api_retry is activity, not a crash")
	g.Expect(errs[0].Text).To(ContainSubstring("Connection error."))
	g.Expect(errs[1].Text).To(ContainSubstring("overloaded_error"))
	g.Expect(errs[2].Denied).To(BeTrue())
	g.Expect(errs[2].Text).To(ContainSubstring("Bash"))
	g.Expect(kinds(events, agent.KindQuestion)).To(ConsistOf(agent.Event{Kind: agent.KindQuestion,
		Text: "Should the endpoint return 404 or 410 for deleted widgets?"}))
}

func TestParseAskUserQuestionTool(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "ask_tool.jsonl")
	g.Expect(kinds(events, agent.KindQuestion)).To(ConsistOf(agent.Event{Kind: agent.KindQuestion,
		Text: "Which database should the cache use?"}))
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
