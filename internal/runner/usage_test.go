package runner

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/agent"
)

func TestConversationTotals(t *testing.T) {
	g := NewWithT(t)
	stateDir := filepath.Join(t.TempDir(), "shepherd", "agent")
	totals := newConversationTotals(stateDir)
	share := func(id string, u agent.Usage) agent.Usage {
		got, err := totals.share(id, u)
		g.Expect(err).NotTo(HaveOccurred())
		return got
	}
	// A new conversation's total is its first turn's share.
	g.Expect(share("t1", agent.Usage{InputTokens: 1800, CacheReadTokens: 600, OutputTokens: 160})).
		To(Equal(agent.Usage{InputTokens: 1800, CacheReadTokens: 600, OutputTokens: 160}))
	// A resumed turn adds what the total grew by.
	g.Expect(share("t1", agent.Usage{InputTokens: 2700, CacheReadTokens: 900, OutputTokens: 240})).
		To(Equal(agent.Usage{InputTokens: 900, CacheReadTokens: 300, OutputTokens: 80}))
	// Conversations are kept apart, and the totals survive a new runner (a restored pod).
	g.Expect(newConversationTotals(stateDir).share("t2", agent.Usage{InputTokens: 5})).To(Equal(agent.Usage{InputTokens: 5}))
	g.Expect(share("t1", agent.Usage{InputTokens: 2800, CacheReadTokens: 900, OutputTokens: 250})).
		To(Equal(agent.Usage{InputTokens: 100, OutputTokens: 10}))
	// A total below the last one is a CLI that started counting anew: it counts whole.
	g.Expect(share("t1", agent.Usage{InputTokens: 10, OutputTokens: 1})).To(Equal(agent.Usage{InputTokens: 10, OutputTokens: 1}))
	g.Expect(filepath.Join(filepath.Dir(stateDir), "usage-totals.json")).To(BeAnExistingFile())
}
