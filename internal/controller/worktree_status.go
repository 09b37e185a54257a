package controller

import (
	"fmt"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// worktreePhase decides the phase from what was observed. Pure.
func worktreePhase(wt *agentsv1alpha1.Worktree, s *worktreeScope) (agentsv1alpha1.WorktreePhase, string) {
	absent := !wt.DeletionTimestamp.IsZero() || wt.Spec.State == agentsv1alpha1.WorktreeAbsent
	switch {
	case absent && s.removed:
		return agentsv1alpha1.WorktreeRemoved, "the checkout is removed; the branch " + string(wt.Spec.Branch) + " is kept"
	case absent:
		return agentsv1alpha1.WorktreeRemoving, "removing the checkout"
	case s.project == nil:
		if wt.Status.Phase != "" {
			return wt.Status.Phase, "the Project is missing; the checkout is unchanged"
		}
		return agentsv1alpha1.WorktreePending, "waiting for the Project"
	case s.volumeRecreated:
		return agentsv1alpha1.WorktreeMissing, "the checkout's volume vanished; restoring it from the branch"
	case s.liveMissing():
		return agentsv1alpha1.WorktreeMissing, "the checkout " + s.live.Path + " is gone (deleted outside Shepherd) while an agent works in it: " +
			"delete the agent's pod, or stop and start the session, to make it again from the branch"
	case s.hasRes && s.result.OK:
		return agentsv1alpha1.WorktreeReady, "checkout ready at " + shortSHA(s.facts().Head)
	case s.hasRes && !s.result.OK && s.result.current(wt):
		return agentsv1alpha1.WorktreeFailed, "no usable checkout: " + s.result.Error
	case wt.Status.Phase == agentsv1alpha1.WorktreeReady:
		// The pods that prepared it are gone (the session stopped or ended) but the checkout
		// stays on its volume; a volume that vanished is caught above.
		return agentsv1alpha1.WorktreeReady, "checkout ready at " + shortSHA(wt.Status.Head)
	default:
		return agentsv1alpha1.WorktreePending, checkoutPendingMessage
	}
}

// checkoutPendingMessage is a Worktree's word while its pod prepares it: routine, so its
// session does not repeat it (that would be one more status write per session, issue 23).
const checkoutPendingMessage = "preparing the checkout"

// liveMissing: the freshest word on the checkout is a runner's report that it is gone.
func (s *worktreeScope) liveMissing() bool {
	return s.live != nil && s.live.Missing && (!s.hasRes || s.liveAt.After(s.result.Finished))
}

// observedRefresh is how stale status.lastObservedTime may grow while the facts stay the same.
const observedRefresh = time.Minute

// facts is the freshest view of the checkout: a live report when newer than the last prepare.
func (s *worktreeScope) facts() (f struct {
	Head     string
	Dirty    bool
	Unpushed int32
}) {
	if s.hasRes && s.result.OK {
		f.Head, f.Dirty, f.Unpushed = s.result.Result.Facts.Head, s.result.Result.Facts.Dirty, int32(s.result.Result.Facts.Unpushed)
	}
	if s.live != nil && (!s.hasRes || s.liveAt.After(s.result.Finished)) && s.live.Head != "" {
		f.Head, f.Dirty, f.Unpushed = s.live.Head, s.live.Dirty, s.live.UnpushedCommits
	}
	return f
}

// setWorktreeStatus computes the Worktree's status: the facts, then one function per condition,
// then the kstatus summary. Pure.
func setWorktreeStatus(wt *agentsv1alpha1.Worktree, s *worktreeScope, err error) {
	gen := wt.Generation
	conds := &wt.Status.Conditions
	st := &wt.Status
	if s.mode != "" {
		st.Mode = s.mode
		st.ClaimName, st.Path = s.vol.ClaimName, s.vol.Path
	}
	st.BoundSessions = s.bound
	phase, msg := worktreePhase(wt, s)
	st.Phase = phase
	setCheckoutFacts(st, s, phase)
	setSetupSucceededCondition(wt, s, phase)
	if s.blocked != "" {
		setCondition(conds, gen, agentsv1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, s.blockedReason, s.blocked)
	} else {
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionDeletionBlocked)
	}
	if err == nil && phase == agentsv1alpha1.WorktreeFailed {
		err = Stalling(agentsv1alpha1.ReasonCheckoutFailed, "%s (fix the cause, then change the spec or annotate %s to retry)", msg, agentsv1alpha1.ReconcileRequestAnnotation)
	}
	ready := phase == agentsv1alpha1.WorktreeReady || phase == agentsv1alpha1.WorktreeRemoved
	setKstatus(conds, gen, err, ready, worktreePhaseReason(phase), msg)
	if observedBy(err) {
		st.ObservedGeneration = gen
	}
}

