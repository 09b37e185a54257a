// Command benchworkspace measures how long each way of making a checkout takes to reach a ready
// checkout, and how much disk each uses, on a generated repository served over git's smart HTTP
// protocol (the real `git http-backend`). hack/bench-workspace.sh runs it; `make
// bench-workspace` runs the script.
//
// The four ways, measured in one run, the median of -runs each:
//   - full clone        workspace.Prepare in Clone mode without a mirror
//   - blob:none clone   git clone --filter=blob:none --no-checkout, then the branch checkout
//   - reference clone   workspace.Prepare in Clone mode with the mirror as --reference
//   - worktree          workspace.Prepare in Worktree mode (mirror fetch + git worktree add)
//
// The mirror is made once, before the measurements: it is shared by every session of a Project.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

func main() {
	files := flag.Int("files", 50000, "files in the generated repository")
	commits := flag.Int("commits", 5000, "commits in the generated repository")
	assetKB := flag.Int("asset-kb", 52, "size of the binary asset rewritten by every commit (drives history size)")
	runs := flag.Int("runs", 3, "runs of each method; the median is reported")
	linkMbps := flag.Float64("link-mbps", 0, "throttle the server's answers to this many Mbit/s, as a link to a forge would; 0 serves at loopback speed")
	cache := flag.String("cache", filepath.Join(userCache(), "shepherd", "bench"), "where the generated repository is kept")
	flag.Parse()
	if err := run(*files, *commits, *assetKB, *runs, *linkMbps, *cache); err != nil {
		fmt.Fprintln(os.Stderr, "bench-workspace:", err)
		os.Exit(1)
	}
}

func userCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return d
	}
	return os.TempDir()
}

