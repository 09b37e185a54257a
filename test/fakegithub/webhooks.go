package fakegithub

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
)

// hook is a webhook waiting to be delivered once the state lock is released.
type hook struct {
	event string
	body  map[string]any
}

func newDeliveryID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// deliver sends hooks, signed with the webhook secret, in order and synchronously, so that a
// test's next step sees their effect.
func (s *Server) deliver(hooks []hook) {
	s.mu.Lock()
	url := s.opts.WebhookURL
	s.mu.Unlock()
	if len(hooks) == 0 || (url == "" && s.opts.WebhookHandler == nil) {
		return
	}
	for _, h := range hooks {
		body, _ := json.Marshal(h.body)
		id := newDeliveryID()
		mac := hmac.New(sha256.New, s.opts.WebhookSecret)
		mac.Write(body)
		hdr := http.Header{}
		hdr.Set("Content-Type", "application/json")
		hdr.Set("User-Agent", "GitHub-Hookshot/fake")
		hdr.Set("X-GitHub-Event", h.event)
		hdr.Set("X-GitHub-Delivery", id)
		hdr.Set("X-GitHub-Hook-ID", "1")
		hdr.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		status := s.send(hdr, body)
		s.mu.Lock()
		s.stats.Webhooks[h.event]++
		s.deliveries = append(s.deliveries, Delivery{Event: h.event, ID: id, Body: body, Status: status})
		if len(s.deliveries) > 10000 {
			s.deliveries = s.deliveries[len(s.deliveries)-10000:]
		}
		s.mu.Unlock()
	}
}

// SetWebhookURL points the repository webhooks at url (a receiver that exists only after the
// fake started: a Project's path on the manager's receiver).
func (s *Server) SetWebhookURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.WebhookURL = url
}

// Redeliver sends a past delivery again with the same id, as GitHub's "Redeliver" does.
func (s *Server) Redeliver(d Delivery) int {
	mac := hmac.New(sha256.New, s.opts.WebhookSecret)
	mac.Write(d.Body)
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("X-GitHub-Event", d.Event)
	hdr.Set("X-GitHub-Delivery", d.ID)
	hdr.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	return s.send(hdr, d.Body)
}

