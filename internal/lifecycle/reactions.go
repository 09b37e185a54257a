package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// maxPending is the capacity of status.messages.pending. A message that does not fit waits for
// the next decision (the attempt is not counted), it is never dropped.
const maxPending = 32

// maxKeyLen is the capacity of status.reactions[].lastAttemptKey and .episode.
const maxKeyLen = 256

// triggerState is what the evidence says about one trigger in this decision.
type triggerState int

const (
	// paused: the evidence cannot say (pull request not read, phase owned by a higher rule):
	// the episode is left exactly as it is, and nothing fires (an escalateAfter that passed
	// meanwhile escalates once the trigger can be judged again).
	paused triggerState = iota
	// inactive: the condition is over; an open episode ends.
	inactive
	// active: the condition holds; an episode runs.
	active
)

// triggerView is one trigger's reading of the evidence.
type triggerView struct {
	state triggerState
	// episode names a new episode (a head commit, a kind of event).
	episode string
	// key is what an attempt now would answer; an attempt runs only when it is new.
	key func(st *agentsv1alpha1.ReactionStatus) string
	// isNew reports whether key answers something the last attempt did not.
	isNew func(last, key string) bool
	// data is the message data of an attempt.
	data func(last string) MessageData
	// subject says in a few words what happened, for notifications and escalations.
	subject string
}

// differs is the usual novelty test: the evidence is new when its key is not the last one.
func differs(last, key string) bool { return last != key }

func (e *eval) runReactions() {
	// Terminal phases freeze the bookkeeping, except for the decision that ends a session
	// because its agent exited: that is what the exited trigger reacts to.
	if e.phase.IsTerminal() && !e.exitedNow {
		return
	}
	for _, t := range Triggers {
		r := e.s.reaction(t)
		if r.Action == agentsv1alpha1.ReactionNone {
			continue
		}
		v := e.view(t)
		st := e.reactions[t]
		switch v.state {
		case paused:
			if st != nil && st.Episode != "" && !st.Escalated {
				e.escalationDeadline(r, st)
			}
			continue
		case inactive:
			if st != nil && st.Episode != "" {
				// The episode is over. LastAttemptKey stays, so the same evidence never
				// triggers twice even across episodes.
				st.Episode, st.EpisodeStartTime, st.Attempts, st.Escalated = "", nil, 0, false
			}
			continue
		}
		if st == nil {
			st = &agentsv1alpha1.ReactionStatus{Trigger: t}
			e.reactions[t] = st
		}
		if st.Episode == "" {
			st.Episode = clip.Marked(v.episode, maxKeyLen, truncated)
			if st.Episode == "" {
				st.Episode = string(t)
			}
			st.EpisodeStartTime = ptr(metav1.NewTime(e.now))
			st.Attempts, st.Escalated = 0, false
		}
		e.react(t, r, st, v)
	}
}

// react runs one step of an active episode: escalate by time, else attempt on new evidence, or
// escalate when the attempts are used up. Escalation happens once per episode; after it, the
// episode belongs to humans and no further automatic action runs until it ends.
func (e *eval) react(t agentsv1alpha1.ReactionTrigger, r Reaction, st *agentsv1alpha1.ReactionStatus, v triggerView) {
	if st.Escalated {
		return
	}
	start := e.episodeStart(st)
	if r.EscalateAfter > 0 && e.now.Sub(start) >= r.EscalateAfter {
		e.escalate(t, st, v, fmt.Sprintf("unresolved for %s (escalateAfter %s) after %d attempt(s)", e.now.Sub(start), r.EscalateAfter, st.Attempts))
		return
	}
	key := clip.Marked(v.key(st), maxKeyLen, truncated)
	switch {
	case v.isNew(st.LastAttemptKey, key):
		if r.Retries != nil && st.Attempts >= *r.Retries {
			e.fixFailed(t, st)
			e.escalate(t, st, v, fmt.Sprintf("%d attempt(s) did not resolve it (retries %d)", st.Attempts, *r.Retries))
			return
		}
		e.attempt(t, r, st, v, key)
	case r.Action == agentsv1alpha1.ReactionMerge && t == agentsv1alpha1.TriggerApprovedAndGreen:
		if e.followMerge(t, r, st, v, key) {
			return
		}
	}
	e.escalationDeadline(r, st)
}

