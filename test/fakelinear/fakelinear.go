// Package fakelinear is a fake of the Linear GraphQL API subset Shepherd's Linear tracker uses:
// issues by identifier (ENG-123), labels, comments, issue filters and label changes. Queries are
// validated against a subset of Linear's schema.
package fakelinear

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"
)

//go:embed schema.graphql
var schemaSDL string

var schema = gqlparser.MustLoadSchema(&ast.Source{Name: "linear-subset.graphql", Input: schemaSDL})

// Server is the fake Linear API.
type Server struct {
	// APIKey is the key requests must carry in Authorization (Linear takes personal API keys
	// without a scheme).
	APIKey string

	mu       sync.Mutex
	teams    map[string]*team
	issues   map[string]*Issue // by identifier
	labels   map[string]*label // by id
	nextID   int
	requests int
	srv      *httptest.Server
}

type team struct {
	id, key, name string
	next          int
}

type label struct {
	id, name string
	team     *team // nil: a workspace label
}

// Issue is an issue of the fake.
type Issue struct {
	ID          string
	Identifier  string
	Number      int
	Title       string
	Description string
	// StateName and StateType: type is one of triage, backlog, unstarted, started, completed,
	// canceled.
	StateName, StateType string
	Labels               []string // label names
	Comments             []Comment
	CreatedAt            time.Time
	team                 *team
}

// Comment on an issue.
type Comment struct {
	// Author is the user's display name; empty for a comment an integration synced in
	// (Linear then has no user on it).
	Author, Body string
	// Guest marks an author who is a guest of the workspace.
	Guest     bool
	CreatedAt time.Time
}

// New returns a fake accepting apiKey; Start serves it.
func New(apiKey string) *Server {
	return &Server{APIKey: apiKey, teams: map[string]*team{}, issues: map[string]*Issue{}, labels: map[string]*label{}}
}

// Start serves on a loopback port; URL is the GraphQL endpoint.
func (s *Server) Start() { s.srv = httptest.NewServer(s) }

// URL of the GraphQL endpoint.
func (s *Server) URL() string { return s.srv.URL + "/graphql" }

// Close stops the server.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.Close()
	}
}

// Requests counts the GraphQL requests served.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *Server) id(prefix string) string {
	s.nextID++
	return fmt.Sprintf("%s-%08d-0000-4000-8000-%012d", prefix, s.nextID, s.nextID)
}

// AddTeam creates a team by key (ENG).
func (s *Server) AddTeam(key, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.teams[key] = &team{id: s.id("team"), key: key, name: name}
}

// AddLabel creates a label of a team ("" for a workspace label).
func (s *Server) AddLabel(teamKey, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.id("label")
	s.labels[id] = &label{id: id, name: name, team: s.teams[teamKey]}
}

// AddIssue creates an issue in a team and returns its identifier (ENG-1, …). The state defaults
// to Todo (unstarted).
func (s *Server) AddIssue(teamKey string, in Issue) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.teams[teamKey]
	t.next++
	is := in
	is.team = t
	is.Number = t.next
	is.Identifier = fmt.Sprintf("%s-%d", t.key, t.next)
	is.ID = s.id("issue")
	if is.StateName == "" {
		is.StateName, is.StateType = "Todo", "unstarted"
	}
	if is.CreatedAt.IsZero() {
		is.CreatedAt = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(t.next) * time.Hour)
	}
	for _, l := range is.Labels {
		s.ensureLabel(t, l)
	}
	s.issues[is.Identifier] = &is
	return is.Identifier
}

// SetState moves an issue to a workflow state.
func (s *Server) SetState(identifier, name, typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if is := s.issues[identifier]; is != nil {
		is.StateName, is.StateType = name, typ
	}
}

// Labels returns an issue's label names.
func (s *Server) Labels(identifier string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if is := s.issues[identifier]; is != nil {
		out := append([]string(nil), is.Labels...)
		sort.Strings(out)
		return out
	}
	return nil
}

func (s *Server) ensureLabel(t *team, name string) *label {
	for _, l := range s.labels {
		if l.name == name && (l.team == nil || l.team == t) {
			return l
		}
	}
	l := &label{id: s.id("label"), name: name, team: t}
	s.labels[l.id] = l
	return l
}

