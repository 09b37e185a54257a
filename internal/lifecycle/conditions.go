package lifecycle

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// maxConditionMessage is metav1.Condition's limit on a message.
const maxConditionMessage = 32768

// conditions sets every condition this package owns on a copy of the previous list.
// LastTransitionTime moves only when a condition's status changes (meta.SetStatusCondition).
func (e *eval) conditions(d Decision) []metav1.Condition {
	conds := make([]metav1.Condition, 0, len(e.prev.Conditions)+10)
	for _, c := range e.prev.Conditions {
		conds = append(conds, *c.DeepCopy())
	}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&conds, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: clip.Marked(msg, maxConditionMessage, truncated),
			ObservedGeneration: e.in.Generation, LastTransitionTime: metav1.NewTime(e.now),
		})
	}
	only := func(t string, on bool, reason, msg string) {
		if on {
			set(t, metav1.ConditionTrue, reason, msg)
		} else {
			meta.RemoveStatusCondition(&conds, t)
		}
	}

	stalled, stalledReason, stalledMsg := e.stalled(d)
	reconciling, recReason, recMsg := e.reconciling(d)
	// kstatus reads Reconciling before Stalled; a session that needs a human is not in progress.
	only(agentsv1alpha1.ConditionReconciling, reconciling && !stalled, recReason, recMsg)
	only(agentsv1alpha1.ConditionStalled, stalled, stalledReason, stalledMsg)

	if ready(e.phase) {
		set(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, e.reason, e.message)
	} else {
		set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, e.reason, e.message)
	}
	s, r, m := e.workspaceCondition()
	set(agentsv1alpha1.ConditionWorkspaceReady, s, r, m)
	s, r, m = e.agentCondition()
	set(agentsv1alpha1.ConditionAgentRunning, s, r, m)
	s, r, m = e.pullRequestCondition()
	set(agentsv1alpha1.ConditionPullRequestOpen, s, r, m)
	s, r, m = e.checksCondition()
	set(agentsv1alpha1.ConditionChecksPassing, s, r, m)
	s, r, m = e.reviewCondition()
	set(agentsv1alpha1.ConditionReviewApproved, s, r, m)
	s, r, m = e.mergeableCondition()
	set(agentsv1alpha1.ConditionMergeable, s, r, m)
	// Only a metered session's cost can be known whole; an agent's own report is its word. A
	// decision without a fresh report keeps what was said, at this generation.
	for _, t := range []string{agentsv1alpha1.ConditionCostKnown, agentsv1alpha1.ConditionUsageConsistent} {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			set(t, c.Status, c.Reason, c.Message)
		}
	}
	if u := d.Usage; u != nil && u.Source == agentsv1alpha1.UsageFromProxy {
		if missing := UnpricedModels(u); len(missing) > 0 {
			set(agentsv1alpha1.ConditionCostKnown, metav1.ConditionFalse, agentsv1alpha1.ReasonPriceUnknown,
				fmt.Sprintf("No price for %s: the tokens are counted, their cost is not in costUSD; add the model to the price table (docs/cost.md)", strings.Join(missing, ", ")))
		} else {
			set(agentsv1alpha1.ConditionCostKnown, metav1.ConditionTrue, agentsv1alpha1.ReasonPriced, "Cost at the prices of the table of "+u.PriceTable)
		}
		if a := u.Agent; a != nil && (a.OutputTokens > 0 || u.OutputTokens > 0) {
			msg := fmt.Sprintf("output tokens: the agent's CLI reported %d, the model proxy counted %d", a.OutputTokens, u.OutputTokens)
			if UsageAgrees(a.OutputTokens, u.OutputTokens) {
				set(agentsv1alpha1.ConditionUsageConsistent, metav1.ConditionTrue, agentsv1alpha1.ReasonUsageAgrees, msg)
			} else {
				set(agentsv1alpha1.ConditionUsageConsistent, metav1.ConditionFalse, agentsv1alpha1.ReasonUsageMismatch,
					msg+", more than 5% apart; the proxy's count stands (it sees every request)")
			}
		}
	}

	attention, aReason, aMsg := stalled, stalledReason, stalledMsg
	if !attention && e.phase == agentsv1alpha1.PhaseMergeable && e.s.reaction(agentsv1alpha1.TriggerApprovedAndGreen).Action != agentsv1alpha1.ReactionMerge {
		attention, aReason, aMsg = true, agentsv1alpha1.ReasonMergeable, e.message+": a human merges it"
	}
	if !attention && e.mergeGated != "" {
		attention, aReason, aMsg = true, agentsv1alpha1.ReasonMergeGated, e.message+": "+e.mergeGated
	}
	if attention {
		set(agentsv1alpha1.ConditionNeedsAttention, metav1.ConditionTrue, aReason, aMsg)
	} else {
		set(agentsv1alpha1.ConditionNeedsAttention, metav1.ConditionFalse, agentsv1alpha1.ReasonNothingNeedsAction, "Nothing needs a human")
	}
	return conds
}

