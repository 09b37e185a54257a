package fakegithub

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator"
)

//go:embed schema.graphql
var schemaSDL string

var schema = gqlparser.MustLoadSchema(&ast.Source{Name: "github-subset.graphql", Input: schemaSDL})

// Schema returns the GitHub schema subset the fake validates queries against.
func Schema() *ast.Schema { return schema }

type gqlErr struct {
	Type      string           `json:"type,omitempty"`
	Path      []any            `json:"path,omitempty"`
	Locations []map[string]int `json:"locations,omitempty"`
	Message   string           `json:"message"`
}

// QueryCost computes GitHub's documented rate-limit score of a query: every connection counts the
// requests needed to fill it (1 at the top level, times the first/last of every enclosing
// connection), the sum is divided by 100 and rounded, with a minimum of 1. It also returns the
// node count (GitHub's limit: 500,000) and refuses connections without first/last or with more
// than 100, as GitHub does.
func QueryCost(query string, vars map[string]any) (cost, nodes int, err error) {
	doc, errs := gqlparser.LoadQueryWithRules(schema, query, nil)
	if len(errs) > 0 {
		return 0, 0, errs
	}
	op := doc.Operations[0]
	coerced, verr := validator.VariableValues(schema, op, vars)
	if verr != nil {
		return 0, 0, verr
	}
	requests, nodes, e := connCost(op.SelectionSet, 1, coerced)
	if e != nil {
		return 0, 0, fmt.Errorf("%s: %s", e.Type, e.Message)
	}
	return max(1, (requests+50)/100), nodes, nil
}

func connCost(ss ast.SelectionSet, mult int, vars map[string]any) (requests, nodes int, err *gqlErr) {
	for _, sel := range ss {
		var sub ast.SelectionSet
		m := mult
		switch s := sel.(type) {
		case *ast.Field:
			sub = s.SelectionSet
			if s.Definition != nil && strings.HasSuffix(s.Definition.Type.Name(), "Connection") {
				args := s.ArgumentMap(vars)
				n := 0
				for _, k := range []string{"first", "last"} {
					if v, ok := args[k]; ok && v != nil {
						n = toInt(v)
					}
				}
				if n == 0 {
					return 0, 0, &gqlErr{Type: "MISSING_PAGINATION_BOUNDARIES", Path: []any{s.Alias},
						Message: fmt.Sprintf("You must provide a `first` or `last` value to properly paginate the `%s` connection.", s.Name)}
				}
				if n < 0 || n > 100 {
					return 0, 0, &gqlErr{Type: "EXCESSIVE_PAGINATION", Path: []any{s.Alias},
						Message: fmt.Sprintf("Requesting %d records on the `%s` connection exceeds the `first` limit of 100 records.", n, s.Name)}
				}
				requests += mult
				nodes += mult * n
				m = mult * n
			}
		case *ast.InlineFragment:
			sub = s.SelectionSet
		case *ast.FragmentSpread:
			sub = s.Definition.SelectionSet
		}
		r, n, e := connCost(sub, m, vars)
		if e != nil {
			return 0, 0, e
		}
		requests += r
		nodes += n
	}
	return requests, nodes, nil
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		return int(x)
	case json.Number:
		n, _ := x.Int64()
		return int(n)
	}
	return 0
}

