// Package gitea is the Gitea Issues tracker. It shares the SCM adapter's client (timeouts, typed
// errors, metrics). Importing it registers the "gitea" tracker.
package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
	scmgitea "github.com/shepherd-dev/shepherd/internal/scm/gitea"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

func init() {
	tracker.Register("gitea", func(cfg tracker.Config) (tracker.Tracker, error) { return New(cfg) })
}

// Bounds of the reads.
const (
	pageSize = 50
	// maxPages bounds the pages of issues scanned for ListIssues and of labels read.
	maxPages = 20
	// newLabelColor is the colour of labels the tracker creates (Gitea requires one).
	newLabelColor = "#ededed"
)

// Tracker reads and labels the issues of one repository.
type Tracker struct {
	c    *scmgitea.Client
	repo scm.Repo
}

// New returns the Gitea Issues tracker of cfg.Repo. cfg.APIURL is the forge's API base and
// cfg.Token an access token, the same as the SCM adapter's.
func New(cfg tracker.Config) (*Tracker, error) {
	if cfg.Repo.IsZero() {
		return nil, errors.New("gitea tracker: the repository is required")
	}
	c, err := scmgitea.NewClient(cfg.SCMConfig())
	if err != nil {
		return nil, fmt.Errorf("gitea tracker: %w", err)
	}
	return &Tracker{c: c, repo: cfg.Repo}, nil
}

// Name is "gitea".
func (t *Tracker) Name() string { return "gitea" }

// ParseID accepts "42" and "#42".
func ParseID(id string) (int, error) { return tracker.ParseNumber(id) }

type apiLabel struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

type apiIssue struct {
	Number      int         `json:"number"`
	Title       string      `json:"title"`
	Body        string      `json:"body"`
	HTMLURL     string      `json:"html_url"`
	State       string      `json:"state"`
	Labels      []*apiLabel `json:"labels"`
	PullRequest *struct{}   `json:"pull_request"`
}

type apiComment struct {
	Body string `json:"body"`
	User *struct {
		Login string `json:"login"`
	} `json:"user"`
	Created time.Time `json:"created_at"`
}

func (t *Tracker) path() string {
	return "/repos/" + url.PathEscape(t.repo.Owner) + "/" + url.PathEscape(t.repo.Name)
}

func convert(is *apiIssue) *tracker.Issue {
	out := &tracker.Issue{
		ID: strconv.Itoa(is.Number), Key: strconv.Itoa(is.Number),
		Title: is.Title, Body: is.Body, URL: is.HTMLURL, State: is.State,
		Completed: is.State == "closed",
	}
	for _, l := range is.Labels {
		out.Labels = append(out.Labels, l.Name)
	}
	return out
}

// issue reads an issue; a pull request is refused.
func (t *Tracker) issue(ctx context.Context, n int) (*apiIssue, error) {
	var is apiIssue
	if err := t.c.Get(scmgitea.Op(ctx, "issues.get"), fmt.Sprintf("%s/issues/%d", t.path(), n), nil, &is, scm.ErrNotFound); err != nil {
		return nil, fmt.Errorf("issue %s#%d: %w", t.repo, n, err)
	}
	if is.PullRequest != nil {
		return nil, fmt.Errorf("issue %s#%d is a pull request: %w", t.repo, n, tracker.ErrInvalidID)
	}
	return &is, nil
}

// GetIssue reads an issue and its comments.
func (t *Tracker) GetIssue(ctx context.Context, id string) (*tracker.Issue, error) {
	n, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	is, err := t.issue(ctx, n)
	if err != nil {
		return nil, err
	}
	out := convert(is)
	var comments []*apiComment
	if err := t.c.Get(scmgitea.Op(ctx, "issues.list_comments"), fmt.Sprintf("%s/issues/%d/comments", t.path(), n), nil, &comments, scm.ErrNotFound); err != nil {
		return nil, fmt.Errorf("comments of %s#%d: %w", t.repo, n, err)
	}
	seen := map[string]scm.Association{}
	for _, c := range comments {
		author := "Ghost"
		if c.User != nil {
			author = c.User.Login
		}
		assoc, ok := seen[author]
		if !ok {
			// A failed lookup leaves None: an author whose standing is unknown is not heard.
			assoc, _ = t.c.Association(ctx, t.repo, author)
			seen[author] = assoc
		}
		out.Comments = append(out.Comments, tracker.Comment{Author: author, Association: assoc, Body: c.Body, CreatedAt: c.Created})
	}
	return out, nil
}

// IsCompleted reports whether the issue is closed.
func (t *Tracker) IsCompleted(ctx context.Context, id string) (bool, error) {
	n, err := ParseID(id)
	if err != nil {
		return false, err
	}
	is, err := t.issue(ctx, n)
	if err != nil {
		return false, err
	}
	return is.State == "closed", nil
}

