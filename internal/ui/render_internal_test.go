package ui

import (
	"strings"
	"testing"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// TestPagesRenderInertly: whatever a session's status and transcript hold (an agent's output is
// attacker-controlled), the pages show it as text.
func TestPagesRenderInertly(t *testing.T) {
	evil := `</script><script>alert(1)</script><img src=x onerror=alert(2)>`
	v := sessionView{card: card{Namespace: "team-a", Name: "w", Phase: "NeedsInput", Question: evil, PRURL: safeURL("javascript:alert(3)")},
		Board: Board, Stream: "/s", Action: "/a", CSRF: "c", CanSteer: true, Summary: evil,
		Entries:   []transcript.Entry{{Seq: 1, Time: time.Now(), Kind: transcript.KindText, Text: evil}, {Seq: 2, Kind: transcript.KindUsage, Usage: &transcript.Usage{CostUSD: 1}}},
		Reactions: []agentsv1alpha1.ReactionStatus{{Trigger: agentsv1alpha1.TriggerCIFailed, Attempts: 2}}}
	var b strings.Builder
	if err := pages.ExecuteTemplate(&b, "session.html", v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<script>alert(1)", "<img src=x", "javascript:"} {
		if strings.Contains(out, bad) {
			t.Fatalf("page contains %q", bad)
		}
	}
	if !strings.Contains(out, "&lt;/script&gt;") {
		t.Fatal("the agent's text is not shown escaped")
	}
	b.Reset()
	if err := pages.ExecuteTemplate(&b, "board.html", boardPage{Base: Board, Columns: []column{{Title: "x", Cards: []card{v.card}}}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<script>alert(1)") {
		t.Fatal("board shows the question unescaped")
	}
}
