// Package linear is the Linear tracker: issues by key (ENG-123) over Linear's GraphQL API.
// Importing it registers the "linear" tracker.
package linear

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// DefaultAPIURL is Linear's GraphQL endpoint.
const DefaultAPIURL = "https://api.linear.app/graphql"

func init() {
	tracker.Register("linear", func(cfg tracker.Config) (tracker.Tracker, error) { return New(cfg) })
}

// Tracker reads and labels the issues of one Linear team.
type Tracker struct {
	url     string
	key     string
	team    string
	http    *http.Client
	metrics *scm.Metrics
}

// New returns the Linear tracker of cfg.TeamKey.
func New(cfg tracker.Config) (*Tracker, error) {
	if cfg.TeamKey == "" {
		return nil, errors.New("linear tracker: the team key is required")
	}
	key := strings.TrimSpace(string(cfg.Token))
	if key == "" || strings.ContainsAny(key, "\r\n") {
		return nil, &scm.APIError{Kind: scm.ErrTokenRejected, Message: "linear API key is empty or spans lines"}
	}
	u := cfg.APIURL
	if u == "" {
		u = DefaultAPIURL
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	tr := cfg.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	return &Tracker{url: u, key: key, team: cfg.TeamKey, http: &http.Client{Transport: tr, Timeout: timeout}, metrics: cfg.Metrics}, nil
}

// Name is "linear".
func (t *Tracker) Name() string { return "linear" }

var keyPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,15}-[1-9][0-9]{0,9}$`)

// ParseID checks an issue key (ENG-123) and returns it upper-cased.
func ParseID(id string) (string, error) {
	id = strings.TrimSpace(id)
	if !keyPattern.MatchString(id) {
		return "", fmt.Errorf("issue %q: %w: want a key such as ENG-123", id, tracker.ErrInvalidID)
	}
	return strings.ToUpper(id), nil
}

type gqlError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code string `json:"code"`
		Type string `json:"type"`
	} `json:"extensions"`
}

// do sends one GraphQL request.
func (t *Tracker) do(ctx context.Context, op, query string, vars map[string]any, out any) error {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return fmt.Errorf("encode linear request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("linear request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	// Linear takes personal API keys as they are, OAuth tokens with "Bearer".
	req.Header.Set("Authorization", t.key)
	resp, err := t.http.Do(req)
	outcome := scm.OutcomeNetworkError
	defer func() {
		if t.metrics != nil {
			t.metrics.Requests.WithLabelValues("linear", scm.KindGraphQL, op, outcome).Inc()
		}
	}()
	if err != nil {
		return &scm.APIError{Kind: scm.ErrUnavailable, Message: "linear " + op, Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return &scm.APIError{Kind: scm.ErrUnavailable, Message: "read linear response", Err: err}
	}
	var gr struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlError      `json:"errors"`
	}
	_ = json.Unmarshal(b, &gr)
	outcome = scm.OutcomeOK
	if len(gr.Errors) > 0 || resp.StatusCode != http.StatusOK {
		outcome = scm.OutcomeClientError
		kind := scm.ErrInvalid
		msg := resp.Status
		if len(gr.Errors) > 0 {
			msg = gr.Errors[0].Message
			switch {
			case gr.Errors[0].Extensions.Code == "AUTHENTICATION_ERROR":
				kind = scm.ErrTokenRejected
			case gr.Errors[0].Extensions.Code == "RATELIMITED":
				kind = scm.ErrRateLimited
			case strings.HasPrefix(msg, "Entity not found"):
				kind = scm.ErrNotFound
			}
		}
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			kind = scm.ErrTokenRejected
		case resp.StatusCode == http.StatusTooManyRequests:
			kind = scm.ErrRateLimited
		case resp.StatusCode >= 500:
			kind, outcome = scm.ErrUnavailable, scm.OutcomeServerError
		}
		if errors.Is(kind, scm.ErrRateLimited) {
			return &scm.RateLimitError{Resource: "linear", Reset: time.Now().Add(time.Minute)}
		}
		return &scm.APIError{Kind: kind, Status: resp.StatusCode, Message: msg}
	}
	if out != nil {
		if err := json.Unmarshal(gr.Data, out); err != nil {
			return &scm.APIError{Kind: scm.ErrUnavailable, Message: "decode linear data", Err: err}
		}
	}
	return nil
}

type issueNode struct {
	ID          string  `json:"id"`
	Identifier  string  `json:"identifier"`
	Title       string  `json:"title"`
	Description *string `json:"description"`
	URL         string  `json:"url"`
	State       struct {
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"state"`
	Team struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	} `json:"team"`
	Labels struct {
		Nodes []labelNode `json:"nodes"`
	} `json:"labels"`
	Comments *struct {
		Nodes []struct {
			Body      string    `json:"body"`
			CreatedAt time.Time `json:"createdAt"`
			User      *struct {
				DisplayName string `json:"displayName"`
				Guest       bool   `json:"guest"`
			} `json:"user"`
		} `json:"nodes"`
	} `json:"comments"`
}