// worktreePhaseReason is the Ready reason of a phase.
func worktreePhaseReason(phase agentsv1alpha1.WorktreePhase) string {
	reason := map[agentsv1alpha1.WorktreePhase]string{
		agentsv1alpha1.WorktreeReady:    agentsv1alpha1.ReasonSucceeded,
		agentsv1alpha1.WorktreeRemoved:  agentsv1alpha1.ReasonCheckoutRemoved,
		agentsv1alpha1.WorktreeRemoving: agentsv1alpha1.ReasonCheckoutRemoving,
		agentsv1alpha1.WorktreeMissing:  agentsv1alpha1.ReasonCheckoutMissing,
		agentsv1alpha1.WorktreePending:  agentsv1alpha1.ReasonCheckoutPending,
	}[phase]
	if reason == "" {
		return agentsv1alpha1.ReasonCheckoutPending
	}
	return reason
}

// setCheckoutFacts records the checkout's head, dirtiness and unpushed commits, and when they
// were last observed.
func setCheckoutFacts(st *agentsv1alpha1.WorktreeStatus, s *worktreeScope, phase agentsv1alpha1.WorktreePhase) {
	if f := s.facts(); f.Head != "" {
		unchanged := st.Head == f.Head && st.Dirty == f.Dirty && st.UnpushedCommits == f.Unpushed
		st.Head, st.Dirty, st.UnpushedCommits = f.Head, f.Dirty, f.Unpushed
		at := s.result.Finished
		if s.liveAt.After(at) {
			at = s.liveAt
		}
		// Facts that did not change move the time at most once per observedRefresh: every move
		// is a status write, and a fleet's runners report every few seconds.
		if !at.IsZero() && (st.LastObservedTime == nil || !unchanged || at.Sub(st.LastObservedTime.Time) >= observedRefresh) {
			t := metav1.NewTime(at.Truncate(1e9))
			st.LastObservedTime = &t
		}
	}
	if phase == agentsv1alpha1.WorktreeRemoved {
		st.Head, st.Dirty, st.UnpushedCommits = "", false, 0
	}
}

// setSetupSucceededCondition: the setup commands' own state (a failed setup leaves the checkout
// Ready).
func setSetupSucceededCondition(wt *agentsv1alpha1.Worktree, s *worktreeScope, phase agentsv1alpha1.WorktreePhase) {
	st, conds, gen := &wt.Status, &wt.Status.Conditions, wt.Generation
	switch {
	case s.hasRes && s.result.OK && s.result.Result.Setup.State != "":
		r := s.result.Result.Setup
		st.Setup.State, st.Setup.FailedCommand, st.Setup.Error = r.State, r.FailedCommand, clip.Marked(r.Error, maxConditionMessage, "…")
		t := metav1.NewTime(s.result.Finished.Truncate(1e9))
		st.Setup.CompletionTime = &t
	case phase == agentsv1alpha1.WorktreePending || phase == agentsv1alpha1.WorktreeMissing:
		st.Setup = agentsv1alpha1.SetupStatus{State: agentsv1alpha1.SetupPending}
	}
	switch st.Setup.State {
	case agentsv1alpha1.SetupSucceeded:
		setCondition(conds, gen, agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded, "setup commands succeeded")
	case agentsv1alpha1.SetupFailed:
		setCondition(conds, gen, agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionFalse, agentsv1alpha1.ReasonSetupFailed,
			fmt.Sprintf("setup command %q failed; the checkout is usable: %s", st.Setup.FailedCommand, st.Setup.Error))
	case agentsv1alpha1.SetupPending:
		setCondition(conds, gen, agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionUnknown, agentsv1alpha1.ReasonSetupPending, "setup has not finished yet")
	}
}

func shortSHA(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
