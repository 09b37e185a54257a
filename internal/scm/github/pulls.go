package github

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// probeFragment is what a probe reads: no connections, so a query of probes costs GitHub's
// minimum of one point however many pull requests it names. The head's check rollup is read
// through headRef (an object) rather than commits(last: 1) (a connection) for that reason.
const probeFragment = `fragment probe on PullRequest {
  id number url title state isDraft merged updatedAt additions deletions
  headRefName headRefOid baseRefName
  headRepositoryOwner { login }
  mergeable mergeStateStatus reviewDecision
  mergeCommit { oid }
  headRef { target { ... on Commit { oid statusCheckRollup { state } } } }
}`

// Connection requests of each kind of read, by GitHub's formula (see estimateCost).
const (
	probeRequests  = 0
	byHeadRequests = 1
	// fullRequests: reviews, reviewThreads, commits and the contexts under commits(last: 1).
	fullRequests = 4
	// byHeadCandidates is how many pull requests of one head a lookup considers.
	byHeadCandidates = 10
)

// estimateCost applies GitHub's documented formula: the connection requests a query may need,
// divided by 100 and rounded, at least 1.
func estimateCost(requests int) int {
	return max(1, (requests+50)/100)
}

func checkContextsSelection(number int, after string) string {
	afterArg := ""
	if after != "" {
		afterArg = ", after: " + strconv.Quote(after)
	}
	return fmt.Sprintf(`contexts(first: 100%s) { pageInfo { hasNextPage endCursor } nodes { __typename
  ... on CheckRun { databaseId name status conclusion detailsUrl isRequired(pullRequestNumber: %d) checkSuite { app { slug } } }
  ... on StatusContext { context state targetUrl isRequired(pullRequestNumber: %d) } } }`, afterArg, number, number)
}

const threadFields = `pageInfo { hasNextPage endCursor } nodes { id isResolved isOutdated path line originalLine }`

// fullSelection is the rest of a full read. isRequired needs the pull request's number, so it is
// written per pull request rather than in a fragment.
func fullSelection(number int) string {
	return `body
  author { login }
  reviews(last: 100) { nodes { id author { login } authorAssociation state submittedAt url commit { oid } } }
  reviewThreads(first: 100) { ` + threadFields + ` }
  comments(last: ` + strconv.Itoa(scm.MaxComments) + `) { nodes { id author { login } authorAssociation createdAt url } }
  commits(last: 1) { nodes { commit { id oid statusCheckRollup { state ` + checkContextsSelection(number, "") + ` } } } }`
}

// GraphQL shapes of the fields the adapter reads.
type gqlActor struct {
	Login string `json:"login"`
}

type gqlPageInfo struct {
	HasNextPage bool   `json:"hasNextPage"`
	EndCursor   string `json:"endCursor"`
}

type gqlReview struct {
	ID                string    `json:"id"`
	Author            *gqlActor `json:"author"`
	AuthorAssociation string    `json:"authorAssociation"`
	State             string    `json:"state"`
	SubmittedAt       time.Time `json:"submittedAt"`
	URL               string    `json:"url"`
	Commit            *struct {
		Oid string `json:"oid"`
	} `json:"commit"`
}

// gqlComment is a conversation comment without its body: bodies are read once per comment, in
// their own small queries (loadTexts), so that no batch of pull requests can be inflated past
// the response bound by outsiders' long comments.
type gqlComment struct {
	ID                string    `json:"id"`
	Author            *gqlActor `json:"author"`
	AuthorAssociation string    `json:"authorAssociation"`
	CreatedAt         time.Time `json:"createdAt"`
	URL               string    `json:"url"`
}

type gqlThread struct {
	ID           string `json:"id"`
	IsResolved   bool   `json:"isResolved"`
	IsOutdated   bool   `json:"isOutdated"`
	Path         string `json:"path"`
	Line         *int   `json:"line"`
	OriginalLine *int   `json:"originalLine"`
}

type gqlThreads struct {
	PageInfo gqlPageInfo `json:"pageInfo"`
	Nodes    []gqlThread `json:"nodes"`
}

type gqlContext struct {
	Typename   string `json:"__typename"`
	DatabaseID int64  `json:"databaseId"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion"`
	DetailsURL string `json:"detailsUrl"`
	IsRequired bool   `json:"isRequired"`
	CheckSuite *struct {
		App *struct {
			Slug string `json:"slug"`
		} `json:"app"`
	} `json:"checkSuite"`
	Context   string `json:"context"`
	State     string `json:"state"`
	TargetURL string `json:"targetUrl"`
}

