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

// sharedOpts are options with shared paths linked to the fixture's one cache directory.
func (f *fixture) sharedOpts(mode agentsv1alpha1.WorkspaceMode, name, branch string, paths ...string) Options {
	o := f.opts(mode, name, branch)
	o.SharedPaths, o.SharedDir = paths, filepath.Join(f.root, "shared")
	return o
}

// expectLinked checks that path p of the checkout is a symlink to the cache.
func expectLinked(g Gomega, o Options, p string) {
	dest, err := os.Readlink(filepath.Join(o.Path, p))
	g.Expect(err).NotTo(HaveOccurred(), "%s is a symlink", p)
	g.Expect(dest).To(Equal(filepath.Join(o.SharedDir, p)))
	g.Expect(filepath.Join(o.SharedDir, p)).To(BeADirectory())
}

// expectClean checks that git sees no change at all in the checkout, ignored files aside.
func (f *fixture) expectClean(t *testing.T, g Gomega, path string) {
	t.Helper()
	g.Expect(f.run(t, path, "status", "--porcelain", "--untracked-files=all")).To(BeEmpty(), "git status in %s", path)
}

func TestSharedPathsAreLinkedAndInvisibleToGit(t *testing.T) {
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		t.Run(string(mode), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			o := f.sharedOpts(mode, "s1", "shepherd/shared", "node_modules", "web/node_modules")
			var out strings.Builder
			o.SetupOutput = &out
			// The setup commands run after the links exist, so they fill the cache.
			o.Setup = []agentsv1alpha1.SetupCommand{{Name: "install", Command: []string{"sh", "-c", "echo v1 > node_modules/pkg && echo v1 > web/node_modules/pkg"}}}
			res, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Setup.State).To(Equal(agentsv1alpha1.SetupSucceeded))
			expectLinked(g, o, "node_modules")
			expectLinked(g, o, "web/node_modules")
			g.Expect(filepath.Join(o.SharedDir, "node_modules", "pkg")).To(BeARegularFile(), "setup wrote into the cache")
			g.Expect(filepath.Join(o.SharedDir, "web", "node_modules", "pkg")).To(BeARegularFile())
			g.Expect(res.Facts.Dirty).To(BeFalse())
			f.expectClean(t, g, o.Path)
			g.Expect(out.String()).To(ContainSubstring("shared path node_modules: linked to " + filepath.Join(o.SharedDir, "node_modules")))

			// What an agent does: stage everything and commit. The links stay out of the commit.
			g.Expect(os.WriteFile(filepath.Join(o.Path, "change.txt"), []byte("x\n"), 0o644)).To(Succeed())
			f.run(t, o.Path, "add", "-A")
			f.run(t, o.Path, "commit", "-q", "-m", "change")
			g.Expect(f.run(t, o.Path, "show", "--name-only", "--format=", "HEAD")).To(Equal("change.txt"))
			g.Expect(f.run(t, o.Path, "ls-files")).NotTo(ContainSubstring("node_modules"))

			// Idempotent: a restore leaves the links and the exclude file as they are and skips
			// the setup that already succeeded with these shared paths.
			exclude := o.excludeFile(f.run(t, o.Path, "rev-parse", "--absolute-git-dir"))
			before, err := os.ReadFile(exclude)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Count(string(before), excludeBegin)).To(Equal(1))
			g.Expect(string(before)).To(ContainSubstring("\n/node_modules\n/web/node_modules\n"))
			linkIno := lstatIno(t, filepath.Join(o.Path, "node_modules"))
			out.Reset()
			res, err = f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Restored).To(BeTrue())
			g.Expect(res.Setup).To(Equal(SetupResult{State: agentsv1alpha1.SetupSucceeded, Skipped: true}))
			g.Expect(lstatIno(t, filepath.Join(o.Path, "node_modules"))).To(Equal(linkIno), "the link was not made again")
			g.Expect(out.String()).NotTo(ContainSubstring("shared path"))
			after, err := os.ReadFile(exclude)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(after)).To(Equal(string(before)))
			f.expectClean(t, g, o.Path)
		})
	}
}

func lstatIno(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return statIno(st)
}

