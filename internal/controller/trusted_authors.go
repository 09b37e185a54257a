package controller

import (
	"strings"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// authorPolicy says whose comments reach an agent's prompts (spec.trustedAuthors): anyone who can
// comment can try to steer an agent, so a comment is heard only from an author the Project
// trusts by association or by login.
type authorPolicy struct {
	associations map[scm.Association]bool
	logins       map[string]bool
}

// trustedAuthors is the Project's policy, or the default (owners, members, collaborators).
func trustedAuthors(p *agentsv1alpha1.Project) authorPolicy {
	assoc := agentsv1alpha1.DefaultTrustedAssociations
	var logins []string
	if p != nil && p.Spec.TrustedAuthors != nil {
		assoc, logins = p.Spec.TrustedAuthors.Associations, p.Spec.TrustedAuthors.Logins
	}
	pol := authorPolicy{associations: map[scm.Association]bool{}, logins: map[string]bool{}}
	for _, a := range assoc {
		pol.associations[scm.Association(a)] = true
	}
	for _, l := range logins {
		pol.logins[strings.ToLower(l)] = true
	}
	return pol
}

// hears reports whether a comment by login, of association a, reaches the agent. An empty
// association (an adapter that could not tell) is None.
func (p authorPolicy) hears(login string, a scm.Association) bool {
	if p.logins[strings.ToLower(login)] {
		return true
	}
	if a == "" {
		a = scm.AssociationNone
	}
	return p.associations[a]
}

// issueComments keeps the comments the policy hears and counts the rest.
func (p authorPolicy) issueComments(in []tracker.Comment) (kept []tracker.Comment, left int) {
	for _, c := range in {
		if p.hears(c.Author, c.Association) {
			kept = append(kept, c)
		} else {
			left++
		}
	}
	return kept, left
}

// pullRequest drops the reviews, review threads and conversation comments whose authors the policy does not hear, so
// that they neither trigger a reaction nor reach a prompt; it returns a copy and leaves pr, which
// the poller shares, as it was.
func (p authorPolicy) pullRequest(pr *scm.PullRequest) *scm.PullRequest {
	if pr == nil {
		return nil
	}
	out := *pr
	out.Reviews, out.Threads, out.Comments = nil, nil, nil
	for _, r := range pr.Reviews {
		if p.hears(r.Author, r.Association) {
			out.Reviews = append(out.Reviews, r)
		}
	}
	for _, t := range pr.Threads {
		if p.hears(t.Author, t.Association) {
			out.Threads = append(out.Threads, t)
		}
	}
	for _, c := range pr.Comments {
		if p.hears(c.Author, c.Association) {
			out.Comments = append(out.Comments, c)
		}
	}
	return &out
}