type gqlContexts struct {
	PageInfo gqlPageInfo  `json:"pageInfo"`
	Nodes    []gqlContext `json:"nodes"`
}

type gqlRollup struct {
	State    string       `json:"state"`
	Contexts *gqlContexts `json:"contexts"`
}

type gqlCommit struct {
	ID                string     `json:"id"`
	Oid               string     `json:"oid"`
	StatusCheckRollup *gqlRollup `json:"statusCheckRollup"`
}

type gqlPR struct {
	ID                  string    `json:"id"`
	Number              int       `json:"number"`
	URL                 string    `json:"url"`
	Title               string    `json:"title"`
	Body                *string   `json:"body"`
	State               string    `json:"state"`
	IsDraft             bool      `json:"isDraft"`
	Merged              bool      `json:"merged"`
	Additions           int       `json:"additions"`
	Deletions           int       `json:"deletions"`
	UpdatedAt           time.Time `json:"updatedAt"`
	HeadRefName         string    `json:"headRefName"`
	HeadRefOid          string    `json:"headRefOid"`
	BaseRefName         string    `json:"baseRefName"`
	HeadRepositoryOwner *gqlActor `json:"headRepositoryOwner"`
	Mergeable           string    `json:"mergeable"`
	MergeStateStatus    string    `json:"mergeStateStatus"`
	ReviewDecision      *string   `json:"reviewDecision"`
	MergeCommit         *struct {
		Oid string `json:"oid"`
	} `json:"mergeCommit"`
	HeadRef *struct {
		Target *gqlCommit `json:"target"`
	} `json:"headRef"`
	Reviews *struct {
		Nodes []gqlReview `json:"nodes"`
	} `json:"reviews"`
	ReviewThreads *gqlThreads `json:"reviewThreads"`
	Author        *gqlActor   `json:"author"`
	Comments      *struct {
		Nodes []gqlComment `json:"nodes"`
	} `json:"comments"`
	Commits *struct {
		Nodes []struct {
			Commit gqlCommit `json:"commit"`
		} `json:"nodes"`
	} `json:"commits"`
}

func (g *gqlPR) headCommit() *gqlCommit {
	if g.Commits != nil && len(g.Commits.Nodes) > 0 {
		return &g.Commits.Nodes[0].Commit
	}
	return nil
}

// fingerprint digests what a probe sees, so that the Poller can tell when a full read is due.
func (g *gqlPR) fingerprint() string {
	rollup, target := "", ""
	if g.HeadRef != nil && g.HeadRef.Target != nil {
		target = g.HeadRef.Target.Oid
		if g.HeadRef.Target.StatusCheckRollup != nil {
			rollup = g.HeadRef.Target.StatusCheckRollup.State
		}
	}
	decision := ""
	if g.ReviewDecision != nil {
		decision = *g.ReviewDecision
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d|%s|%s|%t|%t|%s|%s|%s|%s|%s|%s|%s|%s|%s", g.Number, g.State, g.Title, g.IsDraft, g.Merged,
		g.HeadRefOid, g.BaseRefName, g.Mergeable, g.MergeStateStatus, decision, g.UpdatedAt.UTC().Format(time.RFC3339Nano),
		rollup, target, g.HeadRefName)
	return strconv.FormatUint(h.Sum64(), 36)
}

// refreshJob is one RefreshRequest on its way through the queries.
type refreshJob struct {
	idx  int
	req  scm.RefreshRequest
	repo scm.Repo
	// number to read in full once a by-head lookup found it.
	number int
	raw    *gqlPR
	err    error
}