func TestSharedPathsExcludedInTheCheckoutsOwnExclude(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	o := f.sharedOpts(agentsv1alpha1.WorkspaceWorktree, "wt-ex", "shepherd/ex", "node_modules")
	_, err := f.prepare(o)
	g.Expect(err).NotTo(HaveOccurred())
	gitDir := f.run(t, o.Path, "rev-parse", "--absolute-git-dir")
	g.Expect(gitDir).To(Equal(filepath.Join(o.Path, ".git")), "a repository of its own, not a worktree of the mirror")
	g.Expect(f.run(t, o.Path, "check-ignore", "-v", "node_modules")).To(HavePrefix(".git/info/exclude:"))
	g.Expect(readExcludeBlock(filepath.Join(o.MirrorPath, "info", "exclude"))).To(BeEmpty(), "nothing written to the mirror, which agents only read")
}

func TestSharedPathsTwoWorktreesAndACloneShareOneCache(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	counter := filepath.Join(t.TempDir(), "installs")
	// An install that does its work only when the cache lacks it, and counts when it does. It
	// takes a moment, so that sessions preparing at once would overlap in it without the lock.
	setup := []agentsv1alpha1.SetupCommand{{Name: "install", Command: []string{"sh", "-c",
		`test -e node_modules/.installed || { echo run >> "$0"; sleep 0.3; echo dep > node_modules/dep; touch node_modules/.installed; }`, counter}}}
	opts := []Options{
		f.sharedOpts(agentsv1alpha1.WorkspaceWorktree, "wt-a", "shepherd/a", "node_modules"),
		f.sharedOpts(agentsv1alpha1.WorkspaceWorktree, "wt-b", "shepherd/b", "node_modules"),
		f.sharedOpts(agentsv1alpha1.WorkspaceClone, "cl-c", "shepherd/c", "node_modules"),
	}
	var wg sync.WaitGroup
	errs := make([]error, len(opts))
	for i := range opts {
		opts[i].Setup = setup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.prepare(opts[i])
		}()
	}
	wg.Wait()
	for i, o := range opts {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		expectLinked(g, o, "node_modules")
		g.Expect(os.ReadFile(filepath.Join(o.Path, "node_modules", "dep"))).To(Equal([]byte("dep\n")), "%s sees the cache", o.Path)
		f.expectClean(t, g, o.Path)
	}
	runs, err := os.ReadFile(counter)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(runs)).To(Equal("run\n"), "the cache was filled once for the Project")

	// What one checkout writes through its link, the others see.
	g.Expect(os.WriteFile(filepath.Join(opts[0].Path, "node_modules", "added"), []byte("a"), 0o644)).To(Succeed())
	g.Expect(filepath.Join(opts[1].Path, "node_modules", "added")).To(BeARegularFile())

	// Removing a checkout removes its link, never the cache behind it.
	g.Expect(Remove(context.Background(), f.git, opts[0].Mode, opts[0].Path, opts[0].MirrorPath)).To(Succeed())
	g.Expect(Remove(context.Background(), f.git, opts[2].Mode, opts[2].Path, "")).To(Succeed())
	g.Expect(filepath.Join(opts[0].SharedDir, "node_modules", "dep")).To(BeARegularFile())
	g.Expect(filepath.Join(opts[1].Path, "node_modules", "added")).To(BeARegularFile())
}

