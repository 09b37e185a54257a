package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// TranscriptFile is the session's transcript on its volume, in the runner's state directory
// (out of the agent's reach): one JSON entry per line, appended by every pod of the session.
const TranscriptFile = "transcript.jsonl"

// Bounds of the runner's side of the transcript.
const (
	// transcriptFileMax: past it the file is renamed to .1 (replacing an older .1) and a new
	// one begun, so a session that runs for weeks keeps at most twice this on its volume.
	transcriptFileMax = 32 << 20
	// transcriptRecent is how many entries the runner keeps to send again to a manager whose
	// window is behind (it restarted, or another replica took over).
	transcriptRecent = 1000
	// transcriptSendEvery is the least time between two batches: lines that come faster are
	// sent together, and a line waits at most this long (plus the round trip) to reach the
	// manager.
	transcriptSendEvery = 100 * time.Millisecond
)

// transcriber numbers the session's entries, appends them to the volume, prints them readably
// to the pod's log and streams them to the manager. A manager that cannot be reached delays the
// stream, never the agent: entries wait in memory (the newest transcriptRecent) and the file
// keeps them all.
type transcriber struct {
	client *runnerapi.Client
	out    io.Writer
	errOut io.Writer
	path   string

	mu     sync.Mutex
	file   *os.File
	size   int64
	seq    uint64
	turn   int32
	recent []transcript.Entry
	// sent is the highest Seq the manager confirmed it holds.
	sent uint64
	kick chan struct{}
}

// newTranscriber continues the transcript in dir (empty: none on disk): numbering goes on from
// the file's last entry, and the file's newest entries are queued for the manager, whose window
// a new pod refills.
func newTranscriber(c *runnerapi.Client, dir string, out, errOut io.Writer) *transcriber {
	t := &transcriber{client: c, out: out, errOut: errOut, kick: make(chan struct{}, 1)}
	if dir == "" {
		return t
	}
	t.path = filepath.Join(dir, TranscriptFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintf(errOut, "shepherd-runner: transcript directory: %v\n", err)
		t.path = ""
		return t
	}
	t.load()
	return t
}

// load reads the file's entries (skipping lines a crash cut short), keeping the newest.
func (t *transcriber) load() {
	f, err := os.Open(t.path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e transcript.Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || transcript.Validate(e) != nil || e.Seq <= t.seq {
			continue
		}
		t.seq, t.turn = e.Seq, max(t.turn, e.Turn)
		t.remember(e)
	}
	if fi, err := f.Stat(); err == nil {
		t.size = fi.Size()
	}
}

func (t *transcriber) remember(e transcript.Entry) {
	t.recent = append(t.recent, e)
	if len(t.recent) > transcriptRecent {
		t.recent = append([]transcript.Entry(nil), t.recent[len(t.recent)-transcriptRecent/2:]...)
	}
}

// startTurn begins a new turn with its prompt.
func (t *transcriber) startTurn(prompt string) {
	t.mu.Lock()
	t.turn++
	t.mu.Unlock()
	t.add(transcript.Entry{Kind: transcript.KindTurnStarted, Text: clipText(prompt)})
}

// note records the runner's own account of something.
func (t *transcriber) note(format string, args ...any) {
	t.add(transcript.Entry{Kind: transcript.KindNote, Text: clipText(fmt.Sprintf(format, args...))})
}

func clipText(s string) string { return clip.To(s, transcript.MaxText) }

// add numbers e, writes it to the file and the log, and queues it for the manager.
func (t *transcriber) add(e transcript.Entry) {
	t.mu.Lock()
	t.seq++
	e.Seq, e.Time, e.Turn = t.seq, time.Now().UTC(), t.turn
	t.remember(e)
	t.appendFile(e)
	t.mu.Unlock()
	fmt.Fprintln(t.out, transcript.Format(e))
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// appendFile writes one line; the caller holds mu. A full volume loses the file's copy, not the
// stream.
func (t *transcriber) appendFile(e transcript.Entry) {
	if t.path == "" {
		return
	}
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	line = append(line, '\n')
	if t.size+int64(len(line)) > transcriptFileMax && t.file != nil {
		_ = t.file.Close()
		t.file = nil
		_ = os.Rename(t.path, t.path+".1")
		t.size = 0
	}
	if t.file == nil {
		f, err := os.OpenFile(t.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(t.errOut, "shepherd-runner: transcript file: %v\n", err)
			t.path = ""
			return
		}
		t.file = f
	}
	n, err := t.file.Write(line)
	t.size += int64(n)
	if err != nil {
		fmt.Fprintf(t.errOut, "shepherd-runner: transcript file: %v\n", err)
	}
}

// pending returns the entries the manager does not hold yet, at most one batch.
func (t *transcriber) pending() []transcript.Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for i < len(t.recent) && t.recent[i].Seq <= t.sent {
		i++
	}
	out := t.recent[i:]
	if len(out) > transcript.MaxBatch {
		out = out[:transcript.MaxBatch]
	}
	return append([]transcript.Entry(nil), out...)
}

// loop streams the transcript to the manager until ctx ends, then sends what is left once.
func (t *transcriber) loop(ctx context.Context) {
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		}
		for {
			batch := t.pending()
			if len(batch) == 0 {
				break
			}
			if err := t.send(ctx, batch); err != nil {
				if ctx.Err() != nil {
					return
				}
				fmt.Fprintf(t.errOut, "shepherd-runner: transcript not delivered (retrying in %s): %v\n", backoff, err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 30*time.Second)
				continue
			}
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(transcriptSendEvery):
		}
	}
}

func (t *transcriber) send(ctx context.Context, batch []transcript.Entry) error {
	res, err := t.client.Transcript(ctx, transcript.Batch{Entries: batch})
	if err != nil {
		var ae *runnerapi.APIError
		if errors.As(err, &ae) && ae.Status == 400 {
			// Refused for good (a bug, not a network): skip it rather than resend it forever.
			t.mu.Lock()
			t.sent = max(t.sent, batch[len(batch)-1].Seq)
			t.mu.Unlock()
		}
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if res.Before+1 < batch[0].Seq && len(t.recent) > 0 && t.recent[0].Seq < batch[0].Seq {
		// The manager held less than it was sent before: it restarted, or a new leader
		// answers. Send again what it lacks (as far back as the recent entries go).
		t.sent = res.Before
		return nil
	}
	t.sent = max(t.sent, batch[len(batch)-1].Seq)
	return nil
}

// flush sends what is pending once, within ctx (the pod is stopping).
func (t *transcriber) flush(ctx context.Context) {
	for i := 0; i < 8; i++ {
		batch := t.pending()
		if len(batch) == 0 || t.send(ctx, batch) != nil {
			break
		}
	}
}

func (t *transcriber) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.file != nil {
		_ = t.file.Close()
		t.file = nil
	}
}