// humanApproval turns approvedAndGreen into a Merge of the head a human approved through
// Kubernetes (SpecEvidence.ApprovedHead), when that head is the pull request's current one. The
// approval names the head, so it counts as the approval at it (an approval of an earlier head
// does not: a push after it needs a new one); checks must still pass at that head, and the
// Project's merge method, retries and escalation hold. Whoever may annotate the session may
// approve it: the same RBAC that lets them edit its spec.
func (e *eval) humanApproval() {
	t := agentsv1alpha1.TriggerApprovedAndGreen
	r := e.s.reaction(t)
	if e.in.Spec.ApprovedHead == "" || !e.pr.known || e.pr.headSHA == "" || e.in.Spec.ApprovedHead != e.pr.headSHA || r.Action == agentsv1alpha1.ReactionMerge {
		return
	}
	r.Action, r.MergeMethod, r.MergeWithoutApproval = agentsv1alpha1.ReactionMerge, DefaultMergeMethod, true
	e.s.Reactions[t] = r
}

// mergeGate says why the pull request may not be merged at its head yet, "" when it may: a
// trusted reviewer's approval given at this very head (an approval of an earlier head does not
// count, whatever the forge's review decision says: GitHub keeps it unless stale reviews are
// dismissed), and checks that ran and passed at this head. A Project opts out of either
// explicitly (mergeWithoutApproval, mergeWithoutChecks).
func (e *eval) mergeGate(r Reaction) string {
	switch {
	case !r.MergeWithoutApproval && !e.pr.approvedAtHead:
		return fmt.Sprintf("Shepherd merges only with a trusted reviewer's approval given at head %s (an approval of an earlier head does not count; mergeWithoutApproval opts out)", short(e.pr.headSHA))
	case !r.MergeWithoutChecks && e.pr.checks != agentsv1alpha1.ChecksPassing:
		return fmt.Sprintf("Shepherd merges only once checks ran and passed at head %s (mergeWithoutChecks opts out)", short(e.pr.headSHA))
	}
	return ""
}

// followMerge carries on a merge asked for in an earlier decision, from the merge runner's
// evidence. The status says the merge of this head was asked for (LastAttemptKey); the runner's
// record says what became of it. No record (a manager restarted between the status write and
// the forge's call, or the call never ran) asks again: the forge merges a head once, so that is
// safe, and the fresh read after a restart shows a merge that did go through. It reports whether
// the episode was escalated.
func (e *eval) followMerge(t agentsv1alpha1.ReactionTrigger, r Reaction, st *agentsv1alpha1.ReactionStatus, v triggerView, key string) bool {
	m := e.in.Merge
	if !m.For(e.pr.number, e.pr.headSHA) {
		m = MergeEvidence{}
	}
	switch m.Outcome {
	case MergeInFlight, MergeSucceeded, MergeHeadMoved:
		// Under way, done (the pull request reads as merged), or the head moved: the new head is
		// judged when it is read.
		return false
	case MergeRefused:
		e.escalate(t, st, v, "the forge refused the merge: "+clip.Marked(m.Error, 512, truncated))
		return true
	case MergeRetrying:
		if e.now.Before(m.RetryAt) {
			e.mergeRetry = &m
			e.after(m.RetryAt)
			return false
		}
	}
	if why := e.mergeGate(r); why != "" {
		e.mergeGated = why // the approval was dismissed meanwhile, say
		return false
	}
	// The same action as the attempt it carries on (same id): the attempt is not counted again.
	e.mergeAction(t, r, actionID(t, st, key, st.Attempts), st.Attempts)
	return false
}

// mergeAction asks for the merge of the pull request at its head (withDefaults filled the
// method).
func (e *eval) mergeAction(t agentsv1alpha1.ReactionTrigger, r Reaction, id string, attempt int32) {
	e.actions = append(e.actions, Action{
		Type: ActionMerge, ID: id, Trigger: t, MergeMethod: r.MergeMethod,
		PullRequestNumber: e.pr.number, ExpectedHeadSHA: e.pr.headSHA, Attempt: attempt,
	})
}