// serveGraphQL validates, prices, charges and executes a query.
func (s *Server) serveGraphQL(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	s.mu.Lock()
	id := s.authenticate(r)
	if id == nil {
		s.stats.Unauthorized++
		s.mu.Unlock()
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials", "documentation_url": "https://docs.github.com/graphql"})
		return
	}
	if status := s.outage(id); status != 0 {
		s.mu.Unlock()
		writeJSON(w, status, outageBody(status))
		return
	}
	if ra, status := s.secondaryLimited(id, true, 1); status != 0 {
		s.stats.SecondaryRefused++
		s.setRateHeaders(w.Header(), id, "graphql")
		if ra > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(ra.Seconds())))
		}
		s.mu.Unlock()
		writeJSON(w, status, secondaryBody())
		return
	}
	s.mu.Unlock()
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "Problems parsing JSON", "documentation_url": "https://docs.github.com/graphql"})
		return
	}
	for k, v := range in.Variables {
		if n, ok := v.(json.Number); ok {
			i, _ := n.Int64()
			in.Variables[k] = i
		}
	}
	doc, errs := gqlparser.LoadQueryWithRules(schema, in.Query, nil)
	if len(errs) > 0 {
		var out []gqlErr
		for _, e := range errs {
			ge := gqlErr{Message: e.Message}
			for _, l := range e.Locations {
				ge.Locations = append(ge.Locations, map[string]int{"line": l.Line, "column": l.Column})
			}
			out = append(out, ge)
		}
		writeJSON(w, http.StatusOK, map[string]any{"errors": out})
		return
	}
	if len(doc.Operations) != 1 || doc.Operations[0].Operation != ast.Query && doc.Operations[0].Operation != ast.Mutation {
		writeJSON(w, http.StatusOK, map[string]any{"errors": []gqlErr{{Message: "the fake serves exactly one query or mutation operation"}}})
		return
	}
	op := doc.Operations[0]
	vars, verr := validator.VariableValues(schema, op, in.Variables)
	if verr != nil {
		writeJSON(w, http.StatusOK, map[string]any{"errors": []gqlErr{{Message: verr.Error()}}})
		return
	}
	requests, nodes, cerr := connCost(op.SelectionSet, 1, vars)
	if cerr != nil {
		writeJSON(w, http.StatusOK, map[string]any{"errors": []gqlErr{*cerr}})
		return
	}
	if nodes > 500000 {
		writeJSON(w, http.StatusOK, map[string]any{"errors": []gqlErr{{Type: "MAX_NODE_LIMIT_EXCEEDED",
			Message: fmt.Sprintf("This query requests up to %d possible nodes which exceeds the maximum limit of 500,000.", nodes)}}})
		return
	}
	cost := max(1, (requests+50)/100)

	s.mu.Lock()
	if s.primaryExhausted(id, "graphql", cost) {
		s.stats.PrimaryRefused++
		s.setRateHeaders(w.Header(), id, "graphql")
		w.Header().Set("X-RateLimit-Remaining", "0")
		s.mu.Unlock()
		// GitHub answers an exhausted GraphQL budget with 200 and a RATE_LIMITED error.
		writeJSON(w, http.StatusOK, map[string]any{"errors": []gqlErr{{Type: "RATE_LIMITED",
			Message: "API rate limit already exceeded for " + id.login + "."}}})
		return
	}
	s.charge(id, "graphql", cost)
	s.stats.GraphQLQueries++
	s.stats.GraphQLPoints += cost
	ex := &executor{s: s, vars: vars, id: id, cost: cost, nodes: nodes}
	var data map[string]any
	if op.Operation == ast.Mutation {
		// GitHub counts a mutation as 5 points against the secondary limit, 1 against the
		// primary; the fake charges the primary only.
		data = ex.selectionSet(op.SelectionSet, "Mutation", mutationRoot{}, nil)
		s.stats.GraphQLMutations++
	} else {
		data = ex.selectionSet(op.SelectionSet, "Query", queryRoot{}, nil)
	}
	s.setRateHeaders(w.Header(), id, "graphql")
	s.mu.Unlock()
	out := map[string]any{"data": data}
	if len(ex.errs) > 0 {
		out["errors"] = ex.errs
	}
	writeJSON(w, http.StatusOK, out)
	s.deliver(ex.hooks)
}

// executor resolves a validated query against the fake's state (under its lock).
type executor struct {
	s           *Server
	vars        map[string]any
	id          *identity
	cost, nodes int
	errs        []gqlErr
	// hooks are the webhook deliveries a mutation causes, sent after the answer.
	hooks []hook
	// merge holds each pull request's mergeable and mergeStateStatus as this query first read
	// them: one query is one read, so with MergeableUnknownFirst both fields say UNKNOWN in the
	// query that starts the computation (as on GitHub), not UNKNOWN and then the value.
	merge map[*pull][2]string
}

// mergeInfo is the server's mergeInfo, read once per pull request and query.
func (e *executor) mergeInfo(base *Repo, p *pull) (mergeable, state string) {
	if v, ok := e.merge[p]; ok {
		return v[0], v[1]
	}
	mergeable, state = e.s.mergeInfo(base, p, false)
	if e.merge == nil {
		e.merge = map[*pull][2]string{}
	}
	e.merge[p] = [2]string{mergeable, state}
	return mergeable, state
}

