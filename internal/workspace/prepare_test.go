package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

const repo = "acme/widgets"

// hostileBranch is a valid branch name full of shell metacharacters, quotes and unicode.
const hostileBranch = `feat/$(touch${IFS}pwned);a|b&c'"<d>` + "`id`-ünïcødé-🚀"

type fixture struct {
	srv  *gitserver.Server
	url  string
	head string
	root string
	git  *Git
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	g := NewWithT(t)
	srv, err := gitserver.New(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = srv.Close() })
	head, err := srv.Seed(repo, "main", map[string]string{"README.md": "# widgets\n", "src/main.go": "package main\n"})
	g.Expect(err).NotTo(HaveOccurred())
	return &fixture{srv: srv, url: srv.URL(repo), head: head, root: t.TempDir(), git: &Git{Env: gitserver.CommitterEnv(), Timeout: time.Minute}}
}

// pushCommit adds a commit on branch at the remote, made in a scratch clone.
func (f *fixture) pushCommit(t *testing.T, branch, file string) string {
	t.Helper()
	g := NewWithT(t)
	work := filepath.Join(t.TempDir(), "w")
	f.run(t, "", "clone", "-q", f.url, work)
	if branch != "main" {
		f.run(t, work, "checkout", "-q", "-B", branch)
	}
	g.Expect(os.WriteFile(filepath.Join(work, file), []byte(file+"\n"), 0o644)).To(Succeed())
	f.run(t, work, "add", file)
	f.run(t, work, "commit", "-q", "-m", "add "+file)
	f.run(t, work, "push", "-q", "origin", "HEAD:refs/heads/"+branch)
	return f.run(t, work, "rev-parse", "HEAD")
}

func (f *fixture) run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := f.git.Run(context.Background(), dir, args...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return out
}

// prepare makes a checkout as an agent pod does: in worktree mode the runner's volume step
// first (the mirror fetched, a spare claimed), then the checkout step.
func (f *fixture) prepare(o Options) (*Result, error) {
	ctx := context.Background()
	var vr VolumeResult
	if o.Mode == agentsv1alpha1.WorkspaceWorktree && o.Validate() == nil {
		v := Volume{Mode: o.Mode, Mirror: o.MirrorPath, Remote: o.RemoteURL, Checkout: o.Path, Spares: SpareDir(o.Path)}
		var err error
		if vr, err = PrepareMounts(ctx, v); err != nil {
			return nil, err
		}
		if vr, err = FinishVolume(ctx, f.git, v, vr); err != nil {
			return nil, err
		}
	}
	res, err := Prepare(ctx, f.git, o)
	if res != nil {
		res.FullFetch = res.FullFetch || vr.FullFetch
	}
	return res, err
}

func (f *fixture) opts(mode agentsv1alpha1.WorkspaceMode, name, branch string) Options {
	o := Options{Mode: mode, RemoteURL: f.url, Branch: branch, Base: "main", MirrorPath: filepath.Join(f.root, "mirror.git")}
	if mode == agentsv1alpha1.WorkspaceWorktree {
		o.Path = filepath.Join(f.root, "worktrees", name)
	} else {
		o.Path = filepath.Join(f.root, "clones", name, "repo")
	}
	return o
}

func TestCloneMode(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceClone, "c1", "shepherd/issue-1")
	o.MirrorPath = "" // no mirror mounted
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Restored).To(BeFalse())
	g.Expect(res.FullFetch).To(BeTrue(), "a clone with no mirror fetches everything")
	g.Expect(res.BranchAction).To(Equal(BranchCreated))
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/issue-1", Head: f.head}))
	g.Expect(res.Setup.State).To(Equal(agentsv1alpha1.SetupSucceeded))
	g.Expect(filepath.Join(o.Path, "src/main.go")).To(BeARegularFile())
	g.Expect(f.run(t, o.Path, "config", "--get", "remote.origin.url")).To(Equal(f.url))
	_, err = os.Stat(filepath.Join(o.Path, ".git/objects/info/alternates"))
	g.Expect(err).To(MatchError(os.ErrNotExist))
}

func TestCloneModeBorrowsFromMirror(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceClone, "c2", "shepherd/issue-2")
	g.Expect(UpdateMirror(context.Background(), f.git, o.MirrorPath, f.url)).To(Succeed())
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Facts.Head).To(Equal(f.head))
	g.Expect(res.FullFetch).To(BeFalse(), "the clone borrows from the mirror")
	alt, err := os.ReadFile(filepath.Join(o.Path, ".git/objects/info/alternates"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(alt))).To(Equal(filepath.Join(o.MirrorPath, "objects")))
}