func TestSharedPathWithUntrackedContentIsMovedAside(t *testing.T) {
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		t.Run(string(mode), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			// A checkout from before the path was shared: its setup filled node_modules in place.
			o := f.opts(mode, "old", "shepherd/old")
			o.Setup = []agentsv1alpha1.SetupCommand{{Name: "install", Command: []string{"sh", "-c", "mkdir -p node_modules && echo local > node_modules/pkg"}}}
			_, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(filepath.Join(o.Path, "node_modules", "pkg")).To(BeARegularFile())
			g.Expect(os.WriteFile(filepath.Join(o.Path, "dist"), []byte("a file"), 0o644)).To(Succeed())
			g.Expect(os.Mkdir(filepath.Join(o.Path, "empty"), 0o755)).To(Succeed())

			o.SharedPaths, o.SharedDir = []string{"node_modules", "dist", "empty"}, filepath.Join(f.root, "shared")
			var out strings.Builder
			o.SetupOutput = &out
			res, err := f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			gitDir := f.run(t, o.Path, "rev-parse", "--absolute-git-dir")
			aside := filepath.Join(StateDir(gitDir), "unshared")
			g.Expect(os.ReadFile(filepath.Join(aside, "node_modules", "pkg"))).To(Equal([]byte("local\n")), "nothing was deleted")
			g.Expect(os.ReadFile(filepath.Join(aside, "dist"))).To(Equal([]byte("a file")))
			g.Expect(filepath.Join(aside, "empty")).NotTo(BeAnExistingFile(), "an empty directory is simply replaced")
			g.Expect(out.String()).To(ContainSubstring("moved it to " + filepath.Join(aside, "node_modules")))
			for _, p := range o.SharedPaths {
				expectLinked(g, o, p)
			}
			// Sharing the path changed what the setup made: it ran again, into the cache.
			g.Expect(res.Setup.Skipped).To(BeFalse())
			g.Expect(os.ReadFile(filepath.Join(o.SharedDir, "node_modules", "pkg"))).To(Equal([]byte("local\n")))
			f.expectClean(t, g, o.Path)

			// Again after something replaced a link: moved aside next to the first, never over it.
			g.Expect(os.Remove(filepath.Join(o.Path, "dist"))).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(o.Path, "dist"), []byte("second"), 0o644)).To(Succeed())
			_, err = f.prepare(o)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(os.ReadFile(filepath.Join(aside, "dist.1"))).To(Equal([]byte("second")))
			g.Expect(os.ReadFile(filepath.Join(aside, "dist"))).To(Equal([]byte("a file")))
			expectLinked(g, o, "dist")
		})
	}
}

func TestSharedPathsRefusedWhenTheyCannotBeShared(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		paths []string
		want  string
	}{
		{"files tracked under the path", map[string]string{"vendor/lib/a.go": "package lib\n", "vendor/lib/b.go": "package lib\n"},
			[]string{"node_modules", "vendor"}, "shared paths hold files git tracks on this branch: vendor (vendor/lib/a.go and 1 more)"},
		{"a tracked file at the path", map[string]string{"dist": "built\n"}, []string{"dist"}, "shared paths hold files git tracks on this branch: dist (dist)"},
		{"under a tracked file", map[string]string{"README.md": "x\n"}, []string{"README.md/cache"}, "README.md is not a directory in the checkout"},
		{"re-included by the repository's .gitignore", map[string]string{".gitignore": "!/node_modules\n"}, []string{"node_modules"}, "git does not ignore the shared paths node_modules: a .gitignore of the repository re-includes them"},
	}
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		for _, c := range cases {
			t.Run(string(mode)+"/"+c.name, func(t *testing.T) {
				g := NewWithT(t)
				f := newFixture(t)
				_, err := f.srv.Seed("acme/other", "main", c.files)
				g.Expect(err).NotTo(HaveOccurred())
				o := f.sharedOpts(mode, "refused", "shepherd/refused", c.paths...)
				o.RemoteURL = f.srv.URL("acme/other")
				_, err = f.prepare(o)
				g.Expect(err).To(MatchError(ContainSubstring(c.want)))
				for name := range c.files {
					g.Expect(filepath.Join(o.Path, name)).To(BeARegularFile(), "tracked content is untouched")
				}
				f.expectClean(t, g, o.Path)
			})
		}
	}
}

