package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Spare worktrees (Project spec.workspace.spareWorktrees) are checkouts of the base made ahead of
// time, so that a new session's prepare claims one instead of writing the whole tree: on a large
// repository writing the files is most of a warm start (50,000 files: ~3 s of the 4 s prepare).
//
// Layout, on the volume of the worktrees (a claim is a rename, which must not cross volumes):
//
//	<worktrees>/.spares/spare-<id>        a checkout borrowing the mirror's objects, detached at the base
//	<worktrees>/.spares/spare-<id>.ready  made once the checkout is complete; removing it claims it
//	<worktrees>/.spares/.fill.lock        held by the one runner filling the spares
//
// Spares are made by the runner, in its own trust domain: a spare becomes another session's
// checkout, so no agent may ever write one. Agents' pods do not mount the spares directory. The
// files are group-writable (the runner's umask and core.sharedRepository=group) so that the
// agent of the session that claims it, in the pod's fsGroup, can work in it. Worktree names are
// DNS labels, so ".spares" never collides with a session's checkout.
//
// Claiming (the runner, under the mirror lock, before the session's prepare starts): remove a
// spare's marker (exactly one claimer can) and rename its directory to the session's checkout
// path; no git runs. Prepare then finds the checkout with the spare marker in its git dir,
// points its origin at the session's remote and switches it to the session's branch, which
// writes only the files that differ from the spare's commit.

// SpareDir is where the spares of the worktrees in worktreesDir live.
func SpareDir(worktreePath string) string {
	return filepath.Join(filepath.Dir(worktreePath), ".spares")
}

const (
	spareReadySuffix = ".ready"
	sparePrefix      = "spare-"
)

// Spares says which spares to keep.
type Spares struct {
	// Mirror is the Project's bare mirror the spares borrow from.
	Mirror string
	// Dir holds the spares (SpareDir of the session's checkout).
	Dir string
	// Base is the branch, tag or commit the spares are checked out at (detached).
	Base string
	// Count is how many spares to keep ready; extra ones are removed.
	Count int
	// Remote is the spares' origin until a session claims one.
	Remote string
}

