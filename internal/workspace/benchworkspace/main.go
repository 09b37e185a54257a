// Command benchworkspace measures how long each way of making a checkout takes to reach a ready
// checkout, and how much disk each uses, on a generated repository served over git's smart HTTP
// protocol (the real `git http-backend`). hack/bench-workspace.sh runs it; `make
// bench-workspace` runs the script.
//
// The four ways, measured in one run, the median of -runs each:
//   - full clone        workspace.Prepare in Clone mode without a mirror
//   - blob:none clone   git clone --filter=blob:none --no-checkout, then the branch checkout
//   - reference clone   workspace.Prepare in Clone mode with the mirror as --reference
//   - worktree          workspace.Prepare in Worktree mode: a repository of its own that borrows
//     the mirror's objects (alternates), its refs copied from the mirror, the files checked out
//
// and Shepherd's fifth, spec.workspace.spareWorktrees: workspace.Prepare in Worktree mode
// claiming a spare worktree made (untimed) before each run, as the previous session's runner
// makes it while its agent works.
//
// The mirror is made once, before the measurements: it is shared by every session of a Project.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	"github.com/shepherd-dev/shepherd/test/benchrepo"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

func main() {
	files := flag.Int("files", 50000, "files in the generated repository")
	commits := flag.Int("commits", 5000, "commits in the generated repository")
	assetKB := flag.Int("asset-kb", 52, "size of the binary asset rewritten by every commit (drives history size)")
	runs := flag.Int("runs", 3, "runs of each method; the median is reported")
	linkMbps := flag.Float64("link-mbps", 0, "throttle the server's answers to this many Mbit/s, as a link to a forge would; 0 serves at loopback speed")
	cache := flag.String("cache", benchrepo.DefaultCache(), "where the generated repository is kept")
	flag.Parse()
	if err := run(*files, *commits, *assetKB, *runs, *linkMbps, *cache); err != nil {
		fmt.Fprintln(os.Stderr, "bench-workspace:", err)
		os.Exit(1)
	}
}

func run(files, commits, assetKB, runs int, linkMbps float64, cache string) error {
	ctx := context.Background()
	spec := benchrepo.Spec{Files: files, Commits: commits, AssetKB: assetKB}
	root := benchrepo.Root(cache, spec)
	bare, err := benchrepo.Ensure(cache, spec, os.Stdout)
	if err != nil {
		return err
	}
	packKB := benchrepo.DiskKB(filepath.Join(bare, "objects"), false)
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
		// setup, untimed, runs before each make.
		setup func(i int) error
		make  func(i int) (path string, extra []string, err error)
	}
	prep := func(mode agentsv1alpha1.WorkspaceMode, mirrorPath, dir string) func(i int) (string, []string, error) {
		return func(i int) (string, []string, error) {
			o := workspace.Options{Mode: mode, MirrorPath: mirrorPath, RemoteURL: url, Base: "main",
				Branch: fmt.Sprintf("bench/%s-%d", dir, i), Path: filepath.Join(work, dir, fmt.Sprint(i), "repo")}
			_, err := workspace.Prepare(ctx, git, o)
			var extra []string
			if mode == agentsv1alpha1.WorkspaceWorktree {
				// A linked worktree's index and HEAD live in the mirror's admin dir: count them
				// (a checkout that borrows the mirror keeps its own .git inside it, counted).
				admin, _ := git.Run(ctx, o.Path, "rev-parse", "--absolute-git-dir")
				if admin != "" && !strings.HasPrefix(admin, o.Path+string(filepath.Separator)) {
					extra = append(extra, admin)
				}
			}
			return o.Path, extra, err
		}
	}
	methods := []method{
		{name: "full clone", make: prep(agentsv1alpha1.WorkspaceClone, "", "full")},
		{name: "blob:none clone", make: func(i int) (string, []string, error) {
			path := filepath.Join(work, "blobless", fmt.Sprint(i), "repo")
			if _, err := git.Run(ctx, "", "clone", "--quiet", "--filter=blob:none", "--no-checkout", "--", url, path); err != nil {
				return path, nil, err
			}
			_, err := git.Run(ctx, path, "checkout", "-q", "--no-track", "-B", fmt.Sprintf("bench/blobless-%d", i), "origin/main")
			return path, nil, err
		}},
		{name: "reference clone", make: prep(agentsv1alpha1.WorkspaceClone, mirror, "reference")},
		{name: "worktree", make: prep(agentsv1alpha1.WorkspaceWorktree, mirror, "worktrees")},
		// Shepherd with spec.workspace.spareWorktrees: the spare is made ahead of time (by the
		// previous session's runner while its agent works; here untimed, before each run), and
		// the timed prepare claims it.
		{name: "spare claimed", setup: func(i int) error {
			_, err := workspace.FillSpares(ctx, git, workspace.Spares{Mirror: mirror, Base: "main", Count: 1,
				Dir: workspace.SpareDir(filepath.Join(work, "spares", fmt.Sprint(i), "repo"))})
			return err
		}, make: prep(agentsv1alpha1.WorkspaceWorktree, mirror, "spares")},
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
			if m.setup != nil {
				if err := m.setup(i); err != nil {
					return fmt.Errorf("%s (setup): %w", m.name, err)
				}
			}
			dropCaches()
			start := time.Now()
			path, extra, err := m.make(i)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			times = append(times, time.Since(start))
			if i == 0 {
				for _, p := range append([]string{path}, extra...) {
					res.blocksKB += benchrepo.DiskKB(p, true)
					res.apprKB += benchrepo.DiskKB(p, false)
				}
			}
		}
		sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
		res.median = times[len(times)/2]
		results[m.name] = res
		fmt.Printf("%-16s median %8s of %d runs (%s)   disk %7.1f MB (apparent %7.1f MB)\n", m.name, res.median.Round(time.Millisecond),
			runs, fmtTimes(times), float64(res.blocksKB)/1024, float64(res.apprKB)/1024)
	}
	full, wt := results["full clone"], results["worktree"]
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
	sp := results["spare claimed"]
	fmt.Printf("with a spare worktree (made ahead of time, not counted): %s (%.1fx); disk %s (%.3f: the spare is a whole checkout)\n",
		verdict(float64(full.median)/float64(sp.median) >= 10), float64(full.median)/float64(sp.median),
		verdict(float64(sp.blocksKB)/float64(full.blocksKB) < 0.2), float64(sp.blocksKB)/float64(full.blocksKB))
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