func TestSharedPathsNoLongerSharedAreUnlinked(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	a := f.sharedOpts(agentsv1alpha1.WorkspaceWorktree, "wt-a", "shepherd/a", "node_modules", "dist")
	b := f.sharedOpts(agentsv1alpha1.WorkspaceWorktree, "wt-b", "shepherd/b", "node_modules", "dist")
	for _, o := range []Options{a, b} {
		_, err := f.prepare(o)
		g.Expect(err).NotTo(HaveOccurred())
	}
	excludeOf := func(o Options) string { return filepath.Join(o.Path, ".git", "info", "exclude") }
	// Someone's own line in the checkout's exclude file stays whatever the runner does.
	own, err := os.ReadFile(excludeOf(a))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(excludeOf(a), append(own, []byte("*.local\n")...), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(a.SharedDir, "dist", "bundle.js"), []byte("js"), 0o644)).To(Succeed())

	// wt-a stops sharing dist: its link goes, the cache stays; wt-b, with its own exclude file,
	// keeps its link and its exclusion.
	a.SharedPaths = []string{"node_modules"}
	_, err = f.prepare(a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Join(a.Path, "dist")).NotTo(BeAnExistingFile())
	expectLinked(g, a, "node_modules")
	g.Expect(filepath.Join(a.SharedDir, "dist", "bundle.js")).To(BeARegularFile())
	g.Expect(readExcludeBlock(excludeOf(a))).To(ConsistOf("node_modules"))
	g.Expect(readExcludeBlock(excludeOf(b))).To(ConsistOf("node_modules", "dist"))
	f.expectClean(t, g, a.Path)
	f.expectClean(t, g, b.Path)

	// A link someone else put where a path was shared keeps its exclusion: committing it would
	// push a symlink into the repository.
	g.Expect(os.Symlink(filepath.Join(a.SharedDir, "dist"), filepath.Join(a.Path, "dist"))).To(Succeed())
	g.Expect(writeExcludeBlock(excludeOf(a), []string{"node_modules", "dist"})).To(Succeed())
	_, err = f.prepare(a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(readExcludeBlock(excludeOf(a))).To(ConsistOf("node_modules", "dist"))
	g.Expect(os.Remove(filepath.Join(a.Path, "dist"))).To(Succeed())

	// Nothing shared any more: links and block go, the other lines stay.
	a.SharedPaths, a.SharedDir = nil, ""
	_, err = f.prepare(a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Join(a.Path, "node_modules")).NotTo(BeAnExistingFile())
	left, err := os.ReadFile(excludeOf(a))
	g.Expect(err).NotTo(HaveOccurred())
	outside, _, _ := splitExclude(own)
	g.Expect(string(left)).To(Equal(strings.Join(outside, "\n") + "\n*.local\n"))
	g.Expect(string(left)).NotTo(ContainSubstring("shepherd"))
	f.expectClean(t, g, a.Path)
}

func TestValidateSharedPaths(t *testing.T) {
	cases := []struct {
		paths []string
		want  string // "" when valid
	}{
		{[]string{"node_modules", "web/node_modules", ".venv", "a_b-c.d"}, ""},
		{nil, ""},
		{[]string{"../etc"}, "must stay inside the checkout"},
		{[]string{"a/./b"}, "must stay inside the checkout"},
		{[]string{".git/hooks"}, "must stay inside the checkout"},
		{[]string{"web/.git"}, "must stay inside the checkout"},
		{[]string{"/abs"}, "must be a relative path"},
		{[]string{"a//b"}, "must be a relative path"},
		{[]string{"a/"}, "must be a relative path"},
		{[]string{"$(id)"}, "must be a relative path"},
		{[]string{strings.Repeat("a", 257)}, "must be a relative path"},
		{[]string{"node_modules", "node_modules"}, "listed twice"},
		{[]string{"node_modules", "node_modules/.cache"}, "nest"},
		{[]string{"web/node_modules", "web"}, "nest"},
		{[]string{"web", "web2"}, ""},
	}
	for _, c := range cases {
		err := ValidateSharedPaths(c.paths)
		if c.want == "" {
			NewWithT(t).Expect(err).NotTo(HaveOccurred(), "%q", c.paths)
		} else {
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(c.want)), "%q", c.paths)
		}
	}

	g := NewWithT(t)
	o := Options{Mode: agentsv1alpha1.WorkspaceClone, Path: "/w/checkout", RemoteURL: "https://example.com/r.git", Branch: "b", Base: "main",
		SharedPaths: []string{"node_modules"}}
	g.Expect(o.Validate()).To(MatchError(ContainSubstring("need an absolute shared directory")))
	o.SharedDir = "/w/checkout/cache"
	g.Expect(o.Validate()).To(MatchError(ContainSubstring("must not contain each other")))
	o.SharedDir = "/w"
	g.Expect(o.Validate()).To(MatchError(ContainSubstring("must not contain each other")))
	o.SharedDir = "/w/shared"
	g.Expect(o.Validate()).To(Succeed())
}
