package webhook

import (
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// The actions of pull_request whose payload states the pull request's new state. Others (labels,
// assignees, review requests) change nothing the facts cover and are re-read as before.
// "synchronized" is Gitea's spelling of GitHub's "synchronize".
var pullRequestActions = map[string]bool{
	"opened": true, "reopened": true, "closed": true, "edited": true, "synchronize": true, "synchronized": true,
	"ready_for_review": true, "converted_to_draft": true,
}

// facts are what a verified delivery states about pull requests and commits (scm.Fact), in the
// vocabulary the adapters use for the same things read from the API, so that a fact and the
// re-read that follows it agree. Anything a payload leaves unsaid gives no fact: the Poller
// then re-reads as for any hint.
func facts(event string, p *payload) []scm.Fact {
	switch event {
	case "pull_request":
		pr := p.PullRequest
		if pr == nil || pr.Head == nil || !pullRequestActions[p.Action] || validSHA(pr.Head.SHA) == "" {
			return nil
		}
		number := p.Number
		if number == 0 {
			number = pr.Number
		}
		f := &scm.PullRequestFact{Draft: pr.Draft, Title: clip.To(pr.Title, 256), HeadSHA: pr.Head.SHA, UpdatedAt: pr.UpdatedAt}
		switch {
		case pr.Merged:
			f.State, f.MergeCommitSHA = scm.StateMerged, validSHA(pr.MergeCommitSHA)
		case pr.State == "open":
			f.State = scm.StateOpen
		case pr.State == "closed":
			f.State = scm.StateClosed
		default:
			return nil
		}
		if pr.Base != nil && len(pr.Base.Ref) <= 255 {
			f.BaseRef = pr.Base.Ref
		}
		return []scm.Fact{{Number: number, PullRequest: f}}
	case "push":
		b, ok := strings.CutPrefix(p.Ref, "refs/heads/")
		if !ok || p.Deleted || validSHA(p.After) == "" || len(b) > 255 {
			return nil
		}
		return []scm.Fact{{Branch: b, SHA: p.After}}
	case "check_run":
		c := p.CheckRun
		if c == nil || c.Name == "" || validSHA(c.HeadSHA) == "" {
			return nil
		}
		chk := scm.Check{Name: clip.To(c.Name, 256), URL: clip.To(c.DetailsURL, 2048)}
		if c.CheckSuite != nil && c.CheckSuite.App != nil {
			chk.App = c.CheckSuite.App.Slug
		}
		// As the GitHub adapter maps a check run's status and conclusion.
		switch {
		case c.Status != "completed":
			chk.Outcome, chk.Conclusion = scm.CheckPending, strings.ToLower(c.Status)
		case c.Conclusion == "success":
			chk.Outcome, chk.Conclusion = scm.CheckPassed, "success"
		case c.Conclusion == "neutral" || c.Conclusion == "skipped":
			chk.Outcome, chk.Conclusion = scm.CheckSkipped, c.Conclusion
		default:
			chk.Outcome, chk.Conclusion = scm.CheckFailed, strings.ToLower(c.Conclusion)
		}
		return []scm.Fact{{SHA: c.HeadSHA, Check: &chk}}
	case "check_suite":
		if p.CheckSuite == nil || validSHA(p.CheckSuite.HeadSHA) == "" {
			return nil
		}
		return []scm.Fact{{SHA: p.CheckSuite.HeadSHA, Suite: true}}
	case "status":
		if p.Context == "" || validSHA(p.SHA) == "" {
			return nil
		}
		chk := scm.Check{Name: clip.To(p.Context, 256), URL: clip.To(p.TargetURL, 2048), Conclusion: p.State}
		// As both adapters map a commit status (Gitea's warning and skipped included).
		switch p.State {
		case "success":
			chk.Outcome = scm.CheckPassed
		case "failure", "error", "warning":
			chk.Outcome = scm.CheckFailed
		case "skipped":
			chk.Outcome = scm.CheckSkipped
		case "pending":
			chk.Outcome = scm.CheckPending
		default:
			return nil
		}
		return []scm.Fact{{SHA: p.SHA, Check: &chk}}
	}
	return nil
}

// validSHA is s when it is a commit id (40 or 64 hex digits, not all zero), else "".
func validSHA(s string) string {
	if (len(s) != 40 && len(s) != 64) || strings.Trim(s, "0") == "" {
		return ""
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return ""
		}
	}
	return s
}
