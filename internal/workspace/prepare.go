package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/gitref"
)

// Options say what checkout to make.
type Options struct {
	// Mode is Worktree or Clone.
	Mode agentsv1alpha1.WorkspaceMode
	// Path of the checkout. In worktree mode it lives on the mirror's volume; in clone mode on the
	// Worktree's own volume, in a subdirectory of the mount (a volume's root may hold lost+found).
	Path string
	// MirrorPath is the Project's bare mirror. Required in worktree mode (created when missing);
	// optional in clone mode, where it is only borrowed from (--reference-if-able) and never
	// written, so it may be mounted read-only.
	MirrorPath string
	// RemoteURL git fetches from and pushes to. It must not embed credentials.
	RemoteURL string
	// Branch the checkout works on, and Base it starts from when it is created.
	Branch string
	Base   string
	// Adopt takes over a branch that already exists on the remote.
	Adopt bool
	// Setup commands run in the checkout after it is made.
	Setup []agentsv1alpha1.SetupCommand
	// SetupOutput receives the setup commands' output as it is printed, and notes on the shared
	// paths (what was linked, moved aside or unlinked); nil discards it.
	SetupOutput io.Writer
	// SharedPaths are paths of the checkout served from SharedDir, the Project's cache: each is
	// made a symlink to SharedDir/<path> before the setup commands run, and excluded from git.
	// Paths that were shared before and are not any more are unlinked. See shared.go.
	SharedPaths []string
	// SharedDir is the absolute path of the Project's cache directory, on a volume every pod of
	// the Project mounts at the same path (the links are absolute). Required with SharedPaths.
	SharedDir string
}

// Result is what Prepare did and found.
type Result struct {
	Path   string `json:"path"`
	Branch string `json:"branch"`
	// Restored is true when an existing checkout was found and fetched instead of made.
	Restored bool `json:"restored"`
	// FullFetch is true when this prepare fetched the repository whole from the remote: it
	// created the Project's mirror (worktree mode), or cloned with no mirror to borrow objects
	// from (clone mode). A restore, a worktree added from a present mirror and a clone borrowing
	// from it fetch only what changed. The manager labels the time to running cold or warm by it.
	FullFetch bool `json:"fullFetch,omitempty"`
	// Spare is true when the checkout was a spare worktree made ahead of time (spares.go).
	Spare bool `json:"spare,omitempty"`
	// GitDir is the checkout's git directory (absolute), where StateDir is.
	GitDir string `json:"gitDir,omitempty"`
	// BranchAction says how the branch came to be checked out: created, adopted, existing.
	BranchAction string      `json:"branchAction"`
	Setup        SetupResult `json:"setup"`
	Facts        Facts       `json:"facts"`
}

// Branch actions.
const (
	BranchCreated  = "created"
	BranchAdopted  = "adopted"
	BranchExisting = "existing"
)

// ErrBranchExists: the branch exists on the remote and Adopt is false.
var ErrBranchExists = errors.New("branch already exists on the remote")

// Validate checks the options before anything touches the disk.
func (o *Options) Validate() error {
	switch o.Mode {
	case agentsv1alpha1.WorkspaceWorktree:
		if o.MirrorPath == "" {
			return fmt.Errorf("worktree mode needs the mirror path")
		}
	case agentsv1alpha1.WorkspaceClone:
	default:
		return fmt.Errorf("unknown workspace mode %q (want Worktree or Clone)", o.Mode)
	}
	if o.Path == "" || !filepath.IsAbs(o.Path) {
		return fmt.Errorf("checkout path must be absolute, got %q", o.Path)
	}
	if o.MirrorPath != "" && !filepath.IsAbs(o.MirrorPath) {
		return fmt.Errorf("mirror path must be absolute (worktrees link to it by absolute path), got %q", o.MirrorPath)
	}
	if err := gitref.ValidateBranch(o.Branch); err != nil {
		return fmt.Errorf("branch %q: %w", o.Branch, err)
	}
	if o.Base == "" {
		return fmt.Errorf("base ref is required")
	}
	if err := gitref.ValidateBranch(o.Base); err != nil {
		return fmt.Errorf("base %q: %w", o.Base, err)
	}
	if err := o.validateShared(); err != nil {
		return err
	}
	return ValidateRemoteURL(o.RemoteURL)
}

