package workspace

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// spareFixture is a fixture whose mirror exists (a first session prepared wt-0) and whose spares
// are kept for the worktrees dir.
func spareFixture(t *testing.T) (*fixture, Spares) {
	t.Helper()
	// The index refresh after the racy-git second only saves time on large trees; these are tiny.
	wait := racyWait
	racyWait = 0
	t.Cleanup(func() { racyWait = wait })
	f := newFixture(t)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-0", "shepherd/first")
	_, err := f.prepare(o)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return f, Spares{Mirror: o.MirrorPath, Dir: SpareDir(o.Path), Base: "main", Count: 2}
}

// withSpares is spareFixture with count spares made.
func withSpares(t *testing.T, count int) (*fixture, Spares) {
	t.Helper()
	f, s := spareFixture(t)
	s.Count = count
	made, err := FillSpares(context.Background(), f.git, s)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(made).To(Equal(count))
	return f, s
}

func TestSpareIsClaimedInsteadOfCheckedOut(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	s.Remote = f.url
	made, err := FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(Equal(2))
	ready, err := readySpares(s.Dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready).To(HaveLen(2))
	spare := filepath.Join(s.Dir, ready[0])
	// A spare is a borrowing checkout, detached at the base, group-writable for the agent that
	// claims it.
	ok, err := borrowsFrom(spare, s.Mirror)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(f.run(t, spare, "config", "--get", "core.sharedRepository")).To(Equal("group"))
	g.Expect(filepath.Join(spare, ".git", spareMarker)).To(BeARegularFile())
	readmeInode := inodeOf(t, filepath.Join(spare, "README.md"))

	// The base moves after the spares were made: the claim fetches and switches to the new base,
	// writing only what changed.
	newBase := f.pushCommit(t, "main", "upstream.txt")
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", hostileBranch)
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeTrue())
	g.Expect(res.Restored).To(BeFalse())
	g.Expect(res.BranchAction).To(Equal(BranchCreated))
	g.Expect(res.Facts).To(Equal(Facts{Branch: hostileBranch, Head: newBase}))
	g.Expect(filepath.Join(o.Path, "upstream.txt")).To(BeARegularFile())
	g.Expect(inodeOf(t, filepath.Join(o.Path, "README.md"))).To(Equal(readmeInode), "the spare's files were kept, not rewritten")
	g.Expect(spare).NotTo(BeADirectory())
	g.Expect(filepath.Join(o.Path, ".git", spareMarker)).NotTo(BeAnExistingFile(), "claimed")
	g.Expect(f.run(t, o.Path, "config", "--get", "remote.origin.url")).To(Equal(o.RemoteURL))
	ready, _ = readySpares(s.Dir)
	g.Expect(ready).To(HaveLen(1))
	f.run(t, o.Path, "commit", "-q", "--allow-empty", "-m", "work")
	g.Expect(Remove(context.Background(), f.git, agentsv1alpha1.WorkspaceWorktree, o.Path, s.Mirror)).To(Succeed())

	// The other spare goes to the next session; with none left, prepare checks out as before.
	res, err = f.prepare(f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-2", "shepherd/two"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeTrue())
	o3 := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-3", "shepherd/three")
	res, err = f.prepare(o3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeFalse())
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/three", Head: newBase}))
	f.run(t, s.Mirror, "fsck", "--no-progress")
}

// TestSpareOnAnUnmovedBase: when the base has not moved since the spare was made, the claim
// only creates the branch at the spare's commit and points HEAD at it, as checkout would.
func TestSpareOnAnUnmovedBase(t *testing.T) {
	g := NewWithT(t)
	f, s := withSpares(t, 1)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/unmoved")
	spare, _ := readySpares(s.Dir)
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeTrue())
	g.Expect(res.BranchAction).To(Equal(BranchCreated))
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/unmoved", Head: f.head}))
	g.Expect(filepath.Join(s.Dir, spare[0])).NotTo(BeADirectory(), "the spare was moved to the checkout")
	g.Expect(f.run(t, o.Path, "reflog", "-1", "--format=%gs")).To(Equal("checkout: moving from " + f.head + " to shepherd/unmoved"))
	_, err = f.git.Run(context.Background(), o.Path, "rev-parse", "--abbrev-ref", "@{upstream}")
	g.Expect(err).To(HaveOccurred(), "a new branch tracks nothing")
	f.run(t, o.Path, "commit", "-q", "--allow-empty", "-m", "work")
	g.Expect(f.run(t, o.Path, "status", "--porcelain")).To(BeEmpty())
}

