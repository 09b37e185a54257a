package fakegithub

import "sort"

// Check outcomes, as GitHub groups them.
var failingConclusions = map[string]bool{
	"failure": true, "timed_out": true, "cancelled": true, "action_required": true, "startup_failure": true, "stale": true,
}

// checkContext is one check run or status on a commit, latest per name.
type checkContext struct {
	run    *checkRun
	status *status
}

func (c checkContext) name() string {
	if c.run != nil {
		return c.run.Name
	}
	return c.status.Context
}

func (c checkContext) failing() bool {
	if c.run != nil {
		return c.run.Status == "completed" && failingConclusions[c.run.Conclusion]
	}
	return c.status.State == "failure" || c.status.State == "error"
}

func (c checkContext) pending() bool {
	if c.run != nil {
		return c.run.Status != "completed"
	}
	return c.status.State == "pending"
}

// contexts returns the latest check run per name and the latest status per context of sha.
func (r *Repo) contexts(sha string) []checkContext {
	var out []checkContext
	seen := map[string]int{}
	for _, cr := range r.checkRuns[sha] {
		if i, ok := seen["run:"+cr.Name]; ok {
			out[i] = checkContext{run: cr}
			continue
		}
		seen["run:"+cr.Name] = len(out)
		out = append(out, checkContext{run: cr})
	}
	for _, st := range r.statuses[sha] {
		if i, ok := seen["status:"+st.Context]; ok {
			out[i] = checkContext{status: st}
			continue
		}
		seen["status:"+st.Context] = len(out)
		out = append(out, checkContext{status: st})
	}
	return out
}

func (r *Repo) required(name string) bool {
	for _, n := range r.protection.RequiredChecks {
		if n == name {
			return true
		}
	}
	return false
}

// rollupState is GitHub's statusCheckRollup.state ("" when the commit has no checks at all).
func (r *Repo) rollupState(sha string) string {
	ctxs := r.contexts(sha)
	have := map[string]bool{}
	failing, pending, errored := false, false, false
	for _, c := range ctxs {
		have[c.name()] = true
		switch {
		case c.failing():
			failing = true
			if c.status != nil && c.status.State == "error" {
				errored = true
			}
		case c.pending():
			pending = true
		}
	}
	missing := false
	for _, n := range r.protection.RequiredChecks {
		if !have[n] {
			missing = true
		}
	}
	switch {
	case len(ctxs) == 0 && !missing:
		return ""
	case failing && errored:
		return "ERROR"
	case failing:
		return "FAILURE"
	case pending:
		return "PENDING"
	case missing:
		return "EXPECTED"
	}
	return "SUCCESS"
}

// reviewDecision is GitHub's reviewDecision: null ("") unless reviews are required.
func (r *Repo) reviewDecision(p *pull) string {
	if r.protection.RequiredApprovals == 0 {
		return ""
	}
	latest := map[string]*review{}
	for _, rv := range p.Reviews {
		if rv.State == "COMMENTED" || rv.State == "PENDING" {
			continue
		}
		switch r.association(rv.User) {
		case "OWNER", "MEMBER", "COLLABORATOR":
		default:
			continue // only reviews by those with write access count
		}
		latest[rv.User] = rv
	}
	approvals := 0
	users := make([]string, 0, len(latest))
	for u := range latest {
		users = append(users, u)
	}
	sort.Strings(users)
	for _, u := range users {
		switch latest[u].State {
		case "CHANGES_REQUESTED":
			return "CHANGES_REQUESTED"
		case "APPROVED":
			approvals++
		}
	}
	if approvals >= r.protection.RequiredApprovals {
		return "APPROVED"
	}
	return "REVIEW_REQUIRED"
}

// mergeInfo is GitHub's mergeable and mergeStateStatus for a pull request.
func (s *Server) mergeInfo(base *Repo, p *pull, peek bool) (mergeable, state string) {
	if p.State != "open" {
		return "UNKNOWN", "UNKNOWN"
	}
	baseSHA := base.refs[p.BaseRef]
	pair := baseSHA + " " + p.HeadSHA
	if s.opts.MergeableUnknownFirst && p.seenMergeable != pair {
		if !peek {
			p.seenMergeable = pair
		}
		return "UNKNOWN", "UNKNOWN"
	}
	conflict := false
	if p.Conflicting != nil {
		conflict = *p.Conflicting
	} else if baseSHA != "" && !s.isAncestor(base, baseSHA, p.HeadSHA) {
		conflict = s.conflicts(base, []string{pair})[pair]
	}
	switch {
	case conflict:
		return "CONFLICTING", "DIRTY"
	case p.Draft:
		return "MERGEABLE", "DRAFT"
	case base.protection.Strict && baseSHA != "" && !s.isAncestor(base, baseSHA, p.HeadSHA):
		return "MERGEABLE", "BEHIND"
	}
	if reason := s.blockedReason(base, p); reason != "" {
		return "MERGEABLE", "BLOCKED"
	}
	for _, c := range base.contexts(p.HeadSHA) {
		if c.failing() || c.pending() {
			return "MERGEABLE", "UNSTABLE"
		}
	}
	return "MERGEABLE", "CLEAN"
}

// blockedReason says why protection refuses a merge (GitHub's 405 messages), or "".
func (s *Server) blockedReason(base *Repo, p *pull) string {
	ok := map[string]bool{}
	for _, c := range base.contexts(p.HeadSHA) {
		if !c.failing() && !c.pending() {
			ok[c.name()] = true
		}
	}
	for _, n := range base.protection.RequiredChecks {
		if !ok[n] {
			return "Required status check \"" + n + "\" is expected."
		}
	}
	if d := base.reviewDecision(p); d != "" && d != "APPROVED" {
		if d == "CHANGES_REQUESTED" {
			return "Changes have been requested."
		}
		return "At least " + itoa(base.protection.RequiredApprovals) + " approving review is required by reviewers with write access."
	}
	return ""
}

// prewarmConflicts computes the merge check of every open pull request against its base in one
// git process, after a base branch or a head moved.
func (s *Server) prewarmConflicts(base *Repo) {
	var pairs []string
	for _, p := range base.pulls {
		if p.State != "open" || p.Conflicting != nil {
			continue
		}
		b := base.refs[p.BaseRef]
		if b == "" || s.isAncestor(base, b, p.HeadSHA) {
			continue
		}
		pairs = append(pairs, b+" "+p.HeadSHA)
	}
	if len(pairs) > 0 {
		s.conflicts(base, pairs)
	}
}