// fixFailed reports that checks failed again after the agent was sent a failure; it is said
// only when the failure is acted on (an attempt or the escalation), so a deferred attempt does
// not repeat it.
func (e *eval) fixFailed(t agentsv1alpha1.ReactionTrigger, st *agentsv1alpha1.ReactionStatus) {
	if t == agentsv1alpha1.TriggerCIFailed && st.Attempts > 0 {
		e.reactionEvent(agentsv1alpha1.EventCIFixFailed, agentsv1alpha1.PriorityWarning, agentsv1alpha1.ReasonCIFixFailed, t,
			fmt.Sprintf("Checks failed again on %s at %s after %d fix attempt(s)", e.pr.ref(), short(e.pr.headSHA), st.Attempts))
	}
}

func (e *eval) escalationDeadline(r Reaction, st *agentsv1alpha1.ReactionStatus) {
	if r.EscalateAfter > 0 && !st.Escalated {
		e.after(e.episodeStart(st).Add(r.EscalateAfter))
	}
}

func (e *eval) episodeStart(st *agentsv1alpha1.ReactionStatus) time.Time {
	if st.EpisodeStartTime == nil {
		return e.now
	}
	return st.EpisodeStartTime.Time
}

// attempt runs the reaction's action. An action that cannot run as configured is escalated,
// never replaced by another.
func (e *eval) attempt(t agentsv1alpha1.ReactionTrigger, r Reaction, st *agentsv1alpha1.ReactionStatus, v triggerView, key string) {
	data := v.data(st.LastAttemptKey)
	data.Trigger = t
	data.Attempt = st.Attempts + 1
	if r.Retries != nil {
		data.Retries = *r.Retries
	}
	id := actionID(t, st, key, data.Attempt)
	if r.Action == agentsv1alpha1.ReactionSendToAgent && len(e.prev.Messages.Pending)+len(e.outbox) >= maxPending {
		// No room: the attempt waits for the next decision, uncounted.
		return
	}
	e.fixFailed(t, st)
	switch r.Action {
	case agentsv1alpha1.ReactionSendToAgent:
		if t == agentsv1alpha1.TriggerExited {
			e.escalate(t, st, v, "action SendToAgent cannot reach an agent that exited")
			return
		}
		text, err := renderMessage(t, r.Message, data)
		if err != nil {
			e.reactionEvent(agentsv1alpha1.EventReactionTemplateFailed, agentsv1alpha1.PriorityWarning, agentsv1alpha1.ReasonTemplateFailed, t,
				"The Project's "+string(t)+" message template failed, the built-in message was sent: "+clip.Marked(err.Error(), 512, truncated))
		}
		e.outbox = append(e.outbox, agentsv1alpha1.OutboxMessage{
			ID: id, Source: agentsv1alpha1.MessageFromReaction, Trigger: t, Text: text, CreatedTime: ptr(metav1.NewTime(e.now)),
		})
		e.actions = append(e.actions, Action{Type: ActionSendToAgent, ID: id, Trigger: t, Source: agentsv1alpha1.MessageFromReaction, Text: text, Attempt: data.Attempt})
		e.sentEvent(t, data)
	case agentsv1alpha1.ReactionNotify:
		ev, reason := e.notifyKind(t)
		e.actions = append(e.actions, Action{Type: ActionNotify, ID: id, Trigger: t, Event: ev, Reason: reason, Priority: e.priority(t, r), Text: v.subject, Attempt: data.Attempt})
	case agentsv1alpha1.ReactionMerge:
		if t != agentsv1alpha1.TriggerApprovedAndGreen || e.pr.headSHA == "" || e.pr.number == 0 {
			e.escalate(t, st, v, "action Merge cannot run here (it needs the approvedAndGreen trigger and a known head commit)")
			return
		}
		if why := e.mergeGate(r); why != "" {
			// Not an attempt: it runs once the gate opens (a new approval, checks at this head).
			e.mergeGated = why
			return
		}
		e.mergeAction(t, r, id, data.Attempt)
		e.reactionEvent(agentsv1alpha1.EventMergeReady, agentsv1alpha1.PriorityAction, agentsv1alpha1.ReasonMergeRequested, t,
			fmt.Sprintf("Requested a %s merge of %s at %s", r.MergeMethod, e.pr.ref(), short(e.pr.headSHA)))
	default:
		e.escalate(t, st, v, "unknown action "+strconv.Quote(string(r.Action)))
		return
	}
	st.Attempts++
	st.LastAttemptKey = key
	st.LastAttemptTime = ptr(metav1.NewTime(e.now))
}

