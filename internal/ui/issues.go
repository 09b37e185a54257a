package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// IssueLister reads a Project's open tracker issues with the Project's own tracker and
// credentials (the manager's adapters): the plugin's batch lists them here, so no user's
// machine ever holds the Project's token.
type IssueLister interface {
	// ProjectIssues lists the open issues that carry every label, at most limit of them.
	// ErrNoTracker when the Project has no tracker.
	ProjectIssues(ctx context.Context, p *agentsv1alpha1.Project, labels []string, limit int) ([]tracker.Issue, error)
}

// ErrNoTracker: the Project has no spec.tracker to list issues from.
var ErrNoTracker = errors.New("the Project has no spec.tracker")

// Bounds of the issues endpoint: what one user's batch can make the manager ask of a tracker.
const (
	// DefaultIssueLimit and MaxIssueLimit bound one answer (the trackers' own page bound).
	DefaultIssueLimit = 50
	MaxIssueLimit     = 250
	// maxIssueLabels and maxIssueLabelLen bound the query.
	maxIssueLabels   = 10
	maxIssueLabelLen = 100
	// issueCacheTTL: the same question within this time is answered from memory, so a loop
	// of batch runs costs the forge one query per Project and label set per TTL.
	issueCacheTTL = 30 * time.Second
	// maxIssueCache bounds the cached answers (each at most MaxIssueLimit issues).
	maxIssueCache = 256
	// maxIssueQueries bounds the tracker queries in flight at once, across users.
	maxIssueQueries = 4
	// issueQueryTimeout bounds one tracker query.
	issueQueryTimeout = 60 * time.Second
)

// Issue is a tracker issue as the issues endpoint lists it.
type Issue struct {
	// ID is how the tracker names it ("42", "ENG-123"): a session's spec.issue.
	ID string `json:"id"`
	// Session is the name of the session for it (tracker.SessionName), whether or not it exists.
	Session string   `json:"session"`
	Title   string   `json:"title"`
	URL     string   `json:"url,omitempty"`
	Labels  []string `json:"labels,omitempty"`
}

// IssueList is the answer of GET .../projects/{name}/issues.
type IssueList struct {
	metav1.TypeMeta `json:",inline"`
	Project         string   `json:"project"`
	Labels          []string `json:"labels"`
	Items           []Issue  `json:"items"`
	// Truncated says the tracker returned a full page: more issues may match than limit.
	Truncated bool `json:"truncated,omitempty"`
}

// issueCache remembers recent answers per Project (UID) and query.
type issueCache struct {
	mu      sync.Mutex
	entries map[string]issueCacheEntry
	// queries bounds the tracker queries in flight.
	queries chan struct{}
}

type issueCacheEntry struct {
	at     time.Time
	issues []tracker.Issue
}

func newIssueCache() *issueCache {
	return &issueCache{entries: map[string]issueCacheEntry{}, queries: make(chan struct{}, maxIssueQueries)}
}

func (c *issueCache) get(key string, now time.Time) ([]tracker.Issue, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || now.Sub(e.at) >= issueCacheTTL {
		return nil, false
	}
	return e.issues, true
}

