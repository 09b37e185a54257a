package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// DefaultStepTimeout bounds each wait of Play: a phase, a push of the agent.
const DefaultStepTimeout = 5 * time.Minute

// Play follows one session from its creation to the merge, acting as CI and as the reviewer:
//
//  1. the agent's first commit becomes a pull request (PROpen or ReviewPending);
//  2. CI fails on it (CIFailed); the manager sends the failure to the agent, which pushes a fix;
//  3. CI passes on the fix (ReviewPending);
//  4. the reviewer requests changes with a line comment (ChangesRequested); the agent pushes;
//     CI passes on that commit;
//  5. the reviewer approves; the Merge reaction merges (Merged).
type Play struct {
	// Client reads and watches the session.
	Client client.WithWatch
	Forge  Forge
	// Session is the AgentSession to follow; Run's create makes it.
	Session client.ObjectKey
	// StepTimeout bounds each wait (DefaultStepTimeout when zero).
	StepTimeout time.Duration
	// Logf tells the story: what the scenario does and what it sees (the pull request, the
	// agent's commits). Nil discards it.
	Logf func(format string, args ...any)
	// OnTransition sees each phase as it passes, with the one before (nil for the first).
	OnTransition func(t Transition, prev *Transition)
	// AfterCIFailed, when set, runs once the session reached CIFailed, while the agent works on
	// the fix (the e2e suite restarts the manager here).
	AfterCIFailed func(ctx context.Context) error
	// AfterPullRequest, when set, runs once the pull request is open and before CI reports, while
	// the agent waits between turns (the e2e suite replaces the agent's pod here).
	AfterPullRequest func(ctx context.Context) error
}

// Step is one reaction the scenario waited for, and how long it took from the action (or the
// phase) that caused it.
type Step struct {
	Name string
	Took time.Duration
}

// Result is what Play saw.
type Result struct {
	// Started is when the session was created.
	Started time.Time
	// Phases are the log of the phases passed, still watched until Run's context ends.
	Phases *PhaseLog
	Steps  []Step
	// PullRequest is the merged pull request, Branch its head branch.
	PullRequest PullRequest
	Branch      string
	// Heads are the pull request's head commits the scenario acted on: the task, the CI fix and
	// the review fix.
	Heads []string
	// Commits are the pull request's commits.
	Commits []Commit
	// Session is the session as it was when it reached Merged.
	Session *agentsv1alpha1.AgentSession
}

// Run watches the session, calls create (which creates it), then plays the steps. The Result
// is returned with the error when a step fails, with what was seen until then.
func (p *Play) Run(ctx context.Context, create func(context.Context) error) (*Result, error) {
	if p.StepTimeout == 0 {
		p.StepTimeout = DefaultStepTimeout
	}
	if p.Logf == nil {
		p.Logf = func(string, ...any) {}
	}
	phases := WatchPhases(ctx, p.Client, p.Session, p.OnTransition)
	res := &Result{Phases: phases, Started: time.Now()}
	if err := create(ctx); err != nil {
		return res, err
	}
	return res, p.play(ctx, res)
}