func (e *eval) escalate(t agentsv1alpha1.ReactionTrigger, st *agentsv1alpha1.ReactionStatus, v triggerView, why string) {
	st.Escalated = true
	text := v.subject + " Escalated: " + why + "."
	e.actions = append(e.actions, Action{
		Type: ActionEscalate, ID: string(t) + "." + hash(st.Episode, e.episodeStart(st).Format(time.RFC3339))[:12] + ".escalated",
		Trigger: t, Event: agentsv1alpha1.EventReactionEscalated, Reason: agentsv1alpha1.ReasonEscalated,
		Priority: agentsv1alpha1.PriorityUrgent, Text: text, Attempt: st.Attempts,
	})
	e.reactionEvent(agentsv1alpha1.EventReactionEscalated, agentsv1alpha1.PriorityUrgent, agentsv1alpha1.ReasonEscalated, t, text)
}

// notifyKind is the event a trigger's notification stands for.
func (e *eval) notifyKind(t agentsv1alpha1.ReactionTrigger) (agentsv1alpha1.EventType, string) {
	switch t {
	case agentsv1alpha1.TriggerCIFailed:
		return agentsv1alpha1.EventCIFailing, agentsv1alpha1.ReasonChecksFailed
	case agentsv1alpha1.TriggerChangesRequested:
		return agentsv1alpha1.EventReviewChangesRequested, agentsv1alpha1.ReasonChangesRequested
	case agentsv1alpha1.TriggerCommented:
		return agentsv1alpha1.EventReviewCommented, agentsv1alpha1.ReasonCommentsForwarded
	case agentsv1alpha1.TriggerMergeConflicts:
		return agentsv1alpha1.EventMergeConflicts, agentsv1alpha1.ReasonMergeConflict
	case agentsv1alpha1.TriggerApprovedAndGreen:
		return agentsv1alpha1.EventMergeReady, agentsv1alpha1.ReasonMergeable
	case agentsv1alpha1.TriggerStuck:
		return agentsv1alpha1.EventSessionStuck, e.reason
	case agentsv1alpha1.TriggerNeedsInput:
		return agentsv1alpha1.EventSessionNeedsInput, agentsv1alpha1.ReasonWaitingForInput
	}
	return agentsv1alpha1.EventSessionExited, agentsv1alpha1.ReasonAgentExited
}

func (e *eval) priority(t agentsv1alpha1.ReactionTrigger, r Reaction) agentsv1alpha1.Priority {
	if r.Priority != "" {
		return r.Priority
	}
	return DefaultPriority(t, e.agent.exit != nil && !e.agent.exit.clean())
}

func (e *eval) sentEvent(t agentsv1alpha1.ReactionTrigger, data MessageData) {
	switch t {
	case agentsv1alpha1.TriggerCIFailed:
		e.reactionEvent(agentsv1alpha1.EventCIFixSent, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonCIFixSent, t,
			fmt.Sprintf("Sent %d failed check(s) on %s to the agent (attempt %d)", len(data.Checks), e.pr.ref(), data.Attempt))
	case agentsv1alpha1.TriggerChangesRequested:
		e.reactionEvent(agentsv1alpha1.EventReviewCommentsSent, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonReviewCommentsSent, t,
			fmt.Sprintf("Sent %d new review comment(s) on %s to the agent", len(data.Threads)+len(data.Reviews), e.pr.ref()))
	case agentsv1alpha1.TriggerCommented:
		e.reactionEvent(agentsv1alpha1.EventReviewCommented, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonCommentsForwarded, t,
			fmt.Sprintf("Forwarded %d new comment(s) on %s to the agent", len(data.Comments)+data.OmittedComments, e.pr.ref()))
	case agentsv1alpha1.TriggerMergeConflicts:
		e.reactionEvent(agentsv1alpha1.EventMergeConflicts, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonConflictsSent, t,
			"Sent the merge conflict on "+e.pr.ref()+" to the agent")
	}
}