// ValidateRemoteURL refuses a URL that carries credentials: they would be written to
// .git/config and shown in logs.
func ValidateRemoteURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("remote URL is required")
	}
	if strings.HasPrefix(raw, "-") {
		return fmt.Errorf("remote URL must not start with '-'")
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword || u.Scheme == "http" || u.Scheme == "https" {
			return fmt.Errorf("remote URL must not embed credentials; the runner gets them from the manager")
		}
	}
	return nil
}

// Prepare makes the checkout, or finds it and fetches (a restore), puts it on the branch, links
// the shared paths to the Project's cache, and runs the setup commands. It is idempotent: running
// it again on a ready checkout fetches and reports the facts. A failed setup command is reported
// in Result.Setup, not as an error: the checkout stays usable.
func Prepare(ctx context.Context, g *Git, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	worktree := o.Mode == agentsv1alpha1.WorkspaceWorktree
	if err := g.CheckVersion(ctx, worktree); err != nil {
		return nil, err
	}
	res := &Result{Path: o.Path, Branch: o.Branch}
	state, err := inspect(ctx, g, o.Path)
	if err != nil {
		return nil, err
	}
	if worktree {
		err = prepareWorktree(ctx, g, o, state, res)
	} else {
		err = prepareClone(ctx, g, o, state, res)
	}
	if err != nil {
		return nil, err
	}
	gitDir, err := g.Run(ctx, o.Path, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return nil, err
	}
	res.GitDir = gitDir
	setupOut := o.SetupOutput
	if setupOut == nil {
		setupOut = io.Discard
	}
	if err := shareCheckout(ctx, g, o, gitDir, setupOut); err != nil {
		return nil, err
	}
	res.Setup, err = runSetup(ctx, o.Path, StateDir(gitDir), o.Setup, o.sharedSetup(), setupOut)
	if err != nil {
		return nil, err
	}
	res.Facts, err = ReadFacts(ctx, g, o.Path)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// StateDir is where Shepherd keeps per-checkout state (setup results, agent chat history): inside
// the checkout's own git directory, so it persists with the checkout and never dirties it.
func StateDir(gitDir string) string { return filepath.Join(gitDir, "shepherd") }

type pathState int

const (
	pathMissing pathState = iota
	pathEmpty
	pathCheckout
	pathBroken
)

// inspect says what is at path: nothing, an empty directory, a usable checkout, or a directory
// that looks like a checkout git cannot open.
func inspect(ctx context.Context, g *Git, path string) (pathState, error) {
	entries, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return pathMissing, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read checkout dir: %w", err)
	}
	if len(entries) == 0 {
		return pathEmpty, nil
	}
	if _, err := os.Lstat(filepath.Join(path, ".git")); err != nil {
		return 0, fmt.Errorf("%s is not empty and is not a git checkout; refusing to touch it", path)
	}
	top, err := g.Run(ctx, path, "rev-parse", "--show-toplevel")
	if err != nil {
		return pathBroken, nil
	}
	if filepath.Clean(top) != filepath.Clean(path) {
		return 0, fmt.Errorf("%s is inside another checkout (%s), not a checkout itself", path, top)
	}
	return pathCheckout, nil
}

