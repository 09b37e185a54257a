package aider

import (
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
	hostile := "--yes-always\n$(id) \"q\" 'q' ünï 🚀"
	cmd, err := Adapter{}.Command(agent.Turn{Prompt: hostile, StateDir: "/s"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Name).To(Equal("aider"))
	g.Expect(cmd.Args[0]).To(Equal("--message=" + hostile))
	g.Expect(cmd.Args).To(ContainElements("--chat-history-file", "/s/aider.chat.history.md", "--auto-commits", "--yes-always"))
	g.Expect(cmd.Args).NotTo(ContainElement("--restore-chat-history"))

	cmd, err = Adapter{}.Command(agent.Turn{Prompt: "again", Resume: true, StateDir: "/s", Model: "sonnet",
		Permission: agentsv1alpha1.PermissionReadOnly})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Args).To(ContainElements("--restore-chat-history", "--model", "sonnet", "--chat-mode", "ask", "--no-auto-commits"))

	_, err = Adapter{}.Command(agent.Turn{Prompt: "x"})
	g.Expect(err).To(MatchError(ContainSubstring("state directory")))
}

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.txt")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession, Model: "anthropic/claude-sonnet-4-5"}))
	g.Expect(kinds(events, agent.KindUsage)).To(ConsistOf(agent.Event{Kind: agent.KindUsage,
		Usage: &agent.Usage{CostUSD: 0.01, InputTokens: 2500, CacheReadTokens: 1024, OutputTokens: 312}}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(Equal([]agent.Event{{Kind: agent.KindToolUse, Tool: "edit", Text: "hello.txt"},
		{Kind: agent.KindToolUse, Tool: "commit", Text: "1a2b3c4 feat: Add hello.txt with a greeting"}}))
	res := kinds(events, agent.KindTurnResult)
	g.Expect(res).To(HaveLen(1))
	g.Expect(res[0].Text).To(HavePrefix("I'll add a greeting file."))
	g.Expect(kinds(events, agent.KindQuestion)).To(BeEmpty())
}

func TestParseQuestion(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "question.txt")
	g.Expect(kinds(events, agent.KindQuestion)).To(ConsistOf(agent.Event{Kind: agent.KindQuestion,
		Text: "Do you want me to change the parser or the caller?"}))
	g.Expect(kinds(events, agent.KindUsage)[0].Usage).To(Equal(&agent.Usage{CostUSD: 0.0063, InputTokens: 3000, OutputTokens: 42}))
}

func TestParseErrors(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "error.txt")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(4))
	g.Expect(errs[1].Retrying).To(BeTrue())
	res := kinds(events, agent.KindTurnResult)
	g.Expect(res).To(HaveLen(1))
	g.Expect(res[0].IsError).To(BeTrue())
}

func TestParseMalformed(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "malformed.txt")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(1))
	g.Expect(errs[0].Malformed).To(BeTrue())
	g.Expect(kinds(events, agent.KindTurnResult)).To(BeEmpty())
}

// The summary is the reply's last paragraph of prose, as Finish's comment says: not the whole
// reply, and not the edit block that follows the last words.
func TestSummaryIsTheLastParagraph(t *testing.T) {
	for _, tc := range []struct{ reply, want string }{
		{"I'll add a greeting file.\n\nhello.txt\n```\n<<<<<<< SEARCH\n=======\nhi\n>>>>>>> REPLACE\n```", "I'll add a greeting file."},
		{"Looking at the parser.\n\nparse.go\n```go\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n\nFixed the off-by-one in parse.go and added a test\nfor the empty input.",
			"Fixed the off-by-one in parse.go and added a test\nfor the empty input."},
		{"One paragraph only.", "One paragraph only."},
		{"First.\n   \nSecond, after a blank line with spaces.", "Second, after a blank line with spaces."},
		{"", ""},
	} {
		if got := lastParagraph(tc.reply); got != tc.want {
			t.Errorf("lastParagraph(%q) = %q, want %q", tc.reply, got, tc.want)
		}
	}
}
