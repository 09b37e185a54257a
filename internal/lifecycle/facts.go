package lifecycle

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// prFacts is the pull request the decision works with: fresh from the forge, or the last known
// one from the status when the forge was not read.
type prFacts struct {
	known bool
	// fresh is true when read from the forge for this decision; only then are threads, reviews
	// and check logs available, and only then do pull request reactions run.
	fresh bool

	number         int64
	url, title     string
	state          agentsv1alpha1.PullRequestState
	draft          bool
	headSHA        string
	headBranch     string
	baseBranch     string
	mergeState     agentsv1alpha1.MergeState
	review         agentsv1alpha1.ReviewDecision
	approvedAtHead bool
	checks         agentsv1alpha1.ChecksState
	failed         []FailedCheck
	threads        []ReviewThread
	reviews        []Review
	comments       []Comment
}

func (p prFacts) ref() string { return "#" + strconv.FormatInt(p.number, 10) }

func (p prFacts) data() PullRequestData {
	return PullRequestData{Number: p.number, URL: p.url, Title: p.title, HeadSHA: p.headSHA, HeadBranch: p.headBranch, BaseBranch: p.baseBranch}
}

func (e *eval) readPullRequest() {
	ev := e.in.PullRequest
	prevPR := e.prev.PullRequest
	// An effect's own result is evidence: the merge this manager made is a merged pull request
	// from the moment the forge said so, before any re-read.
	own := e.in.Merge
	if own.Outcome == MergeSucceeded && ev.Observed && ev.Exists && (ev.State == "" || ev.State == agentsv1alpha1.PullRequestOpen) &&
		own.For(ev.Number, ev.HeadSHA) {
		ev.State, ev.MergeCommitSHA, e.ownMerge = agentsv1alpha1.PullRequestMerged, orDefault(ev.MergeCommitSHA, own.MergeCommitSHA), true
	}
	switch {
	case ev.Observed && ev.Exists:
		state := ev.State
		if state == "" {
			state = agentsv1alpha1.PullRequestOpen
		}
		checks := ev.Checks.State
		if checks == "" {
			checks = agentsv1alpha1.ChecksNone
		}
		e.pr = prFacts{
			known: true, fresh: true,
			number: ev.Number, url: ev.URL, title: ev.Title, state: state, draft: ev.Draft,
			headSHA: ev.HeadSHA, headBranch: ev.HeadBranch, baseBranch: ev.BaseBranch,
			mergeState: ev.MergeState,
			review:     ev.ReviewDecision, approvedAtHead: ev.ApprovedAtHead, checks: checks, failed: ev.Checks.FailedChecks,
			threads: ev.Threads, reviews: ev.ChangeRequests, comments: sortedComments(ev.Comments),
		}
		e.prStatus = e.pullRequestStatus(ev, state, checks)
	case ev.Observed && prevPR == nil:
		// The forge answered: there is no pull request.
		e.pr = prFacts{fresh: true}
	case prevPR != nil:
		// Not read this time, or a known pull request missing from the answer (a pull request
		// cannot be deleted, so that answer is wrong): keep what was known.
		p := prevPR
		e.pr = prFacts{
			known: true, number: p.Number, url: p.URL, state: p.State, draft: p.Draft,
			headSHA: p.HeadSHA, baseBranch: p.BaseBranch, mergeState: p.MergeState,
			review: p.ReviewDecision, checks: p.Checks,
		}
		if e.pr.state == "" {
			e.pr.state = agentsv1alpha1.PullRequestOpen
		}
		for _, c := range p.FailedChecks {
			e.pr.failed = append(e.pr.failed, FailedCheck{Name: c.Name, URL: c.URL})
		}
		e.prStatus = prevPR.DeepCopy()
		if own.Outcome == MergeSucceeded && e.pr.state == agentsv1alpha1.PullRequestOpen && own.For(p.Number, p.HeadSHA) {
			e.pr.state, e.prStatus.State, e.ownMerge = agentsv1alpha1.PullRequestMerged, agentsv1alpha1.PullRequestMerged, true
			e.prStatus.MergeCommitSHA = clip.Marked(orDefault(p.MergeCommitSHA, own.MergeCommitSHA), 64, truncated)
			e.prStatus.LastChangeTime = ptr(metav1.NewTime(e.now))
		}
	}
}