// ready: the session reached what its spec asks for: its work merged or ended (Merged, Done),
// or it is Stopped as asked. `kubectl wait --for=condition=Ready` thus waits for the outcome;
// a live session reports Reconciling (or Stalled) meanwhile, which kstatus reads as InProgress.
func ready(p agentsv1alpha1.SessionPhase) bool {
	switch p {
	case agentsv1alpha1.PhaseMerged, agentsv1alpha1.PhaseDone, agentsv1alpha1.PhaseStopped:
		return true
	}
	return false
}

// stalled: progress needs a human.
func (e *eval) stalled(d Decision) (bool, string, string) {
	switch {
	case e.phase == agentsv1alpha1.PhaseErrored, e.phase == agentsv1alpha1.PhaseNeedsInput, e.phase == agentsv1alpha1.PhaseStuck:
		return true, e.reason, e.message
	case e.phase == agentsv1alpha1.PhaseSpawning && (e.reason == agentsv1alpha1.ReasonWorktreeNotFound || e.reason == agentsv1alpha1.ReasonSpawnDeadlineExceeded):
		return true, e.reason, e.message
	case e.phase.IsTerminal():
		return false, "", ""
	}
	for _, r := range d.Reactions {
		if r.Escalated && r.Episode != "" {
			return true, agentsv1alpha1.ReasonEscalated, fmt.Sprintf("The %s reaction escalated to a human after %d attempt(s)", r.Trigger, r.Attempts)
		}
	}
	if t := e.phaseTrigger(); t != "" {
		if a := e.s.reaction(t).Action; a != agentsv1alpha1.ReactionSendToAgent {
			return true, agentsv1alpha1.ReasonAwaitingHuman, fmt.Sprintf("%s; the %s reaction is %s, so a human acts", e.message, t, a)
		}
	}
	return false, "", ""
}

// reconciling: the session is live and on its way, by Shepherd's or the agent's work or by the
// pull request's normal course (checks running, a review awaited).
func (e *eval) reconciling(d Decision) (bool, string, string) {
	switch {
	case e.phase.IsTerminal():
		return false, "", ""
	case e.signal != "" && !e.graceExpired:
		return true, agentsv1alpha1.ReasonSignalGrace, "Waiting out a missing signal: " + e.signalDetail + " (" + e.graceProgress() + ")"
	case e.in.PullRequest.ForgeError != "" && !e.in.PullRequest.Observed:
		// The pull request's conditions keep the last state read; say that it may be behind.
		return true, orDefault(e.in.PullRequest.ForgeErrorReason, agentsv1alpha1.ReasonForgeUnavailable),
			"The forge cannot be read (" + clip.Marked(e.in.PullRequest.ForgeError, 300, truncated) + "); the pull request's status is the last one read, and Shepherd retries. " + e.message
	}
	if m := e.mergeRetry; m != nil {
		return true, agentsv1alpha1.ReasonMergeRetrying, fmt.Sprintf("The forge could not merge %s at %s for now (%s); attempt %d failed, Shepherd asks again at %s",
			e.pr.ref(), short(m.HeadSHA), clip.Marked(m.Error, 300, truncated), m.Attempts, stamp(m.RetryAt))
	}
	if t := e.phaseTrigger(); t != "" {
		for _, r := range d.Reactions {
			if r.Trigger == t && r.Attempts > 0 && r.Episode != "" {
				return true, agentsv1alpha1.ReasonAgentFixing, fmt.Sprintf("%s; sent to the agent (attempt %d)", e.message, r.Attempts)
			}
		}
	}
	return true, e.reason, e.message
}

// phaseTrigger is the trigger an agent-fixable phase answers to.
func (e *eval) phaseTrigger() agentsv1alpha1.ReactionTrigger {
	switch e.phase {
	case agentsv1alpha1.PhaseCIFailed:
		return agentsv1alpha1.TriggerCIFailed
	case agentsv1alpha1.PhaseChangesRequested:
		return agentsv1alpha1.TriggerChangesRequested
	}
	return ""
}