// prepareWorktree makes or restores a checkout that borrows the mirror's objects (borrow.go).
// The runner fetched the mirror just before (it is read-only here) and may have moved a spare
// checkout to o.Path.
func prepareWorktree(ctx context.Context, g *Git, o Options, state pathState, res *Result) error {
	if !mirrorPresent(o.MirrorPath) {
		return fmt.Errorf("the Project's mirror %s is missing: the runner makes it before the checkout", o.MirrorPath)
	}
	if state == pathBroken {
		if fi, err := os.Lstat(filepath.Join(o.Path, ".git")); err == nil && fi.Mode().IsRegular() {
			// A linked worktree of the mirror made by an earlier Shepherd, whose admin entry is in
			// the mirror: convert it (it may well open, so also look below).
			if err := convertLinkedWorktree(ctx, g, o.Path, o.MirrorPath, o.RemoteURL); err != nil {
				return err
			}
			state = pathCheckout
		} else {
			return fmt.Errorf("checkout %s is broken: git cannot open it; remove it (set the Worktree Absent, then Present) to start again from the branch", o.Path)
		}
	}
	if state == pathCheckout {
		if fi, err := os.Lstat(filepath.Join(o.Path, ".git")); err == nil && fi.Mode().IsRegular() {
			if err := convertLinkedWorktree(ctx, g, o.Path, o.MirrorPath, o.RemoteURL); err != nil {
				return err
			}
		}
		ok, err := borrowsFrom(o.Path, o.MirrorPath)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("checkout %s does not borrow from the mirror %s; refusing to touch it", o.Path, o.MirrorPath)
		}
		if err := syncFromMirror(ctx, g, o.Path, o.MirrorPath); err != nil {
			return err
		}
		claimed, err := finishClaim(ctx, g, o.Path, o.RemoteURL)
		if err != nil {
			return err
		}
		if claimed {
			action, start, err := branchPlan(ctx, g, o.Path, o, true)
			if err != nil {
				return err
			}
			res.Spare, res.BranchAction = true, action
			return checkoutClaimed(ctx, g, o.Path, o.Branch, action, start)
		}
		res.Restored = true
		res.BranchAction, err = switchBranch(ctx, g, o, o.Path)
		return err
	}
	if err := initBorrowing(ctx, g, o.Path, o.MirrorPath, o.RemoteURL); err != nil {
		return err
	}
	action, start, err := branchPlan(ctx, g, o.Path, o, true)
	if err != nil {
		return err
	}
	res.BranchAction = action
	return checkoutPlanned(ctx, g, o.Path, o.Branch, action, start)
}

func prepareClone(ctx context.Context, g *Git, o Options, state pathState, res *Result) error {
	switch state {
	case pathBroken:
		return fmt.Errorf("checkout %s is broken: git cannot open it", o.Path)
	case pathCheckout:
		res.Restored = true
		if _, err := g.Run(ctx, o.Path, "fetch", "--prune", "--tags", "origin"); err != nil {
			return err
		}
		var err error
		res.BranchAction, err = switchBranch(ctx, g, o, o.Path)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		return fmt.Errorf("create checkout parent dir: %w", err)
	}
	args := []string{"clone", "--no-checkout", "--origin", "origin"}
	res.FullFetch = !mirrorPresent(o.MirrorPath)
	if o.MirrorPath != "" {
		// Borrow objects from the mirror when it is mounted; the mirror never prunes objects
		// (gc.pruneExpire=never), so what the clone borrows stays there.
		args = append(args, "--reference-if-able", o.MirrorPath)
	}
	args = append(args, "--", o.RemoteURL, o.Path)
	if _, err := g.Run(ctx, "", args...); err != nil {
		return err
	}
	// The clone made a local default branch itself; that one is not "ours".
	action, start, err := branchPlan(ctx, g, o.Path, o, false)
	if err != nil {
		return err
	}
	switch action {
	case BranchAdopted:
		_, err = g.Run(ctx, o.Path, "checkout", "-q", "--track", "-B", o.Branch, start)
	default:
		_, err = g.Run(ctx, o.Path, "checkout", "-q", "--no-track", "-B", o.Branch, start)
	}
	if err != nil {
		return err
	}
	res.BranchAction = action
	return nil
}

