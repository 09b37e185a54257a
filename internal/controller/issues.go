package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// defaultIssuePollInterval is tracker.issuePollInterval's default.
const defaultIssuePollInterval = 10 * time.Minute

// issueLookBackMargin widens the closed-issue listing's since, for clocks that disagree.
const issueLookBackMargin = 5 * time.Minute

// issueWatch is what the Project reconciler learned of its sessions' tracker issues: which were
// closed, and when each Project last asked. It lives in the leader's memory: a restarted manager
// asks again at once, and a session that ended keeps its Done in its status.
type issueWatch struct {
	mu sync.Mutex
	// closed holds, per session, the tracker's word on its closed issue.
	closed map[types.NamespacedName]closedIssue
	// asked holds, per Project, the last query and the reconcile request it answered.
	asked map[types.NamespacedName]issueQuery
	// wake queues a session's reconcile; wakeProject a Project's.
	wake, wakeProject func(types.NamespacedName)
}

// issueHintGap bounds how often deliveries of closed issues make a Project ask its tracker: a
// hundred issues closed at once cost one query, not a hundred.
const issueHintGap = 10 * time.Second

type closedIssue struct {
	project  types.NamespacedName
	evidence lifecycle.IssueEvidence
}

type issueQuery struct {
	uid        types.UID
	generation int64
	request    string
	// at dates the query for its due time (interval after at); a hint moves it back. queried is
	// when the tracker was really last asked: the hints' gap counts from it.
	at, queried time.Time
	// repo and interval are the forge repository whose issues the tracker reads (zero for
	// Linear) and the interval of the query, for hints.
	repo     scm.Repo
	interval time.Duration
}

func newIssueWatch(wake, wakeProject func(types.NamespacedName)) *issueWatch {
	return &issueWatch{closed: map[types.NamespacedName]closedIssue{}, asked: map[types.NamespacedName]issueQuery{}, wake: wake, wakeProject: wakeProject}
}

// hint takes a verified webhook delivery: an issue closed in a repository makes the Projects
// that read their issues there (in the delivery's namespace) ask their tracker at once, or
// issueHintGap after their last query, whichever is later. Nothing is asked of the forge here.
func (w *issueWatch) hint(h scm.Hint, now time.Time) {
	if w == nil || len(h.ClosedIssues) == 0 {
		return
	}
	var due []types.NamespacedName
	w.mu.Lock()
	for key, q := range w.asked {
		if q.repo.IsZero() || !q.repo.Equal(h.Repo) || h.Namespace != "" && key.Namespace != h.Namespace {
			continue
		}
		next := now
		if gap := q.queried.Add(issueHintGap); gap.After(next) {
			next = gap
		}
		// Due at next: the query's age then is its interval.
		q.at = next.Add(-q.interval)
		w.asked[key] = q
		due = append(due, key)
	}
	w.mu.Unlock()
	if w.wakeProject != nil {
		for _, key := range due {
			w.wakeProject(key)
		}
	}
}

// evidence is what the tracker said of the session's issue (zero when nothing is known).
func (w *issueWatch) evidence(session types.NamespacedName) lifecycle.IssueEvidence {
	if w == nil {
		return lifecycle.IssueEvidence{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed[session].evidence
}

// forgetProject drops what is known of a Project and its sessions.
func (w *issueWatch) forgetProject(project types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.asked, project)
	for k, c := range w.closed {
		if c.project == project {
			delete(w.closed, k)
		}
	}
}

// watchedIssues are the sessions whose issue closing would stop them: an issue, not ended, not
// stopped, not being deleted. Pure.
func watchedIssues(sessions []agentsv1alpha1.AgentSession) []*agentsv1alpha1.AgentSession {
	var out []*agentsv1alpha1.AgentSession
	for i := range sessions {
		s := &sessions[i]
		if s.Spec.Issue == "" || s.Status.Phase.IsTerminal() || s.Spec.State == agentsv1alpha1.SessionStopped || !s.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, s)
	}
	return out
}

// issuePollInterval is tracker.issuePollInterval or its default.
func issuePollInterval(t *agentsv1alpha1.TrackerSpec) time.Duration {
	if t.IssuePollInterval != nil && t.IssuePollInterval.Duration > 0 {
		return t.IssuePollInterval.Duration
	}
	return defaultIssuePollInterval
}

