package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
	_, err := Prepare(context.Background(), f.git, o)
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

// worktreeList is the mirror's `git worktree list --porcelain`, one entry per worktree.
func (f *fixture) worktreeList(t *testing.T, mirror string) []string {
	t.Helper()
	var entries []string
	for _, e := range strings.Split(f.run(t, mirror, "worktree", "list", "--porcelain"), "\n\n") {
		if e = strings.TrimSpace(e); e != "" && !strings.Contains(e, "\nbare") {
			entries = append(entries, e)
		}
	}
	return entries
}

func TestSpareIsClaimedInsteadOfCheckedOut(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	made, err := FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(Equal(2))
	ready, err := readySpares(s.Dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready).To(HaveLen(2))
	// Locked while spare, so no prepare's `git worktree prune` can drop their admin entries.
	list := f.worktreeList(t, s.Mirror)
	g.Expect(list).To(HaveLen(3))
	g.Expect(strings.Count(strings.Join(list, "\n"), "locked "+spareLockReason)).To(Equal(2))
	spare := filepath.Join(s.Dir, ready[0])
	readmeInode := inodeOf(t, filepath.Join(spare, "README.md"))

	// The base moves after the spares were made: the claim fetches and switches to the new base,
	// writing only what changed.
	newBase := f.pushCommit(t, "main", "upstream.txt")
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", hostileBranch)
	res, err := Prepare(context.Background(), f.git, o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeTrue())
	g.Expect(res.Restored).To(BeFalse())
	g.Expect(res.BranchAction).To(Equal(BranchCreated))
	g.Expect(res.Facts).To(Equal(Facts{Branch: hostileBranch, Head: newBase}))
	g.Expect(filepath.Join(o.Path, "upstream.txt")).To(BeARegularFile())
	g.Expect(inodeOf(t, filepath.Join(o.Path, "README.md"))).To(Equal(readmeInode), "the spare's files were kept, not rewritten")
	g.Expect(spare).NotTo(BeADirectory())
	ready, _ = readySpares(s.Dir)
	g.Expect(ready).To(HaveLen(1))
	// The claimed checkout is an ordinary worktree: unlocked, at its new path, removable.
	list = f.worktreeList(t, s.Mirror)
	g.Expect(list).To(ContainElement(And(HavePrefix("worktree "+o.Path+"\n"), ContainSubstring("branch refs/heads/"+hostileBranch), Not(ContainSubstring("locked")))))
	f.run(t, o.Path, "commit", "-q", "--allow-empty", "-m", "work")
	work := f.run(t, o.Path, "rev-parse", "HEAD")

	// Its directory vanishes (a node lost its volume's contents): the next prepare claims the
	// other spare and puts it on the kept branch.
	g.Expect(os.RemoveAll(o.Path)).To(Succeed())
	res, err = Prepare(context.Background(), f.git, o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeTrue())
	g.Expect(res.BranchAction).To(Equal(BranchExisting))
	g.Expect(res.Facts.Head).To(Equal(work))
	g.Expect(Remove(context.Background(), f.git, agentsv1alpha1.WorkspaceWorktree, o.Path, s.Mirror)).To(Succeed())

	// No spare left: prepare adds the worktree as before.
	o2 := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-2", "shepherd/two")
	res, err = Prepare(context.Background(), f.git, o2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeFalse())
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/two", Head: newBase}))
	f.run(t, s.Mirror, "fsck", "--no-progress")
}

// TestSpareOnAnUnmovedBase: when the base has not moved since the spare was made, the claim
// only creates the branch at the spare's commit and points HEAD at it, as checkout would.
func TestSpareOnAnUnmovedBase(t *testing.T) {
	g := NewWithT(t)
	f, s := withSpares(t, 1)
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/unmoved")
	spare, _ := readySpares(s.Dir)
	res, err := Prepare(context.Background(), f.git, o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeTrue())
	g.Expect(res.BranchAction).To(Equal(BranchCreated))
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/unmoved", Head: f.head}))
	g.Expect(filepath.Join(s.Dir, spare[0])).NotTo(BeADirectory(), "the spare was moved to the checkout")
	g.Expect(f.run(t, o.Path, "reflog", "-1", "--format=%gs")).To(Equal("checkout: moving from " + f.head + " to shepherd/unmoved"))
	_, err = f.git.Run(context.Background(), o.Path, "rev-parse", "--abbrev-ref", "@{upstream}")
	g.Expect(err).To(HaveOccurred(), "a new branch tracks nothing, as with worktree add --no-track")
	f.run(t, o.Path, "commit", "-q", "--allow-empty", "-m", "work")
	g.Expect(f.run(t, o.Path, "status", "--porcelain")).To(BeEmpty())
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
		g.Expect(f.worktreeList(t, s.Mirror)).To(HaveLen(1+step.count), "wt-0 and the spares, nothing left behind")
		dirs, _ := filepath.Glob(filepath.Join(s.Dir, sparePrefix+"*"))
		g.Expect(dirs).To(HaveLen(2*step.count), "a directory and a marker per spare")
	}
}

func TestHalfMadeSpareIsRemoved(t *testing.T) {
	g := NewWithT(t)
	f, s := spareFixture(t)
	// A runner stopped in the middle of a fill: the worktree exists, locked, without its marker.
	half := filepath.Join(s.Dir, sparePrefix+"000000000000")
	f.run(t, s.Mirror, "worktree", "add", "--quiet", "--detach", "--lock", "--reason", spareLockReason, half, "origin/main")
	g.Expect(os.Remove(filepath.Join(half, "README.md"))).To(Succeed())

	// Never claimed...
	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/one")
	res, err := Prepare(context.Background(), f.git, o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeFalse())
	g.Expect(half).To(BeADirectory())
	// ...and removed by the next fill, which makes a whole one.
	s.Count = 1
	made, err := FillSpares(context.Background(), f.git, s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(Equal(1))
	g.Expect(half).NotTo(BeADirectory())
	g.Expect(f.worktreeList(t, s.Mirror)).To(HaveLen(3), "wt-0, wt-1 and the new spare")
}

func TestUnusableSpareIsDiscarded(t *testing.T) {
	g := NewWithT(t)
	f, s := withSpares(t, 1)
	ready, _ := readySpares(s.Dir)
	// Its admin entry went missing (someone ran `git worktree remove` by hand, then restored the
	// directory): git cannot open it, repair cannot relink it.
	spare := filepath.Join(s.Dir, ready[0])
	f.run(t, s.Mirror, "worktree", "unlock", spare)
	g.Expect(os.RemoveAll(filepath.Join(s.Mirror, "worktrees", ready[0]))).To(Succeed())

	o := f.opts(agentsv1alpha1.WorkspaceWorktree, "wt-1", "shepherd/one")
	res, err := Prepare(context.Background(), f.git, o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Spare).To(BeFalse(), "the broken spare was discarded and the worktree added")
	g.Expect(res.Facts).To(Equal(Facts{Branch: "shepherd/one", Head: f.head}))
	g.Expect(spare).NotTo(BeADirectory())
	ready, _ = readySpares(s.Dir)
	g.Expect(ready).To(BeEmpty())
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
			results[i], errs[i] = Prepare(context.Background(), f.git, o)
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