// branchPlan decides how the branch is checked out in repo (the mirror or a fresh clone): an
// existing local branch is ours from an earlier checkout; a branch only on the remote needs
// Adopt; otherwise the branch is created from the base.
func branchPlan(ctx context.Context, g *Git, repo string, o Options, trustLocal bool) (action, start string, err error) {
	local := trustLocal && g.refExists(ctx, repo, "refs/heads/"+o.Branch)
	remote := g.refExists(ctx, repo, "refs/remotes/origin/"+o.Branch)
	switch {
	case local:
		return BranchExisting, "refs/heads/" + o.Branch, nil
	case remote && !o.Adopt:
		return "", "", fmt.Errorf("%w: %q; set adopt to take it over", ErrBranchExists, o.Branch)
	case remote:
		return BranchAdopted, "origin/" + o.Branch, nil
	}
	base, err := resolveBase(ctx, g, repo, o.Base)
	if err != nil {
		return "", "", err
	}
	return BranchCreated, base, nil
}

// resolveBase finds the base as a remote branch, a tag or a commit, fetching a commit the
// repository lacks.
func resolveBase(ctx context.Context, g *Git, repo, base string) (string, error) {
	for _, ref := range []string{"refs/remotes/origin/" + base, "refs/tags/" + base} {
		if g.refExists(ctx, repo, ref) {
			return ref, nil
		}
	}
	if isHex(base) && len(base) >= 7 {
		if !g.refExists(ctx, repo, base) {
			_, _ = g.Run(ctx, repo, "fetch", "origin", base)
		}
		if full, err := g.Run(ctx, repo, "rev-parse", "--verify", "--quiet", base+"^{commit}"); err == nil {
			return full, nil
		}
	}
	return "", fmt.Errorf("base %q is neither a branch nor a tag on the remote, nor a known commit", base)
}

func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// switchBranch puts an existing checkout on o.Branch without touching uncommitted work: it is
// already there (the usual restore), or the branch is checked out when the tree is clean.
func switchBranch(ctx context.Context, g *Git, o Options, path string) (string, error) {
	current, _ := g.Run(ctx, path, "symbolic-ref", "--quiet", "--short", "HEAD")
	if current == o.Branch {
		return BranchExisting, nil
	}
	facts, err := ReadFacts(ctx, g, path)
	if err != nil {
		return "", err
	}
	if facts.Dirty {
		return "", fmt.Errorf("checkout %s is on %q with uncommitted changes; refusing to switch it to %q", path, current, o.Branch)
	}
	action, start, err := branchPlan(ctx, g, path, o, true)
	if err != nil {
		return "", err
	}
	return action, checkoutPlanned(ctx, g, path, o.Branch, action, start)
}

// checkoutClaimed puts a claimed spare (clean, detached) on branch. When a new branch starts at
// the spare's own commit, the usual case (the base did not move since the spare was made), only
// refs change: the branch is created at HEAD and HEAD pointed at it, which is what checkout does
// for an identical tree, without checkout's refresh of every index entry (~0.25 s on 50,000
// files). Otherwise checkoutPlanned, which writes what differs.
func checkoutClaimed(ctx context.Context, g *Git, path, branch, action, start string) error {
	if action == BranchCreated {
		head, herr := g.Run(ctx, path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
		want, werr := g.Run(ctx, path, "rev-parse", "--verify", "--quiet", start+"^{commit}")
		if herr == nil && werr == nil && head == want {
			if _, err := g.Run(ctx, path, "branch", "--no-track", "--", branch, head); err != nil {
				return err
			}
			_, err := g.Run(ctx, path, "symbolic-ref", "-m", "checkout: moving from "+head+" to "+branch, "HEAD", "refs/heads/"+branch)
			return err
		}
	}
	return checkoutPlanned(ctx, g, path, branch, action, start)
}

// checkoutPlanned puts the clean checkout at path on branch as branchPlan decided.
func checkoutPlanned(ctx context.Context, g *Git, path, branch, action, start string) error {
	var err error
	switch action {
	case BranchExisting:
		_, err = g.Run(ctx, path, "checkout", "-q", branch)
	case BranchAdopted:
		_, err = g.Run(ctx, path, "checkout", "-q", "--track", "-b", branch, start)
	default:
		_, err = g.Run(ctx, path, "checkout", "-q", "--no-track", "-b", branch, start)
	}
	return err
}

// mirrorPresent reports whether a bare mirror exists at path (empty: none mounted).
func mirrorPresent(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(path, "HEAD"))
	return err == nil
}