func (e *eval) workspaceCondition() (metav1.ConditionStatus, string, string) {
	ws := e.in.Workspace
	switch {
	case ws.NotFound:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonWorktreeNotFound, "The Worktree named by spec.worktreeRef does not exist"
	case ws.Phase == agentsv1alpha1.WorktreeReady:
		return metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded, "The Worktree is Ready"
	case ws.Phase == "" || ws.Phase == agentsv1alpha1.WorktreePending:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonWorkspacePending, withDetail("The Worktree is not ready yet", ws.Message)
	}
	return metav1.ConditionFalse, workspaceReason(ws), withDetail("The Worktree is "+string(ws.Phase), ws.Message)
}

func (e *eval) agentCondition() (metav1.ConditionStatus, string, string) {
	a := e.agent
	switch e.phase {
	case agentsv1alpha1.PhaseQueued:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonQueued, "The session is queued"
	case agentsv1alpha1.PhaseStopped:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonAgentStopped, "The session is Stopped"
	case agentsv1alpha1.PhaseMerged, agentsv1alpha1.PhaseDone, agentsv1alpha1.PhaseErrored:
		if e.prevPhase == e.phase {
			// An ended session keeps what was said when it ended: the agent's last report stops
			// counting as current once the phase is terminal, and must not rewrite the record.
			if c := meta.FindStatusCondition(e.prev.Conditions, agentsv1alpha1.ConditionAgentRunning); c != nil {
				return c.Status, c.Reason, c.Message
			}
		}
		if a.exit != nil {
			return metav1.ConditionFalse, agentsv1alpha1.ReasonAgentExited, "The agent exited (" + a.exit.describe() + ")"
		}
		return metav1.ConditionFalse, agentsv1alpha1.ReasonAgentStopped, "The session has ended"
	}
	switch {
	case a.live:
		switch a.state {
		case agentsv1alpha1.ActivityWaitingForInput:
			return metav1.ConditionTrue, agentsv1alpha1.ReasonWaitingForInput, questionMessage(e.in.Runner.Question)
		case agentsv1alpha1.ActivityBlocked:
			return metav1.ConditionTrue, agentsv1alpha1.ReasonAgentBlocked, withDetail("The agent is blocked", e.in.Runner.Message)
		}
		if e.idle() {
			return metav1.ConditionTrue, agentsv1alpha1.ReasonAgentIdle, "No agent activity since " + stamp(e.agent.lastActivity) + e.restartNote()
		}
		return metav1.ConditionTrue, agentsv1alpha1.ReasonAgentActive, "The agent is running" + e.restartNote()
	case a.exit != nil:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonAgentExited, "The agent exited (" + a.exit.describe() + ")"
	case e.signal != "" && e.signal != signalPullRequest && !e.graceExpired:
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonSignalGrace, e.signalDetail + " (" + e.graceProgress() + ")"
	case e.signal == signalRunner:
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonRunnerSilent, e.signalDetail
	case e.signal == signalPod:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonPodMissing, e.signalDetail
	case e.signal == signalContainer:
		return metav1.ConditionFalse, containerReason(e.in.Pod.WaitingReason), e.signalDetail
	}
	return metav1.ConditionFalse, agentsv1alpha1.ReasonPodPending, "The agent is not running yet"
}

// restartNote tells that the kubelet restarted the agent container (the runner resumes the
// agent's conversation after a restart, so the session goes on; a user sees why it paused).
func (e *eval) restartNote() string {
	switch n := e.in.Pod.Restarts; {
	case n == 1:
		return " (its container restarted once)"
	case n > 1:
		return fmt.Sprintf(" (its container restarted %d times)", n)
	}
	return ""
}

func (e *eval) pullRequestCondition() (metav1.ConditionStatus, string, string) {
	p := e.pr
	switch {
	case !p.known:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonNoPullRequest, "No pull request yet"
	case p.state == agentsv1alpha1.PullRequestMerged:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonPullRequestMerged, "Pull request " + p.ref() + " was merged"
	case p.state == agentsv1alpha1.PullRequestClosed:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonPullRequestClosed, "Pull request " + p.ref() + " was closed without merging"
	case p.draft:
		return metav1.ConditionTrue, agentsv1alpha1.ReasonPullRequestDraft, "Draft pull request " + p.ref() + " is open: " + orDefault(p.url, p.ref())
	}
	return metav1.ConditionTrue, agentsv1alpha1.ReasonPullRequestOpened, "Pull request " + p.ref() + " is open: " + orDefault(p.url, p.ref())
}