type labelNode struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Team *struct {
		Key string `json:"key"`
	} `json:"team"`
}

const issueFields = `id identifier title description url state { name type } team { id key } labels(first: 50) { nodes { id name } }`

func completed(stateType string) bool { return stateType == "completed" || stateType == "canceled" }

func convert(n issueNode) tracker.Issue {
	out := tracker.Issue{
		ID: n.Identifier, Key: strings.ToLower(n.Identifier), Title: n.Title, URL: n.URL,
		State: n.State.Name, Completed: completed(n.State.Type),
	}
	if n.Description != nil {
		out.Body = *n.Description
	}
	for _, l := range n.Labels.Nodes {
		out.Labels = append(out.Labels, l.Name)
	}
	if n.Comments != nil {
		for _, c := range n.Comments.Nodes {
			// A workspace's users are its members, and guests are invited by its admins; a
			// comment without a user was synced in by an integration (Slack, a support desk)
			// from someone outside, and is heard only if the Project trusts None.
			author, assoc := "someone", scm.AssociationNone
			if c.User != nil {
				author, assoc = c.User.DisplayName, scm.AssociationMember
				if c.User.Guest {
					assoc = scm.AssociationCollaborator
				}
			}
			out.Comments = append(out.Comments, tracker.Comment{Author: author, Association: assoc, Body: c.Body, CreatedAt: c.CreatedAt})
		}
	}
	return out
}

func (t *Tracker) issue(ctx context.Context, id string, withComments bool) (*issueNode, error) {
	key, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(key, strings.ToUpper(t.team)+"-") {
		return nil, fmt.Errorf("issue %s is not in team %s: %w", key, t.team, tracker.ErrInvalidID)
	}
	fields := issueFields
	if withComments {
		fields += ` comments(first: 50) { nodes { body createdAt user { displayName guest } } }`
	}
	var data struct {
		Issue issueNode `json:"issue"`
	}
	if err := t.do(ctx, "issue", `query($id: String!) { issue(id: $id) { `+fields+` } }`, map[string]any{"id": key}, &data); err != nil {
		return nil, fmt.Errorf("linear issue %s: %w", key, err)
	}
	return &data.Issue, nil
}

// GetIssue reads an issue and its first 50 comments.
func (t *Tracker) GetIssue(ctx context.Context, id string) (*tracker.Issue, error) {
	n, err := t.issue(ctx, id, true)
	if err != nil {
		return nil, err
	}
	is := convert(*n)
	return &is, nil
}

// IsCompleted reports whether the issue is in a completed or cancelled state.
func (t *Tracker) IsCompleted(ctx context.Context, id string) (bool, error) {
	n, err := t.issue(ctx, id, false)
	if err != nil {
		return false, err
	}
	return completed(n.State.Type), nil
}

// Closed asks for the team's completed or cancelled issues among ids by number, in one query per
// MaxClosedQuery ids (Linear's IssueFilter number comparator); since is not needed.
func (t *Tracker) Closed(ctx context.Context, ids []string, _ time.Time) (map[string]string, error) {
	byNumber := map[string]string{} // identifier in upper case → the id as named
	var numbers []int
	prefix := strings.ToUpper(t.team) + "-"
	for _, id := range ids {
		key, err := ParseID(id)
		if err != nil || !strings.HasPrefix(key, prefix) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(key, prefix))
		if err != nil {
			continue
		}
		byNumber[key] = id
		numbers = append(numbers, n)
	}
	found := map[string]string{}
	for len(numbers) > 0 {
		chunk := numbers[:min(len(numbers), tracker.MaxClosedQuery)]
		numbers = numbers[len(chunk):]
		filter := map[string]any{
			"team":   map[string]any{"key": map[string]any{"eq": t.team}},
			"number": map[string]any{"in": chunk},
			"state":  map[string]any{"type": map[string]any{"in": []string{"completed", "canceled"}}},
		}
		var data struct {
			Issues struct {
				Nodes []issueNode `json:"nodes"`
			} `json:"issues"`
		}
		if err := t.do(ctx, "issues_closed", `query($filter: IssueFilter, $first: Int) { issues(filter: $filter, first: $first) { nodes { identifier state { name type } } } }`,
			map[string]any{"filter": filter, "first": len(chunk)}, &data); err != nil {
			return nil, fmt.Errorf("closed linear issues: %w", err)
		}
		for _, n := range data.Issues.Nodes {
			if id, ok := byNumber[strings.ToUpper(n.Identifier)]; ok && completed(n.State.Type) {
				found[id] = n.State.Name
			}
		}
	}
	return found, nil
}

