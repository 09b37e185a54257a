package agent_test

import (
	"bufio"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
)

func TestRegistry(t *testing.T) {
	g := NewWithT(t)
	g.Expect(agent.Types()).To(Equal([]agentsv1alpha1.AgentType{"aider", "claude-code", "codex", "custom", "gemini", "opencode"}))
	for _, typ := range agent.Types() {
		a, err := agent.Get(typ)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(a.Type()).To(Equal(typ))
		g.Expect(a.Capabilities().CanResume).To(BeTrue())
	}
	_, err := agent.Get("cursor")
	g.Expect(err).To(MatchError(ContainSubstring(`unknown agent type "cursor"`)))
}

func TestQuestionFromText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Done.", ""},
		{"", ""},
		{"Shall I also update the docs?", "Shall I also update the docs?"},
		{"Two options.\n\n**Which do you prefer?**", "**Which do you prefer?**"},
		{"What about 🚀？", "What about 🚀？"},
		{"Is it? No, it is fine.", ""},
	}
	for _, tt := range tests {
		NewWithT(t).Expect(agent.QuestionFromText(tt.in)).To(Equal(tt.want), tt.in)
	}
}

func TestReadLineCutsLongLines(t *testing.T) {
	g := NewWithT(t)
	long := strings.Repeat("x", agent.MaxLine+10)
	br := bufio.NewReaderSize(strings.NewReader(long+"\nshort\nlast"), 4096)
	l, err := agent.ReadLine(br)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l).To(HaveLen(agent.MaxLine))
	l, _ = agent.ReadLine(br)
	g.Expect(string(l)).To(Equal("short"))
	l, err = agent.ReadLine(br)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(l)).To(Equal("last"))
	_, err = agent.ReadLine(br)
	g.Expect(err).To(Equal(io.EOF))
}