// Refresh reads many pull requests in as few GraphQL queries as GitHub's limits allow: probes
// (100 per query, one point), full reads (25 per query) and head lookups, grouped by repository
// with aliases. Pages beyond the first 100 threads or checks and the first comment of threads
// not seen before, and the bodies of new comments and reviews, are read in follow-up queries; log excerpts of failed GitHub Actions jobs are
// read once per job over REST.
func (p *Provider) Refresh(ctx context.Context, reqs []scm.RefreshRequest) ([]scm.RefreshResult, error) {
	start := p.cfg.Clock.Now()
	jobs := make([]*refreshJob, len(reqs))
	for i, r := range reqs {
		jobs[i] = &refreshJob{idx: i, req: r, repo: r.Ref.Repo, number: r.Ref.Number}
	}
	// Phase 1: probes, full reads by number and lookups by head.
	if err := p.runJobs(ctx, jobs, false); err != nil {
		return nil, err
	}
	// Phase 2: full reads of pull requests found by head.
	var second []*refreshJob
	for _, j := range jobs {
		if j.req.Full && j.req.Ref.Number == 0 && j.err == nil && j.raw != nil {
			j.number = j.raw.Number
			second = append(second, j)
		}
	}
	if err := p.runJobs(ctx, second, true); err != nil {
		return nil, err
	}
	var fulls []*refreshJob
	for _, j := range jobs {
		if j.req.Full && j.err == nil && j.raw != nil {
			fulls = append(fulls, j)
		}
	}
	if err := p.completePages(ctx, fulls); err != nil {
		return nil, err
	}
	if err := p.loadTexts(ctx, fulls); err != nil {
		return nil, err
	}
	out := make([]scm.RefreshResult, len(jobs))
	logBudget := maxLogsPerRefresh
	for i, j := range jobs {
		if j.err != nil {
			out[i] = scm.RefreshResult{Err: j.err}
			continue
		}
		if j.raw == nil {
			out[i] = scm.RefreshResult{Fingerprint: "none"}
			continue
		}
		pr := p.convert(j.repo, j.raw, j.req.Full, start)
		if j.req.Full {
			logBudget -= p.attachLogs(ctx, pr, logBudget)
		}
		out[i] = scm.RefreshResult{PullRequest: pr, Fingerprint: j.raw.fingerprint(), RecheckAfter: p.mergeRecheck(j.raw, pr, start)}
	}
	return out, nil
}

// GitHub computes mergeability lazily, in the background: the first read after a push to the
// head or the base answers mergeable UNKNOWN (mergeStateStatus UNKNOWN) and starts the
// computation; a later read has the value. No webhook tells when it is done, so an open pull
// request whose mergeability reads unknown asks the Poller to look again (RecheckAfter) after
// as long as it has been unknown so far, at least mergeRecheckAfter and at most mergeRecheckMax:
// a value GitHub computes in seconds is seen within seconds, one it never finishes costs a few
// reads rather than one every few seconds for good.
const (
	mergeRecheckAfter = 3 * time.Second
	mergeRecheckMax   = 2 * time.Minute
)

// mergeRecheck is the RecheckAfter of a pull request read at now.
func (p *Provider) mergeRecheck(g *gqlPR, pr *scm.PullRequest, now time.Time) time.Duration {
	key := g.ID + "@" + g.HeadRefOid
	if pr.State != scm.StateOpen || (pr.Mergeable != scm.MergeableUnknown && pr.MergeState != scm.MergeStateUnknown) {
		p.unknownSince.Remove(key)
		return 0
	}
	since, ok := p.unknownSince.Get(key)
	if !ok {
		p.unknownSince.Add(key, now)
		return mergeRecheckAfter
	}
	return min(max(now.Sub(since), mergeRecheckAfter), mergeRecheckMax)
}

// runJobs sends the jobs in as few queries as the batch limits allow. forceFull reads by
// job.number in full (phase 2).
func (p *Provider) runJobs(ctx context.Context, jobs []*refreshJob, forceFull bool) error {
	var chunk []*refreshJob
	fulls := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := p.query(ctx, chunk, forceFull)
		chunk, fulls = nil, 0
		return err
	}
	for _, j := range jobs {
		full := forceFull || (j.req.Full && j.req.Ref.Number != 0)
		if len(chunk) == probeBatch || (full && fulls == fullBatch) {
			if err := flush(); err != nil {
				return err
			}
		}
		chunk = append(chunk, j)
		if full {
			fulls++
		}
	}
	return flush()
}