// TestMountsAreReadyBeforeTheFetch: the volume's mounts (a claimed spare, the agent's
// directories, the mirror's directory) are final before the mirror is fetched or made, so that
// the kubelet starts the agent's containers meanwhile.
func TestMountsAreReadyBeforeTheFetch(t *testing.T) {
	g := NewWithT(t)
	f, s := withSpares(t, 1)
	oldBase := f.head
	newBase := f.pushCommit(t, "main", "upstream.txt")
	checkout := filepath.Join(filepath.Dir(s.Dir), "wt-1")
	home := filepath.Join(f.root, "homes", "wt-1")
	v := Volume{Mode: agentsv1alpha1.WorkspaceWorktree, Mirror: s.Mirror, Remote: f.url, Checkout: checkout, Spares: s.Dir, Dirs: []string{home}}
	ctx := context.Background()
	res, err := PrepareMounts(ctx, v)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Join(checkout, ".git")).To(BeAnExistingFile(), "the spare is in place")
	g.Expect(home).To(BeADirectory())
	g.Expect(f.run(t, s.Mirror, "rev-parse", "refs/remotes/origin/main")).To(Equal(oldBase), "not fetched yet")
	res, err = FinishVolume(ctx, f.git, v, res)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(VolumeResult{Claimed: true}))
	g.Expect(f.run(t, s.Mirror, "rev-parse", "refs/remotes/origin/main")).To(Equal(newBase), "fetched after")

	// A Project's first session: the mounts are ready at once, the mirror's directory empty; the
	// mirror is made in that very directory (what the containers mount), after.
	f2 := newFixture(t)
	mirror := filepath.Join(f2.root, "mirror.git")
	first := Volume{Mode: agentsv1alpha1.WorkspaceWorktree, Mirror: mirror, Remote: f2.url,
		Checkout: filepath.Join(f2.root, "worktrees", "a"), Spares: SpareDir(filepath.Join(f2.root, "worktrees", "a"))}
	res, err = PrepareMounts(ctx, first)
	g.Expect(err).NotTo(HaveOccurred())
	entries, err := os.ReadDir(mirror)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty())
	mirrorDir, err := os.Stat(mirror)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Checkout).To(BeADirectory())
	res, err = FinishVolume(ctx, f2.git, first, res)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(VolumeResult{FullFetch: true}))
	g.Expect(f2.run(t, mirror, "rev-parse", "refs/remotes/origin/main")).To(Equal(f2.head))
	now, err := os.Stat(mirror)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(mirrorDir, now)).To(BeTrue(), "the directory the containers mount")

	// A fetch that fails comes after the mounts: the containers start, and the checkout step
	// reports the failure.
	bad := Volume{Mode: agentsv1alpha1.WorkspaceWorktree, Mirror: filepath.Join(f2.root, "other.git"),
		Remote: "http://127.0.0.1:1/nowhere.git", Checkout: filepath.Join(f2.root, "worktrees", "b")}
	res, err = PrepareMounts(ctx, bad)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = FinishVolume(ctx, f2.git, bad, res)
	g.Expect(err).To(MatchError(ContainSubstring(MirrorFetchError)))
}

// TestNoClaimOnceMounted: once the mounts are final (the agent's containers may have mounted the
// empty checkout directory), a spare made meanwhile is not renamed onto it: the containers would
// not see it. The checkout step makes the checkout in the directory they mount.
func TestNoClaimOnceMounted(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	checkout := filepath.Join(filepath.Dir(s.Dir), "wt-late")
	v := Volume{Mode: agentsv1alpha1.WorkspaceWorktree, Mirror: s.Mirror, Remote: f.url, Checkout: checkout, Spares: s.Dir}
	res, err := PrepareMounts(context.Background(), v)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Claimed).To(BeFalse(), "no spare yet")
	dir, err := os.Stat(checkout)
	g.Expect(err).NotTo(HaveOccurred())
	s.Count = 1
	made, err := FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(Equal(1))
	res, err = FinishVolume(context.Background(), f.git, v, res)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Claimed).To(BeFalse())
	again, err := os.Stat(checkout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(dir, again)).To(BeTrue(), "the directory the containers mount")
	ready, _ := readySpares(s.Dir)
	g.Expect(ready).To(HaveLen(1), "the spare waits for the next session")
}

