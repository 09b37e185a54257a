// Package benchrepo generates the large repository the benchmarks share (`make bench-workspace`,
// `make bench-session-start`): an initial commit of many small text files, then commits that each
// edit a few of them (small deltas, like source code evolving) and rewrite one of 20 binary
// assets (incompressible, so the history grows while the tree stays the same size). It is made
// once with `git fast-import`, repacked the way a forge serves it, and kept in a cache directory.
package benchrepo

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Spec is the repository's shape. The benchmarks use Large: 50,000 files, 5,000 commits,
// 52 KiB assets (~340 MB packed).
type Spec struct {
	Files, Commits, AssetKB int
}

// Large is the repository of the runner issue's benchmark (the benchmarks' default).
var Large = Spec{Files: 50000, Commits: 5000, AssetKB: 52}

// Name is the repository's directory under the cache.
func (s Spec) Name() string { return fmt.Sprintf("repo-f%d-c%d-a%d", s.Files, s.Commits, s.AssetKB) }

// DefaultCache is $SHEPHERD_CACHE/bench, else ~/.cache/shepherd/bench.
func DefaultCache() string {
	if c := os.Getenv("SHEPHERD_CACHE"); c != "" {
		return filepath.Join(c, "bench")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "shepherd", "bench")
}

// Root is the directory a git server serves (the repository is bench/repo.git under it).
func Root(cache string, s Spec) string { return filepath.Join(cache, s.Name()) }

// Bare is the bare repository's path.
func Bare(cache string, s Spec) string { return filepath.Join(Root(cache, s), "bench", "repo.git") }

// Ensure returns the bare repository of s under cache, generating it first when it is missing
// (or a previous generation did not finish); progress goes to log.
func Ensure(cache string, s Spec, log io.Writer) (string, error) {
	bare := Bare(cache, s)
	if _, err := os.Stat(filepath.Join(bare, ".generated")); err == nil {
		return bare, nil
	}
	fmt.Fprintf(log, "generating %s (%d files, %d commits) under %s ...\n", s.Name(), s.Files, s.Commits, Root(cache, s))
	start := time.Now()
	if err := Generate(bare, s); err != nil {
		return "", fmt.Errorf("generate: %w", err)
	}
	fmt.Fprintf(log, "generated in %s\n", time.Since(start).Round(time.Second))
	return bare, nil
}

// Generate writes the repository of s at bare (replacing what is there).
func Generate(bare string, s Spec) error {
	files, commits, assetKB := s.Files, s.Commits, s.AssetKB
	if files < 1 || commits < 1 || assetKB < 0 {
		return fmt.Errorf("spec %+v: want files and commits >= 1, asset-kb >= 0", s)
	}
	_ = os.RemoveAll(bare)
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	gitRun := func(dir string, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd.Run()
	}
	if err := gitRun("", "init", "--quiet", "--bare", "--initial-branch=main", bare); err != nil {
		return fmt.Errorf("git init: %w", err)
	}
	cmd := exec.Command("git", "fast-import", "--quiet", "--done")
	cmd.Dir = bare
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start fast-import: %w", err)
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	rng := rand.New(rand.NewPCG(42, 2026))
	words := strings.Fields("func return if else for range var const type struct interface map chan go defer select case switch " +
		"error nil true false string int byte len append make new ctx err result value index count name path widget handler config")
	line := func() string {
		n := 4 + rng.IntN(8)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(parts, " ") + "\n"
	}
	pathOf := func(i int) string { return fmt.Sprintf("pkg%03d/mod%02d/file%05d.go", i%500, (i/500)%20, i) }
	contents := make([][]string, files)
	mark := 0
	blob := func(data []byte) int {
		mark++
		fmt.Fprintf(w, "blob\nmark :%d\ndata %d\n", mark, len(data))
		_, _ = w.Write(data)
		_ = w.WriteByte('\n')
		return mark
	}
	join := func(ls []string) []byte { return []byte(strings.Join(ls, "")) }
	ts := int64(1700000000)
	var changes []string
	for i := range files {
		n := 10 + rng.IntN(30)
		ls := make([]string, n)
		for j := range ls {
			ls[j] = line()
		}
		contents[i] = ls
		m := blob(join(ls))
		changes = append(changes, fmt.Sprintf("M 100644 :%d %s\n", m, pathOf(i)))
	}
	// The initial commit's "from" is absent; its mark is written after its blobs.
	mark++
	fmt.Fprintf(w, "commit refs/heads/main\nmark :%d\ncommitter Bench <bench@shepherd.dev> %d +0000\ndata 15\nInitial import\n\n", mark, ts)
	for _, c := range changes {
		_, _ = w.WriteString(c)
	}
	prev := mark
	asset := make([]byte, assetKB*1024)
	for c := 1; c < commits; c++ {
		changes = changes[:0]
		for range 20 {
			i := rng.IntN(files)
			ls := contents[i]
			if rng.IntN(2) == 0 && len(ls) > 5 {
				ls[rng.IntN(len(ls))] = line()
			} else {
				ls = append(ls, line())
			}
			contents[i] = ls
			changes = append(changes, fmt.Sprintf("M 100644 :%d %s\n", blob(join(ls)), pathOf(i)))
		}
		for k := range asset {
			asset[k] = byte(rng.Uint32())
		}
		changes = append(changes, fmt.Sprintf("M 100644 :%d assets/blob-%02d.bin\n", blob(asset), c%20))
		mark++
		msg := fmt.Sprintf("Change %d", c)
		fmt.Fprintf(w, "commit refs/heads/main\nmark :%d\ncommitter Bench <bench@shepherd.dev> %d +0000\ndata %d\n%s\nfrom :%d\n", mark, ts, len(msg), msg, prev)
		for _, ch := range changes {
			_, _ = w.WriteString(ch)
		}
		prev = mark
		ts += 60
	}
	_, _ = w.WriteString("done\n")
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write fast-import stream: %w", err)
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("fast-import: %w", err)
	}
	// One pack with deltas, as a forge serves it; allow partial clones for blob:none.
	if err := gitRun(bare, "repack", "-a", "-d", "-q", "--window=10", "--depth=50"); err != nil {
		return fmt.Errorf("repack: %w", err)
	}
	for _, kv := range [][2]string{{"uploadpack.allowFilter", "true"}, {"uploadpack.allowAnySHA1InWant", "true"}} {
		if err := gitRun(bare, "config", kv[0], kv[1]); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(bare, ".generated"), nil, 0o644)
}

// DiskKB sums the disk used under path in KiB: allocated blocks, or apparent sizes. Hard links
// count once.
func DiskKB(path string, blocks bool) int64 {
	var total int64
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if ok && st.Nlink > 1 {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		if blocks && ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total / 1024
}