// query sends one aliased query for the jobs and stores each job's answer.
func (p *Provider) query(ctx context.Context, jobs []*refreshJob, forceFull bool) error {
	repoAlias := map[scm.Repo]string{}
	var repoOrder []scm.Repo
	byRepo := map[scm.Repo][]*refreshJob{}
	for _, j := range jobs {
		if _, ok := repoAlias[j.repo]; !ok {
			repoAlias[j.repo] = fmt.Sprintf("r%d", len(repoOrder))
			repoOrder = append(repoOrder, j.repo)
		}
		byRepo[j.repo] = append(byRepo[j.repo], j)
	}
	vars := map[string]any{}
	var decl []string
	var body strings.Builder
	requests := 0
	for _, repo := range repoOrder {
		ra := repoAlias[repo]
		vars["o"+ra[1:]], vars["n"+ra[1:]] = repo.Owner, repo.Name
		decl = append(decl, fmt.Sprintf("$o%s: String!, $n%s: String!", ra[1:], ra[1:]))
		fmt.Fprintf(&body, "  %s: repository(owner: $o%s, name: $n%s) {\n", ra, ra[1:], ra[1:])
		for _, j := range byRepo[repo] {
			alias := fmt.Sprintf("i%d", j.idx)
			switch {
			case forceFull || (j.req.Full && j.number != 0):
				fmt.Fprintf(&body, "    %s: pullRequest(number: %d) { ...probe %s }\n", alias, j.number, fullSelection(j.number))
				requests += fullRequests
			case j.number != 0:
				fmt.Fprintf(&body, "    %s: pullRequest(number: %d) { ...probe }\n", alias, j.number)
				requests += probeRequests
			default:
				vars["h"+alias[1:]] = j.req.Head.Branch
				decl = append(decl, fmt.Sprintf("$h%s: String!", alias[1:]))
				fmt.Fprintf(&body, "    %s: pullRequests(headRefName: $h%s, first: %d, orderBy: {field: CREATED_AT, direction: DESC}) { nodes { ...probe } }\n",
					alias, alias[1:], byHeadCandidates)
				requests += byHeadRequests
			}
		}
		body.WriteString("  }\n")
	}
	q := "query(" + strings.Join(decl, ", ") + ") {\n  " + rateLimitSelection + "\n" + body.String() + "}\n" + probeFragment
	op := "pulls.probe"
	if forceFull || requests > 0 {
		op = "pulls.read"
	}
	var data map[string]json.RawMessage
	gqlErrs, err := p.GraphQL(ctx, op, q, vars, estimateCost(requests), &data)
	if err != nil {
		return err
	}
	// Errors with a path belong to one repository or pull request.
	repoErr := map[string]error{}
	itemErr := map[string]error{}
	for _, e := range gqlErrs {
		if len(e.Path) == 0 {
			return graphQLErrorsToError([]graphQLError{e})
		}
		ra := fmt.Sprint(e.Path[0])
		var kindErr error = &scm.APIError{Kind: scm.ErrInvalid, Message: e.Message}
		if len(e.Path) == 1 {
			if e.Type == "NOT_FOUND" {
				kindErr = &scm.APIError{Kind: scm.ErrRepositoryNotFound, Status: 404, Message: e.Message}
			}
			repoErr[ra] = kindErr
			continue
		}
		if e.Type == "NOT_FOUND" {
			kindErr = &scm.APIError{Kind: scm.ErrNotFound, Status: 404, Message: e.Message}
		}
		itemErr[ra+"."+fmt.Sprint(e.Path[1])] = kindErr
	}
	for _, repo := range repoOrder {
		ra := repoAlias[repo]
		var items map[string]json.RawMessage
		if raw, ok := data[ra]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &items); err != nil {
				return &scm.APIError{Kind: scm.ErrUnavailable, Message: "decode repository", Err: err}
			}
		}
		for _, j := range byRepo[repo] {
			alias := fmt.Sprintf("i%d", j.idx)
			if e := repoErr[ra]; e != nil {
				j.err = e
				continue
			}
			if items == nil {
				j.err = &scm.APIError{Kind: scm.ErrRepositoryNotFound, Status: 404, Message: repo.String()}
				continue
			}
			if e := itemErr[ra+"."+alias]; e != nil && !errors.Is(e, scm.ErrNotFound) {
				j.err = e
				continue
			}
			raw := items[alias]
			if forceFull || j.number != 0 {
				if len(raw) == 0 || string(raw) == "null" {
					j.raw = nil // no such pull request: an answer, not an error
					continue
				}
				var pr gqlPR
				if err := json.Unmarshal(raw, &pr); err != nil {
					return &scm.APIError{Kind: scm.ErrUnavailable, Message: "decode pull request", Err: err}
				}
				j.raw = &pr
				continue
			}
			var conn struct {
				Nodes []gqlPR `json:"nodes"`
			}
			if len(raw) > 0 && string(raw) != "null" {
				if err := json.Unmarshal(raw, &conn); err != nil {
					return &scm.APIError{Kind: scm.ErrUnavailable, Message: "decode pull requests", Err: err}
				}
			}
			j.raw = pickByHead(conn.Nodes, repo, j.req.Head)
		}
	}
	return nil
}