// actionID names an attempt deterministically: trigger, a digest of the episode and what the
// attempt answers, and the attempt number. The '.' keeps it apart from spec message ids.
func actionID(t agentsv1alpha1.ReactionTrigger, st *agentsv1alpha1.ReactionStatus, key string, attempt int32) string {
	start := ""
	if st.EpisodeStartTime != nil {
		start = st.EpisodeStartTime.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s.%s.%d", t, hash(st.Episode, start, key)[:12], attempt)
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (e *eval) view(t agentsv1alpha1.ReactionTrigger) triggerView {
	v := triggerView{state: paused, isNew: differs, data: func(string) MessageData { return e.messageData() }}
	prReady := isPRPhase(e.phase) && e.pr.fresh && e.pr.known
	p := e.pr
	startKey := func(prefix string) func(*agentsv1alpha1.ReactionStatus) string {
		return func(st *agentsv1alpha1.ReactionStatus) string {
			return prefix + "@" + e.episodeStart(st).UTC().Format(time.RFC3339)
		}
	}
	switch t {
	case agentsv1alpha1.TriggerCIFailed:
		// One attempt per failing head commit; pending between pushes changes nothing; the
		// episode ends only when checks pass.
		v.subject = fmt.Sprintf("CI failed on pull request %s at %s%s.", p.ref(), short(p.headSHA), failedNames(p.failed))
		switch {
		case !prReady:
		case p.checks == agentsv1alpha1.ChecksFailing:
			v.state, v.episode = active, p.headSHA
			v.key = startKey(p.headSHA)
		case p.checks == agentsv1alpha1.ChecksPassing:
			v.state = inactive
		}
	case agentsv1alpha1.TriggerMergeConflicts:
		// Once per conflict episode, which lasts until the forge reports the pull request free
		// of conflicts (Unknown, while it recomputes, changes nothing).
		v.subject = fmt.Sprintf("Pull request %s conflicts with %s.", p.ref(), orDefault(p.baseBranch, "its base"))
		switch {
		case !prReady:
		case p.mergeState == agentsv1alpha1.MergeStateDirty:
			v.state, v.episode, v.key = active, p.headSHA, startKey("conflict")
		case p.mergeState != agentsv1alpha1.MergeStateUnknown && p.mergeState != "":
			v.state = inactive
		}
	case agentsv1alpha1.TriggerChangesRequested:
		e.changesRequestedView(&v, prReady)
	case agentsv1alpha1.TriggerCommented:
		e.commentedView(&v, prReady)
	case agentsv1alpha1.TriggerApprovedAndGreen:
		// Exactly one attempt per head commit: the key is the head SHA alone, kept across
		// episodes, so a mergeability flap never merges (or notifies) twice.
		v.subject = fmt.Sprintf("Pull request %s is approved, green and mergeable at %s: %s", p.ref(), short(p.headSHA), orDefault(p.url, p.ref()))
		switch {
		case !prReady:
		case e.phase == agentsv1alpha1.PhaseMergeable:
			v.state, v.episode = active, p.headSHA
			v.key = func(*agentsv1alpha1.ReactionStatus) string { return "head:" + p.headSHA }
		default:
			v.state = inactive
		}
	case agentsv1alpha1.TriggerStuck:
		v.subject = "The agent is stuck: " + e.message + "."
		v.state, v.episode, v.key = activeIf(e.phase == agentsv1alpha1.PhaseStuck), "stuck", startKey("stuck")
	case agentsv1alpha1.TriggerNeedsInput:
		q := e.in.Runner.Question
		v.subject = questionMessage(q) + "."
		v.state, v.episode = activeIf(e.phase == agentsv1alpha1.PhaseNeedsInput), "needsInput"
		if v.state == active && !e.agent.current {
			// NeedsInput held through a gap in the runner's reports (a manager that restarted
			// knows nothing until the next one): the question is not known, so not new.
			v.state = paused
		}
		// A new question in the same episode is news; the same one again is not.
		v.key = func(st *agentsv1alpha1.ReactionStatus) string {
			return "q:" + hash(q)[:16] + startKey("")(st)
		}
	case agentsv1alpha1.TriggerExited:
		v.subject = "The agent exited without opening a pull request: " + e.message + "."
		v.state, v.episode, v.key = activeIf(e.exitedNow), "exited", startKey("exit")
	}
	return v
}

// changesRequestedView: one attempt per set of review comments; a new comment (or review) on the
// same head is news, and the agent is sent only what is new.
func (e *eval) changesRequestedView(v *triggerView, prReady bool) {
	p := e.pr
	items := reviewItems(p)
	fp := fingerprint(items)
	v.subject = fmt.Sprintf("Changes requested on pull request %s (%d open comment(s)).", p.ref(), len(p.threads)+len(p.reviews))
	switch {
	case !prReady:
	case len(items) > 0:
		v.state, v.episode = active, p.headSHA
		v.key = func(*agentsv1alpha1.ReactionStatus) string { return fp }
		v.isNew = func(last, key string) bool { return len(newItems(items, last)) > 0 }
		v.data = func(last string) MessageData {
			d := e.messageData()
			fresh := newItems(items, last)
			for _, th := range p.threads {
				if fresh["t:"+th.ID] {
					d.Threads = append(d.Threads, th)
				}
			}
			for _, rv := range p.reviews {
				if fresh["r:"+rv.ID] {
					d.Reviews = append(d.Reviews, rv)
				}
			}
			d.OtherOpenThreads = len(p.threads) + len(p.reviews) - len(d.Threads) - len(d.Reviews)
			return d
		}
	default:
		v.state = inactive
	}
}

func activeIf(b bool) triggerState {
	if b {
		return active
	}
	return inactive
}

func (e *eval) messageData() MessageData {
	d := MessageData{PullRequest: e.pr.data(), Question: e.in.Runner.Question}
	d.Checks = append([]FailedCheck(nil), e.pr.failed...)
	if e.agent.current {
		d.IdleFor = e.silence().String()
	}
	return d
}

// reviewItems are the review threads and change-requesting reviews, by id. A "changes
// requested" decision with neither stands for itself, once per pull request.
func reviewItems(p prFacts) []string {
	var items []string
	for _, t := range p.threads {
		items = append(items, "t:"+t.ID)
	}
	for _, r := range p.reviews {
		items = append(items, "r:"+r.ID)
	}
	if len(items) == 0 && p.review == agentsv1alpha1.ReviewChangesRequested {
		items = append(items, "d:"+strconv.FormatInt(p.number, 10))
	}
	return items
}

// fingerprint names a set of review items. It lists a short digest of each item (sorted), so
// that the next decision can tell which items are new: a thread being resolved shrinks the set
// and sends nothing, a new thread sends only itself. A set too large for the status field is
// named by one digest of the whole, and any change to it counts as new.
func fingerprint(items []string) string {
	ds := make([]string, 0, len(items))
	seen := map[string]bool{}
	for _, it := range items {
		d := hash(it)[:8]
		if !seen[d] {
			seen[d] = true
			ds = append(ds, d)
		}
	}
	sort.Strings(ds)
	fp := "set:" + strings.Join(ds, ".")
	if len(fp) <= maxKeyLen {
		return fp
	}
	return "all:" + hash(ds...)[:32]
}

// newItems returns the items not covered by the fingerprint last.
func newItems(items []string, last string) map[string]bool {
	out := map[string]bool{}
	known := map[string]bool{}
	switch {
	case strings.HasPrefix(last, "set:"):
		for _, d := range strings.Split(strings.TrimPrefix(last, "set:"), ".") {
			known[d] = true
		}
	case last != "" && last == fingerprint(items):
		return out
	}
	for _, it := range items {
		if !known[hash(it)[:8]] {
			out[it] = true
		}
	}
	return out
}