// stopsOnIssueClosed reports whether the Project ends sessions whose issue closed.
func stopsOnIssueClosed(p *agentsv1alpha1.Project) bool {
	return p.Spec.Tracker != nil && p.Spec.Tracker.OnIssueClosed != agentsv1alpha1.IssueClosedIgnore
}

// reconcileIssues asks the tracker, once per issuePollInterval and in one query for all of
// them, which of the Project's working sessions' issues were closed, and wakes those sessions:
// their lifecycle ends them (Done, IssueClosed). A spec change or a new reconcile request
// (ReconcileRequestAnnotation) asks at once. A failed query is said in the log and asked again
// at the next interval: the sessions go on meanwhile, as they did before the issue closed.
func (r *ProjectReconciler) reconcileIssues(ctx context.Context, s *projectScope) error {
	p := s.project
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	w := r.Issues
	if w == nil {
		return nil
	}
	watched := watchedIssues(s.sessions)
	w.prune(key, s.sessions)
	if !stopsOnIssueClosed(p) || len(watched) == 0 || (s.forge == nil && p.Spec.Tracker.Provider != agentsv1alpha1.TrackerLinear) {
		return nil
	}
	now := r.now()
	interval := issuePollInterval(p.Spec.Tracker)
	request := p.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]
	w.mu.Lock()
	last, known := w.asked[key]
	w.mu.Unlock()
	if known && last.uid == p.UID && last.generation == p.Generation && last.request == request && now.Sub(last.at) < interval {
		s.requeue = minPositive(s.requeue, interval-now.Sub(last.at))
		return nil
	}
	q := issueQuery{uid: p.UID, generation: p.Generation, request: request, at: now, queried: now, interval: interval}
	if s.forge != nil && p.Spec.Tracker.Provider != agentsv1alpha1.TrackerLinear {
		q.repo = s.forge.Repo
	}
	w.mu.Lock()
	w.asked[key] = q
	w.mu.Unlock()
	s.requeue = minPositive(s.requeue, interval)

	tr, err := r.connectTracker(ctx, p, s.forge)
	if err != nil || tr == nil {
		return err
	}
	ids := make([]string, 0, len(watched))
	since := now
	for _, sess := range watched {
		if !slices.Contains(ids, sess.Spec.Issue) {
			ids = append(ids, sess.Spec.Issue)
		}
		if c := sess.CreationTimestamp.Time; c.Before(since) {
			since = c
		}
	}
	since = since.Add(-issueLookBackMargin)
	log := ctrl.LoggerFrom(ctx)
	found := map[string]string{}
	for chunk := range slices.Chunk(ids, tracker.MaxClosedQuery) {
		cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
		got, err := tr.Closed(cctx, chunk, since)
		cancel()
		if err != nil {
			log.Info("Could not ask the tracker which issues were closed; asking again at the next interval", "error", err.Error(), "interval", interval)
			return nil
		}
		for id, state := range got {
			found[id] = state
		}
	}
	for _, sess := range watched {
		state, ok := found[sess.Spec.Issue]
		if !ok {
			continue
		}
		sk := types.NamespacedName{Namespace: sess.Namespace, Name: sess.Name}
		w.mu.Lock()
		_, had := w.closed[sk]
		w.closed[sk] = closedIssue{project: key, evidence: lifecycle.IssueEvidence{ID: sess.Spec.Issue, Closed: true, State: state}}
		w.mu.Unlock()
		if !had {
			log.V(1).Info("The session's issue was closed", "AgentSession", sk, "issue", sess.Spec.Issue, "state", state)
			if w.wake != nil {
				w.wake(sk)
			}
		}
	}
	return nil
}

// prune forgets the closed issues of the Project's sessions that ended or are gone: their
// status holds the outcome.
func (w *issueWatch) prune(project types.NamespacedName, sessions []agentsv1alpha1.AgentSession) {
	live := map[string]bool{}
	for i := range sessions {
		if !sessions[i].Status.Phase.IsTerminal() {
			live[sessions[i].Name] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.closed {
		if c.project == project && !live[k.Name] {
			delete(w.closed, k)
		}
	}
}