// pullRequestStatus is the pull request to persist. LastChangeTime moves only when a fact
// changed, so that re-reading an unchanged pull request does not rewrite the status.
func (e *eval) pullRequestStatus(ev PullRequestEvidence, state agentsv1alpha1.PullRequestState, checks agentsv1alpha1.ChecksState) *agentsv1alpha1.PullRequestStatus {
	st := &agentsv1alpha1.PullRequestStatus{
		Number:         ev.Number,
		URL:            clip.Marked(ev.URL, 2048, truncated),
		State:          state,
		Draft:          ev.Draft,
		HeadSHA:        clip.Marked(ev.HeadSHA, 64, truncated),
		BaseBranch:     clip.Marked(ev.BaseBranch, 255, truncated),
		Checks:         checks,
		ChecksSummary:  checksSummary(ev.Checks),
		ReviewDecision: ev.ReviewDecision,
		MergeState:     ev.MergeState,
		MergeCommitSHA: clip.Marked(ev.MergeCommitSHA, 64, truncated),
		Additions:      ev.Additions,
		Deletions:      ev.Deletions,
	}
	st.UnresolvedThreads = int32(min(len(ev.Threads), 1<<30))
	for i, c := range ev.Checks.FailedChecks {
		if i == 20 {
			break
		}
		st.FailedChecks = append(st.FailedChecks, agentsv1alpha1.CheckRef{Name: clip.Marked(c.Name, 256, truncated), URL: clip.Marked(c.URL, 2048, truncated)})
	}
	if prev := e.prev.PullRequest; prev != nil && prev.LastChangeTime != nil {
		old := prev.DeepCopy()
		old.LastChangeTime = nil
		if reflect.DeepEqual(old, st) {
			st.LastChangeTime = prev.LastChangeTime.DeepCopy()
			return st
		}
	}
	st.LastChangeTime = ptr(metav1.NewTime(e.now))
	return st
}

func checksSummary(c ChecksEvidence) string {
	total := c.Passed + c.Failed + c.Pending
	if total == 0 {
		return ""
	}
	s := fmt.Sprintf("%d/%d passed", c.Passed, total)
	if c.Failed > 0 {
		s += fmt.Sprintf(", %d failed", c.Failed)
	}
	if c.Pending > 0 {
		s += fmt.Sprintf(", %d pending", c.Pending)
	}
	return s
}

// agentFacts is what the pod and the runner say about the agent.
type agentFacts struct {
	// podRunning: the pod runs, with its agent container running, and is not going away.
	podRunning bool
	// podLost: the pod is being deleted, its node is lost, or it was evicted.
	podLost bool
	// current: the runner's report is about the current pod, or is the last word of a pod that
	// is gone while the agent was running.
	current      bool
	state        agentsv1alpha1.ActivityState
	lastActivity time.Time
	// fatal: the agent container is waiting for a reason that does not fix itself.
	fatal bool
	exit  *exitFacts
	// live: the pod runs and its runner reports an agent that has not exited.
	live bool
}

type exitFacts struct {
	code       *int32
	reason     string
	fromRunner bool
}

func (x exitFacts) clean() bool { return x.code != nil && *x.code == 0 }

func (x exitFacts) describe() string {
	s := "exit code unknown"
	if x.code != nil {
		s = "exit code " + strconv.Itoa(int(*x.code))
	}
	if x.reason != "" {
		s += ", " + x.reason
	}
	return s
}

// fatalWaiting are container waiting reasons that need a human (a wrong image, a missing Secret
// key, an agent that crashes on start). They still get the grace period: a registry can blip.
var fatalWaiting = map[string]bool{
	"ErrImagePull":               true,
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"ErrImageNeverPull":          true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"CrashLoopBackOff":           true,
}

var imagePullWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
}

// lostPodReasons end a pod without the agent having exited; the agent is respawned.
var lostPodReasons = map[string]bool{
	"Evicted": true, "NodeLost": true, "NodeShutdown": true, "Shutdown": true, "Terminated": true,
	"Preempting": true, "UnexpectedAdmissionError": true,
}

// agentWasLive: in these phases the agent had been running, so a missing pod is a lost agent.
func agentWasLive(p agentsv1alpha1.SessionPhase) bool {
	switch p {
	case agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.PhaseStuck:
		return true
	}
	return isPRPhase(p)
}

func isPRPhase(p agentsv1alpha1.SessionPhase) bool {
	switch p {
	case agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending,
		agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable:
		return true
	}
	return false
}