func (c *issueCache) put(key string, issues []tracker.Issue, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxIssueCache {
		for k, e := range c.entries {
			if now.Sub(e.at) >= issueCacheTTL {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxIssueCache {
			clear(c.entries)
		}
	}
	c.entries[key] = issueCacheEntry{at: now, issues: issues}
}

// parseIssueQuery reads ?label=…&label=…&limit=N. Pure.
func parseIssueQuery(q map[string][]string) (labels []string, limit int, err error) {
	for _, raw := range q["label"] {
		for _, l := range strings.Split(raw, ",") {
			l = strings.TrimSpace(l)
			switch {
			case l == "":
				continue
			case len(l) > maxIssueLabelLen:
				return nil, 0, fmt.Errorf("label %q is longer than %d bytes", l[:20]+"…", maxIssueLabelLen)
			case !utf8.ValidString(l) || strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f }):
				return nil, 0, fmt.Errorf("label %q has control characters or is not UTF-8", l)
			}
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	switch {
	case len(labels) == 0:
		return nil, 0, errors.New("pass at least one label: the issues listed carry every label given")
	case len(labels) > maxIssueLabels:
		return nil, 0, fmt.Errorf("%d labels: at most %d", len(labels), maxIssueLabels)
	}
	limit = DefaultIssueLimit
	if v := firstOf(q["limit"]); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxIssueLimit {
			return nil, 0, fmt.Errorf("limit must be from 1 to %d", MaxIssueLimit)
		}
		limit = n
	}
	slices.Sort(labels)
	return labels, limit, nil
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// issues answers GET .../namespaces/{ns}/projects/{name}/issues?label=L&limit=N: the Project's
// open tracker issues that carry every label, each with the name its session has. Reading them
// needs get on the Project: the issues are read with the Project's credentials, for the people
// who may see the Project.
func (s *Server) issues(w http.ResponseWriter, r *http.Request, u user.Info) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	ok, err := s.may(r.Context(), u, "get", "projects", ns, name)
	if err != nil {
		s.o.Log.Error(err, "Authorize UI request", "user", u.GetName())
		status(w, http.StatusInternalServerError, "InternalError", "authorization failed")
		return
	}
	if !ok {
		status(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s may not get projects.%s %q in namespace %q",
			u.GetName(), agentsv1alpha1.GroupVersion.Group, name, ns))
		return
	}
	labels, limit, err := parseIssueQuery(r.URL.Query())
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	p := &agentsv1alpha1.Project{}
	if err := s.o.Sessions.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("projects.%s %q not found", agentsv1alpha1.GroupVersion.Group, name))
			return
		}
		s.o.Log.Error(err, "Read Project for the UI", "project", ns+"/"+name)
		status(w, http.StatusInternalServerError, "InternalError", "reading the Project failed")
		return
	}
	if s.o.Issues == nil {
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "this manager lists no tracker issues")
		return
	}
	key := string(p.UID) + "/" + strconv.FormatInt(p.Generation, 10) + "/" + strconv.Itoa(limit) + "/" + strings.Join(labels, "\x00")
	now := s.o.Now()
	issues, hit := s.issueCache.get(key, now)
	if !hit {
		select {
		case s.issueCache.queries <- struct{}{}:
		default:
			w.Header().Set("Retry-After", "5")
			status(w, http.StatusTooManyRequests, "TooManyRequests", "the manager is reading other trackers; try again in a few seconds")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), issueQueryTimeout)
		issues, err = s.o.Issues.ProjectIssues(ctx, p, labels, limit)
		cancel()
		<-s.issueCache.queries
		switch {
		case errors.Is(err, ErrNoTracker):
			status(w, http.StatusUnprocessableEntity, "Invalid", fmt.Sprintf("Project %s has no spec.tracker: set the tracker whose issues batch starts sessions on", name))
			return
		case err != nil:
			s.o.Log.Info("Listing a Project's issues failed", "project", ns+"/"+name, "error", err.Error())
			status(w, http.StatusBadGateway, "BadGateway", fmt.Sprintf("the tracker of Project %s answered: %v", name, err))
			return
		}
		s.issueCache.put(key, issues, now)
	}
	list := IssueList{TypeMeta: metav1.TypeMeta{Kind: "IssueList", APIVersion: Group + "/" + Version}, Project: name, Labels: labels, Items: []Issue{}}
	// A full page: the tracker may hold more.
	list.Truncated = len(issues) >= limit
	for _, is := range issues {
		if is.Completed || len(list.Items) == limit {
			continue
		}
		key := is.Key
		if key == "" {
			key = is.ID
		}
		list.Items = append(list.Items, Issue{ID: is.ID, Session: tracker.SessionName(name, key), Title: is.Title, URL: is.URL, Labels: is.Labels})
	}
	writeJSON(w, http.StatusOK, list)
}
