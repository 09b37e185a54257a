package fakegithub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

func itoa(n int) string { return strconv.Itoa(n) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

// ServeHTTP routes git, the admin API, App token creation, GraphQL and REST.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.logf("fakegithub: %s %s", r.Method, r.URL.Path)
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/_fake/logs/"):
		s.serveLog(w, r)
		return
	case strings.HasPrefix(p, "/_fake/"):
		s.serveAdmin(w, r)
		return
	case strings.Contains(p, ".git/") || strings.HasSuffix(p, ".git"):
		s.serveGit(w, r)
		return
	}
	p = strings.TrimPrefix(p, "/api/v3")
	if p == "/graphql" || p == "/api/graphql" {
		s.serveGraphQL(w, r)
		return
	}
	if strings.HasPrefix(p, "/app/installations/") && strings.HasSuffix(p, "/access_tokens") && r.Method == http.MethodPost {
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(p, "/app/installations/"), "/access_tokens"), 10, 64)
		s.mu.Lock()
		if err != nil {
			s.mu.Unlock()
			writeJSON(w, http.StatusNotFound, apiError("Not Found", ""))
			return
		}
		s.createInstallationToken(w, r, id)
		s.mu.Unlock()
		return
	}
	s.serveREST(w, r, p)
}

// serveGit authenticates git over HTTP with a token as the password (any user name, as GitHub
// accepts x-access-token) and hands the request to the real git http-backend.
func (s *Server) serveGit(w http.ResponseWriter, r *http.Request) {
	full := strings.TrimPrefix(r.URL.Path, "/")
	if i := strings.Index(full, ".git"); i >= 0 {
		full = full[:i]
	}
	s.mu.Lock()
	id := s.authenticate(r)
	repo := s.repo(full)
	ok := id != nil && repo != nil && id.canSee(full)
	if strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack" {
		ok = ok && (id.permissions == nil || id.permissions["contents"] == "write")
	}
	s.mu.Unlock()
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "Invalid username or token. Password authentication is not supported for Git operations.", http.StatusUnauthorized)
		return
	}
	s.git.ServeHTTP(w, r)
}

func (s *Server) serveLog(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/_fake/logs/"), 10, 64)
	s.mu.Lock()
	text, ok := s.logs[id]
	s.mu.Unlock()
	if err != nil || !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(text))
}

// restResult is what a REST route answers.
type restResult struct {
	status int
	body   any
	header http.Header
	hooks  []hook
}

func notFound() restResult {
	return restResult{status: http.StatusNotFound, body: apiError("Not Found", "https://docs.github.com/rest")}
}

func validationFailed(msg string) restResult {
	return restResult{status: http.StatusUnprocessableEntity, body: map[string]any{
		"message":           "Validation Failed",
		"errors":            []any{map[string]any{"resource": "PullRequest", "code": "custom", "message": msg}},
		"documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
		"status":            "422",
	}}
}