// ensureMirror creates the bare mirror when missing and fetches it, and reports whether the
// fetch brought the whole repository (the mirror was new, or held nothing yet after a failed
// first fetch). The caller holds its lock.
// Layout: a bare repository whose origin fetches branches into refs/remotes/origin/*, so the
// local branches (refs/heads/*) belong to the worktrees and a fetch never moves or prunes them.
func ensureMirror(ctx context.Context, g *Git, mirror, remote string) (full bool, err error) {
	if _, err := os.Stat(filepath.Join(mirror, "HEAD")); errors.Is(err, os.ErrNotExist) {
		if _, err := g.Run(ctx, "", "init", "--quiet", "--bare", mirror); err != nil {
			return false, err
		}
		for _, kv := range [][2]string{
			{"remote.origin.url", remote},
			{"remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"},
			// Clones borrow objects from the mirror (--reference); never prune what they borrow.
			{"gc.pruneExpire", "never"},
		} {
			if _, err := g.Run(ctx, mirror, "config", kv[0], kv[1]); err != nil {
				return false, err
			}
		}
	} else if err != nil {
		return false, fmt.Errorf("stat mirror: %w", err)
	} else if cur, _ := g.Run(ctx, mirror, "config", "--get", "remote.origin.url"); cur != remote {
		if _, err := g.Run(ctx, mirror, "config", "remote.origin.url", remote); err != nil {
			return false, err
		}
	}
	refs, err := g.Run(ctx, mirror, "for-each-ref", "--count=1", "refs/remotes/origin/")
	if err != nil {
		return false, err
	}
	if _, err := g.Run(ctx, mirror, "fetch", "--prune", "--tags", "origin"); err != nil {
		return false, err
	}
	return refs == "", nil
}

// Volume is what the runner makes ready on a volume before the checkout step starts (as the
// runner's user: the agent's containers mount only their own directories of it).
type Volume struct {
	Mode agentsv1alpha1.WorkspaceMode
	// Mirror is the Project's mirror (worktree mode), which only runners write.
	Mirror string
	// Remote is the mirror's origin: the runner's git endpoint.
	Remote string
	// Checkout is the checkout's directory, mounted alone in the agent's containers.
	Checkout string
	// Spares is where spare checkouts wait (worktree mode, SpareDir(Checkout)); "" claims none.
	Spares string
	// Dirs are more directories the agent's containers mount (its home).
	Dirs []string
}

// VolumeResult says what PrepareMounts and FinishVolume did.
type VolumeResult struct {
	// FullFetch: the mirror was made (or had nothing) and fetched whole.
	FullFetch bool `json:"fullFetch,omitempty"`
	// Claimed: a spare was moved to the checkout's directory.
	Claimed bool `json:"claimed,omitempty"`
}

// agentDirMode is the mode of the directories made for the agent's containers: group-writable
// with the set-group-ID bit, so that the pod's fsGroup, which both the runner and the agent are
// in, owns everything made in them.
const agentDirMode = 0o775 | os.ModeSetgid

// MirrorFetchError starts the error of a prepare that could not fetch the Project's mirror; the
// Project's MirrorReady condition looks for it in a failed Worktree's message.
const MirrorFetchError = "fetch the Project's mirror"

