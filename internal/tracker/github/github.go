// Package github is the GitHub Issues tracker. It shares the SCM adapter's client (governed
// transport, ETag revalidation, metrics). Importing it registers the "github" tracker.
package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	gh "github.com/google/go-github/v88/github"

	"github.com/shepherd-dev/shepherd/internal/scm"
	scmgithub "github.com/shepherd-dev/shepherd/internal/scm/github"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

func init() {
	tracker.Register("github", func(cfg tracker.Config) (tracker.Tracker, error) { return New(cfg) })
}

// Tracker reads and labels the issues of one repository.
type Tracker struct {
	c    *scmgithub.Client
	repo scm.Repo
}

// New returns the GitHub Issues tracker of cfg.Repo.
func New(cfg tracker.Config) (*Tracker, error) {
	if cfg.Repo.IsZero() {
		return nil, errors.New("github tracker: the repository is required")
	}
	c, err := scmgithub.NewClient(cfg.SCMConfig())
	if err != nil {
		return nil, fmt.Errorf("github tracker: %w", err)
	}
	return &Tracker{c: c, repo: cfg.Repo}, nil
}

// Name is "github".
func (t *Tracker) Name() string { return "github" }

// ParseID accepts "42" and "#42".
func ParseID(id string) (int, error) { return tracker.ParseNumber(id) }

func mapErr(err error) error {
	var er *gh.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		kind := scm.ErrInvalid
		switch s := er.Response.StatusCode; {
		case s == http.StatusUnauthorized:
			kind = scm.ErrTokenRejected
		case s == http.StatusForbidden:
			kind = scm.ErrPermissionDenied
		case s == http.StatusNotFound || s == http.StatusGone:
			kind = scm.ErrNotFound
		case s >= 500:
			kind = scm.ErrUnavailable
		}
		return &scm.APIError{Kind: kind, Status: er.Response.StatusCode, Message: er.Message, Err: err}
	}
	var rl *scm.RateLimitError
	if errors.As(err, &rl) {
		return rl
	}
	var ae *scm.APIError
	if errors.As(err, &ae) {
		return ae
	}
	return &scm.APIError{Kind: scm.ErrUnavailable, Err: err}
}

func convert(is *gh.Issue) *tracker.Issue {
	out := &tracker.Issue{
		ID:    strconv.Itoa(is.GetNumber()),
		Key:   strconv.Itoa(is.GetNumber()),
		Title: is.GetTitle(), Body: is.GetBody(), URL: is.GetHTMLURL(), State: is.GetState(),
		Completed: is.GetState() == "closed",
	}
	for _, l := range is.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	return out
}

// GetIssue reads an issue and its first 100 comments.
func (t *Tracker) GetIssue(ctx context.Context, id string) (*tracker.Issue, error) {
	n, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	is, _, err := t.c.REST().Issues.Get(scmgithub.Op(ctx, "issues.get"), t.repo.Owner, t.repo.Name, n)
	if err != nil {
		return nil, fmt.Errorf("issue %s#%d: %w", t.repo, n, mapErr(err))
	}
	if is.IsPullRequest() {
		return nil, fmt.Errorf("issue %s#%d is a pull request: %w", t.repo, n, tracker.ErrInvalidID)
	}
	out := convert(is)
	comments, _, err := t.c.REST().Issues.ListComments(scmgithub.Op(ctx, "issues.list_comments"), t.repo.Owner, t.repo.Name, n,
		&gh.IssueListCommentsOptions{ListOptions: gh.ListOptions{PerPage: 100}})
	if err != nil {
		return nil, fmt.Errorf("comments of %s#%d: %w", t.repo, n, mapErr(err))
	}
	for _, c := range comments {
		out.Comments = append(out.Comments, tracker.Comment{Author: c.GetUser().GetLogin(), Association: scm.ParseGitHubAssociation(c.GetAuthorAssociation()), Body: c.GetBody(), CreatedAt: c.GetCreatedAt().Time})
	}
	return out, nil
}