// readySpares lists the ids of the spares whose marker exists, oldest name first.
func readySpares(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read spares dir: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, sparePrefix) && strings.HasSuffix(name, spareReadySuffix) {
			ids = append(ids, strings.TrimSuffix(name, spareReadySuffix))
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// ClaimSpare moves a ready spare of dir to path, which must be missing or an empty directory,
// and reports whether it did. It runs no git. The caller holds the mirror lock.
func ClaimSpare(dir, path string) (bool, error) {
	ids, err := readySpares(dir)
	if err != nil || len(ids) == 0 {
		return false, err
	}
	for _, id := range ids {
		// The marker's removal is the claim: of several claimers, exactly one succeeds.
		if err := os.Remove(filepath.Join(dir, id+spareReadySuffix)); err != nil {
			continue
		}
		// rename(2) replaces an empty directory, and fails on a full one.
		if err := os.Rename(filepath.Join(dir, id), path); err != nil {
			_ = os.RemoveAll(filepath.Join(dir, id))
			if entries, rerr := os.ReadDir(path); rerr == nil && len(entries) > 0 {
				return false, nil // something is already there: prepare restores or refuses it
			}
			continue
		}
		return true, nil
	}
	return false, nil
}

// discardSpare removes a spare, whatever state it is in.
func discardSpare(path string) { _ = os.RemoveAll(path) }

// FillSpares makes spares until s.Count are ready and removes any beyond it. It returns how many
// it made. Only one runner fills at a time (a lock on the spares dir, not waited for: when
// another runner holds it, FillSpares returns at once). Spares left half-made by a runner that
// was stopped are removed first. The mirror lock is taken only for the short mutations (prune),
// never for the checkout itself, so a session preparing meanwhile is not held up by a fill.
// s.Remote is the origin the spares are given until claimed (the session's remote replaces it).
func FillSpares(ctx context.Context, g *Git, s Spares) (int, error) {
	if s.Count < 0 {
		return 0, fmt.Errorf("spare count must not be negative")
	}
	if !filepath.IsAbs(s.Mirror) || !filepath.IsAbs(s.Dir) {
		return 0, fmt.Errorf("mirror and spares dir must be absolute paths")
	}
	if _, err := os.Stat(s.Dir); errors.Is(err, os.ErrNotExist) && s.Count == 0 {
		return 0, nil
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return 0, fmt.Errorf("create spares dir: %w", err)
	}
	fill, ok, err := tryLock(filepath.Join(s.Dir, ".fill.lock"))
	if err != nil || !ok {
		return 0, err
	}
	defer func() { _ = fill.Release() }()

	ready, err := trimSpares(ctx, s)
	if err != nil {
		return 0, err
	}
	made := 0
	for n := len(ready); n < s.Count; n++ {
		if err := ctx.Err(); err != nil {
			return made, err
		}
		if err := makeSpare(ctx, g, s); err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

// trimSpares removes what a stopped filler left half-made and the spares beyond s.Count, and
// returns the ready ones. It holds the mirror lock, under which claims happen, so a spare being
// claimed (its marker gone, its directory not yet moved) is never taken for a half-made one.
func trimSpares(ctx context.Context, s Spares) ([]string, error) {
	lock, err := AcquireLock(ctx, s.Mirror+".lock")
	if err != nil {
		return nil, err
	}
	defer func() { _ = lock.Release() }()
	// Holding the fill lock, any spare without a marker is one a stopped runner left half-made.
	ready, err := readySpares(s.Dir)
	if err != nil {
		return nil, err
	}
	isReady := map[string]bool{}
	for _, id := range ready {
		isReady[id] = true
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("read spares dir: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), sparePrefix) && !isReady[e.Name()] {
			discardSpare(filepath.Join(s.Dir, e.Name()))
		}
	}
	// Too many (the Project asked for fewer): drop the newest first.
	for len(ready) > s.Count {
		id := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		if err := os.Remove(filepath.Join(s.Dir, id+spareReadySuffix)); err == nil {
			discardSpare(filepath.Join(s.Dir, id))
		}
	}
	return ready, nil
}

func makeSpare(ctx context.Context, g *Git, s Spares) error {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("spare id: %w", err)
	}
	id := sparePrefix + hex.EncodeToString(b[:])
	path := filepath.Join(s.Dir, id)
	fail := func(err error) error {
		discardSpare(path)
		return err
	}
	if err := initBorrowing(ctx, g, path, s.Mirror, s.Remote); err != nil {
		return fail(err)
	}
	// Group-writable, so that the agent of the session that claims it can work in it.
	if _, err := g.Run(ctx, path, "config", "core.sharedRepository", "group"); err != nil {
		return fail(err)
	}
	start, err := resolveBase(ctx, g, path, s.Base)
	if err != nil {
		return fail(err)
	}
	if _, err := g.Run(ctx, path, "checkout", "--quiet", "--detach", start); err != nil {
		return fail(err)
	}
	// Files written in the same second as the index are "racily clean": git cannot trust their
	// stat data and re-reads them on every later check, which made the claim's branch switch take
	// ~1 s instead of ~0.1 s on 50,000 files. Once the clock has moved past the index, a refresh
	// rewrites the index with trusted stat data, here, off the sessions' critical path.
	select {
	case <-time.After(racyWait):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	if _, err := g.Run(ctx, path, "update-index", "-q", "--refresh"); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(path, ".git", spareMarker), []byte(id+"\n"), 0o664); err != nil {
		return fail(fmt.Errorf("mark the spare: %w", err))
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, id+spareReadySuffix), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fail(fmt.Errorf("mark spare ready: %w", err))
	}
	return f.Close()
}

// racyWait is how long makeSpare waits after the checkout before refreshing the index: past the
// second of the index's timestamp. Tests that do not measure the claim's speed shorten it.
var racyWait = 1100 * time.Millisecond

// tryLock takes an exclusive flock on path without waiting; ok is false when another holds it.
func tryLock(path string) (*Lock, bool, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, true, nil
}
