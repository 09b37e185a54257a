package fakegithub

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/shepherd-dev/shepherd/test/gitserver"
)

// git runs git with an argument list in dir.
func git(dir string, stdin []byte, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), gitserver.CommitterEnv()...), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (s *Server) gitDir(r *Repo) string { return s.git.Path(r.FullName()) }

// CreateRepo makes a repository with one commit holding files (a README when empty) on
// defaultBranch and returns its head. A bare repository already in the data directory is served
// as it is (the state around it — pull requests, checks — lives in memory only).
func (s *Server) CreateRepo(full, defaultBranch string, files map[string]string) (string, error) {
	owner, name, ok := strings.Cut(full, "/")
	if !ok || owner == "" || name == "" {
		return "", fmt.Errorf("repository %q: want owner/name", full)
	}
	if defaultBranch == "" {
		defaultBranch = "main"
	}
	if _, err := os.Stat(s.git.Path(full)); err == nil {
		// A repository kept in the data directory from an earlier run: serve it as it is.
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.newRepo(owner, name, defaultBranch)
		if _, err := s.refreshRefs(r); err != nil {
			return "", err
		}
		return r.refs[defaultBranch], nil
	}
	head, err := s.git.Seed(full, defaultBranch, files)
	if err != nil {
		return "", fmt.Errorf("seed %s: %w", full, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.newRepo(owner, name, defaultBranch)
	if _, err := s.refreshRefs(r); err != nil {
		return "", err
	}
	return head, nil
}

func (s *Server) newRepo(owner, name, defaultBranch string) *Repo {
	r := &Repo{
		Owner: owner, Name: name, ID: s.id(), DefaultBranch: defaultBranch,
		pulls: map[int]*pull{}, issues: map[int]*issue{}, nextNumber: 1,
		checkRuns: map[string][]*checkRun{}, statuses: map[string][]*status{},
		refs: map[string]string{}, mergeCache: map[string]bool{}, ancestry: map[string]bool{},
	}
	s.repos[r.FullName()] = r
	return r
}

// Fork copies a repository under another owner ("owner/name" → "forker/name"), as GitHub's fork.
func (s *Server) Fork(full, forkOwner string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.repo(full)
	if src == nil {
		return "", fmt.Errorf("repository %s: not found", full)
	}
	forkName := forkOwner + "/" + src.Name
	dst := s.git.Path(forkName)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("fork dir: %w", err)
	}
	if _, err := git("", nil, nil, "clone", "--bare", "--quiet", s.gitDir(src), dst); err != nil {
		return "", err
	}
	if _, err := git(dst, nil, nil, "config", "http.receivepack", "true"); err != nil {
		return "", err
	}
	r := s.newRepo(forkOwner, src.Name, src.DefaultBranch)
	r.ForkOf = src
	if _, err := s.refreshRefs(r); err != nil {
		return "", err
	}
	return forkName, nil
}

// refreshRefs reads the branches of r and returns those that changed: branch → [old, new] ("" for
// created or deleted).
func (s *Server) refreshRefs(r *Repo) (map[string][2]string, error) {
	out, err := git(s.gitDir(r), nil, nil, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads")
	if err != nil {
		return nil, err
	}
	now := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, sha, ok := strings.Cut(sc.Text(), " ")
		if ok {
			now[name] = sha
		}
	}
	changed := map[string][2]string{}
	for b, sha := range now {
		if r.refs[b] != sha {
			changed[b] = [2]string{r.refs[b], sha}
		}
	}
	for b, sha := range r.refs {
		if _, ok := now[b]; !ok {
			changed[b] = [2]string{sha, ""}
		}
	}
	r.refs = now
	if len(changed) > 0 {
		r.graph = nil
	}
	return changed, nil
}

// ensureGraph loads the commit graph of r (all refs, pull refs included).
func (s *Server) ensureGraph(r *Repo) error {
	if r.graph != nil {
		return nil
	}
	out, err := git(s.gitDir(r), nil, nil, "rev-list", "--all", "--parents")
	if err != nil {
		return err
	}
	g := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	r.graph = g
	return nil
}

// isAncestor reports whether a is b or one of its ancestors.
func (s *Server) isAncestor(r *Repo, a, b string) bool {
	if a == b {
		return true
	}
	key := a + " " + b
	if v, ok := r.ancestry[key]; ok {
		return v // ancestry of two commits never changes
	}
	if err := s.ensureGraph(r); err != nil {
		return false
	}
	v := s.walk(r, a, b)
	if _, known := r.graph[b]; known {
		r.ancestry[key] = v
	}
	return v
}

func (s *Server) walk(r *Repo, a, b string) bool {
	seen := map[string]bool{}
	stack := []string{b}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if c == a {
			return true
		}
		if seen[c] {
			continue
		}
		seen[c] = true
		stack = append(stack, r.graph[c]...)
	}
	return false
}