// IsCompleted reports whether the issue is closed (an ETag-revalidated read: free while
// unchanged).
func (t *Tracker) IsCompleted(ctx context.Context, id string) (bool, error) {
	n, err := ParseID(id)
	if err != nil {
		return false, err
	}
	is, _, err := t.c.REST().Issues.Get(scmgithub.Op(ctx, "issues.get"), t.repo.Owner, t.repo.Name, n)
	if err != nil {
		return false, fmt.Errorf("issue %s#%d: %w", t.repo, n, mapErr(err))
	}
	return is.GetState() == "closed", nil
}

// closedPages bounds the listing of closed issues; past it the rest are asked one by one.
const closedPages = 10

// Closed lists the repository's issues closed and updated from since on (one request per 100,
// usually one in all) and keeps those among ids; a closed issue's updated_at is at least its
// closing time, so none is missed.
func (t *Tracker) Closed(ctx context.Context, ids []string, since time.Time) (map[string]string, error) {
	want := tracker.NumberedIDs(ids)
	found := map[string]string{}
	if len(want) == 0 {
		return found, nil
	}
	complete := false
	for page := 1; page <= closedPages; page++ {
		issues, resp, err := t.c.REST().Issues.ListByRepo(scmgithub.Op(ctx, "issues.list_closed"), t.repo.Owner, t.repo.Name, &gh.IssueListByRepoOptions{
			State: "closed", Since: since, Sort: "updated", Direction: "desc",
			ListOptions: gh.ListOptions{PerPage: 100, Page: page},
		})
		if err != nil {
			return nil, fmt.Errorf("list closed issues of %s: %w", t.repo, mapErr(err))
		}
		for _, is := range issues {
			if id, ok := want[is.GetNumber()]; ok && !is.IsPullRequest() {
				found[id] = is.GetState()
			}
		}
		if resp == nil || resp.NextPage == 0 || len(issues) < 100 {
			complete = true
			break
		}
	}
	if !complete {
		if err := tracker.ClosedOneByOne(ctx, t, ids, found, "closed"); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// AddLabels adds labels to an issue.
func (t *Tracker) AddLabels(ctx context.Context, id string, labels ...string) error {
	n, err := ParseID(id)
	if err != nil || len(labels) == 0 {
		return err
	}
	if _, _, err := t.c.REST().Issues.AddLabelsToIssue(scmgithub.Op(ctx, "issues.add_labels"), t.repo.Owner, t.repo.Name, n, labels); err != nil {
		return fmt.Errorf("label %s#%d: %w", t.repo, n, mapErr(err))
	}
	return nil
}

// RemoveLabels removes labels; a label the issue does not carry is not an error.
func (t *Tracker) RemoveLabels(ctx context.Context, id string, labels ...string) error {
	n, err := ParseID(id)
	if err != nil {
		return err
	}
	for _, l := range labels {
		_, err := t.c.REST().Issues.RemoveLabelForIssue(scmgithub.Op(ctx, "issues.remove_label"), t.repo.Owner, t.repo.Name, n, l)
		if err != nil {
			mapped := mapErr(err)
			if errors.Is(mapped, scm.ErrNotFound) {
				continue // already absent: the wanted state
			}
			return fmt.Errorf("unlabel %s#%d: %w", t.repo, n, mapped)
		}
	}
	return nil
}

// ListIssues lists open issues (not pull requests) carrying all labels, newest first.
func (t *Tracker) ListIssues(ctx context.Context, opts tracker.ListOptions) ([]tracker.Issue, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 250)
	var out []tracker.Issue
	for page := 1; len(out) < limit; page++ {
		issues, resp, err := t.c.REST().Issues.ListByRepo(scmgithub.Op(ctx, "issues.list"), t.repo.Owner, t.repo.Name, &gh.IssueListByRepoOptions{
			State: "open", Labels: opts.Labels, Sort: "created", Direction: "desc",
			ListOptions: gh.ListOptions{PerPage: 100, Page: page},
		})
		if err != nil {
			return nil, fmt.Errorf("list issues of %s: %w", t.repo, mapErr(err))
		}
		for _, is := range issues {
			if is.IsPullRequest() || len(out) == limit {
				continue
			}
			out = append(out, *convert(is))
		}
		if resp == nil || resp.NextPage == 0 || len(issues) < 100 {
			break
		}
	}
	return out, nil
}
