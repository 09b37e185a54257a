package opencode

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
}

func TestParseTurn(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "turn.jsonl")
	g.Expect(kinds(events, agent.KindSession)).To(ConsistOf(agent.Event{Kind: agent.KindSession, SessionID: "ses_494719016ffe85dkDMj0FPRbHK"}))
	tools := kinds(events, agent.KindToolUse)
	g.Expect(tools).To(HaveLen(1))
	g.Expect(tools[0].Tool).To(Equal("bash"))
	total := agent.Usage{}
	for _, e := range kinds(events, agent.KindUsage) {
		total.Add(*e.Usage)
	}
	g.Expect(total.CostUSD).To(BeNumerically("~", 0.006, 1e-9))
	g.Expect(total).To(Equal(agent.Usage{CostUSD: total.CostUSD, InputTokens: 1600, OutputTokens: 105, CacheReadTokens: 7000}))
	g.Expect(kinds(events, agent.KindTurnResult)).To(ConsistOf(agent.Event{Kind: agent.KindTurnResult, Text: "Added hello.txt and committed it."}))
	g.Expect(kinds(events, agent.KindError)).To(BeEmpty())
}

func TestParseErrorAndRejection(t *testing.T) {
	g := NewWithT(t)
	events := parseFile(t, "error.jsonl")
	errs := kinds(events, agent.KindError)
	g.Expect(errs).To(HaveLen(3))
	g.Expect(errs[0].Denied).To(BeTrue())
	g.Expect(errs[1].Text).To(Equal("Rate limit exceeded"))
	g.Expect(errs[2].Text).To(Equal("permission rejected: bash"))
	res := kinds(events, agent.KindTurnResult)
	g.Expect(res).To(HaveLen(1))
	g.Expect(res[0].IsError).To(BeTrue())
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