type queryRoot struct{}

// views of the state, each naming its GraphQL type.
type (
	prView struct {
		base *Repo
		p    *pull
	}
	actorView struct {
		login string
	}
	refView struct {
		repo   *Repo // the repository the ref lives in
		checks *Repo // the repository whose checks apply (a pull request's base)
		name   string
		sha    string
		pr     *prView
	}
	commitView struct {
		repo *Repo
		sha  string
		pr   *prView
	}
	rollupView   struct{ commit commitView }
	checkRunView struct {
		repo *Repo
		c    *checkRun
	}
	statusView struct {
		repo *Repo
		st   *status
	}
	reviewView struct {
		pr *prView
		rv *review
	}
	threadView struct {
		pr *prView
		t  *thread
	}
	reviewCommentView struct {
		pr *prView
		t  *thread
		c  *comment
	}
	// issueCommentView is a comment in a pull request's conversation.
	issueCommentView struct {
		pr *prView
		c  *comment
	}
	prCommitView struct{ pr *prView }
	suiteView    struct{ app string }
	appView      struct{ slug string }
	connView     struct {
		typ   string
		items []any
		args  map[string]any
		extra map[string]any
	}
	pageInfoView struct {
		start, end string
		next, prev bool
		hasAny     bool
	}
	rateLimitView struct{}
)

func typeOf(v any) string {
	switch x := v.(type) {
	case queryRoot:
		return "Query"
	case *Repo:
		return "Repository"
	case *prView:
		return "PullRequest"
	case actorView:
		if strings.HasSuffix(x.login, "[bot]") {
			return "Bot"
		}
		return "User"
	case *refView:
		return "Ref"
	case commitView:
		return "Commit"
	case rollupView:
		return "StatusCheckRollup"
	case checkRunView:
		return "CheckRun"
	case statusView:
		return "StatusContext"
	case reviewView:
		return "PullRequestReview"
	case threadView:
		return "PullRequestReviewThread"
	case reviewCommentView:
		return "PullRequestReviewComment"
	case issueCommentView:
		return "IssueComment"
	case prCommitView:
		return "PullRequestCommit"
	case suiteView:
		return "CheckSuite"
	case appView:
		return "App"
	case *connView:
		return x.typ
	case pageInfoView:
		return "PageInfo"
	case rateLimitView:
		return "RateLimit"
	case edgeView:
		return x.typ
	}
	return ""
}

// applies reports whether a fragment's type condition matches the runtime type.
func applies(cond, typ string) bool {
	if cond == "" || cond == typ {
		return true
	}
	def := schema.Types[cond]
	if def == nil {
		return false
	}
	for _, p := range schema.GetPossibleTypes(def) {
		if p.Name == typ {
			return true
		}
	}
	return false
}

func (e *executor) collect(ss ast.SelectionSet, typ string, fn func(*ast.Field)) {
	for _, sel := range ss {
		switch s := sel.(type) {
		case *ast.Field:
			fn(s)
		case *ast.InlineFragment:
			if applies(s.TypeCondition, typ) {
				e.collect(s.SelectionSet, typ, fn)
			}
		case *ast.FragmentSpread:
			if applies(s.Definition.TypeCondition, typ) {
				e.collect(s.Definition.SelectionSet, typ, fn)
			}
		}
	}
}

func (e *executor) selectionSet(ss ast.SelectionSet, typ string, obj any, path []any) map[string]any {
	out := map[string]any{}
	e.collect(ss, typ, func(f *ast.Field) {
		key := f.Alias
		if key == "" {
			key = f.Name
		}
		if f.Name == "__typename" {
			out[key] = typ
			return
		}
		fp := append(append([]any(nil), path...), key)
		val, err := e.resolve(typ, obj, f)
		if err != nil {
			err.Path = fp
			e.errs = append(e.errs, *err)
			out[key] = nil
			return
		}
		out[key] = e.complete(f.SelectionSet, f.Definition.Type, val, fp)
	})
	return out
}

