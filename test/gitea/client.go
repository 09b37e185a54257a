package gitea

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// requestTimeout bounds every call of the test client.
const requestTimeout = 30 * time.Second

// Client calls Gitea's API as one user: what CI, reviewers and admins do in tests.
type Client struct {
	base                 string
	token                string
	basicUser, basicPass string
	http                 *http.Client
}

func newHTTPClient() *http.Client { return &http.Client{Timeout: requestTimeout} }

// Client returns an API client authenticated with u's token.
func (s *Server) Client(u User) *Client {
	return &Client{base: s.APIURL, token: u.Token, http: newHTTPClient()}
}

// CloneURL is the repository's HTTP clone URL.
func (s *Server) CloneURL(owner, repo string) string {
	return s.URL + "/" + owner + "/" + repo + ".git"
}

// APIError is a refusal of the test client's request.
type APIError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, strings.TrimSpace(e.Body))
}

// Do sends in as JSON to the API path (relative to /api/v1) and decodes the answer into out.
// A status of 300 or more is an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case c.token != "":
		req.Header.Set("Authorization", "token "+c.token)
	case c.basicUser != "":
		req.SetBasicAuth(c.basicUser, c.basicPass)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// CreateRepo creates a repository of the client's user with an initial commit on main.
func (c *Client) CreateRepo(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodPost, "/user/repos", map[string]any{
		"name": name, "auto_init": true, "default_branch": "main", "readme": "Default", "private": false,
	}, nil)
}

// AddCollaborator gives user access to a repository ("read", "write" or "admin").
func (c *Client) AddCollaborator(ctx context.Context, owner, repo, user, permission string) error {
	return c.Do(ctx, http.MethodPut, fmt.Sprintf("/repos/%s/%s/collaborators/%s", owner, repo, user),
		map[string]any{"permission": permission}, nil)
}

// CommitFiles writes files (path → content; an empty content deletes the file) in one commit on
// branch and returns the commit's SHA. When branch does not exist it is created from from. It goes
// through Gitea's push path: pull requests are synchronised and webhooks sent as for a git push.
func (c *Client) CommitFiles(ctx context.Context, owner, repo, branch, from string, files map[string]string, message string) (string, error) {
	exists := c.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/%s/branches/%s", owner, repo, url.PathEscape(branch)), nil, nil) == nil
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	ref := from
	if exists {
		ref = branch
	}
	var ops []map[string]any
	for _, p := range paths {
		op := map[string]any{"path": p}
		sha, err := c.fileSHA(ctx, owner, repo, ref, p)
		if err != nil {
			return "", err
		}
		switch {
		case files[p] == "" && sha != "":
			op["operation"], op["sha"] = "delete", sha
		case files[p] == "":
			continue
		case sha != "":
			op["operation"], op["sha"] = "update", sha
			op["content"] = base64.StdEncoding.EncodeToString([]byte(files[p]))
		default:
			op["operation"] = "create"
			op["content"] = base64.StdEncoding.EncodeToString([]byte(files[p]))
		}
		ops = append(ops, op)
	}
	body := map[string]any{"files": ops, "message": message}
	if exists {
		body["branch"] = branch
	} else {
		body["branch"], body["new_branch"] = from, branch
	}
	var res struct {
		Commit struct {
			SHA string `json:"sha"`
		} `json:"commit"`
	}
	if err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/contents", owner, repo), body, &res); err != nil {
		return "", err
	}
	return res.Commit.SHA, nil
}

// fileSHA returns the blob SHA of a file at ref, or "" when it does not exist.
func (c *Client) fileSHA(ctx context.Context, owner, repo, ref, path string) (string, error) {
	var f struct {
		SHA string `json:"sha"`
	}
	err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/%s/contents/%s?ref=%s", owner, repo, path, url.QueryEscape(ref)), nil, &f)
	if ae := (*APIError)(nil); errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return "", nil
	}
	return f.SHA, err
}

// DeleteBranch deletes a branch.
func (c *Client) DeleteBranch(ctx context.Context, owner, repo, branch string) error {
	return c.Do(ctx, http.MethodDelete, fmt.Sprintf("/repos/%s/%s/branches/%s", owner, repo, url.PathEscape(branch)), nil, nil)
}

// BranchSHA returns a branch's head commit.
func (c *Client) BranchSHA(ctx context.Context, owner, repo, branch string) (string, error) {
	var b struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/%s/branches/%s", owner, repo, url.PathEscape(branch)), nil, &b)
	return b.Commit.ID, err
}

// SetStatus reports a commit status, as CI does. state: pending, success, error, failure,
// warning or skipped.
func (c *Client) SetStatus(ctx context.Context, owner, repo, sha, context, state, targetURL string) error {
	return c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/statuses/%s", owner, repo, sha), map[string]any{
		"context": context, "state": state, "target_url": targetURL, "description": context + " is " + state,
	}, nil)
}

// ReviewComment is a line comment of a review.
type ReviewComment struct {
	Path string
	// Line in the new version of the file.
	Line int
	Body string
}