func (p *Play) play(ctx context.Context, res *Result) error {
	log, f := res.Phases, p.Forge
	step := func(name string, took time.Duration) {
		res.Steps = append(res.Steps, Step{Name: name, Took: took})
		p.Logf("  %s: %.1fs", name, took.Seconds())
	}

	// 1. The pull request.
	t, err := log.WaitFor(ctx, 0, p.StepTimeout, agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseReviewPending)
	if err != nil {
		return fmt.Errorf("waiting for the pull request: %w", err)
	}
	step("session created → pull request open", t.At.Sub(res.Started))
	if t.Session.Status.PullRequest == nil {
		return fmt.Errorf("session %s is %s without a pull request in its status", p.Session, t.Phase)
	}
	n := int(t.Session.Status.PullRequest.Number)
	res.Branch = t.Session.Status.Branch
	pr, err := f.PullRequest(ctx, n)
	if err != nil {
		return fmt.Errorf("read pull request #%d: %w", n, err)
	}
	res.PullRequest = pr
	res.Heads = append(res.Heads, pr.HeadSHA)
	p.Logf("pull request #%d on %s: %s (branch %s)", n, f.Name(), pr.URL, res.Branch)
	seen := map[string]bool{}
	p.logCommits(ctx, n, seen)
	if p.AfterPullRequest != nil {
		if err := p.AfterPullRequest(ctx); err != nil {
			return err
		}
	}

	// 2. CI fails; the agent gets the failure.
	mark, at := log.Len(), time.Now()
	if err := f.ReportCI(ctx, pr.HeadSHA, false); err != nil {
		return fmt.Errorf("report the CI failure: %w", err)
	}
	p.Logf("CI: %s failed on %s", f.Check(), short(pr.HeadSHA))
	t, err = log.WaitFor(ctx, mark, p.StepTimeout, agentsv1alpha1.PhaseCIFailed)
	if err != nil {
		return fmt.Errorf("waiting for CIFailed: %w", err)
	}
	step("CI failure reported → CIFailed", t.At.Sub(at))
	if p.AfterCIFailed != nil {
		if err := p.AfterCIFailed(ctx); err != nil {
			return err
		}
	}
	head, err := p.waitNewHead(ctx, n, pr.HeadSHA)
	if err != nil {
		return err
	}
	step("CIFailed → the agent pushed a fix", time.Since(t.At))
	res.Heads = append(res.Heads, head)
	p.logCommits(ctx, n, seen)

	// 3. CI passes on the fix.
	at = time.Now()
	if err := f.ReportCI(ctx, head, true); err != nil {
		return fmt.Errorf("report CI success: %w", err)
	}
	p.Logf("CI: %s passed on %s", f.Check(), short(head))
	// The session may already be ReviewPending: a push the forge's webhook announced is seen at
	// once, its checks pending. What CI's success changes is the checks the status shows.
	if err := p.waitChecks(ctx, head, agentsv1alpha1.ChecksPassing, agentsv1alpha1.PhaseReviewPending); err != nil {
		return err
	}
	step("CI success reported → ReviewPending, checks passing", time.Since(at))

	// 4. The reviewer requests changes; the agent gets the comments and pushes.
	mark, at = log.Len(), time.Now()
	if err := f.RequestChanges(ctx, n); err != nil {
		return fmt.Errorf("request changes: %w", err)
	}
	p.Logf("review: changes requested, with a comment on %s:%d: %q", ReviewPath, ReviewLine, ReviewComment)
	t, err = log.WaitFor(ctx, mark, p.StepTimeout, agentsv1alpha1.PhaseChangesRequested)
	if err != nil {
		return fmt.Errorf("waiting for ChangesRequested: %w", err)
	}
	step("changes requested → ChangesRequested", t.At.Sub(at))
	head, err = p.waitNewHead(ctx, n, head)
	if err != nil {
		return err
	}
	step("ChangesRequested → the agent pushed the review fix", time.Since(t.At))
	res.Heads = append(res.Heads, head)
	p.logCommits(ctx, n, seen)
	if err := f.ReportCI(ctx, head, true); err != nil {
		return fmt.Errorf("report CI success: %w", err)
	}
	p.Logf("CI: %s passed on %s", f.Check(), short(head))

	// 5. Approved and green: the Merge reaction merges.
	mark, at = log.Len(), time.Now()
	if err := f.Approve(ctx, n); err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	p.Logf("review: approved")
	t, err = log.WaitFor(ctx, mark, p.StepTimeout, agentsv1alpha1.PhaseMerged)
	if err != nil {
		return fmt.Errorf("waiting for Merged: %w", err)
	}
	step("approved → Merged (the Merge reaction)", t.At.Sub(at))
	res.Session = t.Session
	if res.PullRequest, err = f.PullRequest(ctx, n); err != nil {
		return fmt.Errorf("read pull request #%d: %w", n, err)
	}
	if res.Commits, err = f.Commits(ctx, n); err != nil {
		return fmt.Errorf("read the commits of pull request #%d: %w", n, err)
	}
	p.Logf("pull request #%d merged: %s (merge commit %s)", n, res.PullRequest.URL, short(res.PullRequest.MergeSHA))
	return nil
}

// waitChecks waits until the session's status shows the pull request at head with checks, in
// phase.
func (p *Play) waitChecks(ctx context.Context, head string, checks agentsv1alpha1.ChecksState, phase agentsv1alpha1.SessionPhase) error {
	var last agentsv1alpha1.AgentSessionStatus
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, p.StepTimeout, true, func(ctx context.Context) (bool, error) {
		s := &agentsv1alpha1.AgentSession{}
		if err := p.Client.Get(ctx, p.Session, s); err != nil {
			return false, nil //nolint:nilerr // retried until the step timeout
		}
		last = s.Status
		pr := s.Status.PullRequest
		return s.Status.Phase == phase && pr != nil && pr.HeadSHA == head && pr.Checks == checks, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s with checks %s at %s (last: phase %s, pull request %+v): %w", phase, checks, short(head), last.Phase, last.PullRequest, err)
	}
	return nil
}

// waitNewHead waits for the pull request's head to move past old: the agent pushed.
func (p *Play) waitNewHead(ctx context.Context, n int, old string) (string, error) {
	var head string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, p.StepTimeout, true, func(ctx context.Context) (bool, error) {
		pr, err := p.Forge.PullRequest(ctx, n)
		if err != nil {
			lastErr = err
			return false, nil
		}
		head = pr.HeadSHA
		return head != old, nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the agent to push past %s: %w", short(old), errors.Join(err, lastErr))
	}
	return head, nil
}

// logCommits tells the pull request's commits not told yet.
func (p *Play) logCommits(ctx context.Context, n int, seen map[string]bool) {
	commits, err := p.Forge.Commits(ctx, n)
	if err != nil {
		p.Logf("(commits of #%d not read: %v)", n, err)
		return
	}
	for _, c := range commits {
		if !seen[c.SHA] {
			seen[c.SHA] = true
			p.Logf("agent's commit %s %q by %s", c.Short(), c.Message, c.Author)
		}
	}
}
