package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Worktree mode makes each checkout a repository of its own that borrows the Project mirror's
// objects (objects/info/alternates): the objects are shared and never copied, but the refs,
// index, config and hooks are the checkout's. That keeps the mirror read-only to agents — an
// agent's pod mounts it read-only, so nothing an agent does reaches another session's git — at
// the price of git worktree's one shared ref store: a session's branch lives in its checkout
// (and, once pushed, on the forge), not in the mirror.
//
// The mirror is written by the runner only (a trusted process, which never runs git in a
// repository an agent can write); the checkout is made by prepare, as the agent's user.

// spareMarker, in a checkout's git dir, says the checkout is a spare the runner moved into place
// and prepare has not finished claiming yet.
const spareMarker = "shepherd-spare"

// initBorrowing makes an empty repository at path that borrows the mirror's objects, with
// origin at remote, and copies the mirror's view of the remote's refs (a ref copy: every object
// is already there). The caller has made sure that path is missing or an empty directory.
func initBorrowing(ctx context.Context, g *Git, path, mirror, remote string) error {
	if _, err := g.Run(ctx, "", "init", "--quiet", "--", path); err != nil {
		return err
	}
	gitDir := filepath.Join(path, ".git")
	alt := filepath.Join(gitDir, "objects", "info", "alternates")
	if err := os.WriteFile(alt, []byte(filepath.Join(mirror, "objects")+"\n"), 0o644); err != nil {
		return fmt.Errorf("link the mirror's objects: %w", err)
	}
	for _, kv := range [][2]string{
		{"remote.origin.url", remote},
		{"remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"},
		// The objects the checkout borrows are never pruned from the mirror (gc.pruneExpire=never
		// there); a gc here must not repack them into the checkout either.
		{"gc.auto", "0"},
	} {
		if _, err := g.Run(ctx, path, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	return syncFromMirror(ctx, g, path, mirror)
}

// syncFromMirror copies the mirror's remote-tracking refs and tags into the checkout: the
// mirror was fetched moments ago by the runner, so the checkout sees the remote as it is now
// without a round trip to the forge.
func syncFromMirror(ctx context.Context, g *Git, path, mirror string) error {
	_, err := g.Run(ctx, path, "fetch", "--quiet", "--prune", "--no-tags", mirror,
		"+refs/remotes/origin/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
	return err
}

// borrowsFrom reports whether the checkout at path borrows its objects from mirror.
func borrowsFrom(path, mirror string) (bool, error) {
	raw, err := os.ReadFile(filepath.Join(path, ".git", "objects", "info", "alternates"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the checkout's alternates: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if filepath.Clean(strings.TrimSpace(line)) == filepath.Join(mirror, "objects") {
			return true, nil
		}
	}
	return false, nil
}

// convertLinkedWorktree turns a checkout made by an earlier Shepherd (a linked worktree of the
// mirror, whose branch and index live in the mirror) into a borrowing repository: the branch's
// commit and name are read from the mirror (read-only), a repository of its own is made in
// place, and the index is rebuilt from that commit, so the files and any uncommitted change in
// the working tree stay as they were.
func convertLinkedWorktree(ctx context.Context, g *Git, path, mirror, remote string) error {
	dotgit := filepath.Join(path, ".git")
	raw, err := os.ReadFile(dotgit)
	if err != nil {
		return fmt.Errorf("read %s: %w", dotgit, err)
	}
	admin := strings.TrimSpace(strings.TrimPrefix(string(raw), "gitdir:"))
	if !strings.HasPrefix(filepath.Clean(admin), filepath.Join(mirror, "worktrees")+string(filepath.Separator)) {
		return fmt.Errorf("checkout %s is a linked worktree of %s, not of the mirror %s", path, admin, mirror)
	}
	head, err := os.ReadFile(filepath.Join(admin, "HEAD"))
	if err != nil {
		return fmt.Errorf("read the old worktree's HEAD: %w", err)
	}
	branch, onBranch := strings.CutPrefix(strings.TrimSpace(string(head)), "ref: refs/heads/")
	commit := strings.TrimSpace(string(head))
	if onBranch {
		if commit, err = g.Run(ctx, mirror, "rev-parse", "--verify", "refs/heads/"+branch+"^{commit}"); err != nil {
			return fmt.Errorf("find the old worktree's branch %s in the mirror: %w", branch, err)
		}
	}
	if err := os.Remove(dotgit); err != nil {
		return fmt.Errorf("remove the old worktree's link: %w", err)
	}
	if err := initBorrowing(ctx, g, path, mirror, remote); err != nil {
		return err
	}
	if onBranch {
		if _, err := g.Run(ctx, path, "update-ref", "refs/heads/"+branch, commit); err != nil {
			return err
		}
		if _, err := g.Run(ctx, path, "symbolic-ref", "HEAD", "refs/heads/"+branch); err != nil {
			return err
		}
	} else if _, err := g.Run(ctx, path, "update-ref", "--no-deref", "HEAD", commit); err != nil {
		return err
	}
	_, err = g.Run(ctx, path, "reset", "--quiet")
	return err
}

// finishClaim completes a spare the runner moved to path: its origin becomes the session's,
// its marker goes, and it reports true; a checkout without the marker reports false.
func finishClaim(ctx context.Context, g *Git, path, remote string) (bool, error) {
	marker := filepath.Join(path, ".git", spareMarker)
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("stat the spare marker: %w", err)
	}
	if _, err := g.Run(ctx, path, "config", "remote.origin.url", remote); err != nil {
		return false, err
	}
	if err := os.Remove(marker); err != nil {
		return false, fmt.Errorf("remove the spare marker: %w", err)
	}
	return true, nil
}