func (e *eval) checksCondition() (metav1.ConditionStatus, string, string) {
	p := e.pr
	if !p.known {
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonNoPullRequest, "No pull request yet"
	}
	at := " on " + p.ref() + " at " + short(p.headSHA)
	switch p.checks {
	case agentsv1alpha1.ChecksPassing:
		return metav1.ConditionTrue, agentsv1alpha1.ReasonChecksPassed, "Checks pass" + at
	case agentsv1alpha1.ChecksFailing:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonChecksFailed, "Checks failed" + at + failedNames(p.failed)
	case agentsv1alpha1.ChecksPending:
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonChecksPending, "Checks are running" + at
	}
	return metav1.ConditionTrue, agentsv1alpha1.ReasonNoChecks, "No checks" + at
}

func (e *eval) reviewCondition() (metav1.ConditionStatus, string, string) {
	p := e.pr
	if !p.known {
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonNoPullRequest, "No pull request yet"
	}
	switch p.review {
	case agentsv1alpha1.ReviewApproved:
		return metav1.ConditionTrue, agentsv1alpha1.ReasonApproved, "Pull request " + p.ref() + " is approved"
	case agentsv1alpha1.ReviewChangesRequested:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonChangesRequested, "A reviewer requested changes on " + p.ref()
	case agentsv1alpha1.ReviewRequired:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonReviewRequired, "Pull request " + p.ref() + " waits for a review"
	}
	return metav1.ConditionTrue, agentsv1alpha1.ReasonNoReviewRequired, "No review is required on " + p.ref()
}

func (e *eval) mergeableCondition() (metav1.ConditionStatus, string, string) {
	p := e.pr
	switch {
	case !p.known:
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonNoPullRequest, "No pull request yet"
	case p.state == agentsv1alpha1.PullRequestMerged:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonPullRequestMerged, "Pull request " + p.ref() + " was merged"
	case p.state == agentsv1alpha1.PullRequestClosed:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonPullRequestClosed, "Pull request " + p.ref() + " was closed"
	case e.mergeable():
		return metav1.ConditionTrue, agentsv1alpha1.ReasonMergeable, "Pull request " + p.ref() + " can merge at " + short(p.headSHA)
	case p.draft:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonPullRequestDraft, "Pull request " + p.ref() + " is a draft"
	case p.mergeState == agentsv1alpha1.MergeStateDirty:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonMergeConflict, "Pull request " + p.ref() + " conflicts with " + orDefault(p.baseBranch, "its base")
	case p.checks == agentsv1alpha1.ChecksFailing:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonChecksFailed, "Checks failed on " + p.ref()
	case p.review == agentsv1alpha1.ReviewChangesRequested:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonChangesRequested, "A reviewer requested changes on " + p.ref()
	case p.review == agentsv1alpha1.ReviewRequired:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonReviewRequired, "Pull request " + p.ref() + " waits for a review"
	case p.mergeState == agentsv1alpha1.MergeStateBehind:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonBehindBase, "Pull request " + p.ref() + " is behind " + orDefault(p.baseBranch, "its base") + ", which must be up to date to merge"
	case p.mergeState == agentsv1alpha1.MergeStateBlocked:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonMergeBlocked, "Branch protection blocks merging " + p.ref()
	case p.mergeState == agentsv1alpha1.MergeStateUnstable:
		return metav1.ConditionFalse, agentsv1alpha1.ReasonMergeUnstable, "A check the base does not require is not green on " + p.ref() + "; Shepherd merges only when every check passes"
	case p.checks == agentsv1alpha1.ChecksPending:
		return metav1.ConditionUnknown, agentsv1alpha1.ReasonChecksPending, "Checks are running on " + p.ref()
	}
	return metav1.ConditionUnknown, agentsv1alpha1.ReasonMergeStateUnknown, "The forge has not said whether " + p.ref() + " can merge"
}

// UnpricedModels lists the models of a metered usage that used tokens and have no cost (the
// price table had no price), each with its tokens: "my-model (1200 tokens)".
func UnpricedModels(u *agentsv1alpha1.UsageStatus) []string {
	if u == nil || u.Source != agentsv1alpha1.UsageFromProxy {
		return nil
	}
	var out []string
	for _, m := range u.Models {
		if n := m.InputTokens + m.OutputTokens + m.CacheReadTokens + m.CacheWriteTokens; m.CostUSD == "" && n != 0 {
			out = append(out, m.Model+" ("+strconv.FormatInt(n, 10)+" tokens)")
		}
	}
	return out
}

// UsageAgrees reports whether the CLI's count agrees with the proxy's: within 5% of the proxy's,
// or 100 tokens, whichever is larger. Output tokens are compared: every API and CLI counts them
// the same way, while input is split differently around the prompt cache.
func UsageAgrees(cli, proxy int64) bool {
	diff := cli - proxy
	if diff < 0 {
		diff = -diff
	}
	return diff <= max(100, proxy/20)
}