func TestWorktreeModeFromMirror(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/issue-3")
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Restored).To(BeFalse())
	g.Expect(res.FullFetch).To(BeTrue(), "the first worktree creates the mirror")
	g.Expect(res.BranchAction).To(Equal(BranchCreated))
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/issue-3", Head: f.head}))
	// The checkout is a repository of its own that borrows the mirror's objects by absolute
	// path; the mirror is bare and holds no branch of any session.
	alt, err := os.ReadFile(filepath.Join(o.Path, ".git", "objects", "info", "alternates"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(alt))).To(Equal(filepath.Join(o.MirrorPath, "objects")))
	g.Expect(f.run(t, o.MirrorPath, "rev-parse", "--is-bare-repository")).To(Equal("true"))
	g.Expect(f.run(t, o.MirrorPath, "config", "--get", "gc.pruneExpire")).To(Equal("never"))
	g.Expect(f.run(t, o.MirrorPath, "for-each-ref", "refs/heads/")).To(BeEmpty(), "the mirror holds no session's branch")
	g.Expect(f.run(t, o.Path, "config", "--get", "remote.origin.url")).To(Equal(f.url))
	g.Expect(f.run(t, o.Path, "count-objects", "-v")).To(ContainSubstring("count: 0"), "no object copied into the checkout")

	second, err := f.prepare(f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-2", "shepherd/issue-4"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second.FullFetch).To(BeFalse(), "the second worktree is added from the present mirror")
}

func TestRestoreFetchesWithoutRecloning(t *testing.T) {
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		t.Run(string(mode), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			o := f.opts(mode, "r1", "shepherd/restore")
			_, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			// Work in progress: a local commit and an uncommitted file must survive the restore.
			g.Expect(os.WriteFile(filepath.Join(o.Path, "wip.txt"), []byte("wip"), 0o644)).To(Succeed())
			f.run(t, o.Path, "add", "wip.txt")
			f.run(t, o.Path, "commit", "-q", "-m", "wip")
			local := f.run(t, o.Path, "rev-parse", "HEAD")
			g.Expect(os.WriteFile(filepath.Join(o.Path, "scratch.txt"), []byte("x"), 0o644)).To(Succeed())
			inode := inodeOf(t, filepath.Join(o.Path, "README.md"))

			newBase := f.pushCommit(t, "main", "upstream.txt")
			res, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Restored).To(BeTrue())
			g.Expect(res.FullFetch).To(BeFalse())
			g.Expect(res.BranchAction).To(Equal(BranchExisting))
			g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/restore", Head: local, Dirty: true, Unpushed: 1}))
			g.Expect(f.run(t, o.Path, "rev-parse", "refs/remotes/origin/main")).To(Equal(newBase), "new base commits were fetched")
			g.Expect(inodeOf(t, filepath.Join(o.Path, "README.md"))).To(Equal(inode), "no re-clone or re-checkout")
			g.Expect(filepath.Join(o.Path, "scratch.txt")).To(BeARegularFile())
		})
	}
}

func inodeOf(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return statIno(st)
}

func TestRestoreAfterCheckoutDirVanished(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "gone", "shepherd/gone")
	_, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(o.Path, "kept.txt"), []byte("k"), 0o644)).To(Succeed())
	f.run(t, o.Path, "add", "kept.txt")
	f.run(t, o.Path, "commit", "-q", "-m", "kept")
	kept := f.run(t, o.Path, "rev-parse", "HEAD")
	f.run(t, o.Path, "push", "-q", "origin", "HEAD:refs/heads/shepherd/gone")
	g.Expect(os.RemoveAll(o.Path)).To(Succeed())

	// The branch lives on in the forge (a checkout's commits are pushed before it may go): a new
	// checkout takes it over.
	o.Adopt = true
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.BranchAction).To(Equal(BranchAdopted), "restored from the pushed branch")
	g.Expect(res.Facts.Head).To(Equal(kept))
	g.Expect(filepath.Join(o.Path, "kept.txt")).To(BeARegularFile())
}