// conflicts reports, for each "base head" pair, whether merging head into base conflicts, with
// one `git merge-tree --stdin` for all pairs not cached.
func (s *Server) conflicts(r *Repo, pairs []string) map[string]bool {
	var todo []string
	for _, p := range pairs {
		if _, ok := r.mergeCache[p]; !ok {
			todo = append(todo, p)
		}
	}
	sort.Strings(todo)
	todo = dedup(todo)
	if len(todo) > 0 {
		in := strings.Join(todo, "\n") + "\n"
		out, _ := git(s.gitDir(r), []byte(in), nil, "merge-tree", "--stdin", "--write-tree", "--name-only", "--no-messages")
		// Each answer: "<1 clean|0 conflicted>\0<tree>\0<conflicted path>\0...\0" ended by an empty field.
		fields := strings.Split(out, "\x00")
		i := 0
		for _, p := range todo {
			if i >= len(fields) {
				r.mergeCache[p] = false
				continue
			}
			clean := fields[i] == "1"
			i += 2
			for i < len(fields) && fields[i] != "" {
				i++
			}
			i++
			r.mergeCache[p] = !clean
		}
	}
	res := map[string]bool{}
	for _, p := range pairs {
		res[p] = r.mergeCache[p]
	}
	return res
}

func dedup(xs []string) []string {
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// commitFiles makes a real commit on branch (created from the default branch when missing) that
// writes files, and returns its SHA. It does not send webhooks.
func (s *Server) commitFiles(r *Repo, branch string, files map[string]string, message string) (string, error) {
	dir := s.gitDir(r)
	parent := r.refs[branch]
	if parent == "" {
		parent = r.refs[r.DefaultBranch]
	}
	idx, err := os.CreateTemp("", "fakegithub-index-")
	if err != nil {
		return "", fmt.Errorf("temp index: %w", err)
	}
	_ = idx.Close()
	defer func() { _ = os.Remove(idx.Name()) }()
	env := []string{"GIT_INDEX_FILE=" + idx.Name()}
	if parent != "" {
		if _, err := git(dir, nil, env, "read-tree", parent); err != nil {
			return "", err
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		blob, err := git(dir, []byte(files[n]), nil, "hash-object", "-w", "--stdin")
		if err != nil {
			return "", err
		}
		if _, err := git(dir, nil, env, "update-index", "--add", "--cacheinfo", "100644,"+strings.TrimSpace(blob)+","+n); err != nil {
			return "", err
		}
	}
	tree, err := git(dir, nil, env, "write-tree")
	if err != nil {
		return "", err
	}
	args := []string{"commit-tree", strings.TrimSpace(tree), "-m", message}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	sha, err := git(dir, nil, nil, args...)
	if err != nil {
		return "", err
	}
	sha = strings.TrimSpace(sha)
	if _, err := git(dir, nil, nil, "update-ref", "refs/heads/"+branch, sha); err != nil {
		return "", err
	}
	return sha, nil
}

// setPullRef points refs/pull/N/head of the base repository at the pull request's head,
// fetching it from a fork, as GitHub does.
func (s *Server) setPullRef(base *Repo, p *pull) error {
	ref := fmt.Sprintf("refs/pull/%d/head", p.Number)
	if p.HeadRepo != base {
		if _, err := git(s.gitDir(base), nil, nil, "fetch", "--quiet", "--no-tags", s.gitDir(p.HeadRepo), "+refs/heads/"+p.HeadRef+":"+ref); err != nil {
			return err
		}
	} else if _, err := git(s.gitDir(base), nil, nil, "update-ref", ref, p.HeadSHA); err != nil {
		return err
	}
	base.graph = nil
	return nil
}

// mergeCommit merges head into base the GitHub way (merge: a commit with two parents; squash:
// one commit on the base; rebase: each commit of the head replayed onto the base) and moves the
// base branch. conflict is true when it cannot.
func (s *Server) mergeCommit(r *Repo, baseRef, headSHA, method, title string) (sha string, conflict bool, err error) {
	dir := s.gitDir(r)
	baseSHA := r.refs[baseRef]
	if method == "rebase" {
		return s.rebaseCommits(dir, baseRef, baseSHA, headSHA)
	}
	out, err := git(dir, nil, nil, "merge-tree", "--write-tree", "--name-only", "--no-messages", baseSHA, headSHA)
	if err != nil {
		if strings.Contains(err.Error(), "exit status 1") {
			return "", true, nil
		}
		return "", false, err
	}
	tree := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	args := []string{"commit-tree", tree, "-m", title, "-p", baseSHA}
	if method == "merge" {
		args = append(args, "-p", headSHA)
	}
	sha, err = git(dir, nil, nil, args...)
	if err != nil {
		return "", false, err
	}
	sha = strings.TrimSpace(sha)
	if _, err := git(dir, nil, nil, "update-ref", "refs/heads/"+baseRef, sha, baseSHA); err != nil {
		return "", false, err
	}
	return sha, false, nil
}

// rebaseCommits is GitHub's "rebase and merge": every commit of the head that the base lacks
// (merge commits left out) is added onto the base individually, keeping its author and message
// but with GitHub as the committer, so every commit gets a new SHA even when the base has not
// moved. The base ends at the last of them, which is what merge_commit_sha reports.
func (s *Server) rebaseCommits(dir, baseRef, baseSHA, headSHA string) (sha string, conflict bool, err error) {
	out, err := git(dir, nil, nil, "rev-list", "--reverse", "--no-merges", baseSHA+".."+headSHA)
	if err != nil {
		return "", false, err
	}
	commits := strings.Fields(out)
	if len(commits) == 0 {
		return "", true, nil // nothing to rebase: GitHub refuses such a merge
	}
	committer := []string{"GIT_COMMITTER_NAME=GitHub", "GIT_COMMITTER_EMAIL=noreply@github.com"}
	parent := baseSHA
	for _, c := range commits {
		// Replaying the commits one by one onto the base ends at the tree of a three-way merge of
		// the base and that commit (without conflicts, which abort the whole rebase), so each
		// replayed commit's tree is that merge.
		treeOut, err := git(dir, nil, nil, "merge-tree", "--write-tree", "--name-only", "--no-messages", baseSHA, c)
		if err != nil {
			if strings.Contains(err.Error(), "exit status 1") {
				return "", true, nil
			}
			return "", false, err
		}
		tree := strings.TrimSpace(strings.SplitN(treeOut, "\n", 2)[0])
		meta, err := git(dir, nil, nil, "show", "-s", "--format=%an%x00%ae%x00%ad%x00%B", "--date=raw", c)
		if err != nil {
			return "", false, err
		}
		f := strings.SplitN(meta, "\x00", 4)
		if len(f) != 4 {
			return "", false, fmt.Errorf("commit %s: unexpected metadata %q", c, meta)
		}
		env := append([]string{"GIT_AUTHOR_NAME=" + f[0], "GIT_AUTHOR_EMAIL=" + f[1], "GIT_AUTHOR_DATE=" + f[2]}, committer...)
		msg := strings.TrimRight(f[3], "\n")
		next, err := git(dir, []byte(msg+"\n"), env, "commit-tree", tree, "-p", parent)
		if err != nil {
			return "", false, err
		}
		parent = strings.TrimSpace(next)
	}
	if _, err := git(dir, nil, nil, "update-ref", "refs/heads/"+baseRef, parent, baseSHA); err != nil {
		return "", false, err
	}
	return parent, false, nil
}

// onPush is test/gitserver's hook: it syncs pull request heads with the pushed branches and
// sends push and pull_request synchronize webhooks.
func (s *Server) onPush(full string) {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return
	}
	hooks := s.branchesMovedLocked(r)
	s.mu.Unlock()
	s.deliver(hooks)
}

// branchesMovedLocked re-reads r's branches and updates the pull requests whose head moved.
func (s *Server) branchesMovedLocked(r *Repo) []hook {
	changed, err := s.refreshRefs(r)
	if err != nil {
		s.logf("fakegithub: refresh refs of %s: %v", r.FullName(), err)
		return nil
	}
	var hooks []hook
	names := make([]string, 0, len(changed))
	for b := range changed {
		names = append(names, b)
	}
	sort.Strings(names)
	for _, b := range names {
		ch := changed[b]
		hooks = append(hooks, s.pushHook(r, b, ch[0], ch[1]))
		for _, base := range s.repos {
			for _, p := range base.sortedPulls() {
				if p.HeadRepo != r || p.HeadRef != b || p.State != "open" || ch[1] == "" {
					continue
				}
				p.HeadSHA = ch[1]
				p.UpdatedAt = s.now()
				if err := s.setPullRef(base, p); err != nil {
					s.logf("fakegithub: pull ref: %v", err)
				}
				hooks = append(hooks, s.pullHook(base, p, "synchronize"))
			}
		}
	}
	return hooks
}

func (r *Repo) sortedPulls() []*pull {
	out := make([]*pull, 0, len(r.pulls))
	for _, p := range r.pulls {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// diffStat is a pull request's changed lines and files, as GitHub counts them: the diff of its
// head against the merge base with its base branch.
type diffStat struct{ additions, deletions, files int }

// diffStat computes p's diffStat with git (kept until its base or head moves).
func (s *Server) diffStat(base *Repo, p *pull) diffStat {
	baseSHA := base.refs[p.BaseRef]
	pair := baseSHA + " " + p.HeadSHA
	if p.diffPair == pair {
		return p.diff
	}
	var st diffStat
	if baseSHA != "" && p.HeadSHA != "" {
		out, err := git(s.gitDir(base), nil, nil, "diff", "--numstat", baseSHA+"..."+p.HeadSHA)
		if err == nil {
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				if len(f) < 3 {
					continue
				}
				st.files++
				var a, d int
				_, _ = fmt.Sscan(f[0], &a) // "-" for a binary file counts 0
				_, _ = fmt.Sscan(f[1], &d)
				st.additions += a
				st.deletions += d
			}
		}
	}
	p.diffPair, p.diff = pair, st
	return st
}