// pickByHead chooses, among the pull requests of a branch name, the one from the right owner
// (forks share branch names): the open one, else the newest.
func pickByHead(nodes []gqlPR, repo scm.Repo, head scm.Head) *gqlPR {
	owner := head.Owner
	if owner == "" {
		owner = repo.Owner
	}
	var best *gqlPR
	for i := range nodes {
		n := &nodes[i]
		if n.HeadRepositoryOwner == nil || !strings.EqualFold(n.HeadRepositoryOwner.Login, owner) {
			continue
		}
		if n.State == "OPEN" {
			return n
		}
		if best == nil {
			best = n // nodes come newest first
		}
	}
	return best
}

// completePages reads the threads and checks beyond the first page.
func (p *Provider) completePages(ctx context.Context, jobs []*refreshJob) error {
	for _, j := range jobs {
		for page := 0; j.raw.ReviewThreads != nil && j.raw.ReviewThreads.PageInfo.HasNextPage && page < maxExtraPages; page++ {
			q := fmt.Sprintf("query($id: ID!) {\n  %s\n  node(id: $id) { ... on PullRequest { reviewThreads(first: 100, after: %s) { %s } } }\n}",
				rateLimitSelection, strconv.Quote(j.raw.ReviewThreads.PageInfo.EndCursor), threadFields)
			var data struct {
				Node struct {
					ReviewThreads gqlThreads `json:"reviewThreads"`
				} `json:"node"`
			}
			if _, err := p.GraphQL(ctx, "pulls.threads_page", q, map[string]any{"id": j.raw.ID}, 1, &data); err != nil {
				return err
			}
			j.raw.ReviewThreads.Nodes = append(j.raw.ReviewThreads.Nodes, data.Node.ReviewThreads.Nodes...)
			j.raw.ReviewThreads.PageInfo = data.Node.ReviewThreads.PageInfo
		}
		c := j.raw.headCommit()
		for page := 0; c != nil && c.StatusCheckRollup != nil && c.StatusCheckRollup.Contexts != nil &&
			c.StatusCheckRollup.Contexts.PageInfo.HasNextPage && page < maxExtraPages; page++ {
			ctxs := c.StatusCheckRollup.Contexts
			q := fmt.Sprintf("query($id: ID!) {\n  %s\n  node(id: $id) { ... on Commit { statusCheckRollup { %s } } }\n}",
				rateLimitSelection, checkContextsSelection(j.raw.Number, ctxs.PageInfo.EndCursor))
			var data struct {
				Node struct {
					StatusCheckRollup struct {
						Contexts gqlContexts `json:"contexts"`
					} `json:"statusCheckRollup"`
				} `json:"node"`
			}
			if _, err := p.GraphQL(ctx, "pulls.checks_page", q, map[string]any{"id": c.ID}, 1, &data); err != nil {
				return err
			}
			ctxs.Nodes = append(ctxs.Nodes, data.Node.StatusCheckRollup.Contexts.Nodes...)
			ctxs.PageInfo = data.Node.StatusCheckRollup.Contexts.PageInfo
		}
	}
	return nil
}

// maxExtraPages bounds the follow-up pages per pull request (1,100 threads or checks in all).
const maxExtraPages = 10

// textBatch is how many texts one follow-up query reads. GitHub allows 65,536 characters in a
// body; at up to six bytes each in JSON (an escaped control character), 25 stay under maxBody
// (about 9.4 MiB), so a query of texts is never refused for its size, however long the bodies.
const textBatch = 25

// textKind is what a text's node id names.
type textKind int

const (
	// textThread: a review thread, whose first comment is read.
	textThread textKind = iota
	// textComment: a conversation comment (IssueComment).
	textComment
	// textReview: a review's summary.
	textReview
)

