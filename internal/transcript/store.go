package transcript

import (
	"cmp"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Window bounds, per session: the newest entries are kept, the oldest dropped first. The full
// transcript is on the session's volume; the window is what a reader joining late sees at once.
const (
	DefaultMaxEntries = 1000
	DefaultMaxBytes   = 512 << 10
	// DefaultMaxTotalBytes bounds all windows together: with many sessions streaming, each
	// window's share is this divided among them (at least MinShareBytes), so 5000 busy sessions
	// hold about 52 KiB each instead of 512 KiB, 2.5 GiB in all.
	DefaultMaxTotalBytes = 256 << 20
	// MinShareBytes is the least a window keeps, however many sessions share the total.
	MinShareBytes = 16 << 10
)

// Store keeps a bounded window of each session's newest entries in memory and wakes the readers
// that follow it. It is safe for concurrent use.
type Store struct {
	// MaxEntries and MaxBytes bound one window (Entry.Size); MaxTotalBytes all of them, as a
	// share per window applied when it grows. Zero uses the defaults.
	MaxEntries, MaxBytes, MaxTotalBytes int

	mu      sync.Mutex
	windows map[types.NamespacedName]*window
	bytes   int
}

type window struct {
	// uid is the AgentSession's: a new object of the same name starts an empty window.
	uid     types.UID
	entries []Entry
	bytes   int
	// last is the highest Seq held or dropped.
	last uint64
	// changed is closed (and replaced) on every append.
	changed chan struct{}
}

// limits are a window's bounds now: its entries, and its bytes, which is MaxBytes or, with more
// windows than the total holds at MaxBytes each, its share of MaxTotalBytes. Call with mu held.
func (s *Store) limits() (int, int) {
	n, b, total := s.MaxEntries, s.MaxBytes, s.MaxTotalBytes
	if n <= 0 {
		n = DefaultMaxEntries
	}
	if b <= 0 {
		b = DefaultMaxBytes
	}
	if total <= 0 {
		total = DefaultMaxTotalBytes
	}
	if w := len(s.windows); w > 0 {
		b = min(b, max(total/w, MinShareBytes))
	}
	return n, b
}

func (s *Store) windowLocked(key types.NamespacedName, uid types.UID) *window {
	if s.windows == nil {
		s.windows = map[types.NamespacedName]*window{}
	}
	w := s.windows[key]
	if w == nil || (uid != "" && w.uid != uid) {
		if w != nil {
			s.bytes -= w.bytes
			close(w.changed)
		}
		w = &window{uid: uid, changed: make(chan struct{})}
		s.windows[key] = w
	}
	return w
}

// Append merges entries into the session's window, skipping those it holds (a runner sends
// again what an answer it lost covered, and a manager that restarted is sent the runner's recent
// entries to fill its window). A runner of a new pod continues the numbering from the transcript
// file on the volume, so its entries follow the old pod's. It returns the highest Seq the window
// held before: a runner that sees it below its batch's first Seq less one knows the manager
// missed entries and sends its older ones.
func (s *Store) Append(key types.NamespacedName, uid types.UID, entries []Entry) (before uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windowLocked(key, uid)
	maxN, maxB := s.limits()
	before = w.last
	added := false
	for _, e := range entries {
		if e.Seq > w.last {
			w.entries = append(w.entries, e)
			w.last = e.Seq
		} else {
			i, found := slices.BinarySearchFunc(w.entries, e.Seq, func(x Entry, seq uint64) int { return cmp.Compare(x.Seq, seq) })
			if found {
				continue
			}
			w.entries = slices.Insert(w.entries, i, e)
		}
		w.bytes += e.Size()
		s.bytes += e.Size()
		added = true
	}
	drop := 0
	for len(w.entries)-drop > maxN || (w.bytes > maxB && len(w.entries)-drop > 1) {
		w.bytes -= w.entries[drop].Size()
		s.bytes -= w.entries[drop].Size()
		drop++
	}
	if drop > 0 {
		// Copy, so the dropped entries' memory goes and a reader's slice stays valid.
		w.entries = append([]Entry(nil), w.entries[drop:]...)
	}
	if added {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	return before
}

// Read returns the session's entries after since (at most limit; 0 for all), whether entries
// after since were already dropped from the window (the reader missed some: the volume has
// them), and a channel closed at the next change. An unknown session reads as empty, with a
// channel that closes when its first entries arrive.
func (s *Store) Read(key types.NamespacedName, since uint64, limit int) (entries []Entry, dropped bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windowLocked(key, "")
	i := 0
	for i < len(w.entries) && w.entries[i].Seq <= since {
		i++
	}
	if len(w.entries) > 0 && w.entries[0].Seq > since+1 {
		dropped = true
	}
	out := w.entries[i:]

	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return append([]Entry(nil), out...), dropped, w.changed
}

// Last returns the highest Seq the session's window holds or held.
func (s *Store) Last(key types.NamespacedName) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.windows[key]; w != nil {
		return w.last
	}
	return 0
}

// Forget drops a session's window (the AgentSession is gone); its readers are woken and read
// an empty window.
func (s *Store) Forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.windows[key]; w != nil {
		s.bytes -= w.bytes
		close(w.changed)
		delete(s.windows, key)
	}
}

// Stats are the store's size: sessions with a window, entries and bytes (Entry.Size) held.
type Stats struct {
	Sessions, Entries, Bytes int
}

// Stats reports the store's size.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Sessions: len(s.windows), Bytes: s.bytes}
	for _, w := range s.windows {
		st.Entries += len(w.entries)
	}
	return st
}
