package fakegithub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrNotFound is returned by controls naming a repository, pull request or object that does not
// exist.
var ErrNotFound = errors.New("fakegithub: not found")

func (s *Server) pullLocked(full string, n int) (*Repo, *pull, error) {
	r := s.repo(full)
	if r == nil {
		return nil, nil, fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	p := r.pulls[n]
	if p == nil {
		return nil, nil, fmt.Errorf("pull request %s#%d: %w", full, n, ErrNotFound)
	}
	return r, p, nil
}

// Push makes a real commit writing files on branch (created from the default branch when
// missing) and processes it as a push: pull request heads move, webhooks go out. It returns the
// commit's SHA.
func (s *Server) Push(full, branch string, files map[string]string, message string) (string, error) {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return "", fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	if message == "" {
		message = "Update " + branch
	}
	sha, err := s.commitFiles(r, branch, files, message)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	hooks := s.branchesMovedLocked(r)
	for _, base := range s.repos {
		for _, p := range base.pulls {
			if p.HeadRepo == r && p.HeadRef == branch {
				s.prewarmConflicts(base)
				break
			}
		}
	}
	if branch == r.DefaultBranch {
		s.prewarmConflicts(r)
	}
	s.mu.Unlock()
	s.deliver(hooks)
	return sha, nil
}

// OpenPullRequest opens a pull request as author: head is "branch" or "owner:branch" for a fork.
func (s *Server) OpenPullRequest(full, author, head, base, title, body string, draft bool) (int, error) {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	p, hooks, res := s.openPull(r, author, head, base, title, body, draft)
	s.mu.Unlock()
	if p == nil {
		b, _ := json.Marshal(res.body)
		return 0, fmt.Errorf("open pull request: %d %s", res.status, b)
	}
	s.deliver(hooks)
	return p.Number, nil
}

// BulkOpenPullRequests creates n branches named <prefix>-NNNN, each one real commit on the
// default branch (written by one `git fast-import`), and opens a pull request for each. It sends
// no webhooks; it is how benchmarks and scale tests get many pull requests quickly.
func (s *Server) BulkOpenPullRequests(full, prefix string, n int) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil {
		return nil, fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	base := r.refs[r.DefaultBranch]
	var stream strings.Builder
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		msg := "Work on " + name + "\n"
		content := name + "\n"
		fmt.Fprintf(&stream, "commit refs/heads/%s\ncommitter Shepherd Test <test@shepherd.dev> %d +0000\ndata %d\n%s", name, s.now().Unix(), len(msg), msg)
		fmt.Fprintf(&stream, "from %s\nM 100644 inline %s.txt\ndata %d\n%s\n", base, name, len(content), content)
	}
	if _, err := git(s.gitDir(r), []byte(stream.String()), nil, "fast-import", "--quiet"); err != nil {
		return nil, err
	}
	if _, err := s.refreshRefs(r); err != nil {
		return nil, err
	}
	var refs strings.Builder
	nums := make([]int, 0, n)
	now := s.now()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		p := &pull{Number: r.nextNumber, NodeID: nodeID("PR", s.id()), Title: "Work on " + name, State: "open", Author: r.Owner,
			HeadRepo: r, HeadRef: name, HeadSHA: r.refs[name], BaseRef: r.DefaultBranch, CreatedAt: now, UpdatedAt: now}
		r.nextNumber++
		r.pulls[p.Number] = p
		nums = append(nums, p.Number)
		fmt.Fprintf(&refs, "update refs/pull/%d/head %s\n", p.Number, p.HeadSHA)
	}
	if _, err := git(s.gitDir(r), []byte(refs.String()), nil, "update-ref", "--stdin"); err != nil {
		return nil, err
	}
	r.graph = nil
	return nums, nil
}

// SetProtection sets the branch protection of a repository.
func (s *Server) SetProtection(full string, p Protection) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil {
		return fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	r.protection = p
	return nil
}

