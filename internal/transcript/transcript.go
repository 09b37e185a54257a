// Package transcript is the live record of what an agent did: one stream of entries per
// session, in the same vocabulary for every agent CLI (turns, assistant text, tool calls and
// their results, questions, cost, errors).
//
// The runner makes the entries from the adapters' common events (FromEvent), numbers them,
// appends them to the session's volume (so the transcript outlives the pod), prints them as
// readable text to the pod's log (Format), and streams them to the manager over the runner
// channel. The manager keeps a bounded window per session in memory (Store), never in etcd,
// and serves it to the kubectl plugin and the dashboard.
package transcript

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/clip"
)

// Kind says what an Entry records.
type Kind string

const (
	// KindTurnStarted: a turn began; Text is its prompt (the task or a follow-up message).
	KindTurnStarted Kind = "TurnStarted"
	// KindTurnEnded: a turn ended; Text is the agent's summary, IsError marks a failed turn.
	KindTurnEnded Kind = "TurnEnded"
	// KindText: the agent said Text.
	KindText Kind = "Text"
	// KindToolCall: the agent called Tool with the input Text.
	KindToolCall Kind = "ToolCall"
	// KindToolResult: Tool answered Text (bounded); IsError marks a failed call.
	KindToolResult Kind = "ToolResult"
	// KindQuestion: the agent asked the human Text.
	KindQuestion Kind = "Question"
	// KindUsage: cost and tokens of a turn or a step of it.
	KindUsage Kind = "Usage"
	// KindError: an error the agent or its CLI reported.
	KindError Kind = "Error"
	// KindNote: the runner's own account (a message delivered, a push, the pull request).
	KindNote Kind = "Note"
)

var kinds = map[Kind]bool{KindTurnStarted: true, KindTurnEnded: true, KindText: true, KindToolCall: true,
	KindToolResult: true, KindQuestion: true, KindUsage: true, KindError: true, KindNote: true}

// Bounds of one entry: a tool's input and output are clipped, said text is kept whole up to
// MaxText. An entry past them is refused by Validate (the runner clips before it sends).
const (
	MaxText  = 16 << 10
	MaxInput = 2 << 10
	MaxTool  = 128
)

// Entry is one thing in a session's transcript.
type Entry struct {
	// Seq numbers the session's entries from 1, without gaps in what one runner wrote; a
	// reader resumes after the last Seq it has.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Turn is the turn the entry belongs to (1 for the first of the session).
	Turn    int32  `json:"turn,omitempty"`
	Kind    Kind   `json:"kind"`
	Tool    string `json:"tool,omitempty"`
	Text    string `json:"text,omitempty"`
	IsError bool   `json:"isError,omitempty"`
	Usage   *Usage `json:"usage,omitempty"`
}

// Usage is what a turn or step cost.
type Usage struct {
	CostUSD         float64 `json:"costUSD,omitempty"`
	InputTokens     int64   `json:"inputTokens,omitempty"`
	OutputTokens    int64   `json:"outputTokens,omitempty"`
	CacheReadTokens int64   `json:"cacheReadTokens,omitempty"`
}

// Size is the entry's share of a window's memory bound: its strings and a fixed overhead.
func (e Entry) Size() int { return 96 + len(e.Tool) + len(e.Text) }

// FromEvent turns an adapter's event into an entry (without Seq, Time and Turn, which the runner
// adds). Events that are not part of the transcript (activity, the conversation id) give false.
func FromEvent(ev agent.Event) (Entry, bool) {
	switch ev.Kind {
	case agent.KindText:
		return Entry{Kind: KindText, Text: clip.To(ev.Text, MaxText)}, true
	case agent.KindToolUse:
		return Entry{Kind: KindToolCall, Tool: clip.To(ev.Tool, MaxTool), Text: clip.To(ev.Text, MaxInput)}, true
	case agent.KindToolResult:
		return Entry{Kind: KindToolResult, Tool: clip.To(ev.Tool, MaxTool), Text: clip.To(ev.Text, agent.MaxToolResult), IsError: ev.IsError}, true
	case agent.KindQuestion:
		return Entry{Kind: KindQuestion, Text: clip.To(ev.Text, MaxText)}, true
	case agent.KindTurnResult:
		return Entry{Kind: KindTurnEnded, Text: clip.To(ev.Text, MaxText), IsError: ev.IsError}, true
	case agent.KindUsage:
		if ev.Usage == nil {
			return Entry{}, false
		}
		u := Usage(*ev.Usage)
		return Entry{Kind: KindUsage, Usage: &u}, true
	case agent.KindError:
		text := ev.Text
		switch {
		case ev.Retrying:
			text = "retrying: " + text
		case ev.Denied:
			text = "denied: " + text
		}
		return Entry{Kind: KindError, Text: clip.To(text, MaxText)}, true
	}
	return Entry{}, false
}

// Errors of Validate and Decode.
var (
	ErrInvalid  = errors.New("invalid transcript entry")
	ErrTooLarge = errors.New("transcript batch too large")
)