// Review submits a review: event APPROVED, REQUEST_CHANGES or COMMENT. It returns its id.
func (c *Client) Review(ctx context.Context, owner, repo string, number int, event, body string, comments ...ReviewComment) (int64, error) {
	return c.ReviewAt(ctx, owner, repo, number, "", event, body, comments...)
}

// ReviewAt submits a review of the pull request at head commit (Gitea's commit_id), as a
// reviewer's browser does: without it Gitea records the commit of refs/pull/N/head, which it
// updates asynchronously after a push, so a review sent right after a push may be recorded at
// the previous head (and shown as stale). "" leaves the choice to Gitea.
func (c *Client) ReviewAt(ctx context.Context, owner, repo string, number int, commit, event, body string, comments ...ReviewComment) (int64, error) {
	cs := make([]map[string]any, 0, len(comments))
	for _, rc := range comments {
		cs = append(cs, map[string]any{"path": rc.Path, "new_position": rc.Line, "body": rc.Body})
	}
	var r struct {
		ID int64 `json:"id"`
	}
	req := map[string]any{"event": event, "body": body, "comments": cs}
	if commit != "" {
		req["commit_id"] = commit
	}
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/pulls/%d/reviews", owner, repo, number), req, &r)
	return r.ID, err
}

// DismissReview dismisses a review (needs write access to the repository).
func (c *Client) DismissReview(ctx context.Context, owner, repo string, number int, id int64, message string) error {
	return c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/pulls/%d/reviews/%d/dismissals", owner, repo, number, id),
		map[string]any{"message": message}, nil)
}

// Protection is a branch protection rule (a subset of Gitea's options).
type Protection struct {
	Branch string
	// RequiredContexts are commit status contexts (globs) that must succeed before merging.
	RequiredContexts []string
	// RequiredApprovals counts official, undismissed approvals.
	RequiredApprovals int
	// BlockOnRejectedReviews refuses merges while an official review requests changes.
	BlockOnRejectedReviews bool
	// BlockOnOutdatedBranch refuses merges while the head is behind the base.
	BlockOnOutdatedBranch bool
	// DismissStaleApprovals dismisses approvals when new commits are pushed.
	DismissStaleApprovals bool
}

// Protect creates (or replaces) the protection rule of a branch (needs repository admin).
func (c *Client) Protect(ctx context.Context, owner, repo string, p Protection) error {
	path := fmt.Sprintf("/repos/%s/%s/branch_protections", owner, repo)
	_ = c.Do(ctx, http.MethodDelete, path+"/"+url.PathEscape(p.Branch), nil, nil)
	return c.Do(ctx, http.MethodPost, path, map[string]any{
		"rule_name":                 p.Branch,
		"enable_push":               true,
		"enable_status_check":       len(p.RequiredContexts) > 0,
		"status_check_contexts":     p.RequiredContexts,
		"required_approvals":        p.RequiredApprovals,
		"block_on_rejected_reviews": p.BlockOnRejectedReviews,
		"block_on_outdated_branch":  p.BlockOnOutdatedBranch,
		"dismiss_stale_approvals":   p.DismissStaleApprovals,
	}, nil)
}

// CreateWebhook points a repository webhook (type gitea, JSON, every event) at target, signed with
// secret. It returns the hook's id.
func (c *Client) CreateWebhook(ctx context.Context, owner, repo, target, secret string) (int64, error) {
	var h struct {
		ID int64 `json:"id"`
	}
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/hooks", owner, repo), map[string]any{
		"type": "gitea", "active": true, "branch_filter": "*",
		"config": map[string]string{"url": target, "content_type": "json", "secret": secret},
		"events": []string{"push", "create", "delete", "issues", "issue_comment", "pull_request", "pull_request_sync",
			"pull_request_review_approved", "pull_request_review_rejected", "pull_request_review_comment",
			"pull_request_comment", "pull_request_review_request", "pull_request_label", "pull_request_assign", "status"},
	}, &h)
	return h.ID, err
}

// CreateIssue opens an issue and returns its number.
func (c *Client) CreateIssue(ctx context.Context, owner, repo, title, body string) (int, error) {
	var is struct {
		Number int `json:"number"`
	}
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/issues", owner, repo), map[string]any{"title": title, "body": body}, &is)
	return is.Number, err
}

// CommentIssue comments on an issue or pull request.
func (c *Client) CommentIssue(ctx context.Context, owner, repo string, number int, body string) error {
	return c.Do(ctx, http.MethodPost, fmt.Sprintf("/repos/%s/%s/issues/%d/comments", owner, repo, number), map[string]any{"body": body}, nil)
}

// CloseIssue closes an issue.
func (c *Client) CloseIssue(ctx context.Context, owner, repo string, number int) error {
	return c.Do(ctx, http.MethodPatch, fmt.Sprintf("/repos/%s/%s/issues/%d", owner, repo, number), map[string]any{"state": "closed"}, nil)
}