func (e *executor) complete(ss ast.SelectionSet, t *ast.Type, val any, path []any) any {
	if val == nil {
		return nil
	}
	if t.Elem != nil {
		items, _ := val.([]any)
		out := make([]any, len(items))
		for i, it := range items {
			out[i] = e.complete(ss, t.Elem, it, append(append([]any(nil), path...), i))
		}
		return out
	}
	if len(ss) == 0 {
		return val
	}
	return e.selectionSet(ss, typeOf(val), val, path)
}

func notFoundErr(msg string) *gqlErr { return &gqlErr{Type: "NOT_FOUND", Message: msg} }

// resolve returns a field's value: a scalar, a view, a []any of either, or nil.
func (e *executor) resolve(typ string, obj any, f *ast.Field) (any, *gqlErr) {
	s := e.s
	args := f.ArgumentMap(e.vars)
	switch o := obj.(type) {
	case mutationRoot:
		return e.mutate(f, args)
	case readyPayload:
		if f.Name == "pullRequest" {
			return o.pr, nil
		}
		return o.clientID, nil
	case queryRoot:
		switch f.Name {
		case "rateLimit":
			return rateLimitView{}, nil
		case "repository":
			full := fmt.Sprint(args["owner"]) + "/" + fmt.Sprint(args["name"])
			r := s.repo(full)
			if r == nil || !e.id.canSee(full) {
				return nil, notFoundErr(fmt.Sprintf("Could not resolve to a Repository with the name '%s'.", full))
			}
			return r, nil
		case "node":
			v := e.node(fmt.Sprint(args["id"]))
			if v == nil {
				return nil, notFoundErr(fmt.Sprintf("Could not resolve to a node with the global id of '%v'", args["id"]))
			}
			return v, nil
		case "nodes":
			ids, _ := args["ids"].([]any)
			out := make([]any, len(ids))
			for i, id := range ids {
				if v := e.node(fmt.Sprint(id)); v != nil {
					out[i] = v
				}
			}
			return out, nil
		case "viewer":
			return actorView{login: e.id.login}, nil
		}
	case rateLimitView:
		w, limit := s.win(s.budgetOf(e.id), "graphql")
		switch f.Name {
		case "cost":
			return e.cost, nil
		case "limit":
			return limit, nil
		case "nodeCount":
			return e.nodes, nil
		case "remaining":
			return max(limit-w.used, 0), nil
		case "used":
			return w.used, nil
		case "resetAt":
			return w.reset.UTC().Format(time.RFC3339), nil
		}
	case *Repo:
		switch f.Name {
		case "id":
			return nodeID("R", o.ID), nil
		case "databaseId":
			return o.ID, nil
		case "name":
			return o.Name, nil
		case "nameWithOwner":
			return o.FullName(), nil
		case "owner":
			return actorView{login: o.Owner}, nil
		case "isPrivate":
			return o.Private, nil
		case "url":
			return s.baseURL + "/" + o.FullName(), nil
		case "defaultBranchRef":
			return &refView{repo: o, checks: o, name: o.DefaultBranch, sha: o.refs[o.DefaultBranch]}, nil
		case "pullRequest":
			p := o.pulls[toInt(args["number"])]
			if p == nil {
				return nil, notFoundErr(fmt.Sprintf("Could not resolve to a PullRequest with the number of %d.", toInt(args["number"])))
			}
			return &prView{base: o, p: p}, nil
		case "pullRequests":
			return e.pullRequests(o, args), nil
		}
	case *prView:
		return e.resolvePR(o, f, args)
	case actorView:
		switch f.Name {
		case "login":
			return o.login, nil
		case "id":
			return nodeID("U", int64(len(o.login))), nil
		case "url":
			return s.baseURL + "/" + o.login, nil
		case "avatarUrl":
			return "https://avatars.githubusercontent.com/u/1?v=4", nil
		case "name":
			return o.login, nil
		case "databaseId":
			return 1, nil
		}
	case *refView:
		switch f.Name {
		case "id":
			return "REF_" + base64.RawURLEncoding.EncodeToString([]byte(o.repo.FullName()+":"+o.name)), nil
		case "name":
			return o.name, nil
		case "prefix":
			return "refs/heads/", nil
		case "target":
			if o.sha == "" {
				return nil, nil
			}
			return commitView{repo: o.checks, sha: o.sha, pr: o.pr}, nil
		}
	case commitView:
		switch f.Name {
		case "id":
			return fmt.Sprintf("C_%d_%s", o.repo.ID, o.sha), nil
		case "oid":
			return o.sha, nil
		case "abbreviatedOid":
			return o.sha[:7], nil
		case "message":
			return "", nil
		case "committedDate":
			return s.now().Format(time.RFC3339), nil
		case "statusCheckRollup":
			if o.repo.rollupState(o.sha) == "" {
				return nil, nil
			}
			return rollupView{commit: o}, nil
		}
	case rollupView:
		switch f.Name {
		case "id":
			return "SCR_" + o.commit.sha, nil
		case "state":
			return o.commit.repo.rollupState(o.commit.sha), nil
		case "commit":
			return o.commit, nil
		case "contexts":
			var items []any
			runs, statuses := 0, 0
			for _, c := range o.commit.repo.contexts(o.commit.sha) {
				if c.run != nil {
					items = append(items, checkRunView{repo: o.commit.repo, c: c.run})
					runs++
				} else {
					items = append(items, statusView{repo: o.commit.repo, st: c.status})
					statuses++
				}
			}
			return &connView{typ: "StatusCheckRollupContextConnection", items: items, args: args,
				extra: map[string]any{"checkRunCount": runs, "statusContextCount": statuses}}, nil
		}
	case checkRunView:
		c := o.c
		switch f.Name {
		case "id":
			return c.NodeID, nil
		case "databaseId":
			return c.ID, nil
		case "name":
			return c.Name, nil
		case "status":
			return strings.ToUpper(c.Status), nil
		case "conclusion":
			if c.Conclusion == "" {
				return nil, nil
			}
			return strings.ToUpper(c.Conclusion), nil
		case "detailsUrl":
			return nilIfEmpty(c.DetailsURL), nil
		case "url":
			return fmt.Sprintf("%s/%s/runs/%d", s.baseURL, o.repo.FullName(), c.ID), nil
		case "isRequired":
			return o.repo.required(c.Name), nil
		case "checkSuite":
			return suiteView{app: c.App}, nil
		case "startedAt":
			return ts(c.StartedAt), nil
		case "completedAt":
			return ts(c.CompletedAt), nil
		}
	case statusView:
		switch f.Name {
		case "id":
			return o.st.NodeID, nil
		case "context":
			return o.st.Context, nil
		case "state":
			return strings.ToUpper(o.st.State), nil
		case "targetUrl":
			return nilIfEmpty(o.st.TargetURL), nil
		case "description":
			return nilIfEmpty(o.st.Description), nil
		case "isRequired":
			return o.repo.required(o.st.Context), nil
		case "createdAt":
			return ts(o.st.CreatedAt), nil
		}
	case suiteView:
		switch f.Name {
		case "app":
			if o.app == "" {
				return nil, nil
			}
			return appView{slug: o.app}, nil
		case "id":
			return "CS_" + o.app, nil
		case "databaseId":
			return 1, nil
		}
	case appView:
		switch f.Name {
		case "slug", "name":
			return o.slug, nil
		case "id":
			return "A_" + o.slug, nil
		case "databaseId":
			return 15368, nil
		}
	case reviewView:
		switch f.Name {
		case "id":
			return o.rv.NodeID, nil
		case "databaseId":
			return o.rv.ID, nil
		case "author":
			return actorView{login: o.rv.User}, nil
		case "authorAssociation":
			return o.pr.base.association(o.rv.User), nil
		case "state":
			return o.rv.State, nil
		case "submittedAt":
			return ts(o.rv.SubmittedAt), nil
		case "commit":
			// The head commit the review was submitted at (GitHub's PullRequestReview.commit).
			if o.rv.CommitID == "" {
				return nil, nil
			}
			return commitView{repo: o.pr.base, sha: o.rv.CommitID, pr: o.pr}, nil
		case "body":
			return o.rv.Body, nil
		case "url":
			return fmt.Sprintf("%s/%s/pull/%d#pullrequestreview-%d", s.baseURL, o.pr.base.FullName(), o.pr.p.Number, o.rv.ID), nil
		}
	case threadView:
		switch f.Name {
		case "id":
			return o.t.NodeID, nil
		case "isResolved":
			return o.t.Resolved, nil
		case "isOutdated":
			return o.t.Outdated, nil
		case "path":
			return o.t.Path, nil
		case "line":
			if o.t.Outdated {
				return nil, nil // GitHub has no current line for an outdated thread
			}
			return o.t.Line, nil
		case "originalLine":
			return o.t.Line, nil
		case "comments":
			var items []any
			for _, c := range o.t.Comments {
				items = append(items, reviewCommentView{pr: o.pr, t: o.t, c: c})
			}
			return &connView{typ: "PullRequestReviewCommentConnection", items: items, args: args}, nil
		}
	case reviewCommentView:
		switch f.Name {
		case "id":
			return o.c.NodeID, nil
		case "databaseId":
			return o.c.ID, nil
		case "author":
			return actorView{login: o.c.User}, nil
		case "authorAssociation":
			return o.pr.base.association(o.c.User), nil
		case "body":
			return o.c.Body, nil
		case "path":
			return o.t.Path, nil
		case "url":
			return fmt.Sprintf("%s/%s/pull/%d#discussion_r%d", s.baseURL, o.pr.base.FullName(), o.pr.p.Number, o.c.ID), nil
		}
	case issueCommentView:
		switch f.Name {
		case "id":
			return o.c.NodeID, nil
		case "databaseId":
			return o.c.ID, nil
		case "author":
			return actorView{login: o.c.User}, nil
		case "authorAssociation":
			return o.pr.base.association(o.c.User), nil
		case "body":
			return o.c.Body, nil
		case "createdAt":
			return ts(o.c.CreatedAt), nil
		case "url":
			return fmt.Sprintf("%s/%s/pull/%d#issuecomment-%d", s.baseURL, o.pr.base.FullName(), o.pr.p.Number, o.c.ID), nil
		}
	case prCommitView:
		switch f.Name {
		case "id":
			return "PRC_" + o.pr.p.HeadSHA, nil
		case "commit":
			return commitView{repo: o.pr.base, sha: o.pr.p.HeadSHA, pr: o.pr}, nil
		}
	case *connView:
		return e.resolveConn(o, f)
	case edgeView:
		switch f.Name {
		case "cursor":
			return o.cursor, nil
		case "node":
			return o.node, nil
		}
	case pageInfoView:
		switch f.Name {
		case "hasNextPage":
			return o.next, nil
		case "hasPreviousPage":
			return o.prev, nil
		case "startCursor":
			if !o.hasAny {
				return nil, nil
			}
			return o.start, nil
		case "endCursor":
			if !o.hasAny {
				return nil, nil
			}
			return o.end, nil
		}
	}
	return nil, &gqlErr{Message: fmt.Sprintf("the fake does not serve %s.%s", typ, f.Name)}
}