// Validate checks an entry that came from outside (the runner, a file on the volume).
func Validate(e Entry) error {
	switch {
	case e.Seq == 0:
		return fmt.Errorf("%w: seq must be at least 1", ErrInvalid)
	case !kinds[e.Kind]:
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, e.Kind)
	case len(e.Text) > MaxText:
		return fmt.Errorf("%w: text of %d bytes is over %d", ErrInvalid, len(e.Text), MaxText)
	case len(e.Tool) > MaxTool:
		return fmt.Errorf("%w: tool name of %d bytes is over %d", ErrInvalid, len(e.Tool), MaxTool)
	case e.Turn < 0:
		return fmt.Errorf("%w: negative turn", ErrInvalid)
	case e.Usage != nil && (e.Usage.CostUSD < 0 || e.Usage.InputTokens < 0 || e.Usage.OutputTokens < 0 || e.Usage.CacheReadTokens < 0):
		return fmt.Errorf("%w: negative usage", ErrInvalid)
	case !utf8.ValidString(e.Text) || !utf8.ValidString(e.Tool):
		return fmt.Errorf("%w: text is not UTF-8", ErrInvalid)
	}
	return nil
}

// Batch is what the runner sends at once, in order of Seq.
type Batch struct {
	Entries []Entry `json:"entries"`
}

// BatchResult is the manager's answer: the highest Seq it held for the session before the
// batch, so that a runner whose manager restarted (an empty window) sends its recent entries
// again.
type BatchResult struct {
	Before uint64 `json:"before"`
}

// MaxBatch bounds the entries of one Batch.
const MaxBatch = 256

// DecodeBatch reads a Batch of at most MaxBatch valid entries in increasing Seq from r (which
// the caller bounds in bytes).
func DecodeBatch(r io.Reader) (Batch, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var b Batch
	if err := dec.Decode(&b); err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if dec.More() {
		return Batch{}, fmt.Errorf("%w: trailing data", ErrInvalid)
	}
	if len(b.Entries) > MaxBatch {
		return Batch{}, fmt.Errorf("%w: %d entries, at most %d", ErrTooLarge, len(b.Entries), MaxBatch)
	}
	for i, e := range b.Entries {
		if err := Validate(e); err != nil {
			return Batch{}, fmt.Errorf("entry %d: %w", i, err)
		}
		if i > 0 && e.Seq <= b.Entries[i-1].Seq {
			return Batch{}, fmt.Errorf("%w: entry %d: seq %d is not after %d", ErrInvalid, i, e.Seq, b.Entries[i-1].Seq)
		}
	}
	return b, nil
}

// Format is an entry as one or more lines of readable text, for a terminal or a pod's log. It
// never prints control characters the entry carried (an agent's output cannot move a
// terminal's cursor or change its title).
func Format(e Entry) string {
	ts := e.Time.UTC().Format("15:04:05")
	var b strings.Builder
	b.WriteString(ts)
	b.WriteByte(' ')
	text := Printable(e.Text)
	switch e.Kind {
	case KindTurnStarted:
		fmt.Fprintf(&b, "── turn %d ── %s", e.Turn, indent(text))
	case KindTurnEnded:
		if e.IsError {
			fmt.Fprintf(&b, "✗ turn %d failed: %s", e.Turn, indent(text))
		} else {
			fmt.Fprintf(&b, "✓ turn %d ended: %s", e.Turn, indent(text))
		}
	case KindText:
		b.WriteString("agent: " + indent(text))
	case KindToolCall:
		fmt.Fprintf(&b, "→ %s %s", Printable(e.Tool), indent(clip.To(text, 300)))
	case KindToolResult:
		mark := "←"
		if e.IsError {
			mark = "← (failed)"
		}
		fmt.Fprintf(&b, "%s %s: %s", mark, Printable(e.Tool), indent(firstLines(text, 6)))
	case KindQuestion:
		b.WriteString("? asks you: " + indent(text))
	case KindUsage:
		b.WriteString("$ " + FormatUsage(e.Usage))
	case KindError:
		b.WriteString("! " + indent(text))
	case KindNote:
		b.WriteString("· " + indent(text))
	default:
		b.WriteString(string(e.Kind) + ": " + indent(text))
	}
	return b.String()
}

// FormatUsage is a usage as "$0.0123, 1200 in, 300 out, 800 cached".
func FormatUsage(u *Usage) string {
	if u == nil {
		return ""
	}
	var parts []string
	if u.CostUSD > 0 {
		parts = append(parts, "$"+strconv.FormatFloat(u.CostUSD, 'f', 4, 64))
	}
	parts = append(parts, fmt.Sprintf("%d in, %d out", u.InputTokens, u.OutputTokens))
	if u.CacheReadTokens > 0 {
		parts = append(parts, fmt.Sprintf("%d cached", u.CacheReadTokens))
	}
	return strings.Join(parts, ", ")
}

// Printable drops control characters other than newline and tab, and invalid UTF-8.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == utf8.RuneError, r < 0x20, r >= 0x7f && r < 0xa0, r == 0x2028, r == 0x2029:
			return -1
		}
		return r
	}, s)
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return strings.ReplaceAll(s, "\n", "\n         ")
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimRight(s, "\n"), "\n", n+1)
	if len(lines) > n {
		return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… (%d more bytes)", len(s)-len(strings.Join(lines[:n], "\n")))
	}
	return strings.Join(lines, "\n")
}