func (e *eval) readAgent() {
	pod, r := e.in.Pod, e.in.Runner
	a := &e.agent
	a.podLost = pod.Exists && (pod.Deleting || pod.NodeLost || pod.Phase == PodUnknown || lostPodReasons[pod.Reason])
	a.podRunning = pod.Exists && !a.podLost && pod.Phase == PodRunning && pod.ContainerRunning
	if r.Reported {
		if pod.Exists {
			a.current = r.PodUID == "" || pod.UID == "" || r.PodUID == pod.UID
		} else {
			a.current = agentWasLive(e.prevPhase)
		}
	}
	if a.current {
		a.state = r.State
		if a.state == "" {
			a.state = agentsv1alpha1.ActivityActive
		}
		a.lastActivity = r.LastActivityTime
		if a.lastActivity.IsZero() {
			a.lastActivity = r.ReportTime
		}
		if a.lastActivity.IsZero() {
			// No time at all: silence cannot be measured, so it cannot make the agent stuck.
			a.lastActivity = e.now
		}
	}
	a.fatal = pod.Exists && !pod.Deleting && fatalWaiting[pod.WaitingReason]
	switch {
	case a.current && a.state == agentsv1alpha1.ActivityExited:
		a.exit = &exitFacts{code: r.ExitCode, fromRunner: true}
		if r.ExitCode != nil {
			a.exit.code = ptr(*r.ExitCode)
		}
	case pod.Exists && !a.podLost && !pod.ContainerRunning && pod.Terminated != nil &&
		(pod.Phase == PodSucceeded || pod.Phase == PodFailed):
		// The container ended without the runner saying so (killed, OOM): the pod is the truth.
		a.exit = &exitFacts{code: ptr(pod.Terminated.ExitCode), reason: pod.Terminated.Reason}
	}
	a.live = a.podRunning && a.current && a.exit == nil
}

// The signals that get a bounded grace before they count, in precedence order.
const (
	signalWorkspace   = "workspace"
	signalContainer   = "container"
	signalPod         = "pod"
	signalRunner      = "runner"
	signalPullRequest = "pullRequest"
)

func (e *eval) currentSignal() (string, string) {
	ws, pod, a := e.in.Workspace, e.in.Pod, e.agent
	switch ws.Phase {
	case agentsv1alpha1.WorktreeFailed, agentsv1alpha1.WorktreeMissing, agentsv1alpha1.WorktreeRemoving, agentsv1alpha1.WorktreeRemoved:
		return signalWorkspace, withDetail("the Worktree is "+string(ws.Phase), ws.Message)
	}
	if a.fatal {
		return signalContainer, withDetail(pod.WaitingReason, pod.WaitingMessage)
	}
	if agentWasLive(e.runPrev) && a.exit == nil && !a.podRunning {
		return signalPod, e.podProblem()
	}
	if a.podRunning && !a.current {
		// A runner reports as soon as its pod runs: its first grace slot is its time to, not a
		// missing signal yet. (Counting it would write the grace into the status of nearly every
		// new session, one write each, only to clear it a moment later: issue 23.) Only for an
		// agent that has not run yet: one that had (a manager restarted, and has not heard from
		// the runner since) keeps its phase through the grace, as for any missing report.
		if started := pod.Started; !agentWasLive(e.runPrev) && !started.IsZero() && e.now.Before(started.Add(e.graceSlot())) {
			e.after(started.Add(e.graceSlot()))
			return "", ""
		}
		return signalRunner, "no report from the runner of the current pod"
	}
	if n := e.in.Runner.PullRequestNumber; n > 0 && !e.pr.known {
		return signalPullRequest, "the runner reported pull request #" + strconv.FormatInt(n, 10) + " but the forge does not show it"
	}
	return "", ""
}

func (e *eval) podProblem() string {
	pod := e.in.Pod
	switch {
	case !pod.Exists:
		return "the agent pod is missing"
	case pod.NodeLost:
		return "the agent pod's node is lost"
	case pod.Deleting:
		return "the agent pod is being deleted"
	case pod.Reason != "":
		return "the agent pod ended: " + pod.Reason
	case pod.Phase == PodPending:
		return "the agent pod is pending"
	}
	return "the agent container is not running"
}