// TestClaimNeverTakesAFullCheckoutDir: a spare is only moved onto a missing or empty directory.
func TestClaimNeverTakesAFullCheckoutDir(t *testing.T) {
	g := NewWithT(t)
	_, s := withSpares(t, 1)
	full := filepath.Join(filepath.Dir(s.Dir), "busy")
	g.Expect(os.MkdirAll(full, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(full, "mine.txt"), []byte("mine"), 0o644)).To(Succeed())
	claimed, err := ClaimSpare(s.Dir, full)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claimed).To(BeFalse())
	g.Expect(filepath.Join(full, "mine.txt")).To(BeARegularFile())
}

func TestFillSparesKeepsTheCount(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	for _, step := range []struct {
		count, made int
	}{
		{2, 2}, {2, 0}, {3, 1}, {1, 0}, {0, 0}, {1, 1},
	} {
		s.Count = step.count
		made, err := FillSpares(context.Background(), f.git, s)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(made).To(Equal(step.made), "count %d", step.count)
		ready, _ := readySpares(s.Dir)
		g.Expect(ready).To(HaveLen(step.count))
		dirs, _ := filepath.Glob(filepath.Join(s.Dir, sparePrefix+"*"))
		g.Expect(dirs).To(HaveLen(2*step.count), "a directory and a marker per spare")
	}
}

func TestHalfMadeSpareIsRemoved(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	// A runner stopped in the middle of a fill: a checkout without its ready marker.
	half := filepath.Join(s.Dir, sparePrefix+"000000000000")
	g.Expect(initBorrowing(context.Background(), f.git, half, s.Mirror, f.url)).To(Succeed())

	// Never claimed...
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/one")
	res, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeFalse())
	g.Expect(half).To(BeADirectory())
	// ...and removed by the next fill, which makes a whole one.
	s.Count = 1
	made, err := FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(Equal(1))
	g.Expect(half).NotTo(BeADirectory())
	ready, _ := readySpares(s.Dir)
	g.Expect(ready).To(HaveLen(1))
}

func TestUnusableSpareIsRefusedByPrepare(t *testing.T) {
	g := NewWithT(t)
	f, s := withSpares(t, 1)
	ready, _ := readySpares(s.Dir)
	// Its objects link went missing (someone edited it by hand): it borrows from no mirror.
	spare := filepath.Join(s.Dir, ready[0])
	g.Expect(os.Remove(filepath.Join(spare, ".git", "objects", "info", "alternates"))).To(Succeed())

	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/one")
	_, err := f.prepare(o)
	g.Expect(err).To(MatchError(ContainSubstring("does not borrow from the mirror")), "refused, never guessed at")
}

func TestConcurrentClaimsTakeEachSpareOnce(t *testing.T) {
	g := NewWithT(t)
	f, s := withSpares(t, 2)
	const n = 4
	var wg sync.WaitGroup
	results := make([]*Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-"+string(rune('a'+i)), "shepherd/s-"+string(rune('a'+i)))
			results[i], errs[i] = f.prepare(o)
		})
	}
	// A fill running meanwhile neither blocks the claims nor takes a spare being claimed.
	wg.Go(func() { _, _ = FillSpares(context.Background(), f.git, s) })
	wg.Wait()
	spares := 0
	for i := range n {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		g.Expect(results[i].Facts).To(Equal(Facts{Branch: "shepherd/s-" + string(rune('a'+i)), Head: f.head}))
		if results[i].Spare {
			spares++
		}
	}
	g.Expect(spares).To(BeNumerically(">=", 2), "both spares made before were claimed")
	f.run(t, s.Mirror, "fsck", "--no-progress")
}

func TestFillSkipsWhileAnotherRunnerFills(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	g.Expect(os.MkdirAll(s.Dir, 0o755)).To(Succeed())
	held, ok, err := tryLock(filepath.Join(s.Dir, ".fill.lock"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	made, err := FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(BeZero())
	g.Expect(held.Release()).To(Succeed())
	made, err = FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(Equal(2))
}

func TestFillSparesRefusals(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	_, err := FillSpares(context.Background(), f.git, Spares{Mirror: "rel/mirror.git", Dir: "/x", Base: "main", Count: 1})
	g.Expect(err).To(MatchError(ContainSubstring("absolute")))
	_, err = FillSpares(context.Background(), f.git, Spares{Mirror: "/m", Dir: "/x", Base: "main", Count: -1})
	g.Expect(err).To(MatchError(ContainSubstring("negative")))
	made, err := FillSpares(context.Background(), f.git, Spares{Mirror: "/m", Dir: filepath.Join(f.root, "none"), Base: "main"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(BeZero())
	g.Expect(filepath.Join(f.root, "none")).NotTo(BeADirectory(), "no spares wanted: nothing created")
}
