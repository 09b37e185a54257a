package transcript_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// entries runs a real CLI's recorded output through its adapter and into transcript entries.
func entries(t *testing.T, typ agentsv1alpha1.AgentType, dir, file string) []transcript.Entry {
	t.Helper()
	a, err := agent.Get(typ)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "internal", "agent", dir, "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	p := a.NewParser()
	var out []transcript.Entry
	add := func(evs []agent.Event) {
		for _, ev := range evs {
			if e, ok := transcript.FromEvent(ev); ok {
				out = append(out, e)
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		add(p.Line(sc.Bytes()))
	}
	add(p.Finish())
	return out
}

func kindsOf(es []transcript.Entry) map[transcript.Kind]int {
	m := map[transcript.Kind]int{}
	for _, e := range es {
		m[e.Kind]++
	}
	return m
}

// TestRealTranscriptsShareOneVocabulary: the turns the real Claude Code, Codex and OpenCode
// printed in the integration tests (internal/agent/*/testdata/turn.jsonl, recorded from the
// CLIs) come out as the same entry kinds: text, tool calls with their results, usage, the end
// of the turn.
func TestRealTranscriptsShareOneVocabulary(t *testing.T) {
	for _, tc := range []struct {
		typ agentsv1alpha1.AgentType
		dir string
	}{
		{agentsv1alpha1.AgentClaudeCode, "claudecode"},
		{agentsv1alpha1.AgentCodex, "codex"},
		{agentsv1alpha1.AgentOpenCode, "opencode"},
	} {
		t.Run(string(tc.typ), func(t *testing.T) {
			g := NewWithT(t)
			es := entries(t, tc.typ, tc.dir, "turn.jsonl")
			k := kindsOf(es)
			for _, want := range []transcript.Kind{transcript.KindText, transcript.KindToolCall, transcript.KindToolResult,
				transcript.KindUsage, transcript.KindTurnEnded} {
				g.Expect(k[want]).To(BeNumerically(">", 0), "kind %s in %v", want, k)
			}
			g.Expect(k[transcript.KindError]).To(BeZero())
			g.Expect(es[len(es)-1].Kind).To(Equal(transcript.KindTurnEnded))
			// The commit the agent made shows in a tool result, whatever the CLI calls its tool.
			var results []string
			for _, e := range es {
				if e.Kind == transcript.KindToolResult {
					g.Expect(e.Tool).NotTo(BeEmpty())
					results = append(results, e.Text)
				}
			}
			g.Expect(strings.Join(results, "\n")).To(ContainSubstring("1 file changed"))
		})
	}
}

// TestRealQuestionsShowAsQuestions: a turn that ends with a question to the human carries it as
// a Question entry for every CLI.
func TestRealQuestionsShowAsQuestions(t *testing.T) {
	for _, tc := range []struct {
		typ agentsv1alpha1.AgentType
		dir string
	}{
		{agentsv1alpha1.AgentClaudeCode, "claudecode"},
		{agentsv1alpha1.AgentCodex, "codex"},
		{agentsv1alpha1.AgentOpenCode, "opencode"},
	} {
		t.Run(string(tc.typ), func(t *testing.T) {
			k := kindsOf(entries(t, tc.typ, tc.dir, "retry_question.jsonl"))
			NewWithT(t).Expect(k[transcript.KindQuestion]).To(BeNumerically(">=", 1), "%v", k)
		})
	}
}

func TestFormatIsReadableAndInert(t *testing.T) {
	at := time.Date(2026, 12, 2, 9, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		e    transcript.Entry
		want string
	}{
		{transcript.Entry{Time: at, Turn: 2, Kind: transcript.KindTurnStarted, Text: "fix the build"}, "09:04:05 ── turn 2 ── fix the build"},
		{transcript.Entry{Time: at, Kind: transcript.KindText, Text: "line one\nline two"}, "09:04:05 agent: line one\n         line two"},
		{transcript.Entry{Time: at, Kind: transcript.KindToolCall, Tool: "Bash", Text: `{"command":"go test"}`}, `09:04:05 → Bash {"command":"go test"}`},
		{transcript.Entry{Time: at, Kind: transcript.KindToolResult, Tool: "Bash", Text: "ok", IsError: true}, "09:04:05 ← (failed) Bash: ok"},
		{transcript.Entry{Time: at, Kind: transcript.KindQuestion, Text: "Which database?"}, "09:04:05 ? asks you: Which database?"},
		{transcript.Entry{Time: at, Kind: transcript.KindUsage, Usage: &transcript.Usage{CostUSD: 0.0123, InputTokens: 1200, OutputTokens: 300}}, "09:04:05 $ $0.0123, 1200 in, 300 out"},
		{transcript.Entry{Time: at, Turn: 1, Kind: transcript.KindTurnEnded, Text: "done"}, "09:04:05 ✓ turn 1 ended: done"},
		// An agent's output cannot drive the reader's terminal: escapes and other controls go.
		{transcript.Entry{Time: at, Kind: transcript.KindText, Text: "\x1b]0;owned\x07red\x1b[31m\rX"}, "09:04:05 agent: ]0;ownedred[31mX"},
	} {
		NewWithT(t).Expect(transcript.Format(tc.e)).To(Equal(tc.want))
	}
}

func TestDecodeBatchRefuses(t *testing.T) {
	long := strings.Repeat("a", transcript.MaxText+1)
	for _, tc := range []struct {
		name, body string
	}{
		{"unknown field", `{"entries":[],"x":1}`},
		{"seq zero", `{"entries":[{"seq":0,"kind":"Text"}]}`},
		{"unknown kind", `{"entries":[{"seq":1,"kind":"Exec"}]}`},
		{"out of order", `{"entries":[{"seq":2,"kind":"Text"},{"seq":2,"kind":"Text"}]}`},
		{"text too long", `{"entries":[{"seq":1,"kind":"Text","text":"` + long + `"}]}`},
		{"negative usage", `{"entries":[{"seq":1,"kind":"Usage","usage":{"costUSD":-1}}]}`},
		{"trailing", `{"entries":[]}{}`},
		{"too many", `{"entries":[` + strings.Repeat(`{"seq":1,"kind":"Text"},`, transcript.MaxBatch) + `{"seq":1,"kind":"Text"}]}`},
	} {
		_, err := transcript.DecodeBatch(strings.NewReader(tc.body))
		NewWithT(t).Expect(err).To(HaveOccurred(), tc.name)
	}
	b, err := transcript.DecodeBatch(strings.NewReader(`{"entries":[{"seq":1,"kind":"Text","text":"hi"},{"seq":3,"kind":"Note"}]}`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(b.Entries).To(HaveLen(2))
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"entries":[{"seq":1,"kind":"Text","text":"hi"}]}`))
	f.Add([]byte(`{"entries":[{"seq":1,"kind":"Usage","usage":{"costUSD":0.1}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := transcript.DecodeBatch(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i, e := range b.Entries {
			if transcript.Validate(e) != nil || (i > 0 && e.Seq <= b.Entries[i-1].Seq) {
				t.Fatalf("accepted an invalid entry %+v", e)
			}
			_ = transcript.Format(e)
		}
	})
}

func TestStoreBoundsAndReplays(t *testing.T) {
	g := NewWithT(t)
	s := &transcript.Store{MaxEntries: 10, MaxBytes: 4096}
	key := types.NamespacedName{Namespace: "team-a", Name: "widgets-42"}
	mk := func(from, to uint64, text string) []transcript.Entry {
		var es []transcript.Entry
		for i := from; i <= to; i++ {
			es = append(es, transcript.Entry{Seq: i, Kind: transcript.KindText, Text: text})
		}
		return es
	}
	_, _, changed := s.Read(key, 0, 0)
	g.Expect(s.Append(key, "uid-1", mk(3, 5, "x"))).To(Equal(uint64(0)))
	g.Expect(changed).To(BeClosed())
	// A replay (a runner sending again after a lost answer) adds nothing and wakes nobody.
	_, _, changed = s.Read(key, 0, 0)
	g.Expect(s.Append(key, "uid-1", mk(3, 5, "x"))).To(Equal(uint64(5)))
	g.Expect(changed).NotTo(BeClosed())
	// What a manager that restarted missed is merged in when the runner sends it again.
	g.Expect(s.Append(key, "uid-1", mk(1, 4, "x"))).To(Equal(uint64(5)))
	es, dropped, _ := s.Read(key, 2, 0)
	g.Expect(dropped).To(BeFalse())
	g.Expect(es).To(HaveLen(3))
	es, _, _ = s.Read(key, 0, 0)
	g.Expect(es).To(HaveLen(5))
	for i, e := range es {
		g.Expect(e.Seq).To(Equal(uint64(i + 1)))
	}
	// Past MaxEntries the oldest go, and a reader from the start learns it missed some.
	s.Append(key, "uid-1", mk(6, 25, "x"))
	es, dropped, _ = s.Read(key, 0, 0)
	g.Expect(es).To(HaveLen(10))
	g.Expect(es[0].Seq).To(Equal(uint64(16)))
	g.Expect(dropped).To(BeTrue())
	// Past MaxBytes too.
	s.Append(key, "uid-1", mk(26, 28, strings.Repeat("y", 1500)))
	g.Expect(s.Stats().Bytes).To(BeNumerically("<=", 4096))
	// A new object of the same name starts afresh.
	g.Expect(s.Append(key, "uid-2", mk(1, 1, "new"))).To(Equal(uint64(0)))
	es, _, _ = s.Read(key, 0, 0)
	g.Expect(es).To(HaveLen(1))
	s.Forget(key)
	g.Expect(s.Stats()).To(Equal(transcript.Stats{}))
}

// TestStoreSharesTheTotal: with more sessions than the total holds at MaxBytes each, a window
// that grows keeps only its share, so all windows together stay near MaxTotalBytes however many
// sessions stream; a window never keeps less than transcript.MinShareBytes.
func TestStoreSharesTheTotal(t *testing.T) {
	const text = 1024 - 96 // an entry of 1 KiB (Entry.Size)
	s := &transcript.Store{MaxEntries: 100000, MaxBytes: 512 << 10, MaxTotalBytes: 1 << 20}
	fill := func(name string, kib int) {
		key := types.NamespacedName{Namespace: "ns", Name: name}
		last := s.Last(key)
		batch := make([]transcript.Entry, kib)
		for i := range batch {
			batch[i] = transcript.Entry{Seq: last + uint64(i) + 1, Kind: transcript.KindText, Text: strings.Repeat("x", text)}
		}
		s.Append(key, "", batch)
	}
	fill("a", 600)
	fill("b", 600)
	if st := s.Stats(); st.Bytes > 1<<20 {
		t.Fatalf("two windows at their 512 KiB bound hold %d bytes", st.Bytes)
	}
	// Eight sessions: a share of 128 KiB each; a window that grows is cut to it.
	for _, n := range []string{"c", "d", "e", "f", "g", "h"} {
		fill(n, 200)
	}
	// Each is cut when it next grows (a window that stays quiet keeps what it has until then).
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		fill(n, 1)
	}
	st := s.Stats()
	if st.Sessions != 8 || st.Bytes > 1<<20 {
		t.Fatalf("8 sessions hold %d bytes, over the 1 MiB total: %+v", st.Bytes, st)
	}
	// A thousand sessions: the share is below transcript.MinShareBytes, which each window keeps.
	for i := range 1000 {
		fill(fmt.Sprintf("s-%d", i), 40)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "s-999"}
	es, _, _ := s.Read(key, 0, 0)
	kept := 0
	for _, e := range es {
		kept += e.Size()
	}
	if kept > transcript.MinShareBytes || kept < transcript.MinShareBytes-1024 {
		t.Fatalf("a window of 1008 sessions keeps %d bytes, want about %d", kept, transcript.MinShareBytes)
	}
}