// mutationRoot is the Mutation type's object.
type mutationRoot struct{}

// readyPayload is markPullRequestReadyForReview's answer.
type readyPayload struct {
	clientID any
	pr       *prView
}

// mutate runs a mutation field, as GitHub documents it.
func (e *executor) mutate(f *ast.Field, args map[string]any) (any, *gqlErr) {
	switch f.Name {
	case "markPullRequestReadyForReview":
		in, _ := args["input"].(map[string]any)
		pv, ok := e.node(fmt.Sprint(in["pullRequestId"])).(*prView)
		if !ok {
			return nil, notFoundErr(fmt.Sprintf("Could not resolve to a node with the global id of '%v'", in["pullRequestId"]))
		}
		if pv.p.State != "open" {
			return nil, &gqlErr{Type: "UNPROCESSABLE", Message: "Pull request is closed"}
		}
		if pv.p.Draft {
			pv.p.Draft, pv.p.UpdatedAt = false, e.s.now()
			e.hooks = append(e.hooks, e.s.pullHook(pv.base, pv.p, "ready_for_review"))
		}
		return readyPayload{clientID: in["clientMutationId"], pr: pv}, nil
	}
	return nil, &gqlErr{Message: "the fake does not serve mutation " + f.Name}
}

func (e *executor) resolvePR(o *prView, f *ast.Field, args map[string]any) (any, *gqlErr) {
	s, p, base := e.s, o.p, o.base
	switch f.Name {
	case "additions", "deletions", "changedFiles":
		st := s.diffStat(base, p)
		return map[string]int{"additions": st.additions, "deletions": st.deletions, "changedFiles": st.files}[f.Name], nil
	case "id":
		return p.NodeID, nil
	case "databaseId":
		return int64(p.Number) + base.ID*100000, nil
	case "number":
		return p.Number, nil
	case "url":
		return fmt.Sprintf("%s/%s/pull/%d", s.baseURL, base.FullName(), p.Number), nil
	case "title":
		return p.Title, nil
	case "body":
		return p.Body, nil
	case "state":
		switch {
		case p.Merged:
			return "MERGED", nil
		case p.State == "closed":
			return "CLOSED", nil
		}
		return "OPEN", nil
	case "closed":
		return p.State != "open", nil
	case "isDraft":
		return p.Draft, nil
	case "merged":
		return p.Merged, nil
	case "mergedAt":
		return ts(p.MergedAt), nil
	case "closedAt":
		return ts(p.ClosedAt), nil
	case "createdAt":
		return ts(p.CreatedAt), nil
	case "updatedAt":
		return ts(p.UpdatedAt), nil
	case "headRefName":
		return p.HeadRef, nil
	case "headRefOid":
		return p.HeadSHA, nil
	case "baseRefName":
		return p.BaseRef, nil
	case "baseRefOid":
		return base.refs[p.BaseRef], nil
	case "isCrossRepository":
		return p.HeadRepo != base, nil
	case "headRepositoryOwner":
		return actorView{login: p.HeadRepo.Owner}, nil
	case "headRepository":
		return p.HeadRepo, nil
	case "repository":
		return base, nil
	case "author":
		return actorView{login: p.Author}, nil
	case "mergeable", "mergeStateStatus":
		m, st := e.mergeInfo(base, p)
		if f.Name == "mergeable" {
			return m, nil
		}
		return st, nil
	case "reviewDecision":
		if d := base.reviewDecision(p); d != "" {
			return d, nil
		}
		return nil, nil
	case "mergeCommit":
		if p.MergeCommitSHA == "" {
			return nil, nil
		}
		return commitView{repo: base, sha: p.MergeCommitSHA}, nil
	case "headRef":
		sha, ok := p.HeadRepo.refs[p.HeadRef]
		if !ok {
			return nil, nil // the head branch was deleted
		}
		return &refView{repo: p.HeadRepo, checks: base, name: p.HeadRef, sha: sha, pr: o}, nil
	case "baseRef":
		return &refView{repo: base, checks: base, name: p.BaseRef, sha: base.refs[p.BaseRef]}, nil
	case "reviews":
		var items []any
		for _, rv := range p.Reviews {
			if st, ok := args["states"].([]any); ok && len(st) > 0 && !containsAny(st, rv.State) {
				continue
			}
			items = append(items, reviewView{pr: o, rv: rv})
		}
		return &connView{typ: "PullRequestReviewConnection", items: items, args: args}, nil
	case "reviewThreads":
		var items []any
		for _, t := range p.Threads {
			items = append(items, threadView{pr: o, t: t})
		}
		return &connView{typ: "PullRequestReviewThreadConnection", items: items, args: args}, nil
	case "comments":
		var items []any
		for _, c := range p.Comments {
			items = append(items, issueCommentView{pr: o, c: c})
		}
		return &connView{typ: "IssueCommentConnection", items: items, args: args}, nil
	case "commits":
		// The fake keeps only the head commit of a pull request's history.
		return &connView{typ: "PullRequestCommitConnection", items: []any{prCommitView{pr: o}}, args: args}, nil
	}
	return nil, &gqlErr{Message: "the fake does not serve PullRequest." + f.Name}
}