type gqlError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path,omitempty"`
	Extensions map[string]any `json:"extensions,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ServeHTTP serves POST /graphql.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("Authorization") != s.APIKey {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []gqlError{{Message: "Authentication required, not authenticated",
			Extensions: map[string]any{"type": "authentication error", "code": "AUTHENTICATION_ERROR"}}}})
		return
	}
	var in struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []gqlError{{Message: "invalid JSON"}}})
		return
	}
	doc, errs := gqlparser.LoadQueryWithRules(schema, in.Query, nil)
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []gqlError{{Message: errs.Error(),
			Extensions: map[string]any{"code": "GRAPHQL_VALIDATION_FAILED"}}}})
		return
	}
	op := doc.Operations[0]
	vars, err := validator.VariableValues(schema, op, in.Variables)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []gqlError{{Message: err.Error()}}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	data := map[string]any{}
	var out []gqlError
	for _, sel := range op.SelectionSet {
		f, ok := sel.(*ast.Field)
		if !ok {
			continue
		}
		key := f.Alias
		if key == "" {
			key = f.Name
		}
		val, gerr := s.root(f.Name, f.ArgumentMap(vars))
		if gerr != nil {
			gerr.Path = []any{key}
			out = append(out, *gerr)
			data[key] = nil
			continue
		}
		data[key] = project(f.SelectionSet, val)
	}
	resp := map[string]any{"data": data}
	if len(out) > 0 {
		resp["errors"] = out
	}
	writeJSON(w, http.StatusOK, resp)
}

// project keeps the selected fields of a JSON-like value, with aliases.
func project(ss ast.SelectionSet, v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = project(ss, e)
		}
		return out
	case map[string]any:
		if len(ss) == 0 {
			return x
		}
		out := map[string]any{}
		var walk func(ast.SelectionSet)
		walk = func(ss ast.SelectionSet) {
			for _, sel := range ss {
				switch f := sel.(type) {
				case *ast.Field:
					key := f.Alias
					if key == "" {
						key = f.Name
					}
					out[key] = project(f.SelectionSet, x[f.Name])
				case *ast.InlineFragment:
					walk(f.SelectionSet)
				case *ast.FragmentSpread:
					walk(f.Definition.SelectionSet)
				}
			}
		}
		walk(ss)
		return out
	}
	return v
}

func notFound(what string) *gqlError {
	return &gqlError{Message: "Entity not found: " + what, Extensions: map[string]any{"type": "invalid input", "code": "INVALID_INPUT"}}
}

func (s *Server) root(name string, args map[string]any) (any, *gqlError) {
	switch name {
	case "viewer":
		return map[string]any{"id": "user-1", "name": "Shepherd", "displayName": "shepherd"}, nil
	case "issue":
		is := s.lookup(fmt.Sprint(args["id"]))
		if is == nil {
			return nil, notFound("Issue")
		}
		return s.issueJSON(is), nil
	case "issues":
		var list []*Issue
		for _, is := range s.issues {
			if matches(is, args["filter"]) {
				list = append(list, is)
			}
		}
		sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt.After(list[j].CreatedAt) })
		if n, ok := args["first"].(int64); ok && int(n) < len(list) {
			list = list[:n]
		}
		nodes := []any{}
		for _, is := range list {
			nodes = append(nodes, s.issueJSON(is))
		}
		return map[string]any{"nodes": nodes, "pageInfo": map[string]any{"hasNextPage": false, "endCursor": nil}}, nil
	case "issueLabels":
		var names []string
		if f, ok := args["filter"].(map[string]any); ok {
			names = comparatorValues(f["name"])
		}
		nodes := []any{}
		ids := make([]string, 0, len(s.labels))
		for id := range s.labels {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			l := s.labels[id]
			if names == nil || contains(names, l.name) {
				nodes = append(nodes, labelJSON(l))
			}
		}
		return map[string]any{"nodes": nodes, "pageInfo": map[string]any{"hasNextPage": false, "endCursor": nil}}, nil
	case "issueUpdate":
		is := s.lookup(fmt.Sprint(args["id"]))
		if is == nil {
			return nil, notFound("Issue")
		}
		input, _ := args["input"].(map[string]any)
		if ids, ok := input["labelIds"].([]any); ok {
			var names []string
			for _, id := range ids {
				l := s.labels[fmt.Sprint(id)]
				if l == nil {
					return nil, notFound("IssueLabel")
				}
				names = append(names, l.name)
			}
			is.Labels = names
		}
		if t, ok := input["title"].(string); ok {
			is.Title = t
		}
		return map[string]any{"success": true, "issue": s.issueJSON(is)}, nil
	case "issueLabelCreate":
		input, _ := args["input"].(map[string]any)
		var t *team
		for _, tm := range s.teams {
			if tm.id == fmt.Sprint(input["teamId"]) {
				t = tm
			}
		}
		l := &label{id: s.id("label"), name: fmt.Sprint(input["name"]), team: t}
		s.labels[l.id] = l
		return map[string]any{"success": true, "issueLabel": labelJSON(l)}, nil
	}
	return nil, &gqlError{Message: "the fake does not serve " + name}
}

// lookup finds an issue by identifier or id, as Linear's issue(id:) accepts both.
func (s *Server) lookup(id string) *Issue {
	if is := s.issues[strings.ToUpper(id)]; is != nil {
		return is
	}
	for _, is := range s.issues {
		if is.ID == id {
			return is
		}
	}
	return nil
}

func labelJSON(l *label) map[string]any {
	out := map[string]any{"id": l.id, "name": l.name, "team": nil}
	if l.team != nil {
		out["team"] = map[string]any{"id": l.team.id, "key": l.team.key, "name": l.team.name}
	}
	return out
}

func (s *Server) issueJSON(is *Issue) map[string]any {
	labels := []any{}
	for _, n := range is.Labels {
		labels = append(labels, labelJSON(s.ensureLabel(is.team, n)))
	}
	comments := []any{}
	for i, c := range is.Comments {
		var user any
		if c.Author != "" {
			user = map[string]any{"id": "user-" + c.Author, "name": c.Author, "displayName": c.Author, "guest": c.Guest}
		}
		comments = append(comments, map[string]any{"id": fmt.Sprintf("comment-%d", i), "body": c.Body,
			"createdAt": c.CreatedAt.UTC().Format(time.RFC3339), "user": user})
	}
	var desc any
	if is.Description != "" {
		desc = is.Description
	}
	return map[string]any{
		"id": is.ID, "identifier": is.Identifier, "number": float64(is.Number), "title": is.Title, "description": desc,
		"url":        "https://linear.app/acme/issue/" + strings.ToLower(is.Identifier),
		"branchName": strings.ToLower(is.Identifier),
		"createdAt":  is.CreatedAt.UTC().Format(time.RFC3339),
		"state":      map[string]any{"id": "state-" + is.StateType, "name": is.StateName, "type": is.StateType},
		"team":       map[string]any{"id": is.team.id, "key": is.team.key, "name": is.team.name},
		"labels":     map[string]any{"nodes": labels, "pageInfo": map[string]any{"hasNextPage": false, "endCursor": nil}},
		"comments":   map[string]any{"nodes": comments, "pageInfo": map[string]any{"hasNextPage": false, "endCursor": nil}},
	}
}

func comparatorValues(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	if eq, ok := m["eq"].(string); ok {
		return []string{eq}
	}
	if in, ok := m["in"].([]any); ok {
		out := []string{}
		for _, x := range in {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}

func compare(v any, value string) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return true
	}
	if eq, ok := m["eq"].(string); ok && eq != value {
		return false
	}
	if neq, ok := m["neq"].(string); ok && neq == value {
		return false
	}
	if in, ok := m["in"].([]any); ok && !containsAny(in, value) {
		return false
	}
	if nin, ok := m["nin"].([]any); ok && containsAny(nin, value) {
		return false
	}
	return true
}

func matches(is *Issue, filter any) bool {
	f, ok := filter.(map[string]any)
	if !ok {
		return true
	}
	if t, ok := f["team"].(map[string]any); ok && !compare(t["key"], is.team.key) {
		return false
	}
	if !compareNumber(f["number"], is.Number) {
		return false
	}
	if st, ok := f["state"].(map[string]any); ok && (!compare(st["type"], is.StateType) || !compare(st["name"], is.StateName)) {
		return false
	}
	if l, ok := f["labels"].(map[string]any); ok {
		// A label filter matches an issue having some label that satisfies it, as in Linear.
		found := false
		for _, n := range is.Labels {
			if compare(l["name"], n) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func containsAny(xs []any, x string) bool {
	for _, v := range xs {
		if fmt.Sprint(v) == x {
			return true
		}
	}
	return false
}

// compareNumber applies a NumberComparator (eq, in, nin) to n, as Linear's filters do.
func compareNumber(v any, n int) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return true
	}
	value := strconv.Itoa(n)
	if eq, ok := m["eq"]; ok && eq != nil && fmt.Sprint(eq) != value {
		return false
	}
	if in, ok := m["in"].([]any); ok && !containsAny(in, value) {
		return false
	}
	if nin, ok := m["nin"].([]any); ok && containsAny(nin, value) {
		return false
	}
	return true
}