func run(files, commits, assetKB, runs int, linkMbps float64, cache string) error {
	ctx := context.Background()
	name := fmt.Sprintf("repo-f%d-c%d-a%d", files, commits, assetKB)
	root := filepath.Join(cache, name)
	bare := filepath.Join(root, "bench", "repo.git")
	if _, err := os.Stat(filepath.Join(bare, ".generated")); err != nil {
		fmt.Printf("generating %s (%d files, %d commits) under %s ...\n", name, files, commits, root)
		start := time.Now()
		if err := generate(bare, files, commits, assetKB); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		fmt.Printf("generated in %s\n", time.Since(start).Round(time.Second))
	}
	packKB := duKB(filepath.Join(bare, "objects"), false)
	fmt.Printf("repository: %d files at HEAD, %d commits, %.0f MB packed history\n", files, commits, float64(packKB)/1024)

	srv, err := gitserver.New(root)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var handler http.Handler = srv
	link := "loopback speed"
	if linkMbps > 0 {
		handler = throttle{h: srv, bytesPerSec: linkMbps * 1e6 / 8}
		link = fmt.Sprintf("answers throttled to %.0f Mbit/s", linkMbps)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	defer func() { _ = hs.Close() }()
	url := fmt.Sprintf("http://%s/bench/repo.git", l.Addr())
	fmt.Printf("server: git http-backend over HTTP, %s\n", link)

	work, err := os.MkdirTemp("", "bench-workspace-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	// A large postBuffer makes git send its requests with a Content-Length: the CGI bridge in
	// front of http-backend refuses chunked request bodies, which a blob:none checkout's lazy
	// fetch of 50k blobs would otherwise use.
	git := &workspace.Git{Timeout: time.Hour, ConfigArgs: []string{"-c", "http.postBuffer=524288000"}}
	mirror := filepath.Join(work, "mirror.git")
	start := time.Now()
	if err := workspace.UpdateMirror(ctx, git, mirror, url); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	fmt.Printf("mirror made once in %s (shared by every session of the Project)\n\n", time.Since(start).Round(time.Millisecond))

	type method struct {
		name string
		make func(i int) (path string, extra []string, err error)
	}
	prep := func(mode agentsv1alpha1.WorkspaceMode, mirrorPath, dir string) func(i int) (string, []string, error) {
		return func(i int) (string, []string, error) {
			o := workspace.Options{Mode: mode, MirrorPath: mirrorPath, RemoteURL: url, Base: "main",
				Branch: fmt.Sprintf("bench/%s-%d", strings.ToLower(string(mode)), i), Path: filepath.Join(work, dir, fmt.Sprint(i), "repo")}
			_, err := workspace.Prepare(ctx, git, o)
			var extra []string
			if mode == agentsv1alpha1.WorkspaceWorktree {
				// The worktree's index and HEAD live in the mirror's admin dir; count them.
				admin, _ := git.Run(ctx, o.Path, "rev-parse", "--absolute-git-dir")
				extra = append(extra, admin)
			}
			return o.Path, extra, err
		}
	}
	methods := []method{
		{"full clone", prep(agentsv1alpha1.WorkspaceClone, "", "full")},
		{"blob:none clone", func(i int) (string, []string, error) {
			path := filepath.Join(work, "blobless", fmt.Sprint(i), "repo")
			if _, err := git.Run(ctx, "", "clone", "--quiet", "--filter=blob:none", "--no-checkout", "--", url, path); err != nil {
				return path, nil, err
			}
			_, err := git.Run(ctx, path, "checkout", "-q", "--no-track", "-B", fmt.Sprintf("bench/blobless-%d", i), "origin/main")
			return path, nil, err
		}},
		{"reference clone", prep(agentsv1alpha1.WorkspaceClone, mirror, "reference")},
		{"worktree add", prep(agentsv1alpha1.WorkspaceWorktree, mirror, "worktrees")},
	}
	type result struct {
		median           time.Duration
		blocksKB, apprKB int64
	}
	results := map[string]result{}
	for _, m := range methods {
		var times []time.Duration
		var res result
		for i := range runs {
			dropCaches()
			start := time.Now()
			path, extra, err := m.make(i)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			times = append(times, time.Since(start))
			if i == 0 {
				for _, p := range append([]string{path}, extra...) {
					res.blocksKB += duKB(p, true)
					res.apprKB += duKB(p, false)
				}
			}
		}
		sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
		res.median = times[len(times)/2]
		results[m.name] = res
		fmt.Printf("%-16s median %8s of %d runs (%s)   disk %7.1f MB (apparent %7.1f MB)\n", m.name, res.median.Round(time.Millisecond),
			runs, fmtTimes(times), float64(res.blocksKB)/1024, float64(res.apprKB)/1024)
	}
	full, wt := results["full clone"], results["worktree add"]
	fmt.Println()
	for _, m := range methods[1:] {
		r := results[m.name]
		fmt.Printf("%-16s %5.1fx faster than full clone, %5.3f of its disk (apparent %5.3f)\n", m.name,
			float64(full.median)/float64(r.median), float64(r.blocksKB)/float64(full.blocksKB), float64(r.apprKB)/float64(full.apprKB))
	}
	speed := float64(full.median) / float64(wt.median)
	disk := float64(wt.blocksKB) / float64(full.blocksKB)
	fmt.Printf("\ntarget: worktree >= 10x faster than full clone: %s (%.1fx); under 1/5 of its disk: %s (%.3f; apparent %.3f)\n",
		verdict(speed >= 10), speed, verdict(disk < 0.2), disk, float64(wt.apprKB)/float64(full.apprKB))
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func fmtTimes(ts []time.Duration) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Round(time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}

// throttle delays a handler's answers to a link speed.
type throttle struct {
	h           http.Handler
	bytesPerSec float64
}

func (t throttle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t.h.ServeHTTP(&slowWriter{ResponseWriter: w, bytesPerSec: t.bytesPerSec, start: time.Now()}, r)
}

type slowWriter struct {
	http.ResponseWriter
	bytesPerSec float64
	start       time.Time
	n           int64
}

func (s *slowWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), 32<<10)]
		n, err := s.ResponseWriter.Write(chunk)
		written += n
		s.n += int64(n)
		if err != nil {
			return written, err
		}
		p = p[n:]
		due := s.start.Add(time.Duration(float64(s.n) / s.bytesPerSec * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
	}
	return written, nil
}

func (s *slowWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// dropCaches asks the kernel to drop clean page cache when allowed (root), so that no method
// profits from a previous one's reads; without permission every method runs warm alike.
func dropCaches() {
	syscall.Sync()
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o200)
}

// duKB sums the disk used under path: allocated blocks, or apparent sizes.
func duKB(path string, blocks bool) int64 {
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

// generate writes the repository with git fast-import: an initial commit of `files` text files,
// then commits that each edit a few text files (small deltas, like source code evolving) and
// rewrite one of 20 binary assets (incompressible, so history grows while the tree stays small).
func generate(bare string, files, commits, assetKB int) error {
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