func containsAny(xs []any, s string) bool {
	for _, x := range xs {
		if fmt.Sprint(x) == s {
			return true
		}
	}
	return false
}

func (e *executor) pullRequests(r *Repo, args map[string]any) *connView {
	var items []any
	pulls := r.sortedPulls()
	if ob, ok := args["orderBy"].(map[string]any); ok && fmt.Sprint(ob["direction"]) == "DESC" {
		sort.SliceStable(pulls, func(i, j int) bool { return pulls[i].Number > pulls[j].Number })
	}
	for _, p := range pulls {
		if h, ok := args["headRefName"].(string); ok && p.HeadRef != h {
			continue
		}
		if b, ok := args["baseRefName"].(string); ok && p.BaseRef != b {
			continue
		}
		if st, ok := args["states"].([]any); ok && len(st) > 0 {
			state := "OPEN"
			if p.Merged {
				state = "MERGED"
			} else if p.State == "closed" {
				state = "CLOSED"
			}
			if !containsAny(st, state) {
				continue
			}
		}
		items = append(items, &prView{base: r, p: p})
	}
	return &connView{typ: "PullRequestConnection", items: items, args: args}
}

func cursor(i int) string {
	return base64.StdEncoding.EncodeToString([]byte("cursor:v2:" + strconv.Itoa(i)))
}

