package benchrepo

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestEnsureGeneratesOnceWithTheSpecsShape generates a small repository and checks its shape:
// the files at HEAD (the text files plus the assets), the commit count, one pack, and that a
// second Ensure reuses it.
func TestEnsureGeneratesOnceWithTheSpecsShape(t *testing.T) {
	g := NewWithT(t)
	cache := t.TempDir()
	spec := Spec{Files: 40, Commits: 25, AssetKB: 1}
	bare, err := Ensure(cache, spec, io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bare).To(Equal(filepath.Join(cache, "repo-f40-c25-a1", "bench", "repo.git")))

	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"--git-dir", bare}, args...)...).Output()
		g.Expect(err).NotTo(HaveOccurred(), strings.Join(args, " "))
		return strings.TrimSpace(string(out))
	}
	g.Expect(git("rev-list", "--count", "main")).To(Equal("25"))
	files := strings.Split(git("ls-tree", "-r", "--name-only", "main"), "\n")
	// 24 commits after the first rewrite assets/blob-01..blob-20 and blob-00 (c%20).
	g.Expect(files).To(HaveLen(40 + 20))
	g.Expect(files).To(ContainElement("pkg000/mod00/file00000.go"))
	packs, err := filepath.Glob(filepath.Join(bare, "objects", "pack", "*.pack"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(packs).To(HaveLen(1))
	g.Expect(DiskKB(filepath.Join(bare, "objects"), false)).To(BeNumerically(">", 20), "24 incompressible 1 KiB assets")

	// The generator is deterministic, so a second generation would give the same commits: a
	// file of our own shows whether the repository was kept.
	mark := filepath.Join(bare, "kept")
	g.Expect(os.WriteFile(mark, nil, 0o644)).To(Succeed())
	again, err := Ensure(cache, spec, io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(bare))
	g.Expect(mark).To(BeAnExistingFile(), "the same repository, not generated again")
}