// TestLinkedWorktreeOfAnEarlierVersionIsConverted: a checkout an earlier Shepherd made as a
// linked worktree of the mirror becomes a borrowing repository in place: its branch, commits and
// uncommitted work kept.
func TestLinkedWorktreeOfAnEarlierVersionIsConverted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "old", "shepherd/old")
	g.Expect(UpdateMirror(context.Background(), f.git, o.MirrorPath, f.url)).To(Succeed())
	f.run(t, o.MirrorPath, "worktree", "add", "-q", "--no-track", "-b", o.Branch, o.Path, "refs/remotes/origin/main")
	g.Expect(os.WriteFile(filepath.Join(o.Path, "old.txt"), []byte("old"), 0o644)).To(Succeed())
	f.run(t, o.Path, "add", "old.txt")
	f.run(t, o.Path, "commit", "-q", "-m", "old work")
	commit := f.run(t, o.Path, "rev-parse", "HEAD")
	g.Expect(os.WriteFile(filepath.Join(o.Path, "README.md"), []byte("edited, not committed\n"), 0o644)).To(Succeed())

	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Restored).To(BeTrue())
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/old", Head: commit, Dirty: true, Unpushed: 1}))
	g.Expect(filepath.Join(o.Path, ".git")).To(BeADirectory(), "a repository of its own now")
	ok, err := borrowsFrom(o.Path, o.MirrorPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(os.ReadFile(filepath.Join(o.Path, "README.md"))).To(BeEquivalentTo("edited, not committed\n"))
}

func TestBranchExistingRemotely(t *testing.T) {
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		t.Run(string(mode), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			remoteHead := f.pushCommit(t, "feature/taken", "theirs.txt")
			o := f.opts(mode, "adopt", "feature/taken")
			_, err := f.prepare(o)
			g.Expect(errors.Is(err, ErrBranchExists)).To(BeTrue(), "got %v", err)
			g.Expect(err).To(MatchError(ContainSubstring("set adopt")))

			o.Adopt = true
			o.Path += "-2"
			res, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.BranchAction).To(Equal(BranchAdopted))
			g.Expect(res.Facts).To(Equal(Facts{Branch: "feature/taken", Head: remoteHead}))
			g.Expect(f.run(t, o.Path, "rev-parse", "--abbrev-ref", "@{upstream}")).To(Equal("origin/feature/taken"))
		})
	}
}

func TestFailingSetupLeavesCheckoutUsable(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "setup", "shepherd/setup")
	var out strings.Builder
	o.SetupOutput = &out
	o.Setup = []agentsv1alpha1.SetupCommand{
		{Name: "hello", Command: []string{"sh", "-c", "echo hello > .setup-ran"}},
		{Name: "deps", Command: []string{"sh", "-c", "echo resolving; echo 'boom: registry unreachable' >&2; exit 3"}},
		{Name: "never", Command: []string{"touch", "never-ran"}},
	}
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred(), "a failed setup is reported, not an error")
	g.Expect(res.Setup.State).To(Equal(agentsv1alpha1.SetupFailed))
	g.Expect(res.Setup.FailedCommand).To(Equal("deps"))
	g.Expect(res.Setup.Error).To(ContainSubstring("exit status 3"))
	g.Expect(res.Setup.Error).To(ContainSubstring("boom: registry unreachable"))
	g.Expect(out.String()).To(ContainSubstring("resolving"))
	g.Expect(filepath.Join(o.Path, ".setup-ran")).To(BeARegularFile())
	g.Expect(filepath.Join(o.Path, "never-ran")).NotTo(BeAnExistingFile())
	g.Expect(res.Facts.Head).To(Equal(f.head), "the checkout is usable")

	// A restore runs setup again because it failed; once it succeeds it is skipped.
	o.Setup = o.Setup[:1]
	res, err = f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Setup).To(Equal(SetupResult{State: agentsv1alpha1.SetupSucceeded}))
	res, err = f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Setup).To(Equal(SetupResult{State: agentsv1alpha1.SetupSucceeded, Skipped: true}))
}

func TestSetupTimeoutKillsTheCommand(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	res, err := RunSetup(context.Background(), dir, filepath.Join(dir, ".state"), []agentsv1alpha1.SetupCommand{
		{Name: "slow", Command: []string{"sh", "-c", "echo started; sleep 60"}, Timeout: &metav1.Duration{Duration: 300 * time.Millisecond}},
	}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.State).To(Equal(agentsv1alpha1.SetupFailed))
	g.Expect(res.Error).To(ContainSubstring("timed out after 300ms"))
	g.Expect(res.Error).To(ContainSubstring("started"))
}

func TestConcurrentWorktreesFromOneMirror(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	results := make([]*Result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-"+string(rune('a'+i)), "shepherd/s-"+string(rune('a'+i)))
			results[i], errs[i] = f.prepare(o)
		}()
	}
	wg.Wait()
	for i := range n {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		g.Expect(results[i].Facts.Head).To(Equal(f.head))
	}
	mirror := filepath.Join(f.root, "mirror.git")
	for i := range n {
		path := filepath.Join(f.root, "worktrees", "wt-"+string(rune('a'+i)))
		g.Expect(f.run(t, path, "symbolic-ref", "--short", "HEAD")).To(Equal("shepherd/s-" + string(rune('a'+i))))
		f.run(t, path, "fsck", "--no-progress")
	}
	f.run(t, mirror, "fsck", "--no-progress")
}