// labelIDs finds (and creates in the issue's team, when missing) the labels by name.
func (t *Tracker) labelIDs(ctx context.Context, teamID, teamKey string, names []string, create bool) (map[string]string, error) {
	var data struct {
		IssueLabels struct {
			Nodes []labelNode `json:"nodes"`
		} `json:"issueLabels"`
	}
	if err := t.do(ctx, "issue_labels", `query($names: [String!]) { issueLabels(filter: { name: { in: $names } }, first: 100) { nodes { id name team { key } } } }`,
		map[string]any{"names": names}, &data); err != nil {
		return nil, fmt.Errorf("linear labels: %w", err)
	}
	ids := map[string]string{}
	for _, l := range data.IssueLabels.Nodes {
		// A team's own label wins over a workspace label of the same name; other teams' labels
		// cannot be applied.
		if l.Team == nil && ids[l.Name] == "" || l.Team != nil && l.Team.Key == teamKey {
			ids[l.Name] = l.ID
		}
	}
	if !create {
		return ids, nil
	}
	for _, n := range names {
		if ids[n] != "" {
			continue
		}
		var created struct {
			IssueLabelCreate struct {
				IssueLabel labelNode `json:"issueLabel"`
			} `json:"issueLabelCreate"`
		}
		if err := t.do(ctx, "issue_label_create", `mutation($name: String!, $team: String) { issueLabelCreate(input: { name: $name, teamId: $team }) { success issueLabel { id name } } }`,
			map[string]any{"name": n, "team": teamID}, &created); err != nil {
			return nil, fmt.Errorf("create linear label %q: %w", n, err)
		}
		ids[n] = created.IssueLabelCreate.IssueLabel.ID
	}
	return ids, nil
}

func (t *Tracker) setLabels(ctx context.Context, id string, add, remove []string) error {
	n, err := t.issue(ctx, id, false)
	if err != nil {
		return err
	}
	current := map[string]string{}
	for _, l := range n.Labels.Nodes {
		current[l.Name] = l.ID
	}
	changed := false
	if len(add) > 0 {
		ids, err := t.labelIDs(ctx, n.Team.ID, n.Team.Key, add, true)
		if err != nil {
			return err
		}
		for _, name := range add {
			if current[name] == "" {
				current[name] = ids[name]
				changed = true
			}
		}
	}
	for _, name := range remove {
		if _, ok := current[name]; ok {
			delete(current, name)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	labelIDs := make([]string, 0, len(current))
	for _, v := range current {
		labelIDs = append(labelIDs, v)
	}
	return t.do(ctx, "issue_update", `mutation($id: String!, $labels: [String!]) { issueUpdate(id: $id, input: { labelIds: $labels }) { success } }`,
		map[string]any{"id": n.ID, "labels": labelIDs}, nil)
}

// AddLabels adds labels, creating them in the issue's team when the workspace has none of that
// name.
func (t *Tracker) AddLabels(ctx context.Context, id string, labels ...string) error {
	if err := t.setLabels(ctx, id, labels, nil); err != nil {
		return fmt.Errorf("label linear issue %s: %w", id, err)
	}
	return nil
}

// RemoveLabels removes labels the issue carries.
func (t *Tracker) RemoveLabels(ctx context.Context, id string, labels ...string) error {
	if err := t.setLabels(ctx, id, nil, labels); err != nil {
		return fmt.Errorf("unlabel linear issue %s: %w", id, err)
	}
	return nil
}

// ListIssues lists the team's open (not completed or cancelled) issues carrying all labels.
func (t *Tracker) ListIssues(ctx context.Context, opts tracker.ListOptions) ([]tracker.Issue, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 250)
	filter := map[string]any{
		"team":  map[string]any{"key": map[string]any{"eq": t.team}},
		"state": map[string]any{"type": map[string]any{"nin": []string{"completed", "canceled"}}},
	}
	if len(opts.Labels) > 0 {
		filter["labels"] = map[string]any{"name": map[string]any{"in": opts.Labels}}
	}
	var data struct {
		Issues struct {
			Nodes []issueNode `json:"nodes"`
		} `json:"issues"`
	}
	if err := t.do(ctx, "issues", `query($filter: IssueFilter, $first: Int) { issues(filter: $filter, first: $first) { nodes { `+issueFields+` } } }`,
		map[string]any{"filter": filter, "first": min(limit*2, 250)}, &data); err != nil {
		return nil, fmt.Errorf("list linear issues: %w", err)
	}
	var out []tracker.Issue
	for _, n := range data.Issues.Nodes {
		is := convert(n)
		// Linear's label filter matches any of the names; every one is required here.
		if hasAll(is.Labels, opts.Labels) && len(out) < limit {
			out = append(out, is)
		}
	}
	return out, nil
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
