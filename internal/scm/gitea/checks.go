package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// protection is what the adapter knows of a base branch's protection: the branch object (any
// reader sees whether it is protected, its required approvals and status contexts, and whether
// the token's user may merge) and, when the token may read it (repository admin), the rule with
// the review and up-to-date requirements.
type protection struct {
	branch apiBranch
	// rule is nil when the rule could not be read; its requirements are then unknown.
	rule *apiProtection
	// required are the compiled status_check_contexts.
	required []*regexp.Regexp
}

func (p *protection) protected() bool { return p != nil && p.branch.Protected }

// statusChecks reports whether merging requires statuses to pass.
func (p *protection) statusChecks() bool { return p.protected() && p.branch.EnableStatusCheck }

// protection reads the base branch and its rule once per call. Gitea answers the rule only to
// repository admins; after a refusal the adapter stops asking for protectionDeniedTTL.
func (rc *refreshCall) protection(ctx context.Context, repo scm.Repo, base string) (*protection, error) {
	key := branchKey{repo, base}
	if pr, ok := rc.prots[key]; ok {
		return pr, nil
	}
	p := rc.p
	pr := &protection{}
	err := p.Get(Op(ctx, "branches.get"), repoPath(repo)+"/branches/"+escapeBranch(base), nil, &pr.branch, scm.ErrNotFound)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	if pr.branch.Protected {
		for _, c := range pr.branch.StatusCheckContexts {
			if re, err := compileGlob(c); err == nil {
				pr.required = append(pr.required, re)
			}
		}
		if name := pr.branch.EffectiveBranchProtectionName; name != "" && p.mayReadRules(repo) {
			var rule apiProtection
			err := p.Get(Op(ctx, "branch_protections.get"), repoPath(repo)+"/branch_protections/"+url.PathEscape(name), nil, &rule, scm.ErrNotFound)
			switch {
			case err == nil:
				pr.rule = &rule
			case errors.Is(err, scm.ErrPermissionDenied) || isNotFound(err):
				p.denyRules(repo)
			case fatal(err):
				return nil, err
			}
		}
	}
	rc.prots[key] = pr
	return pr, nil
}

func (p *Provider) mayReadRules(repo scm.Repo) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.protectionDeny[repo]
	return !ok || !p.cfg.Clock.Now().Before(until)
}

func (p *Provider) denyRules(repo scm.Repo) {
	p.mu.Lock()
	p.protectionDeny[repo] = p.cfg.Clock.Now().Add(protectionDeniedTTL)
	p.mu.Unlock()
}

// isRequired reports whether branch protection requires a status context. With status checks on
// and no contexts listed, Gitea requires every status to pass.
func (p *protection) isRequired(context string) bool {
	if !p.statusChecks() {
		return false
	}
	if len(p.branch.StatusCheckContexts) == 0 {
		return true
	}
	for _, re := range p.required {
		if re.MatchString(context) {
			return true
		}
	}
	return false
}

// missingRequired counts the required context patterns no status matches yet.
func (p *protection) missingRequired(statuses []*apiStatus) int {
	if !p.statusChecks() {
		return 0
	}
	missing := 0
	for _, re := range p.required {
		found := false
		for _, s := range statuses {
			if re.MatchString(s.Context) {
				found = true
				break
			}
		}
		if !found {
			missing++
		}
	}
	return missing
}

// outcome maps a Gitea commit status state. Gitea's combined state counts warning as a failure
// and skipped as a success; Shepherd keeps skipped apart, as GitHub's skipped and neutral.
func outcome(state string) scm.CheckOutcome {
	switch state {
	case "success":
		return scm.CheckPassed
	case "failure", "error", "warning":
		return scm.CheckFailed
	case "skipped":
		return scm.CheckSkipped
	}
	return scm.CheckPending
}

// rollup summarises the latest status of each context. The overall state follows the required
// contexts when the base requires any (a failing optional context does not fail the build), and
// every context otherwise; a required context that has not reported yet keeps it Pending, as
// GitHub's EXPECTED does.
func rollup(statuses []*apiStatus, prot *protection) scm.Checks {
	checks := make([]scm.Check, 0, len(statuses))
	for _, s := range statuses {
		checks = append(checks, scm.Check{Name: s.Context, URL: s.TargetURL, Outcome: outcome(s.State), Conclusion: s.State,
			Required: prot != nil && prot.isRequired(s.Context)})
	}
	sort.SliceStable(checks, func(i, j int) bool { return checks[i].Name < checks[j].Name })
	out := scm.Tally(checks)
	if prot.statusChecks() {
		switch {
		case !hasRequired(checks):
			out.State, out.Expected = scm.ChecksPending, true // no required context has reported yet
		case out.State != scm.ChecksFailing && prot.missingRequired(statuses) > 0:
			out.State, out.Expected = scm.ChecksPending, true
		}
	}
	return out
}

func hasRequired(checks []scm.Check) bool {
	for _, c := range checks {
		if c.Required {
			return true
		}
	}
	return false
}

// requiredPassing is what Gitea's merge check computes over the required contexts
// (services/pull/commit_status.go MergeRequiredContextsCommitStatus): true only when every
// required pattern matched a status and all matched statuses succeeded or were skipped. rollup
// computes the same over the required contexts when status checks are on.
func requiredPassing(checks scm.Checks) bool { return checks.State == scm.ChecksPassing }

// compileGlob compiles a status context pattern the way Gitea's modules/glob does (gobwas/glob
// syntax without separators): * and ** match any run of characters, ? one character, [abc] and
// [!abc] a class, {a,b} alternatives, \ escapes.
func compileGlob(pattern string) (*regexp.Regexp, error) {
	rs := []rune(pattern)
	pos := 0
	var compile func(sub bool) (string, error)
	compile = func(sub bool) (string, error) {
		var b strings.Builder
		for pos < len(rs) {
			c := rs[pos]
			pos++
			switch {
			case sub && c == '}':
				return "(" + b.String() + ")", nil
			case c == '*':
				for pos < len(rs) && rs[pos] == '*' {
					pos++
				}
				b.WriteString(".*")
			case c == '?':
				b.WriteString(".")
			case c == '[':
				b.WriteString("[")
				if pos < len(rs) && rs[pos] == '!' {
					b.WriteString("^")
					pos++
				}
				closed := false
				for pos < len(rs) {
					c := rs[pos]
					pos++
					if c == ']' {
						closed = true
						break
					}
					if c == '\\' && pos < len(rs) {
						c = rs[pos]
						pos++
					}
					b.WriteString(regexp.QuoteMeta(string(c)))
				}
				if !closed {
					return "", fmt.Errorf("glob %q: unterminated character class", pattern)
				}
				b.WriteString("]")
			case c == '{':
				s, err := compile(true)
				if err != nil {
					return "", err
				}
				b.WriteString(s)
			case c == ',' && sub:
				b.WriteString("|")
			case c == '\\':
				if pos >= len(rs) {
					return "", fmt.Errorf("glob %q: nothing to escape", pattern)
				}
				b.WriteString(regexp.QuoteMeta(string(rs[pos])))
				pos++
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		if sub {
			return "", fmt.Errorf("glob %q: unterminated {", pattern)
		}
		return b.String(), nil
	}
	expr, err := compile(false)
	if err != nil {
		return nil, err
	}
	return regexp.Compile("^" + expr + "$")
}