func TestHostileBranchReachesGitUnchanged(t *testing.T) {
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		t.Run(string(mode), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			o := f.opts(mode, "hostile", hostileBranch)
			cwd := t.TempDir()
			t.Chdir(cwd)
			res, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Facts.Branch).To(Equal(hostileBranch))
			g.Expect(f.run(t, o.Path, "symbolic-ref", "HEAD")).To(Equal("refs/heads/" + hostileBranch))
			for _, dir := range []string{cwd, o.Path, f.root} {
				g.Expect(filepath.Join(dir, "pwned")).NotTo(BeAnExistingFile())
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)

	o := f.opts(agentsv1alpha1.WorkspaceClone, "bad", "-rf")
	_, err := f.prepare(o)
	g.Expect(err).To(MatchError(ContainSubstring("must not start with '-'")))

	o = f.opts(agentsv1alpha1.WorkspaceClone, "bad", "ok")
	o.RemoteURL = strings.Replace(f.url, "http://", "http://user:secret@", 1)
	_, err = f.prepare(o)
	g.Expect(err).To(MatchError(ContainSubstring("must not embed credentials")))
	g.Expect(err.Error()).NotTo(ContainSubstring("secret"))

	o = f.opts(agentsv1alpha1.WorkspaceClone, "notgit", "ok")
	g.Expect(os.MkdirAll(o.Path, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(o.Path, "precious.txt"), []byte("x"), 0o644)).To(Succeed())
	_, err = f.prepare(o)
	g.Expect(err).To(MatchError(ContainSubstring("is not a git checkout; refusing")))

	o = f.opts(agentsv1alpha1.WorkspaceWorktree, "nobase", "ok")
	o.Base = "does-not-exist"
	_, err = f.prepare(o)
	g.Expect(err).To(MatchError(ContainSubstring(`base "does-not-exist"`)))
}

func TestGitMissingOrTooOld(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	missing := &Git{Path: filepath.Join(t.TempDir(), "no-git")}
	err := missing.CheckVersion(ctx, true)
	g.Expect(err).To(HaveOccurred())

	t.Setenv("PATH", t.TempDir())
	err = (&Git{}).CheckVersion(ctx, false)
	g.Expect(err).To(MatchError(ContainSubstring("git is not installed in this image")))

	// An old git: a stand-in that only answers `git version`, since no old git is installed.
	old := filepath.Join(t.TempDir(), "git")
	g.Expect(os.WriteFile(old, []byte("#!/bin/sh\necho 'git version 2.25.1'\n"), 0o755)).To(Succeed())
	err = (&Git{Path: old}).CheckVersion(ctx, true)
	g.Expect(err).NotTo(HaveOccurred(), "worktree mode works with 2.25")
	older := filepath.Join(t.TempDir(), "git")
	g.Expect(os.WriteFile(older, []byte("#!/bin/sh\necho 'git version 2.12.0'\n"), 0o755)).To(Succeed())
	err = (&Git{Path: older}).CheckVersion(ctx, true)
	g.Expect(errors.Is(err, ErrGitTooOld)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("found git 2.12, need 2.13 or newer")))
	g.Expect((&Git{Path: older}).CheckVersion(ctx, false)).To(Succeed(), "clone mode works with 2.12")

	real, err := exec.LookPath("/usr/bin/git")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&Git{Path: real}).CheckVersion(ctx, true)).To(Succeed())
}

func TestParseVersion(t *testing.T) {
	g := NewWithT(t)
	v, err := ParseVersion("git version 2.39.5")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(Version{2, 39}))
	v, err = ParseVersion("git version 2.50.1.windows.1\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(Version{2, 50}))
	_, err = ParseVersion("hub version 1")
	g.Expect(err).To(HaveOccurred())
	g.Expect(Version{2, 12}.Less(MinWorktreeVersion)).To(BeTrue())
	g.Expect(Version{3, 0}.Less(MinWorktreeVersion)).To(BeFalse())
}

func TestRemove(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "rm", "shepherd/rm")
	_, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(Remove(context.Background(), f.git, o.Mode, o.Path, o.MirrorPath)).To(Succeed())
	entries, err := os.ReadDir(o.Path)
	g.Expect(err).NotTo(HaveOccurred(), "the directory stays: in a pod it is a mount point")
	g.Expect(entries).To(BeEmpty())
	f.run(t, o.MirrorPath, "fsck", "--no-progress")

	c := f.opts(agentsv1alpha1.WorkspaceClone, "rm", "shepherd/rm")
	_, err = f.prepare(c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(Remove(context.Background(), f.git, c.Mode, c.Path, "")).To(Succeed())
	g.Expect(c.Path).NotTo(BeAnExistingFile())
}