func (s *Server) serveREST(w http.ResponseWriter, r *http.Request, path string) {
	s.mu.Lock()
	id := s.authenticate(r)
	if id == nil {
		s.stats.Unauthorized++
		s.mu.Unlock()
		writeJSON(w, http.StatusUnauthorized, apiError("Bad credentials", "https://docs.github.com/rest"))
		return
	}
	if status := s.outage(id); status != 0 {
		s.mu.Unlock()
		writeJSON(w, status, outageBody(status))
		return
	}
	route := routeName(r.Method, path)
	s.stats.ByRoute[route]++
	if status := s.routeFailure(route); status != 0 {
		s.mu.Unlock()
		body := outageBody(status)
		switch {
		case status == http.StatusMethodNotAllowed:
			// What GitHub answers a merge its rules refuse.
			body = apiError("Pull Request is not mergeable", "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request")
		case status < 500:
			body = apiError(http.StatusText(status), "https://docs.github.com/rest")
		}
		writeJSON(w, status, body)
		return
	}
	points := 1
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		points = 5
	}
	if ra, status := s.secondaryLimited(id, false, points); status != 0 {
		s.stats.SecondaryRefused++
		s.setRateHeaders(w.Header(), id, "core")
		if ra > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(ra.Seconds())))
		}
		s.mu.Unlock()
		writeJSON(w, status, secondaryBody())
		return
	}
	if s.primaryExhausted(id, "core", 1) {
		s.stats.PrimaryRefused++
		s.setRateHeaders(w.Header(), id, "core")
		s.mu.Unlock()
		writeJSON(w, http.StatusForbidden, primaryBody(id))
		return
	}
	res := s.rest(id, r, path)
	var body []byte
	if res.body != nil {
		body, _ = json.Marshal(res.body)
	}
	for k, v := range res.header {
		w.Header()[k] = v
	}
	if r.Method == http.MethodGet && res.status == http.StatusOK {
		etag := etagOf(body)
		w.Header().Set("ETag", etag)
		w.Header().Set("Cache-Control", "private, max-age=60, s-maxage=60")
		w.Header().Set("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP")
		if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
			// An authorised 304 is free.
			s.stats.NotModified++
			s.setRateHeaders(w.Header(), id, "core")
			s.mu.Unlock()
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	s.charge(id, "core", 1)
	s.stats.RESTCounted++
	s.setRateHeaders(w.Header(), id, "core")
	s.mu.Unlock()
	if body != nil {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	}
	w.WriteHeader(res.status)
	_, _ = w.Write(body)
	s.deliver(res.hooks)
}

// routeName replaces the variable parts of a path, for statistics.
func routeName(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) >= 3 && segs[0] == "repos" {
		segs[1], segs[2] = "{o}", "{r}"
		for i := 3; i < len(segs); i++ {
			if _, err := strconv.Atoi(segs[i]); err == nil || (i > 0 && segs[i-1] == "commits") || (i > 0 && segs[i-1] == "labels") {
				segs[i] = "{x}"
			}
		}
	}
	return method + " /" + strings.Join(segs, "/")
}