// SetDefaultBranch renames the repository's default branch to an existing branch, as the
// repository settings do (the bare repository's HEAD follows, so clones check it out).
func (s *Server) SetDefaultBranch(full, branch string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil {
		return fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	if _, err := s.refreshRefs(r); err != nil {
		return err
	}
	if r.refs[branch] == "" {
		return fmt.Errorf("branch %s of %s: %w", branch, full, ErrNotFound)
	}
	if _, err := git(s.gitDir(r), nil, nil, "symbolic-ref", "HEAD", "refs/heads/"+branch); err != nil {
		return err
	}
	r.DefaultBranch = branch
	return nil
}

// SetAssociation sets the author association GitHub reports for login's comments and reviews on
// the repository (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER,
// MANNEQUIN or NONE).
func (s *Server) SetAssociation(full, login, association string) error {
	switch association {
	case "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "MANNEQUIN", "NONE":
	default:
		return fmt.Errorf("association %q is not one GitHub reports", association)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil {
		return fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	if r.associations == nil {
		r.associations = map[string]string{}
	}
	r.associations[strings.ToLower(login)] = association
	return nil
}

// CheckRun describes a check run to create or update.
type CheckRun struct {
	Name string
	// Status: queued, in_progress or completed (default completed).
	Status string
	// Conclusion when completed: success, failure, neutral, cancelled, skipped, timed_out,
	// action_required.
	Conclusion string
	DetailsURL string
	// App is the reporting app's slug (default "github-actions").
	App string
	// Log is the job log served for a GitHub Actions run.
	Log string
}

// AddCheckRun reports a check run on sha (a commit or a branch name) and returns its id. It sends
// check_run (and, when its suite completes, check_suite) webhooks.
func (s *Server) AddCheckRun(full, sha string, c CheckRun) (int64, error) {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	sha = s.resolveRef(r, sha)
	if c.App == "" {
		c.App = "github-actions"
	}
	if c.Status == "" {
		c.Status = "completed"
	}
	now := s.now()
	cr := &checkRun{ID: s.id(), Name: c.Name, HeadSHA: sha, Status: c.Status, Conclusion: c.Conclusion, App: c.App, StartedAt: now}
	cr.NodeID = nodeID("CR", cr.ID)
	cr.SuiteID = r.ID*1000 + int64(len(sha))
	if h, err := strconv.ParseInt(sha[:8], 16, 64); err == nil {
		cr.SuiteID = h
	}
	cr.DetailsURL = c.DetailsURL
	if cr.DetailsURL == "" {
		cr.DetailsURL = fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", s.baseURL, full, cr.SuiteID, cr.ID)
	}
	if c.Status == "completed" {
		cr.CompletedAt = now
	} else {
		cr.Conclusion = ""
	}
	if c.Log != "" {
		s.logs[cr.ID] = c.Log
	}
	r.checkRuns[sha] = append(r.checkRuns[sha], cr)
	hooks := []hook{s.checkRunHook(r, cr, "created")}
	if cr.Status == "completed" {
		hooks = append(hooks, s.suiteCompletedHook(r, cr)...)
	}
	s.mu.Unlock()
	s.deliver(hooks)
	return cr.ID, nil
}

func (s *Server) suiteCompletedHook(r *Repo, cr *checkRun) []hook {
	for _, o := range r.checkRuns[cr.HeadSHA] {
		if o.SuiteID == cr.SuiteID && o.Status != "completed" {
			return nil
		}
	}
	return []hook{s.checkSuiteHook(r, cr)}
}

// UpdateCheckRun changes a check run's status and conclusion (completing it sends check_run
// completed).
func (s *Server) UpdateCheckRun(full string, id int64, status, conclusion string) error {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	var cr *checkRun
	for _, runs := range r.checkRuns {
		for _, c := range runs {
			if c.ID == id {
				cr = c
			}
		}
	}
	if cr == nil {
		s.mu.Unlock()
		return fmt.Errorf("check run %d: %w", id, ErrNotFound)
	}
	cr.Status, cr.Conclusion = status, conclusion
	action := "created"
	var hooks []hook
	if status == "completed" {
		cr.CompletedAt = s.now()
		action = "completed"
		hooks = append(hooks, s.checkRunHook(r, cr, action))
		hooks = append(hooks, s.suiteCompletedHook(r, cr)...)
	} else {
		cr.Conclusion = ""
		hooks = append(hooks, s.checkRunHook(r, cr, action))
	}
	s.mu.Unlock()
	s.deliver(hooks)
	return nil
}

// SetStatus reports a commit status on sha (a commit or a branch name).
func (s *Server) SetStatus(full, sha, context, state, targetURL string) error {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	sha = s.resolveRef(r, sha)
	st := &status{ID: s.id(), Context: context, State: state, TargetURL: targetURL, CreatedAt: s.now()}
	st.NodeID = nodeID("SC", st.ID)
	r.statuses[sha] = append(r.statuses[sha], st)
	h := s.statusHook(r, sha, st)
	s.mu.Unlock()
	s.deliver([]hook{h})
	return nil
}

// AddReview submits a review by user: APPROVED, CHANGES_REQUESTED or COMMENTED. It returns the
// review's id.
func (s *Server) AddReview(full string, n int, user, state, body string) (int64, error) {
	s.mu.Lock()
	r, p, err := s.pullLocked(full, n)
	if err != nil {
		s.mu.Unlock()
		return 0, err
	}
	rv := &review{ID: s.id(), User: user, State: state, Body: body, SubmittedAt: s.now(), CommitID: p.HeadSHA}
	rv.NodeID = nodeID("PRR", rv.ID)
	p.Reviews = append(p.Reviews, rv)
	p.UpdatedAt = s.now()
	h := s.reviewHook(r, p, rv, "submitted")
	s.mu.Unlock()
	s.deliver([]hook{h})
	return rv.ID, nil
}

// DismissReview dismisses a review, as a maintainer does.
func (s *Server) DismissReview(full string, n int, id int64) error {
	s.mu.Lock()
	r, p, err := s.pullLocked(full, n)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	for _, rv := range p.Reviews {
		if rv.ID == id {
			rv.State = "DISMISSED"
			p.UpdatedAt = s.now()
			h := s.reviewHook(r, p, rv, "dismissed")
			s.mu.Unlock()
			s.deliver([]hook{h})
			return nil
		}
	}
	s.mu.Unlock()
	return fmt.Errorf("review %d: %w", id, ErrNotFound)
}

// AddReviewThread starts a review thread on path:line with a first comment by user, and returns
// the thread's node id.
func (s *Server) AddReviewThread(full string, n int, user, path string, line int, body string) (string, error) {
	s.mu.Lock()
	r, p, err := s.pullLocked(full, n)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	c := &comment{ID: s.id(), User: user, Body: body, CreatedAt: s.now(), Path: path, Line: line}
	c.NodeID = nodeID("PRRC", c.ID)
	t := &thread{NodeID: nodeID("PRRT", s.id()), Path: path, Line: line, Comments: []*comment{c}}
	p.Threads = append(p.Threads, t)
	p.UpdatedAt = s.now()
	h := s.reviewCommentHook(r, p, t, c)
	s.mu.Unlock()
	s.deliver([]hook{h})
	return t.NodeID, nil
}

// ResolveThread resolves (or, with resolved false, unresolves) a review thread.
func (s *Server) ResolveThread(full string, n int, threadID string, resolved bool) error {
	s.mu.Lock()
	r, p, err := s.pullLocked(full, n)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	for _, t := range p.Threads {
		if t.NodeID == threadID {
			t.Resolved = resolved
			action := "resolved"
			if !resolved {
				action = "unresolved"
			}
			h := s.threadHook(r, p, t, action, r.Owner)
			s.mu.Unlock()
			s.deliver([]hook{h})
			return nil
		}
	}
	s.mu.Unlock()
	return fmt.Errorf("thread %s: %w", threadID, ErrNotFound)
}

// SetConflicting overrides the real merge check of a pull request (nil restores it).
func (s *Server) SetConflicting(full string, n int, conflicting *bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, p, err := s.pullLocked(full, n)
	if err != nil {
		return err
	}
	p.Conflicting = conflicting
	p.UpdatedAt = s.now()
	return nil
}

// MakeBehind commits to the pull request's base branch (a file the head does not touch), so that
// the head is really behind; with Protection.Strict the state reads BEHIND.
func (s *Server) MakeBehind(full string, n int) (string, error) {
	s.mu.Lock()
	_, p, err := s.pullLocked(full, n)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	base := p.BaseRef
	s.mu.Unlock()
	return s.Push(full, base, map[string]string{fmt.Sprintf("base-moved-%d.txt", time.Now().UnixNano()): "moved\n"}, "Move "+base)
}

// Merge merges a pull request with real git (method merge, squash or rebase), ignoring
// protection, as an administrator would.
func (s *Server) Merge(full string, n int, method string) (string, error) {
	s.mu.Lock()
	r, p, err := s.pullLocked(full, n)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	if p.State != "open" {
		s.mu.Unlock()
		return "", fmt.Errorf("pull request %s#%d is not open", full, n)
	}
	hooks, err := s.doMerge(r, p, method, "")
	sha := p.MergeCommitSHA
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	s.deliver(hooks)
	return sha, nil
}

// Issue describes a tracker issue.
type Issue struct {
	Title, Body string
	Labels      []string
	User        string
}

// CreateIssue opens an issue and returns its number (issues and pull requests share numbers).
func (s *Server) CreateIssue(full string, in Issue) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil {
		return 0, fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	if in.User == "" {
		in.User = r.Owner
	}
	now := s.now()
	is := &issue{Number: r.nextNumber, NodeID: nodeID("I", s.id()), Title: in.Title, Body: in.Body, State: "open",
		Labels: append([]string(nil), in.Labels...), User: in.User, CreatedAt: now, UpdatedAt: now}
	r.nextNumber++
	r.issues[is.Number] = is
	return is.Number, nil
}

// CommentIssue adds a comment to an issue or pull request conversation.
func (s *Server) CommentIssue(full string, n int, user, body string) error {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil {
		s.mu.Unlock()
		return fmt.Errorf("repository %s: %w", full, ErrNotFound)
	}
	_, hooks, ok := s.addIssueComment(r, n, user, body)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("issue %s#%d: %w", full, n, ErrNotFound)
	}
	s.deliver(hooks)
	return nil
}

// CloseIssue closes an issue and delivers the issues webhook (action closed), as GitHub does.
func (s *Server) CloseIssue(full string, n int) error {
	s.mu.Lock()
	r := s.repo(full)
	if r == nil || r.issues[n] == nil {
		s.mu.Unlock()
		return fmt.Errorf("issue %s#%d: %w", full, n, ErrNotFound)
	}
	// Closing updates the issue, as on GitHub: a listing with since= finds it.
	r.issues[n].State, r.issues[n].ClosedAt, r.issues[n].UpdatedAt = "closed", s.now(), s.now()
	h := hook{event: "issues", body: map[string]any{
		"action": "closed", "issue": s.issueJSON(r, r.issues[n]), "repository": s.repoJSON(r, nil), "sender": s.sender(r.Owner),
	}}
	s.mu.Unlock()
	s.deliver([]hook{h})
	return nil
}

// LabelIssue adds labels to an issue, as a human does in the UI (present ones are kept).
func (s *Server) LabelIssue(full string, n int, labels ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil || r.issues[n] == nil {
		return fmt.Errorf("issue %s#%d: %w", full, n, ErrNotFound)
	}
	is := r.issues[n]
	for _, l := range labels {
		if !contains(is.Labels, l) {
			is.Labels = append(is.Labels, l)
		}
	}
	is.UpdatedAt = s.now()
	return nil
}

// IssueLabels returns an issue's labels.
func (s *Server) IssueLabels(full string, n int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil || r.issues[n] == nil {
		return nil, fmt.Errorf("issue %s#%d: %w", full, n, ErrNotFound)
	}
	return append([]string(nil), r.issues[n].Labels...), nil
}

// PullRequestInfo is a snapshot of a pull request, for assertions.
type PullRequestInfo struct {
	Number         int
	State          string // open, closed
	Merged         bool
	MergeCommitSHA string
	Title, Body    string
	Draft          bool
	HeadOwner      string
	HeadRef        string
	HeadSHA        string
	BaseRef        string
	Mergeable      string // MERGEABLE, CONFLICTING, UNKNOWN
	MergeState     string // CLEAN, BEHIND, …
	Comments       []string
	// Author is the login that opened the pull request.
	Author string
}

// PullRequest returns a snapshot of a pull request.
func (s *Server) PullRequest(full string, n int) (PullRequestInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, p, err := s.pullLocked(full, n)
	if err != nil {
		return PullRequestInfo{}, err
	}
	m, st := s.mergeInfo(r, p, true)
	info := PullRequestInfo{Number: p.Number, State: p.State, Merged: p.Merged, MergeCommitSHA: p.MergeCommitSHA,
		Title: p.Title, Body: p.Body, Draft: p.Draft, HeadOwner: p.HeadRepo.Owner, HeadRef: p.HeadRef, HeadSHA: p.HeadSHA,
		BaseRef: p.BaseRef, Mergeable: m, MergeState: st, Author: p.Author}
	for _, c := range p.Comments {
		info.Comments = append(info.Comments, c.Body)
	}
	return info, nil
}

// Branch returns the SHA a branch points at ("" when it does not exist).
func (s *Server) Branch(full, branch string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(full)
	if r == nil {
		return ""
	}
	if _, err := s.refreshRefs(r); err != nil {
		return ""
	}
	return r.refs[branch]
}

// serveAdmin is the HTTP form of the controls, for the demo and e2e (no authentication: bind the
// fake to loopback or a test network).
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/_fake"), "/"), "/")
	var body map[string]json.RawMessage
	if r.Method != http.MethodGet && r.Body != nil {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && err.Error() != "EOF" {
			http.Error(w, "body must be a JSON object", http.StatusBadRequest)
			return
		}
	}
	str := func(k string) string {
		var v string
		_ = json.Unmarshal(body[k], &v)
		return v
	}
	num := func(k string) int {
		var v int
		_ = json.Unmarshal(body[k], &v)
		return v
	}
	reply := func(v any, err error) {
		switch {
		case errors.Is(err, ErrNotFound):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			writeJSON(w, http.StatusOK, v)
		}
	}
	// Routes: /_fake/stats, /_fake/tokens, /_fake/ratelimit, /_fake/repos[/{o}/{r}/...].
	switch {
	case len(segs) == 1 && segs[0] == "stats" && r.Method == http.MethodGet:
		reply(s.Stats(), nil)
	case len(segs) == 2 && segs[0] == "stats" && segs[1] == "reset" && r.Method == http.MethodPost:
		s.ResetStats()
		reply(map[string]any{}, nil)
	case len(segs) == 1 && segs[0] == "tokens" && r.Method == http.MethodPost:
		s.AddToken(str("token"), str("login"))
		reply(map[string]any{}, nil)
	case len(segs) == 1 && segs[0] == "secondary-limit" && r.Method == http.MethodPost:
		s.ForceSecondaryLimit(max(num("count"), 1), max(num("status"), 403), time.Duration(num("retry_after"))*time.Second)
		reply(map[string]any{}, nil)
	case len(segs) == 1 && segs[0] == "deliveries" && r.Method == http.MethodGet:
		var out []map[string]any
		for _, d := range s.Deliveries() {
			out = append(out, map[string]any{"event": d.Event, "id": d.ID, "status": d.Status})
		}
		reply(out, nil)
	case len(segs) == 1 && segs[0] == "repos" && r.Method == http.MethodPost:
		var files map[string]string
		_ = json.Unmarshal(body["files"], &files)
		head, err := s.CreateRepo(str("full_name"), str("default_branch"), files)
		reply(map[string]any{"head": head}, err)
	case len(segs) >= 3 && segs[0] == "repos":
		s.serveAdminRepo(segs[1]+"/"+segs[2], segs[3:], r.Method, str, num, body, reply)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serveAdminRepo(full string, rest []string, method string, str func(string) string, num func(string) int,
	body map[string]json.RawMessage, reply func(any, error)) {
	n := 0
	if len(rest) >= 2 {
		n, _ = strconv.Atoi(rest[1])
	}
	is := func(parts ...string) bool {
		if len(parts) != len(rest) {
			return false
		}
		for i, p := range parts {
			if p != "*" && p != rest[i] {
				return false
			}
		}
		return true
	}
	switch {
	case is("fork") && method == http.MethodPost:
		name, err := s.Fork(full, str("owner"))
		reply(map[string]any{"full_name": name}, err)
	case is("push") && method == http.MethodPost:
		var files map[string]string
		_ = json.Unmarshal(body["files"], &files)
		sha, err := s.Push(full, str("branch"), files, str("message"))
		reply(map[string]any{"sha": sha}, err)
	case is("protection") && method == http.MethodPut:
		var p struct {
			RequiredChecks    []string `json:"required_checks"`
			RequiredApprovals int      `json:"required_approvals"`
			Strict            bool     `json:"strict"`
		}
		raw, _ := json.Marshal(body)
		_ = json.Unmarshal(raw, &p)
		reply(map[string]any{}, s.SetProtection(full, Protection{RequiredChecks: p.RequiredChecks, RequiredApprovals: p.RequiredApprovals, Strict: p.Strict}))
	case is("associations") && method == http.MethodPut:
		reply(map[string]any{}, s.SetAssociation(full, str("login"), str("association")))
	case is("pulls") && method == http.MethodPost:
		var draft bool
		_ = json.Unmarshal(body["draft"], &draft)
		num, err := s.OpenPullRequest(full, str("user"), str("head"), str("base"), str("title"), str("body"), draft)
		reply(map[string]any{"number": num}, err)
	case is("pulls", "*") && method == http.MethodGet:
		info, err := s.PullRequest(full, n)
		reply(info, err)
	case is("check-runs") && method == http.MethodPost:
		id, err := s.AddCheckRun(full, str("head_sha"), CheckRun{Name: str("name"), Status: str("status"), Conclusion: str("conclusion"),
			DetailsURL: str("details_url"), App: str("app"), Log: str("log")})
		reply(map[string]any{"id": id}, err)
	case is("check-runs", "*") && method == http.MethodPatch:
		id, _ := strconv.ParseInt(rest[1], 10, 64)
		reply(map[string]any{}, s.UpdateCheckRun(full, id, str("status"), str("conclusion")))
	case is("statuses", "*") && method == http.MethodPost:
		reply(map[string]any{}, s.SetStatus(full, rest[1], str("context"), str("state"), str("target_url")))
	case is("pulls", "*", "reviews") && method == http.MethodPost:
		id, err := s.AddReview(full, n, str("user"), str("state"), str("body"))
		reply(map[string]any{"id": id}, err)
	case is("pulls", "*", "reviews", "*", "dismiss") && method == http.MethodPost:
		id, _ := strconv.ParseInt(rest[3], 10, 64)
		reply(map[string]any{}, s.DismissReview(full, n, id))
	case is("pulls", "*", "threads") && method == http.MethodPost:
		id, err := s.AddReviewThread(full, n, str("user"), str("path"), num("line"), str("body"))
		reply(map[string]any{"id": id}, err)
	case is("pulls", "*", "threads", "*", "resolve") && method == http.MethodPost:
		reply(map[string]any{}, s.ResolveThread(full, n, rest[3], true))
	case is("pulls", "*", "conflict") && method == http.MethodPost:
		var c *bool
		if raw, ok := body["conflicting"]; ok && string(raw) != "null" {
			var v bool
			_ = json.Unmarshal(raw, &v)
			c = &v
		}
		reply(map[string]any{}, s.SetConflicting(full, n, c))
	case is("pulls", "*", "behind") && method == http.MethodPost:
		sha, err := s.MakeBehind(full, n)
		reply(map[string]any{"sha": sha}, err)
	case is("pulls", "*", "merge") && method == http.MethodPost:
		m := str("method")
		if m == "" {
			m = "merge"
		}
		sha, err := s.Merge(full, n, m)
		reply(map[string]any{"sha": sha}, err)
	case is("issues") && method == http.MethodPost:
		var labels []string
		_ = json.Unmarshal(body["labels"], &labels)
		num, err := s.CreateIssue(full, Issue{Title: str("title"), Body: str("body"), Labels: labels, User: str("user")})
		reply(map[string]any{"number": num}, err)
	default:
		reply(nil, fmt.Errorf("no admin route %s %v: %w", method, rest, ErrNotFound))
	}
}