// repoLabels reads the repository's labels by name.
func (t *Tracker) repoLabels(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for page := 1; page <= maxPages; page++ {
		var batch []*apiLabel
		q := url.Values{"page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(pageSize)}}
		if err := t.c.Get(scmgitea.Op(ctx, "labels.list"), t.path()+"/labels", q, &batch, scm.ErrRepositoryNotFound); err != nil {
			return nil, fmt.Errorf("labels of %s: %w", t.repo, err)
		}
		for _, l := range batch {
			out[l.Name] = l.ID
		}
		if len(batch) < pageSize {
			break
		}
	}
	return out, nil
}

// AddLabels adds labels to an issue, creating the ones the repository lacks (Gitea, unlike
// GitHub, does not create them on use).
func (t *Tracker) AddLabels(ctx context.Context, id string, labels ...string) error {
	n, err := ParseID(id)
	if err != nil || len(labels) == 0 {
		return err
	}
	if _, err := t.issue(ctx, n); err != nil {
		return err
	}
	known, err := t.repoLabels(ctx)
	if err != nil {
		return err
	}
	ids := make([]int64, 0, len(labels))
	for _, name := range labels {
		lid, ok := known[name]
		if !ok {
			var l apiLabel
			err := t.c.Send(scmgitea.Op(ctx, "labels.create"), http.MethodPost, t.path()+"/labels",
				map[string]any{"name": name, "color": newLabelColor}, &l, scm.ErrRepositoryNotFound)
			if err != nil {
				return fmt.Errorf("create label %q in %s: %w", name, t.repo, err)
			}
			lid = l.ID
			known[name] = lid
		}
		if !slices.Contains(ids, lid) {
			ids = append(ids, lid)
		}
	}
	if err := t.c.Send(scmgitea.Op(ctx, "issues.add_labels"), http.MethodPost, fmt.Sprintf("%s/issues/%d/labels", t.path(), n),
		map[string]any{"labels": ids}, nil, scm.ErrNotFound); err != nil {
		return fmt.Errorf("label %s#%d: %w", t.repo, n, err)
	}
	return nil
}

// RemoveLabels removes labels; a label the issue does not carry is not an error.
func (t *Tracker) RemoveLabels(ctx context.Context, id string, labels ...string) error {
	n, err := ParseID(id)
	if err != nil || len(labels) == 0 {
		return err
	}
	is, err := t.issue(ctx, n)
	if err != nil {
		return err
	}
	for _, l := range is.Labels {
		if !slices.Contains(labels, l.Name) {
			continue
		}
		err := t.c.Send(scmgitea.Op(ctx, "issues.remove_label"), http.MethodDelete, fmt.Sprintf("%s/issues/%d/labels/%d", t.path(), n, l.ID), nil, nil, scm.ErrNotFound)
		if err != nil && !errors.Is(err, scm.ErrNotFound) {
			return fmt.Errorf("unlabel %s#%d: %w", t.repo, n, err)
		}
	}
	return nil
}

// ListIssues lists open issues (not pull requests) carrying all labels, newest first. Gitea's
// label filter matches any of the labels, so the result is filtered again here.
func (t *Tracker) ListIssues(ctx context.Context, opts tracker.ListOptions) ([]tracker.Issue, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 250)
	var out []tracker.Issue
	for page := 1; page <= maxPages && len(out) < limit; page++ {
		q := url.Values{"state": {"open"}, "type": {"issues"}, "page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(pageSize)}}
		if len(opts.Labels) > 0 {
			q.Set("labels", strings.Join(opts.Labels, ","))
		}
		var batch []*apiIssue
		if err := t.c.Get(scmgitea.Op(ctx, "issues.list"), t.path()+"/issues", q, &batch, scm.ErrRepositoryNotFound); err != nil {
			return nil, fmt.Errorf("list issues of %s: %w", t.repo, err)
		}
		for _, is := range batch {
			if is.PullRequest != nil || len(out) == limit || !hasAll(is, opts.Labels) {
				continue
			}
			out = append(out, *convert(is))
		}
		if len(batch) < pageSize {
			break
		}
	}
	return out, nil
}

// Closed lists the repository's issues closed and updated from since on (Gitea's since filter,
// RFC 3339; one request per 50) and keeps those among ids. A closed issue's updated time is at
// least its closing time, so none is missed; past maxPages the rest are asked one by one.
func (t *Tracker) Closed(ctx context.Context, ids []string, since time.Time) (map[string]string, error) {
	want := tracker.NumberedIDs(ids)
	found := map[string]string{}
	if len(want) == 0 {
		return found, nil
	}
	for page := 1; ; page++ {
		if page > maxPages {
			return found, tracker.ClosedOneByOne(ctx, t, ids, found, "closed")
		}
		q := url.Values{"state": {"closed"}, "type": {"issues"}, "since": {since.UTC().Format(time.RFC3339)},
			"page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(pageSize)}}
		var batch []*apiIssue
		if err := t.c.Get(scmgitea.Op(ctx, "issues.list_closed"), t.path()+"/issues", q, &batch, scm.ErrRepositoryNotFound); err != nil {
			return nil, fmt.Errorf("list closed issues of %s: %w", t.repo, err)
		}
		for _, is := range batch {
			if id, ok := want[is.Number]; ok && is.PullRequest == nil {
				found[id] = is.State
			}
		}
		if len(batch) < pageSize {
			return found, nil
		}
	}
}

func hasAll(is *apiIssue, labels []string) bool {
	for _, want := range labels {
		if !slices.ContainsFunc(is.Labels, func(l *apiLabel) bool { return l.Name == want }) {
			return false
		}
	}
	return true
}