func uncursor(c string) int {
	b, err := base64.StdEncoding.DecodeString(c)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimPrefix(string(b), "cursor:v2:"))
	if err != nil {
		return -1
	}
	return n
}

// page applies first/last/after/before to a connection's items.
func (c *connView) page() ([]any, pageInfoView) {
	lo, hi := 0, len(c.items)
	if a, ok := c.args["after"].(string); ok {
		lo = max(lo, uncursor(a)+1)
	}
	if b, ok := c.args["before"].(string); ok {
		if n := uncursor(b); n >= 0 {
			hi = min(hi, n)
		}
	}
	if lo > hi {
		lo = hi
	}
	if v, ok := c.args["first"]; ok && v != nil {
		hi = min(hi, lo+toInt(v))
	}
	if v, ok := c.args["last"]; ok && v != nil {
		lo = max(lo, hi-toInt(v))
	}
	pi := pageInfoView{next: hi < len(c.items), prev: lo > 0, hasAny: hi > lo}
	if pi.hasAny {
		pi.start, pi.end = cursor(lo), cursor(hi-1)
	}
	return c.items[lo:hi], pi
}

func (e *executor) resolveConn(c *connView, f *ast.Field) (any, *gqlErr) {
	nodes, pi := c.page()
	switch f.Name {
	case "nodes":
		return nodes, nil
	case "edges":
		lo := 0
		if pi.hasAny {
			lo = uncursor(pi.start)
		}
		out := make([]any, len(nodes))
		for i, n := range nodes {
			out[i] = edgeView{cursor: cursor(lo + i), node: n, typ: strings.TrimSuffix(c.typ, "Connection") + "Edge"}
		}
		return out, nil
	case "pageInfo":
		return pi, nil
	case "totalCount":
		return len(c.items), nil
	}
	if v, ok := c.extra[f.Name]; ok {
		return v, nil
	}
	return nil, &gqlErr{Message: "the fake does not serve " + c.typ + "." + f.Name}
}

// node finds an object by its global id.
func (e *executor) node(id string) any {
	s := e.s
	if rest, ok := strings.CutPrefix(id, "C_"); ok {
		repoID, sha, _ := strings.Cut(rest, "_")
		for _, name := range s.repoNames() {
			r := s.repos[name]
			if strconv.FormatInt(r.ID, 10) == repoID && e.id.canSee(name) {
				return commitView{repo: r, sha: sha}
			}
		}
		return nil
	}
	for _, name := range s.repoNames() {
		if !e.id.canSee(name) {
			continue
		}
		r := s.repos[name]
		for _, p := range r.pulls {
			pv := &prView{base: r, p: p}
			if p.NodeID == id {
				return pv
			}
			for _, t := range p.Threads {
				if t.NodeID == id {
					return threadView{pr: pv, t: t}
				}
			}
			for _, rv := range p.Reviews {
				if rv.NodeID == id {
					return reviewView{pr: pv, rv: rv}
				}
			}
			for _, c := range p.Comments {
				if c.NodeID == id {
					return issueCommentView{pr: pv, c: c}
				}
			}
		}
	}
	return nil
}

type edgeView struct {
	cursor string
	node   any
	typ    string
}