func (s *Server) send(hdr http.Header, body []byte) int {
	if s.opts.WebhookHandler != nil {
		req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		req.Header = hdr
		rec := httptest.NewRecorder()
		s.opts.WebhookHandler.ServeHTTP(rec, req)
		return rec.Code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	url := s.opts.WebhookURL
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.logf("fakegithub: webhook %s: %v", hdr.Get("X-GitHub-Event"), err)
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (s *Server) sender(login string) map[string]any { return s.userJSON(login) }

func (s *Server) pullHook(base *Repo, p *pull, action string) hook {
	return hook{event: "pull_request", body: map[string]any{
		"action": action, "number": p.Number, "pull_request": s.pullJSONAs(base, p, true, true),
		"repository": s.repoJSON(base, nil), "sender": s.sender(p.Author),
	}}
}

func (s *Server) pushHook(r *Repo, branch, before, after string) hook {
	zero := strings.Repeat("0", 40)
	if before == "" {
		before = zero
	}
	deleted := after == ""
	if deleted {
		after = zero
	}
	repo := s.repoJSON(r, nil)
	repo["pushed_at"] = s.now().Unix()
	var head any
	if !deleted {
		head = map[string]any{
			"id": after, "tree_id": after, "distinct": true, "message": "push", "timestamp": s.now().Format(time.RFC3339),
			"url":    fmt.Sprintf("%s/%s/commit/%s", s.baseURL, r.FullName(), after),
			"author": map[string]any{"name": "Shepherd Test", "email": "test@shepherd.dev"}, "committer": map[string]any{"name": "Shepherd Test", "email": "test@shepherd.dev"},
			"added": []any{}, "removed": []any{}, "modified": []any{},
		}
	}
	return hook{event: "push", body: map[string]any{
		"ref": "refs/heads/" + branch, "before": before, "after": after,
		"created": before == zero, "deleted": deleted, "forced": false, "base_ref": nil,
		"compare": fmt.Sprintf("%s/%s/compare/%s...%s", s.baseURL, r.FullName(), before[:12], after[:12]),
		"commits": []any{}, "head_commit": head,
		"repository": repo, "pusher": map[string]any{"name": r.Owner, "email": nil}, "sender": s.sender(r.Owner),
	}}
}

func (s *Server) reviewHook(base *Repo, p *pull, rv *review, action string) hook {
	return hook{event: "pull_request_review", body: map[string]any{
		"action": action, "review": s.reviewJSON(base, p, rv), "pull_request": s.pullJSON(base, p, false),
		"repository": s.repoJSON(base, nil), "sender": s.sender(rv.User),
	}}
}

func (s *Server) reviewCommentJSON(base *Repo, p *pull, t *thread, c *comment) map[string]any {
	return map[string]any{
		"id": c.ID, "node_id": c.NodeID, "path": t.Path, "line": t.Line, "original_line": t.Line, "side": "RIGHT",
		"body": c.Body, "user": s.userJSON(c.User), "commit_id": p.HeadSHA, "original_commit_id": p.HeadSHA,
		"diff_hunk":              "@@ -1 +1 @@",
		"pull_request_review_id": c.ID,
		"created_at":             ts(c.CreatedAt), "updated_at": ts(c.CreatedAt),
		"html_url":           fmt.Sprintf("%s/%s/pull/%d#discussion_r%d", s.baseURL, base.FullName(), p.Number, c.ID),
		"pull_request_url":   fmt.Sprintf("%s/repos/%s/pulls/%d", s.baseURL, base.FullName(), p.Number),
		"url":                fmt.Sprintf("%s/repos/%s/pulls/comments/%d", s.baseURL, base.FullName(), c.ID),
		"author_association": base.association(c.User),
	}
}

func (s *Server) reviewCommentHook(base *Repo, p *pull, t *thread, c *comment) hook {
	return hook{event: "pull_request_review_comment", body: map[string]any{
		"action": "created", "comment": s.reviewCommentJSON(base, p, t, c), "pull_request": s.pullJSON(base, p, false),
		"repository": s.repoJSON(base, nil), "sender": s.sender(c.User),
	}}
}

func (s *Server) threadHook(base *Repo, p *pull, t *thread, action, user string) hook {
	comments := []any{}
	for _, c := range t.Comments {
		comments = append(comments, s.reviewCommentJSON(base, p, t, c))
	}
	return hook{event: "pull_request_review_thread", body: map[string]any{
		"action": action, "thread": map[string]any{"node_id": t.NodeID, "comments": comments},
		"pull_request": s.pullJSON(base, p, false), "repository": s.repoJSON(base, nil), "sender": s.sender(user),
	}}
}

// prRefsFor lists the open pull requests of r whose head is sha in r itself, as check payloads
// carry them (pull requests from forks are left out, as on GitHub).
func (s *Server) prRefsFor(r *Repo, sha string) []any {
	out := []any{}
	for _, p := range r.sortedPulls() {
		if p.State != "open" || p.HeadRepo != r || p.HeadSHA != sha {
			continue
		}
		repoMini := map[string]any{"id": r.ID, "url": s.baseURL + "/repos/" + r.FullName(), "name": r.Name}
		out = append(out, map[string]any{
			"url": fmt.Sprintf("%s/repos/%s/pulls/%d", s.baseURL, r.FullName(), p.Number), "id": int64(p.Number) + r.ID*100000, "number": p.Number,
			"head": map[string]any{"ref": p.HeadRef, "sha": p.HeadSHA, "repo": repoMini},
			"base": map[string]any{"ref": p.BaseRef, "sha": r.refs[p.BaseRef], "repo": repoMini},
		})
	}
	return out
}

func (s *Server) branchOf(r *Repo, sha string) any {
	for _, p := range r.sortedPulls() {
		if p.HeadSHA == sha && p.HeadRepo == r {
			return p.HeadRef
		}
	}
	for b, h := range r.refs {
		if h == sha {
			return b
		}
	}
	return nil
}

func (s *Server) suiteJSON(r *Repo, c *checkRun) map[string]any {
	status, conclusion := "completed", ""
	for _, other := range r.checkRuns[c.HeadSHA] {
		if other.SuiteID != c.SuiteID {
			continue
		}
		if other.Status != "completed" {
			status = other.Status
		} else if failingConclusions[other.Conclusion] || conclusion == "" {
			if conclusion == "" || failingConclusions[other.Conclusion] {
				conclusion = other.Conclusion
			}
		}
	}
	if status != "completed" {
		conclusion = ""
	}
	return map[string]any{
		"id": c.SuiteID, "node_id": nodeID("CS", c.SuiteID), "head_branch": s.branchOf(r, c.HeadSHA), "head_sha": c.HeadSHA,
		"status": status, "conclusion": nilIfEmpty(conclusion),
		"url":    fmt.Sprintf("%s/repos/%s/check-suites/%d", s.baseURL, r.FullName(), c.SuiteID),
		"before": nil, "after": c.HeadSHA,
		"pull_requests": s.prRefsFor(r, c.HeadSHA),
		"app":           map[string]any{"id": 15368, "slug": c.App, "name": c.App},
		"created_at":    ts(c.StartedAt), "updated_at": ts(s.now()),
	}
}

func (s *Server) checkRunHook(r *Repo, c *checkRun, action string) hook {
	run := s.checkRunJSON(r, c)
	run["check_suite"] = s.suiteJSON(r, c)
	run["pull_requests"] = s.prRefsFor(r, c.HeadSHA)
	return hook{event: "check_run", body: map[string]any{
		"action": action, "check_run": run, "repository": s.repoJSON(r, nil), "sender": s.sender(c.App + "[bot]"),
	}}
}

func (s *Server) checkSuiteHook(r *Repo, c *checkRun) hook {
	return hook{event: "check_suite", body: map[string]any{
		"action": "completed", "check_suite": s.suiteJSON(r, c), "repository": s.repoJSON(r, nil), "sender": s.sender(c.App + "[bot]"),
	}}
}

func (s *Server) statusHook(r *Repo, sha string, st *status) hook {
	branches := []any{}
	for b, h := range r.refs {
		if h == sha {
			branches = append(branches, map[string]any{"name": b, "commit": map[string]any{"sha": sha, "url": fmt.Sprintf("%s/repos/%s/commits/%s", s.baseURL, r.FullName(), sha)}, "protected": false})
		}
	}
	return hook{event: "status", body: map[string]any{
		"id": st.ID, "sha": sha, "name": r.FullName(), "target_url": nilIfEmpty(st.TargetURL), "context": st.Context,
		"description": nilIfEmpty(st.Description), "state": st.State,
		"commit":   map[string]any{"sha": sha, "node_id": nodeID("C", st.ID), "url": fmt.Sprintf("%s/repos/%s/commits/%s", s.baseURL, r.FullName(), sha)},
		"branches": branches, "created_at": ts(st.CreatedAt), "updated_at": ts(st.CreatedAt),
		"repository": s.repoJSON(r, nil), "sender": s.sender(r.Owner),
	}}
}

func (s *Server) issueCommentHook(r *Repo, n int, isPull bool, c *comment) hook {
	var issue map[string]any
	if isPull {
		issue = s.pullAsIssueJSON(r, r.pulls[n])
	} else {
		issue = s.issueJSON(r, r.issues[n])
	}
	return hook{event: "issue_comment", body: map[string]any{
		"action": "created", "issue": issue, "comment": s.issueCommentJSON(r, n, c),
		"repository": s.repoJSON(r, nil), "sender": s.sender(c.User),
	}}
}