// loadTexts reads what is new since the last read, textBatch per query: the first comment
// (author, body, URL) of unresolved threads, and the bodies of conversation comments and of
// reviews. Each is read once: they never change, edits aside (an edit is not news for the agent).
func (p *Provider) loadTexts(ctx context.Context, jobs []*refreshJob) error {
	type want struct {
		id   string
		kind textKind
	}
	var missing []want
	seen := map[string]bool{}
	add := func(id string, k textKind) {
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		if _, ok := p.threadComments.Get(id); !ok {
			missing = append(missing, want{id, k})
		}
	}
	for _, j := range jobs {
		if j.raw == nil {
			continue
		}
		if j.raw.ReviewThreads != nil {
			for _, t := range j.raw.ReviewThreads.Nodes {
				if !t.IsResolved {
					add(t.ID, textThread)
				}
			}
		}
		if j.raw.Comments != nil {
			for _, c := range j.raw.Comments.Nodes {
				add(c.ID, textComment)
			}
		}
		if j.raw.Reviews != nil {
			for _, r := range j.raw.Reviews.Nodes {
				// An approval's or a dismissed review's text asks nothing of the agent.
				if st := strings.ToUpper(r.State); st == "COMMENTED" || st == "CHANGES_REQUESTED" {
					add(r.ID, textReview)
				}
			}
		}
	}
	for len(missing) > 0 {
		n := min(len(missing), textBatch)
		batch := missing[:n]
		missing = missing[n:]
		var decl []string
		var body strings.Builder
		vars := map[string]any{}
		for i, w := range batch {
			decl = append(decl, fmt.Sprintf("$t%d: ID!", i))
			vars[fmt.Sprintf("t%d", i)] = w.id
			switch w.kind {
			case textThread:
				fmt.Fprintf(&body, "  t%d: node(id: $t%d) { ... on PullRequestReviewThread { comments(first: 1) { nodes { author { login } authorAssociation body url } } } }\n", i, i)
			case textComment:
				fmt.Fprintf(&body, "  t%d: node(id: $t%d) { ... on IssueComment { body } }\n", i, i)
			case textReview:
				fmt.Fprintf(&body, "  t%d: node(id: $t%d) { ... on PullRequestReview { body } }\n", i, i)
			}
		}
		q := "query(" + strings.Join(decl, ", ") + ") {\n  " + rateLimitSelection + "\n" + body.String() + "}"
		var data map[string]json.RawMessage
		if _, err := p.GraphQL(ctx, "pulls.texts", q, vars, estimateCost(len(batch)), &data); err != nil {
			return err
		}
		for i, w := range batch {
			raw := data[fmt.Sprintf("t%d", i)]
			if len(raw) == 0 || string(raw) == "null" {
				continue
			}
			var node struct {
				Body     string `json:"body"`
				Comments struct {
					Nodes []struct {
						Author            *gqlActor `json:"author"`
						AuthorAssociation string    `json:"authorAssociation"`
						Body              string    `json:"body"`
						URL               string    `json:"url"`
					} `json:"nodes"`
				} `json:"comments"`
			}
			if err := json.Unmarshal(raw, &node); err != nil {
				return &scm.APIError{Kind: scm.ErrUnavailable, Message: "decode a comment's text", Err: err}
			}
			tc := threadComment{Body: clip.Marked(node.Body, scm.MaxTextBytes, scm.ClippedMark)}
			if w.kind == textThread && len(node.Comments.Nodes) > 0 {
				c := node.Comments.Nodes[0]
				tc = threadComment{Author: login(c.Author), Association: scm.ParseGitHubAssociation(c.AuthorAssociation),
					Body: clip.Marked(c.Body, scm.MaxTextBytes, scm.ClippedMark), URL: c.URL}
			}
			p.threadComments.Add(w.id, tc)
		}
	}
	return nil
}

func login(a *gqlActor) string {
	if a == nil {
		return "ghost" // GitHub's name for a deleted account
	}
	return a.Login
}