// updateGrace applies the grace rule to the current signal.
//
// The rule: a signal counts only when it was seen missing in GraceObservations observations AND
// for at least GracePeriod. Observations must be spread out: the grace period is cut into
// GraceObservations slots, and the k-th observation counts only from slot k-1 on (measured from
// Since), so a burst of reconciles in one instant counts once and re-deciding with the same
// evidence changes nothing. After a pause that skipped slots, the window slides forward (Since
// moves so that the pause counts as one observation): a pause is not evidence. A signal that
// changes, or disappears, restarts or ends the grace.
func (e *eval) updateGrace() {
	sig, detail := e.currentSignal()
	e.signal, e.signalDetail = sig, detail
	if sig == "" {
		e.grace = nil
		return
	}
	n := e.s.GraceObservations
	period := e.s.GracePeriod
	slot := e.graceSlot()
	g := e.prev.Grace
	if g == nil || g.Signal != sig || g.Since == nil || g.Observations < 1 || g.Since.After(e.now) {
		e.grace = &agentsv1alpha1.GraceStatus{Signal: sig, Since: ptr(metav1.NewTime(e.now)), Observations: 1}
	} else {
		g = g.DeepCopy()
		if g.Observations < n {
			since := g.Since.Time
			if i := int64(e.now.Sub(since) / slot); i >= int64(g.Observations) {
				if i > int64(g.Observations) {
					g.Since = ptr(metav1.NewTime(e.now.Add(-time.Duration(g.Observations) * slot).Truncate(time.Second)))
				}
				g.Observations++
			}
		}
		e.grace = g
	}
	since := e.grace.Since.Time
	e.graceExpired = e.grace.Observations >= n && e.now.Sub(since) >= period
	switch {
	case e.graceExpired:
	case e.grace.Observations < n:
		e.after(since.Add(time.Duration(e.grace.Observations) * slot))
	default:
		e.after(since.Add(period))
	}
}

func (e *eval) graceSlot() time.Duration {
	slot := e.s.GracePeriod / time.Duration(e.s.GraceObservations)
	if slot < time.Second {
		slot = time.Second
	}
	return slot
}

func (e *eval) graceProgress() string {
	if e.grace == nil || e.grace.Since == nil {
		return ""
	}
	return fmt.Sprintf("observation %d of %d, missing for %s of %s",
		e.grace.Observations, e.s.GraceObservations, e.now.Sub(e.grace.Since.Time), e.s.GracePeriod)
}

func workspaceReason(ws WorkspaceEvidence) string {
	switch ws.Phase {
	case agentsv1alpha1.WorktreeFailed:
		return agentsv1alpha1.ReasonCheckoutFailed
	case agentsv1alpha1.WorktreeRemoving:
		return agentsv1alpha1.ReasonCheckoutRemoving
	case agentsv1alpha1.WorktreeRemoved:
		return agentsv1alpha1.ReasonCheckoutRemoved
	}
	return agentsv1alpha1.ReasonCheckoutMissing
}

func containerReason(waiting string) string {
	if imagePullWaiting[waiting] {
		return agentsv1alpha1.ReasonImagePullFailed
	}
	return agentsv1alpha1.ReasonPodFailed
}

// activityStatus is the agent's activity to persist.
func (e *eval) activityStatus() *agentsv1alpha1.ActivityStatus {
	a, r := e.agent, e.in.Runner
	switch {
	case a.exit != nil && !a.exit.fromRunner:
		st := e.prev.Activity.DeepCopy()
		if st == nil {
			st = &agentsv1alpha1.ActivityStatus{}
		}
		st.State = agentsv1alpha1.ActivityExited
		st.ExitCode = a.exit.code
		st.Question = ""
		st.Message = clip.Marked(a.exit.reason, 4096, truncated)
		return st
	case a.current:
		st := &agentsv1alpha1.ActivityStatus{
			State:    a.state,
			Question: clip.Marked(r.Question, 4096, truncated),
			Message:  clip.Marked(r.Message, 4096, truncated),
		}
		if r.ExitCode != nil {
			st.ExitCode = ptr(*r.ExitCode)
		}
		if !r.LastActivityTime.IsZero() || !r.ReportTime.IsZero() {
			st.LastActivityTime = ptr(metav1.NewTime(a.lastActivity.UTC().Truncate(time.Second)))
		}
		if (a.state == agentsv1alpha1.ActivityActive || a.state == agentsv1alpha1.ActivityReady) && e.idle() {
			st.State = agentsv1alpha1.ActivityIdle
		}
		return st
	}
	return e.prev.Activity.DeepCopy()
}