// PrepareMounts and FinishVolume make the volume ready for the checkout step, as the runner's
// user, running no git in a repository an agent can write. PrepareMounts makes final what the
// agent's containers mount: in worktree mode the mirror's
// directory (empty when the Project has no mirror yet: FinishVolume makes it there, so the
// containers' read-only mount of it is the same directory) and a spare claimed for an empty
// checkout directory; the checkout's and Dirs' directories. It fetches nothing and needs no
// remote, so a runner does it before anything else, and the agent's containers start while the
// mirror is fetched.
func PrepareMounts(ctx context.Context, v Volume) (VolumeResult, error) {
	var res VolumeResult
	if v.Mode == agentsv1alpha1.WorkspaceWorktree {
		switch _, err := os.Stat(filepath.Join(v.Mirror, "HEAD")); {
		case err == nil:
			if err := claimUnderLock(ctx, v, &res); err != nil {
				return res, err
			}
		case errors.Is(err, os.ErrNotExist):
			// No mirror, so no spare: its directory, for the mounts.
			if err := os.MkdirAll(v.Mirror, 0o775); err != nil {
				return res, fmt.Errorf("make the mirror's directory: %w", err)
			}
		default:
			return res, fmt.Errorf("stat mirror: %w", err)
		}
	}
	return res, makeDirs(v)
}

// FinishVolume fetches the mirror (worktree mode; made in its directory when new) after
// PrepareMounts (res is what it did). It claims nothing: a spare renamed onto the checkout's
// directory after a container mounted it would not be what that container sees.
func FinishVolume(ctx context.Context, g *Git, v Volume, res VolumeResult) (VolumeResult, error) {
	if v.Mode != agentsv1alpha1.WorkspaceWorktree {
		return res, nil
	}
	lock, err := AcquireLock(ctx, v.Mirror+".lock")
	if err != nil {
		return res, err
	}
	defer func() { _ = lock.Release() }()
	if res.FullFetch, err = ensureMirror(ctx, g, v.Mirror, v.Remote); err != nil {
		return res, fmt.Errorf("%s: %w", MirrorFetchError, err)
	}
	return res, nil
}

// makeDirs makes the checkout's and v.Dirs' directories for the agent's containers.
func makeDirs(v Volume) error {
	for _, d := range append([]string{v.Checkout}, v.Dirs...) {
		if err := makeAgentDir(d); err != nil {
			return err
		}
	}
	return nil
}

// claimUnderLock claims a spare for an empty checkout directory, under the mirror's lock (which
// trimSpares holds when it tells half-made spares from claimed ones).
func claimUnderLock(ctx context.Context, v Volume, res *VolumeResult) error {
	if v.Spares == "" || !isEmptyDir(v.Checkout) {
		return nil
	}
	lock, err := AcquireLock(ctx, v.Mirror+".lock")
	if err != nil {
		return err
	}
	defer func() { _ = lock.Release() }()
	res.Claimed, err = ClaimSpare(v.Spares, v.Checkout)
	return err
}

// isEmptyDir reports whether path is missing or an empty directory.
func isEmptyDir(path string) bool {
	entries, err := os.ReadDir(path)
	return errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0
}

// makeAgentDir makes path for the agent's containers. An existing directory keeps its owner
// and mode (it may be the agent's own by now).
func makeAgentDir(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(path, agentDirMode); err != nil {
		return fmt.Errorf("make %s: %w", path, err)
	}
	// MkdirAll applies the umask; the setgid and group-write bits must be exact.
	if err := os.Chmod(path, agentDirMode); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

// UpdateMirror creates or fetches the mirror under its lock (what a mirror refresh job runs).
func UpdateMirror(ctx context.Context, g *Git, mirror, remote string) error {
	if err := ValidateRemoteURL(remote); err != nil {
		return err
	}
	lock, err := AcquireLock(ctx, mirror+".lock")
	if err != nil {
		return err
	}
	defer func() { _ = lock.Release() }()
	_, err = ensureMirror(ctx, g, mirror, remote)
	return err
}

// Remove deletes a checkout's files. In worktree mode the branch is kept on the forge (a
// Worktree's checkout is removed only once its commits are pushed, unless forced); the
// directory itself may be a mount point and stays, empty. A clone's directory is deleted.
func Remove(_ context.Context, _ *Git, mode agentsv1alpha1.WorkspaceMode, path, _ string) error {
	entries, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read checkout: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
			return fmt.Errorf("remove checkout: %w", err)
		}
	}
	if mode == agentsv1alpha1.WorkspaceClone {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("remove checkout: %w", err)
		}
	}
	return nil
}