// convert maps a GraphQL pull request to the neutral type.
func (p *Provider) convert(repo scm.Repo, g *gqlPR, full bool, fetched time.Time) *scm.PullRequest {
	pr := &scm.PullRequest{
		Repo:       repo,
		Number:     g.Number,
		URL:        g.URL,
		Title:      g.Title,
		State:      convertState(g.State, g.Merged),
		Draft:      g.IsDraft,
		Additions:  g.Additions,
		Deletions:  g.Deletions,
		Head:       scm.Head{Owner: ownerLogin(g.HeadRepositoryOwner), Branch: g.HeadRefName},
		HeadSHA:    g.HeadRefOid,
		BaseRef:    g.BaseRefName,
		Mergeable:  convertMergeable(g.Mergeable),
		MergeState: convertMergeState(g.MergeStateStatus),
		UpdatedAt:  g.UpdatedAt,
		FetchedAt:  fetched,
	}
	if g.Body != nil {
		pr.Body = *g.Body
	}
	if g.MergeCommit != nil && pr.State == scm.StateMerged {
		pr.MergeCommitSHA = g.MergeCommit.Oid
	}
	if !full {
		pr.ReviewDecision = convertDecision(g.ReviewDecision, nil)
		rollup := ""
		if g.HeadRef != nil && g.HeadRef.Target != nil && g.HeadRef.Target.Oid == g.HeadRefOid && g.HeadRef.Target.StatusCheckRollup != nil {
			rollup = g.HeadRef.Target.StatusCheckRollup.State
		}
		pr.Checks = scm.Checks{State: rollupState(rollup)}
		return pr
	}
	pr.DetailsFetchedAt = fetched
	pr.Author = login(g.Author)
	if g.Reviews != nil {
		for _, r := range g.Reviews.Nodes {
			rv := convertReview(r)
			if c, ok := p.threadComments.Get(r.ID); ok {
				rv.Body = c.Body
			}
			pr.Reviews = append(pr.Reviews, rv)
		}
	}
	if g.Comments != nil {
		for _, c := range g.Comments.Nodes {
			cm := scm.Comment{ID: c.ID, Author: login(c.Author), Association: scm.ParseGitHubAssociation(c.AuthorAssociation), URL: c.URL, CreatedAt: c.CreatedAt}
			if t, ok := p.threadComments.Get(c.ID); ok {
				cm.Body = t.Body
			}
			pr.Comments = append(pr.Comments, cm)
		}
	}
	pr.ReviewDecision = convertDecision(g.ReviewDecision, pr.Reviews)
	if g.ReviewThreads != nil {
		for _, t := range g.ReviewThreads.Nodes {
			if t.IsResolved {
				continue
			}
			th := scm.ReviewThread{ID: t.ID, Path: t.Path, Outdated: t.IsOutdated}
			switch {
			case t.Line != nil:
				th.Line = *t.Line
			case t.OriginalLine != nil:
				th.Line = *t.OriginalLine
			}
			if c, ok := p.threadComments.Get(t.ID); ok {
				th.Author, th.Association, th.Body, th.URL = c.Author, c.Association, c.Body, c.URL
			}
			pr.Threads = append(pr.Threads, th)
		}
	}
	if c := g.headCommit(); c != nil && c.StatusCheckRollup != nil {
		var nodes []gqlContext
		if c.StatusCheckRollup.Contexts != nil {
			nodes = c.StatusCheckRollup.Contexts.Nodes
		}
		pr.Checks = rollupChecks(c.StatusCheckRollup.State, nodes)
	} else {
		pr.Checks = scm.Checks{State: scm.ChecksNone}
	}
	return pr
}

func ownerLogin(a *gqlActor) string {
	if a == nil {
		return ""
	}
	return a.Login
}

func convertState(s string, merged bool) scm.PullRequestState {
	switch {
	case merged || s == "MERGED":
		return scm.StateMerged
	case s == "CLOSED":
		return scm.StateClosed
	}
	return scm.StateOpen
}

func convertMergeable(s string) scm.Mergeable {
	switch s {
	case "MERGEABLE":
		return scm.MergeableTrue
	case "CONFLICTING":
		return scm.MergeableFalse
	}
	return scm.MergeableUnknown
}

func convertMergeState(s string) scm.MergeState {
	switch s {
	case "CLEAN", "HAS_HOOKS":
		// HAS_HOOKS: mergeable with passing checks; pre-receive hooks run on merge.
		return scm.MergeStateClean
	case "BEHIND":
		return scm.MergeStateBehind
	case "BLOCKED":
		return scm.MergeStateBlocked
	case "DIRTY":
		return scm.MergeStateDirty
	case "UNSTABLE":
		return scm.MergeStateUnstable
	case "DRAFT":
		return scm.MergeStateDraft
	}
	return scm.MergeStateUnknown
}

func convertReview(r gqlReview) scm.Review {
	out := scm.Review{ID: r.ID, Author: login(r.Author), Association: scm.ParseGitHubAssociation(r.AuthorAssociation), SubmittedAt: r.SubmittedAt, URL: r.URL}
	if r.Commit != nil {
		out.CommitSHA = r.Commit.Oid
	}
	var ok bool
	if out.State, out.Dismissed, ok = scm.ParseGitHubReviewState(r.State); !ok {
		out.State = scm.ReviewStateCommented
	}
	return out
}