// rest executes one REST call under the lock.
func (s *Server) rest(id *identity, r *http.Request, path string) restResult {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) < 3 || segs[0] != "repos" {
		return notFound()
	}
	full := segs[1] + "/" + segs[2]
	repo := s.repo(full)
	if repo == nil || !id.canSee(full) {
		return notFound()
	}
	rest := segs[3:]
	m := r.Method
	// num is the number in /repos/{o}/{r}/{pulls|issues}/{number}/...
	num := func() int {
		if len(rest) < 2 {
			return 0
		}
		n, _ := strconv.Atoi(rest[1])
		return n
	}
	switch {
	case len(rest) == 0 && m == http.MethodGet:
		return restResult{status: 200, body: s.repoJSON(repo, id)}
	case len(rest) == 1 && rest[0] == "pulls" && m == http.MethodGet:
		return s.listPulls(repo, r.URL.Query())
	case len(rest) == 1 && rest[0] == "pulls" && m == http.MethodPost:
		return s.createPull(repo, id, r)
	case len(rest) == 2 && rest[0] == "pulls" && m == http.MethodGet:
		p := repo.pulls[num()]
		if p == nil {
			return notFound()
		}
		return restResult{status: 200, body: s.pullJSON(repo, p, true)}
	case len(rest) == 2 && rest[0] == "pulls" && m == http.MethodPatch:
		return s.editPull(repo, num(), r)
	case len(rest) == 3 && rest[0] == "pulls" && rest[2] == "merge" && m == http.MethodPut:
		return s.mergePull(repo, num(), r)
	case len(rest) == 3 && rest[0] == "pulls" && rest[2] == "reviews" && m == http.MethodGet:
		p := repo.pulls[num()]
		if p == nil {
			return notFound()
		}
		out := []any{}
		for _, rv := range p.Reviews {
			out = append(out, s.reviewJSON(repo, p, rv))
		}
		return restResult{status: 200, body: out}
	case len(rest) == 3 && rest[0] == "commits" && rest[2] == "check-runs" && m == http.MethodGet:
		sha := s.resolveRef(repo, rest[1])
		runs := []any{}
		for _, c := range repo.contexts(sha) {
			if c.run != nil {
				runs = append(runs, s.checkRunJSON(repo, c.run))
			}
		}
		return restResult{status: 200, body: map[string]any{"total_count": len(runs), "check_runs": runs}}
	case len(rest) == 3 && rest[0] == "commits" && rest[2] == "status" && m == http.MethodGet:
		return restResult{status: 200, body: s.combinedStatusJSON(repo, s.resolveRef(repo, rest[1]))}
	case len(rest) == 1 && rest[0] == "issues" && m == http.MethodGet:
		return s.listIssues(repo, r.URL.Query())
	case len(rest) == 2 && rest[0] == "issues" && m == http.MethodGet:
		if is := repo.issues[num()]; is != nil {
			return restResult{status: 200, body: s.issueJSON(repo, is)}
		}
		if p := repo.pulls[num()]; p != nil {
			return restResult{status: 200, body: s.pullAsIssueJSON(repo, p)}
		}
		return notFound()
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments" && m == http.MethodGet:
		comments, ok := s.issueComments(repo, num())
		if !ok {
			return notFound()
		}
		out := []any{}
		for _, c := range comments {
			out = append(out, s.issueCommentJSON(repo, num(), c))
		}
		return restResult{status: 200, body: out}
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments" && m == http.MethodPost:
		var in struct {
			Body string `json:"body"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Body == "" {
			return restResult{status: 422, body: apiError("Invalid request.\n\n\"body\" wasn't supplied.", "")}
		}
		c, hooks, ok := s.addIssueComment(repo, num(), id.login, in.Body)
		if !ok {
			return notFound()
		}
		return restResult{status: 201, body: s.issueCommentJSON(repo, num(), c), hooks: hooks}
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "labels" && m == http.MethodPost:
		// GitHub takes {"labels": [...]} or a bare array.
		var in struct {
			Labels []string `json:"labels"`
		}
		var raw json.RawMessage
		_ = json.NewDecoder(r.Body).Decode(&raw)
		if err := json.Unmarshal(raw, &in.Labels); err != nil {
			_ = json.Unmarshal(raw, &in)
		}
		is := repo.issues[num()]
		if is == nil {
			return notFound()
		}
		for _, l := range in.Labels {
			if !contains(is.Labels, l) {
				is.Labels = append(is.Labels, l)
			}
		}
		is.UpdatedAt = s.now()
		return restResult{status: 200, body: labelsJSON(repo, is.Labels)}
	case len(rest) == 4 && rest[0] == "issues" && rest[2] == "labels" && m == http.MethodDelete:
		is := repo.issues[num()]
		name, _ := url.PathUnescape(rest[3])
		if is == nil || !contains(is.Labels, name) {
			return restResult{status: 404, body: apiError("Label does not exist", "https://docs.github.com/rest/issues/labels#remove-a-label-from-an-issue")}
		}
		var keep []string
		for _, l := range is.Labels {
			if l != name {
				keep = append(keep, l)
			}
		}
		is.Labels = keep
		is.UpdatedAt = s.now()
		return restResult{status: 200, body: labelsJSON(repo, is.Labels)}
	case len(rest) == 4 && rest[0] == "actions" && rest[1] == "jobs" && rest[3] == "logs" && m == http.MethodGet:
		jobID, _ := strconv.ParseInt(rest[2], 10, 64)
		if _, ok := s.logs[jobID]; !ok {
			return notFound()
		}
		h := http.Header{}
		h.Set("Location", fmt.Sprintf("%s/_fake/logs/%d", s.baseURL, jobID))
		return restResult{status: http.StatusFound, header: h}
	}
	return notFound()
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// resolveRef turns a branch name or SHA into a SHA.
func (s *Server) resolveRef(r *Repo, ref string) string {
	if sha, ok := r.refs[ref]; ok {
		return sha
	}
	return ref
}

func (s *Server) userJSON(login string) map[string]any {
	typ := "User"
	if strings.HasSuffix(login, "[bot]") {
		typ = "Bot"
	}
	id := int64(len(login)) * 7919
	for _, c := range login {
		id = id*31 + int64(c)
	}
	if id < 0 {
		id = -id
	}
	return map[string]any{
		"login": login, "id": id, "node_id": nodeID("U", id),
		"avatar_url": "https://avatars.githubusercontent.com/u/" + strconv.FormatInt(id, 10) + "?v=4",
		"url":        s.baseURL + "/users/" + login, "html_url": s.baseURL + "/" + login,
		"type": typ, "site_admin": false,
	}
}

func (s *Server) repoJSON(r *Repo, id *identity) map[string]any {
	out := map[string]any{
		"id": r.ID, "node_id": nodeID("R", r.ID), "name": r.Name, "full_name": r.FullName(),
		"owner": s.userJSON(r.Owner), "private": r.Private, "html_url": s.baseURL + "/" + r.FullName(),
		"description": nil, "fork": r.ForkOf != nil, "url": s.baseURL + "/repos/" + r.FullName(),
		"clone_url": s.CloneURL(r.FullName()), "default_branch": r.DefaultBranch,
		"visibility": map[bool]string{true: "private", false: "public"}[r.Private],
		"archived":   false, "disabled": false,
	}
	// User tokens see their permissions; installation tokens do not get the block.
	if id != nil && id.permissions == nil {
		out["permissions"] = map[string]any{"admin": false, "maintain": false, "push": true, "triage": true, "pull": true}
	}
	return out
}

func (s *Server) branchJSON(r *Repo, ref, sha string) map[string]any {
	return map[string]any{
		"label": r.Owner + ":" + ref, "ref": ref, "sha": sha,
		"user": s.userJSON(r.Owner), "repo": s.repoJSON(r, nil),
	}
}

// pullJSON renders a pull request; full adds the fields only the single-pull endpoint has.
func (s *Server) pullJSON(base *Repo, p *pull, full bool) map[string]any {
	return s.pullJSONAs(base, p, full, false)
}

// pullJSONAs renders a pull request; peek leaves MergeableUnknownFirst's state alone (a webhook
// payload is not a read: GitHub's pull_request payload after a push carries a mergeable it has
// not computed yet, null, and the client's first read still starts the computation).
func (s *Server) pullJSONAs(base *Repo, p *pull, full, peek bool) map[string]any {
	state := "open"
	if p.State != "open" {
		state = "closed"
	}
	out := map[string]any{
		"url":        fmt.Sprintf("%s/repos/%s/pulls/%d", s.baseURL, base.FullName(), p.Number),
		"id":         int64(p.Number) + base.ID*100000,
		"node_id":    p.NodeID,
		"html_url":   fmt.Sprintf("%s/%s/pull/%d", s.baseURL, base.FullName(), p.Number),
		"diff_url":   fmt.Sprintf("%s/%s/pull/%d.diff", s.baseURL, base.FullName(), p.Number),
		"issue_url":  fmt.Sprintf("%s/repos/%s/issues/%d", s.baseURL, base.FullName(), p.Number),
		"number":     p.Number,
		"state":      state,
		"locked":     false,
		"title":      p.Title,
		"user":       s.userJSON(p.Author),
		"body":       p.Body,
		"labels":     []any{},
		"created_at": ts(p.CreatedAt), "updated_at": ts(p.UpdatedAt),
		"closed_at": ts(p.ClosedAt), "merged_at": ts(p.MergedAt),
		"merge_commit_sha":   nilIfEmpty(p.MergeCommitSHA),
		"draft":              p.Draft,
		"head":               s.branchJSON(p.HeadRepo, p.HeadRef, p.HeadSHA),
		"base":               s.branchJSON(base, p.BaseRef, base.refs[p.BaseRef]),
		"author_association": base.association(p.Author),
		"auto_merge":         nil,
	}
	if full {
		mergeable, st := s.mergeInfo(base, p, peek)
		out["merged"] = p.Merged
		switch mergeable {
		case "MERGEABLE":
			out["mergeable"] = true
		case "CONFLICTING":
			out["mergeable"] = false
		default:
			out["mergeable"] = nil
		}
		out["mergeable_state"] = strings.ToLower(st)
		d := s.diffStat(base, p)
		out["additions"], out["deletions"], out["changed_files"] = d.additions, d.deletions, d.files
		out["comments"] = len(p.Comments)
		out["review_comments"] = 0
		for _, t := range p.Threads {
			out["review_comments"] = out["review_comments"].(int) + len(t.Comments)
		}
		out["maintainer_can_modify"] = false
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Server) listPulls(r *Repo, q url.Values) restResult {
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	head := q.Get("head")
	out := []any{}
	pulls := r.sortedPulls()
	sort.SliceStable(pulls, func(i, j int) bool { return pulls[i].Number > pulls[j].Number })
	for _, p := range pulls {
		if state != "all" && ((state == "open") != (p.State == "open")) {
			continue
		}
		if head != "" {
			owner, branch, ok := strings.Cut(head, ":")
			if !ok || p.HeadRepo.Owner != owner || p.HeadRef != branch {
				continue
			}
		}
		if b := q.Get("base"); b != "" && p.BaseRef != b {
			continue
		}
		out = append(out, s.pullJSON(r, p, false))
	}
	return restResult{status: 200, body: page(out, q)}
}

func page(items []any, q url.Values) []any {
	per, _ := strconv.Atoi(q.Get("per_page"))
	if per <= 0 || per > 100 {
		per = 30
	}
	pg, _ := strconv.Atoi(q.Get("page"))
	if pg <= 0 {
		pg = 1
	}
	start := (pg - 1) * per
	if start >= len(items) {
		return []any{}
	}
	return items[start:min(start+per, len(items))]
}

func (s *Server) createPull(r *Repo, id *identity, req *http.Request) restResult {
	var in struct {
		Title string `json:"title"`
		Head  string `json:"head"`
		Base  string `json:"base"`
		Body  string `json:"body"`
		Draft bool   `json:"draft"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Title == "" || in.Head == "" || in.Base == "" {
		return validationFailed("title, head and base are required")
	}
	p, hooks, res := s.openPull(r, id.login, in.Head, in.Base, in.Title, in.Body, in.Draft)
	if p == nil {
		return res
	}
	return restResult{status: 201, body: s.pullJSON(r, p, true), hooks: hooks}
}

// openPull creates a pull request (shared by REST and the Go API).
func (s *Server) openPull(r *Repo, author, head, baseRef, title, body string, draft bool) (*pull, []hook, restResult) {
	headRepo, branch := r, head
	if owner, b, ok := strings.Cut(head, ":"); ok {
		branch = b
		if owner != r.Owner {
			headRepo = s.repo(owner + "/" + r.Name)
			if headRepo == nil || headRepo.ForkOf != r {
				return nil, nil, validationFailed("head " + head + " is not a fork of " + r.FullName())
			}
		}
	}
	if _, err := s.refreshRefs(headRepo); err != nil {
		return nil, nil, restResult{status: 500, body: apiError(err.Error(), "")}
	}
	headSHA := headRepo.refs[branch]
	if headSHA == "" {
		return nil, nil, validationFailed("head: invalid branch " + branch)
	}
	if r.refs[baseRef] == "" {
		return nil, nil, validationFailed("base: invalid branch " + baseRef)
	}
	for _, p := range r.pulls {
		if p.State == "open" && p.HeadRepo == headRepo && p.HeadRef == branch && p.BaseRef == baseRef {
			return nil, nil, validationFailed("A pull request already exists for " + headRepo.Owner + ":" + branch + ".")
		}
	}
	if headRepo == r && s.isAncestor(r, headSHA, r.refs[baseRef]) {
		return nil, nil, validationFailed("No commits between " + baseRef + " and " + branch)
	}
	now := s.now()
	p := &pull{
		Number: r.nextNumber, NodeID: nodeID("PR", s.id()), Title: title, Body: body, State: "open", Draft: draft,
		Author: author, HeadRepo: headRepo, HeadRef: branch, HeadSHA: headSHA, BaseRef: baseRef,
		CreatedAt: now, UpdatedAt: now,
	}
	r.nextNumber++
	r.pulls[p.Number] = p
	if err := s.setPullRef(r, p); err != nil {
		return nil, nil, restResult{status: 500, body: apiError(err.Error(), "")}
	}
	s.prewarmConflicts(r)
	return p, []hook{s.pullHook(r, p, "opened")}, restResult{}
}

func (s *Server) editPull(r *Repo, n int, req *http.Request) restResult {
	p := r.pulls[n]
	if p == nil {
		return notFound()
	}
	var in struct {
		Title *string `json:"title"`
		Body  *string `json:"body"`
		State *string `json:"state"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		return validationFailed("body is not JSON")
	}
	var hooks []hook
	if in.Title != nil && *in.Title != p.Title || in.Body != nil && *in.Body != p.Body {
		if in.Title != nil {
			p.Title = *in.Title
		}
		if in.Body != nil {
			p.Body = *in.Body
		}
		p.UpdatedAt = s.now()
		hooks = append(hooks, s.pullHook(r, p, "edited"))
	}
	if in.State != nil && !p.Merged {
		switch {
		case *in.State == "closed" && p.State == "open":
			p.State, p.ClosedAt, p.UpdatedAt = "closed", s.now(), s.now()
			hooks = append(hooks, s.pullHook(r, p, "closed"))
		case *in.State == "open" && p.State == "closed":
			p.State, p.ClosedAt, p.UpdatedAt = "open", time.Time{}, s.now()
			hooks = append(hooks, s.pullHook(r, p, "reopened"))
		}
	}
	return restResult{status: 200, body: s.pullJSON(r, p, true), hooks: hooks}
}

func (s *Server) mergePull(r *Repo, n int, req *http.Request) restResult {
	p := r.pulls[n]
	if p == nil {
		return notFound()
	}
	var in struct {
		CommitTitle   string `json:"commit_title"`
		CommitMessage string `json:"commit_message"`
		SHA           string `json:"sha"`
		MergeMethod   string `json:"merge_method"`
	}
	_ = json.NewDecoder(req.Body).Decode(&in)
	notMergeable := func(msg string) restResult {
		return restResult{status: http.StatusMethodNotAllowed, body: apiError(msg, "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request")}
	}
	if p.State != "open" {
		return notMergeable("Pull Request is not mergeable")
	}
	if in.SHA != "" && in.SHA != p.HeadSHA {
		return restResult{status: http.StatusConflict, body: apiError("Head branch was modified. Review and try the merge again.", "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request")}
	}
	method := in.MergeMethod
	if method == "" {
		method = "merge"
	}
	if method != "merge" && method != "squash" && method != "rebase" {
		return validationFailed("merge_method must be merge, squash or rebase")
	}
	mergeable, _ := s.mergeInfo(r, p, true)
	if mergeable == "CONFLICTING" || p.Draft {
		return notMergeable("Pull Request is not mergeable")
	}
	if reason := s.blockedReason(r, p); reason != "" {
		return notMergeable(reason)
	}
	hooks, err := s.doMerge(r, p, method, in.CommitTitle)
	if err != nil {
		return notMergeable(err.Error())
	}
	return restResult{status: 200, body: map[string]any{"sha": p.MergeCommitSHA, "merged": true, "message": "Pull Request successfully merged"}, hooks: hooks}
}

// doMerge merges with real git and updates the state; other pull requests on the same base
// become behind (and maybe conflicting) the way they would on GitHub.
func (s *Server) doMerge(r *Repo, p *pull, method, title string) ([]hook, error) {
	if title == "" {
		title = fmt.Sprintf("%s (#%d)", p.Title, p.Number)
	}
	sha, conflict, err := s.mergeCommit(r, p.BaseRef, p.HeadSHA, method, title)
	if err != nil {
		return nil, err
	}
	if conflict {
		return nil, errors.New("Pull Request is not mergeable") //nolint:staticcheck // GitHub's own message, quoted to clients
	}
	now := s.now()
	p.Merged, p.State, p.MergedAt, p.ClosedAt, p.UpdatedAt, p.MergeCommitSHA = true, "closed", now, now, now, sha
	hooks := []hook{s.pullHook(r, p, "closed")}
	hooks = append(hooks, s.branchesMovedLocked(r)...)
	s.prewarmConflicts(r)
	return hooks, nil
}

func (s *Server) reviewJSON(r *Repo, p *pull, rv *review) map[string]any {
	return map[string]any{
		"id": rv.ID, "node_id": rv.NodeID, "user": s.userJSON(rv.User), "body": rv.Body, "state": rv.State,
		"html_url":           fmt.Sprintf("%s/%s/pull/%d#pullrequestreview-%d", s.baseURL, r.FullName(), p.Number, rv.ID),
		"pull_request_url":   fmt.Sprintf("%s/repos/%s/pulls/%d", s.baseURL, r.FullName(), p.Number),
		"submitted_at":       ts(rv.SubmittedAt),
		"commit_id":          rv.CommitID,
		"author_association": r.association(rv.User),
	}
}

func (s *Server) checkRunJSON(r *Repo, c *checkRun) map[string]any {
	return map[string]any{
		"id": c.ID, "node_id": c.NodeID, "head_sha": c.HeadSHA, "external_id": "",
		"url":           fmt.Sprintf("%s/repos/%s/check-runs/%d", s.baseURL, r.FullName(), c.ID),
		"html_url":      c.DetailsURL,
		"details_url":   c.DetailsURL,
		"status":        c.Status,
		"conclusion":    nilIfEmpty(c.Conclusion),
		"started_at":    ts(c.StartedAt),
		"completed_at":  ts(c.CompletedAt),
		"name":          c.Name,
		"check_suite":   map[string]any{"id": c.SuiteID},
		"app":           map[string]any{"id": 15368, "slug": c.App, "name": c.App},
		"pull_requests": []any{},
	}
}

func (s *Server) combinedStatusJSON(r *Repo, sha string) map[string]any {
	var list []any
	state := "success"
	sts := []*status{}
	for _, c := range r.contexts(sha) {
		if c.status != nil {
			sts = append(sts, c.status)
		}
	}
	for _, st := range sts {
		list = append(list, map[string]any{
			"url": fmt.Sprintf("%s/repos/%s/statuses/%s", s.baseURL, r.FullName(), sha), "id": st.ID, "node_id": st.NodeID,
			"state": st.State, "description": st.Description, "target_url": nilIfEmpty(st.TargetURL), "context": st.Context,
			"created_at": ts(st.CreatedAt), "updated_at": ts(st.CreatedAt),
		})
		switch st.State {
		case "failure", "error":
			state = "failure"
		case "pending":
			if state == "success" {
				state = "pending"
			}
		}
	}
	if len(sts) == 0 {
		state = "pending" // GitHub's combined state without statuses
	}
	if list == nil {
		list = []any{}
	}
	return map[string]any{
		"state": state, "statuses": list, "sha": sha, "total_count": len(sts),
		"repository": s.repoJSON(r, nil),
		"commit_url": fmt.Sprintf("%s/repos/%s/commits/%s", s.baseURL, r.FullName(), sha),
		"url":        fmt.Sprintf("%s/repos/%s/commits/%s/status", s.baseURL, r.FullName(), sha),
	}
}

func labelsJSON(r *Repo, labels []string) []any {
	out := []any{}
	for i, l := range labels {
		out = append(out, map[string]any{
			"id": r.ID*1000 + int64(i), "node_id": nodeID("LA", r.ID*1000+int64(i)), "name": l,
			"color": "ededed", "default": false, "description": nil,
			"url": "/repos/" + r.FullName() + "/labels/" + url.PathEscape(l),
		})
	}
	return out
}

func (s *Server) issueJSON(r *Repo, is *issue) map[string]any {
	return map[string]any{
		"url":        fmt.Sprintf("%s/repos/%s/issues/%d", s.baseURL, r.FullName(), is.Number),
		"html_url":   fmt.Sprintf("%s/%s/issues/%d", s.baseURL, r.FullName(), is.Number),
		"id":         r.ID*100000 + int64(is.Number),
		"node_id":    is.NodeID,
		"number":     is.Number,
		"title":      is.Title,
		"user":       s.userJSON(is.User),
		"labels":     labelsJSON(r, is.Labels),
		"state":      is.State,
		"locked":     false,
		"comments":   len(is.Comments),
		"created_at": ts(is.CreatedAt), "updated_at": ts(is.UpdatedAt), "closed_at": ts(is.ClosedAt),
		"body":         is.Body,
		"state_reason": nil,
	}
}

func (s *Server) pullAsIssueJSON(r *Repo, p *pull) map[string]any {
	out := s.issueJSON(r, &issue{Number: p.Number, NodeID: p.NodeID, Title: p.Title, Body: p.Body, User: p.Author,
		State: map[bool]string{true: "open", false: "closed"}[p.State == "open"], CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, Comments: p.Comments})
	out["pull_request"] = map[string]any{
		"url":       fmt.Sprintf("%s/repos/%s/pulls/%d", s.baseURL, r.FullName(), p.Number),
		"html_url":  fmt.Sprintf("%s/%s/pull/%d", s.baseURL, r.FullName(), p.Number),
		"merged_at": ts(p.MergedAt),
	}
	return out
}

func (s *Server) listIssues(r *Repo, q url.Values) restResult {
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	var want []string
	if l := q.Get("labels"); l != "" {
		want = strings.Split(l, ",")
	}
	// since: only issues updated at or after the time (ISO 8601), as GitHub documents.
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return restResult{status: http.StatusUnprocessableEntity, body: map[string]any{"message": "Validation Failed: since is not a timestamp"}}
		}
		since = t
	}
	nums := make([]int, 0, len(r.issues))
	for n := range r.issues {
		nums = append(nums, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(nums)))
	out := []any{}
	for _, n := range nums {
		is := r.issues[n]
		if state != "all" && is.State != state || is.UpdatedAt.Before(since) {
			continue
		}
		ok := true
		for _, l := range want {
			if !contains(is.Labels, l) {
				ok = false
			}
		}
		if ok {
			out = append(out, s.issueJSON(r, is))
		}
	}
	return restResult{status: 200, body: page(out, q)}
}

func (s *Server) issueComments(r *Repo, n int) ([]*comment, bool) {
	if is := r.issues[n]; is != nil {
		return is.Comments, true
	}
	if p := r.pulls[n]; p != nil {
		return p.Comments, true
	}
	return nil, false
}

func (s *Server) addIssueComment(r *Repo, n int, user, body string) (*comment, []hook, bool) {
	c := &comment{ID: s.id(), User: user, Body: body, CreatedAt: s.now()}
	c.NodeID = nodeID("IC", c.ID)
	if is := r.issues[n]; is != nil {
		is.Comments = append(is.Comments, c)
		is.UpdatedAt = s.now()
		return c, []hook{s.issueCommentHook(r, n, false, c)}, true
	}
	if p := r.pulls[n]; p != nil {
		p.Comments = append(p.Comments, c)
		p.UpdatedAt = s.now()
		return c, []hook{s.issueCommentHook(r, n, true, c)}, true
	}
	return nil, nil, false
}

func (s *Server) issueCommentJSON(r *Repo, n int, c *comment) map[string]any {
	return map[string]any{
		"id": c.ID, "node_id": c.NodeID,
		"url":        fmt.Sprintf("%s/repos/%s/issues/comments/%d", s.baseURL, r.FullName(), c.ID),
		"html_url":   fmt.Sprintf("%s/%s/issues/%d#issuecomment-%d", s.baseURL, r.FullName(), n, c.ID),
		"issue_url":  fmt.Sprintf("%s/repos/%s/issues/%d", s.baseURL, r.FullName(), n),
		"body":       c.Body,
		"user":       s.userJSON(c.User),
		"created_at": ts(c.CreatedAt), "updated_at": ts(c.CreatedAt),
		"author_association": r.association(c.User),
	}
}