// convertDecision maps GitHub's reviewDecision. GitHub leaves it null when the base branch
// requires no review; reviews still say something then, so the decision is computed from each
// reviewer's latest approving or blocking review, dismissed ones left out. Only the repository's
// owners, members and collaborators count, as on GitHub: anyone may review a public repository's
// pull request, and a stranger's approval must not make it Approved (and so merge it).
func convertDecision(d *string, reviews []scm.Review) scm.ReviewDecision {
	if d != nil {
		switch *d {
		case "APPROVED":
			return scm.ReviewApproved
		case "CHANGES_REQUESTED":
			return scm.ReviewChangesRequested
		case "REVIEW_REQUIRED":
			return scm.ReviewRequired
		}
	}
	latest := map[string]scm.Review{}
	for _, r := range reviews {
		switch r.Association {
		case scm.AssociationOwner, scm.AssociationMember, scm.AssociationCollaborator:
		default:
			continue
		}
		switch r.State {
		case scm.ReviewStateApproved, scm.ReviewStateChangesRequested, scm.ReviewStateDismissed:
			if prev, ok := latest[r.Author]; !ok || !r.SubmittedAt.Before(prev.SubmittedAt) {
				latest[r.Author] = r
			}
		}
	}
	decision := scm.ReviewNone
	for _, r := range latest {
		switch r.State {
		case scm.ReviewStateChangesRequested:
			return scm.ReviewChangesRequested
		case scm.ReviewStateApproved:
			decision = scm.ReviewApproved
		}
	}
	return decision
}

func rollupState(s string) scm.ChecksState {
	switch s {
	case "SUCCESS":
		return scm.ChecksPassing
	case "FAILURE", "ERROR":
		return scm.ChecksFailing
	case "PENDING", "EXPECTED":
		return scm.ChecksPending
	}
	return scm.ChecksNone
}

// checkOutcome maps a check run's status and conclusion, or a status context's state.
func checkOutcome(c gqlContext) (scm.CheckOutcome, string) {
	if c.Typename == "StatusContext" {
		switch c.State {
		case "SUCCESS":
			return scm.CheckPassed, "success"
		case "FAILURE", "ERROR":
			return scm.CheckFailed, strings.ToLower(c.State)
		}
		return scm.CheckPending, strings.ToLower(c.State)
	}
	if c.Status != "COMPLETED" {
		return scm.CheckPending, strings.ToLower(c.Status)
	}
	switch c.Conclusion {
	case "SUCCESS":
		return scm.CheckPassed, "success"
	case "NEUTRAL", "SKIPPED":
		return scm.CheckSkipped, strings.ToLower(c.Conclusion)
	}
	// FAILURE, TIMED_OUT, CANCELLED, ACTION_REQUIRED, STARTUP_FAILURE and STALE (never finished).
	return scm.CheckFailed, strings.ToLower(c.Conclusion)
}

// rollupChecks summarises check runs and commit statuses. The overall state follows the checks
// branch protection requires when there are any, so that a failing optional check does not read
// as a failed build; GitHub's own rollup state adds the required checks that have not reported
// yet (EXPECTED).
func rollupChecks(githubState string, nodes []gqlContext) scm.Checks {
	checks := make([]scm.Check, 0, len(nodes))
	anyRequired := false
	for _, n := range nodes {
		outcome, conclusion := checkOutcome(n)
		c := scm.Check{Outcome: outcome, Conclusion: conclusion, Required: n.IsRequired}
		if n.Typename == "StatusContext" {
			c.Name, c.URL = n.Context, n.TargetURL
		} else {
			c.Name, c.URL = n.Name, n.DetailsURL
			if n.CheckSuite != nil && n.CheckSuite.App != nil {
				c.App = n.CheckSuite.App.Slug
				if c.App == "github-actions" {
					c.JobID = n.DatabaseID // an Actions check run's id is its job's id
				}
			}
		}
		anyRequired = anyRequired || n.IsRequired
		checks = append(checks, c)
	}
	out := scm.Tally(checks)
	if (out.State == scm.ChecksPassing || out.State == scm.ChecksNone) && (githubState == "EXPECTED" || (githubState == "PENDING" && anyRequired)) {
		out.State, out.Expected = scm.ChecksPending, true
	}
	return out
}

// GetPullRequests reads many pull requests in full, batched.
func (p *Provider) GetPullRequests(ctx context.Context, refs []scm.PRRef) ([]*scm.PullRequest, error) {
	return scm.GetPullRequestsByRefresh(ctx, p, refs)
}

// FindPullRequest returns the pull request of head (open first, else the newest), in full.
func (p *Provider) FindPullRequest(ctx context.Context, repo scm.Repo, head scm.Head) (*scm.PullRequest, error) {
	return scm.FindPullRequestByRefresh(ctx, p, repo, head)
}
