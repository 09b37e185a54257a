package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/metrics"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=agentsessions,verbs=create;patch

// The backlog (docs/backlog.md): a Project with spec.backlog queries its tracker at most once per
// backlog.interval for open issues carrying all the labels, and creates one AgentSession per
// matching issue, oldest issue first, while fewer than backlog.maxConcurrent of its backlog
// sessions are unfinished (and the Project's limits leave room). The session's name is derived
// from the issue, so creating it is the guard against two sessions for one issue: a second Create
// (another reconcile, a restarted manager, a new leader) meets AlreadyExists.
//
// The issue is relabelled as its session goes: the query labels are replaced by claimedLabel when
// the session is created; inProgressLabel is added once the agent has run; doneLabel replaces
// inProgressLabel once the pull request merged; a session that ends without a merge (Done,
// Errored) only loses inProgressLabel. Every label call is idempotent. The stage last applied is
// kept in the session's agentsv1alpha1.BacklogStageAnnotation, so that a restart does not label again.

// Project event reasons of the backlog.
const (
	reasonBacklogSpawned      = "BacklogSpawned"
	reasonBacklogIssueHasSess = "BacklogIssueHasSession"
	reasonBacklogNameConflict = "BacklogNameConflict"
	reasonBacklogRelabelFail  = "BacklogRelabelFailed"
	reasonBacklogIssueInvalid = "BacklogIssueInvalid"
)

// backlogStage is how far a backlog session has come, as its issue's labels say it.
type backlogStage string

const (
	stageClaimed    backlogStage = "claimed"
	stageInProgress backlogStage = "in-progress"
	stageDone       backlogStage = "done"
	stageEnded      backlogStage = "ended"
)

// backlogQueryLimit bounds the issues one query reads (the trackers' own maximum).
const backlogQueryLimit = 250

// backlogWorkers bounds the tracker calls made at once by one reconcile.
const backlogWorkers = 4

// backlogRecord is what this process remembers of a Project's backlog. It is a cache: a restart
// or a new leader works from the status (lastQueryTime) and the sessions that exist.
type backlogRecord struct {
	uid        types.UID
	generation int64
	request    string
	at         time.Time
	// err is the last query's failure, reported until the next query.
	err error
	// created are sessions this process created (and when) that the cache may not show yet;
	// they count against the limit until it does, or for createdGrace at most.
	created map[string]time.Time
}

// createdGrace bounds how long a created session the cache does not show counts against the
// limit (the cache shows it within milliseconds; a session deleted at once never shows).
const createdGrace = time.Minute

// backlogScope is what one reconcile of the backlog observed and did.
type backlogScope struct {
	// queried is set when the tracker was queried in this reconcile.
	queried   bool
	queryTime time.Time
	matching  int
	// spawned counts the backlog sessions that exist (created by this reconcile included).
	spawned int32
	events  []backlogEvent
}

type backlogEvent struct {
	kind, reason, message string
}

// finished reports whether a session has ended for good: it no longer counts against the
// backlog's limit. A Stopped session may be set Running again, so it still counts.
func finished(p agentsv1alpha1.SessionPhase) bool {
	return p == agentsv1alpha1.PhaseMerged || p == agentsv1alpha1.PhaseDone || p == agentsv1alpha1.PhaseErrored
}

// isBacklogSession reports whether the Project's backlog created s.
func isBacklogSession(s *agentsv1alpha1.AgentSession) bool {
	return s.Labels[agentsv1alpha1.BacklogLabel] == "true"
}

// wantStage is the backlog stage a session's phase calls for. Pure.
func wantStage(s *agentsv1alpha1.AgentSession) backlogStage {
	switch {
	case s.Status.Phase == agentsv1alpha1.PhaseMerged:
		return stageDone
	case s.Status.Phase == agentsv1alpha1.PhaseDone || s.Status.Phase == agentsv1alpha1.PhaseErrored:
		return stageEnded
	case s.Status.StartTime != nil:
		return stageInProgress
	}
	return stageClaimed
}

// appliedStage is the stage whose labels were last applied to the session's issue.
func appliedStage(s *agentsv1alpha1.AgentSession) backlogStage {
	if v := s.Annotations[agentsv1alpha1.BacklogStageAnnotation]; v != "" {
		return backlogStage(v)
	}
	return stageClaimed
}

// stageLabels are the label changes that bring an issue to a stage. Pure.
func stageLabels(b *agentsv1alpha1.BacklogSpec, stage backlogStage) (add, remove []string) {
	switch stage {
	case stageClaimed:
		add, remove = []string{b.ClaimedLabel}, b.Labels
	case stageInProgress:
		add = []string{b.InProgressLabel}
	case stageDone:
		add, remove = []string{b.DoneLabel}, []string{b.InProgressLabel}
	case stageEnded:
		remove = []string{b.InProgressLabel}
	}
	nonEmpty := func(l []string) []string {
		return slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == "" })
	}
	return nonEmpty(add), nonEmpty(remove)
}

// backlogSessionName is the issue's session name (tracker.SessionName: the same name the
// plugin's spawn and batch give it, so that no path makes a second session for one issue).
func backlogSessionName(project string, issue tracker.Issue) string {
	return tracker.SessionName(project, keyOrID(issue))
}

// keyOrID is how the issue is named in session names and labels.
func keyOrID(issue tracker.Issue) string {
	if issue.Key != "" {
		return issue.Key
	}
	return issue.ID
}

// sameIssue reports whether a session's spec.issue names the issue ("#42" and "42" are one).
func sameIssue(spec string, issue tracker.Issue) bool {
	return spec != "" && strings.EqualFold(strings.TrimPrefix(spec, "#"), issue.ID)
}

// issueOrder sorts issues oldest first: by the number in their id (GitHub and Gitea numbers,
// the sequence of a Linear key), then by id. Pure.
func issueOrder(issues []tracker.Issue) []tracker.Issue {
	out := slices.Clone(issues)
	num := func(id string) int64 {
		if i := strings.LastIndexByte(id, '-'); i >= 0 {
			id = id[i+1:]
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(id, "#"), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := num(out[i].ID), num(out[j].ID)
		if a != b {
			return a < b
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// backlogPlan is what a query's result asks for.
type backlogPlan struct {
	// spawn are the issues to create sessions for, oldest first, with the session names.
	spawn []plannedSession
	// reclaim are issues that still carry the query labels while an unfinished session works on
	// them (a claim that did not land, or a human who labelled the issue again): claimed again.
	reclaim []tracker.Issue
	// held are issues whose session has finished: the backlog never starts a second session for
	// an issue while the first exists; a human deletes it to retry.
	held []heldIssue
	// conflicts are issues whose session name is taken by a session for something else.
	conflicts []heldIssue
}

type plannedSession struct {
	name  string
	issue tracker.Issue
}

type heldIssue struct {
	issue   tracker.Issue
	session string
}

// backlogCapacity is how many more backlog sessions may be created now. Pure.
//
// unfinished counts backlog sessions that have not finished; limit and live are the Project's
// maxConcurrentSessions (nil: none) and its sessions that hold or wait for a slot.
func backlogCapacity(maxConcurrent int32, unfinished int, limit *int32, live int) int {
	room := int(maxConcurrent) - unfinished
	if limit != nil {
		room = min(room, int(*limit)-live)
	}
	return max(room, 0)
}

// planBacklog decides what to do with a query's issues, given the Project's sessions and the
// room left. Pure.
func planBacklog(project string, issues []tracker.Issue, sessions []agentsv1alpha1.AgentSession, capacity int) backlogPlan {
	byName := map[string]*agentsv1alpha1.AgentSession{}
	for i := range sessions {
		byName[sessions[i].Name] = &sessions[i]
	}
	var plan backlogPlan
	for _, is := range issueOrder(issues) {
		name := backlogSessionName(project, is)
		var existing *agentsv1alpha1.AgentSession
		if s := byName[name]; s != nil && sameIssue(s.Spec.Issue, is) {
			existing = s
		} else {
			for i := range sessions {
				if sameIssue(sessions[i].Spec.Issue, is) && sessions[i].DeletionTimestamp.IsZero() {
					existing = &sessions[i]
					break
				}
			}
		}
		switch {
		case existing != nil && !finished(existing.Status.Phase):
			plan.reclaim = append(plan.reclaim, is)
		case existing != nil:
			plan.held = append(plan.held, heldIssue{issue: is, session: existing.Name})
		case byName[name] != nil:
			plan.conflicts = append(plan.conflicts, heldIssue{issue: is, session: name})
		case capacity > 0:
			plan.spawn = append(plan.spawn, plannedSession{name: name, issue: is})
			capacity--
		}
	}
	return plan
}

// countBacklog counts the backlog sessions that exist and those not finished. created are the
// sessions this process created (and when); those the cache shows, or older than createdGrace,
// are dropped from it, the others count as unfinished. Pure but for pruning created.
func countBacklog(sessions []agentsv1alpha1.AgentSession, created map[string]time.Time, now time.Time) (spawned, unfinished int) {
	for i := range sessions {
		o := &sessions[i]
		if !isBacklogSession(o) {
			continue
		}
		spawned++
		delete(created, o.Name)
		if !finished(o.Status.Phase) && o.DeletionTimestamp.IsZero() {
			unfinished++
		}
	}
	maps.DeleteFunc(created, func(_ string, at time.Time) bool { return now.Sub(at) > createdGrace })
	return spawned, unfinished + len(created)
}

// backlogInterval is the time between queries.
func backlogInterval(b *agentsv1alpha1.BacklogSpec) time.Duration {
	if b.Interval != nil && b.Interval.Duration > 0 {
		return b.Interval.Duration
	}
	return time.Minute
}

// backlogMemory holds the per-Project records of the Project reconciler.
type backlogMemory struct {
	mu      sync.Mutex
	records map[types.NamespacedName]*backlogRecord
}

func (m *backlogMemory) get(key types.NamespacedName, uid types.UID) *backlogRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.records[key]
	if rec == nil || rec.uid != uid {
		return nil
	}
	cp := *rec
	cp.created = maps.Clone(rec.created)
	return &cp
}

func (m *backlogMemory) put(key types.NamespacedName, rec *backlogRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[types.NamespacedName]*backlogRecord{}
	}
	m.records[key] = rec
}

func (m *backlogMemory) forget(key types.NamespacedName) {
	m.mu.Lock()
	delete(m.records, key)
	m.mu.Unlock()
}

// queryDue says whether the backlog's tracker query runs now, and otherwise how long until it
// does. The last query is the later of what this process remembers and the status (which a
// restarted manager or a new leader reads); a spec change or a new reconcile request runs it at
// once. A process that has not seen the Project before cannot tell whether the request it finds
// was answered, unless its value is a time (as `date` writes it): then it was when the last query
// is later. Pure.
func queryDue(p *agentsv1alpha1.Project, rec *backlogRecord, now time.Time) (bool, time.Duration) {
	interval := backlogInterval(p.Spec.Backlog)
	var last time.Time
	if st := p.Status.Backlog; st != nil && st.LastQueryTime != nil {
		last = st.LastQueryTime.Time
	}
	request := p.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]
	switch {
	case rec == nil && p.Status.ObservedGeneration != p.Generation:
		return true, 0
	case rec == nil && requestedAfter(request, last):
		return true, 0
	case rec != nil && (rec.generation != p.Generation || rec.request != request):
		return true, 0
	case rec != nil && rec.at.After(last):
		last = rec.at
	}
	if last.IsZero() || now.Sub(last) >= interval {
		return true, 0
	}
	return false, interval - now.Sub(last)
}

// requestedAfter reports whether a reconcile-request value is a time later than last (which the
// status keeps to the second). Pure.
func requestedAfter(value string, last time.Time) bool {
	var t time.Time
	if secs, err := strconv.ParseInt(value, 10, 64); err == nil {
		t = time.Unix(secs, 0)
	} else if t, err = time.Parse(time.RFC3339Nano, value); err != nil {
		return false
	}
	return t.After(last.Add(time.Second))
}

// reconcileBacklog advances the labels of the backlog's sessions, then, when the query is due,
// queries the tracker and creates the sessions there is room for.
func (r *ProjectReconciler) reconcileBacklog(ctx context.Context, s *projectScope) error {
	p := s.project
	b := p.Spec.Backlog
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if b == nil {
		r.backlog.forget(key)
		return nil
	}
	now := r.now()
	rec := r.backlog.get(key, p.UID)
	var created map[string]time.Time
	if rec != nil {
		created = rec.created
	}
	spawned, unfinished := countBacklog(s.sessions, created, now)
	s.backlog = &backlogScope{spawned: int32(spawned)}
	if slices.Contains(b.Labels, b.ClaimedLabel) {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.backlog.claimedLabel %q is one of spec.backlog.labels: a claimed issue would keep matching the query; choose another claimedLabel", b.ClaimedLabel)
	}
	tr, err := r.connectTracker(ctx, p, s.forge)
	if err != nil {
		return err
	}
	if tr == nil {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.backlog needs spec.tracker: set the tracker whose issues the backlog is read from")
	}
	stageErr := r.advanceStages(ctx, s, tr, b)

	due, wait := queryDue(p, rec, now)
	request := p.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]
	if rec == nil {
		// The first reconcile of this process (a restart, a new leader): the status says when the
		// last query ran; from now on a spec change or a new reconcile request runs it at once.
		rec = &backlogRecord{uid: p.UID, generation: p.Generation, request: request, created: map[string]time.Time{}}
		r.backlog.put(key, rec)
	}
	if !due {
		s.requeue = minPositive(s.requeue, wait)
		return errors.Join(stageErr, rec.err)
	}
	interval := backlogInterval(b)
	rec.generation, rec.request, rec.at = p.Generation, request, now
	s.requeue = minPositive(s.requeue, interval)

	return errors.Join(stageErr, r.queryBacklog(ctx, s, tr, rec, unfinished, now))
}

// queryBacklog queries the tracker for the backlog's issues and creates the sessions there is
// room for; a failed query is tried again after forgeRetry (or the interval, if shorter).
func (r *ProjectReconciler) queryBacklog(ctx context.Context, s *projectScope, tr tracker.Tracker, rec *backlogRecord, unfinished int, now time.Time) error {
	p := s.project
	b := p.Spec.Backlog
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	interval := backlogInterval(b)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	issues, err := tr.ListIssues(cctx, tracker.ListOptions{Labels: b.Labels, Limit: backlogQueryLimit})
	cancel()
	if err != nil {
		// Try again after forgeRetry (or the interval, if shorter), not on every session change.
		rec.err = forgeError(err, "query the backlog")
		rec.at = now.Add(min(forgeRetry, interval) - interval)
		r.backlog.put(key, rec)
		s.requeue = minPositive(s.requeue, min(forgeRetry, interval))
		r.Metrics.ObserveBacklogQuery(p.Namespace, p.Name, metrics.QueryError, 0)
		return rec.err
	}
	rec.err = nil
	s.backlog.queried, s.backlog.queryTime, s.backlog.matching = true, now, len(issues)

	// Sessions created by this process that the cache does not show yet hold a slot too.
	live := int(s.counts.Active+s.counts.Queued) + len(rec.created)
	var limit *int32
	if p.Spec.Limits != nil {
		limit = p.Spec.Limits.MaxConcurrentSessions
	}
	plan := planBacklog(p.Name, issues, s.sessions, backlogCapacity(b.MaxConcurrent, unfinished, limit, live))
	n, spawnErr := r.spawn(ctx, s, tr, b, plan, rec, now)
	r.backlog.put(key, rec)
	r.Metrics.ObserveBacklogQuery(p.Namespace, p.Name, metrics.QueryOK, n)
	return spawnErr
}

// spawn creates the planned sessions in order (oldest issue first), then claims their issues and
// those to claim again. It returns how many sessions it created.
func (r *ProjectReconciler) spawn(ctx context.Context, s *projectScope, tr tracker.Tracker, b *agentsv1alpha1.BacklogSpec, plan backlogPlan, rec *backlogRecord, now time.Time) (int, error) {
	p := s.project
	log := ctrl.LoggerFrom(ctx)
	claims := slices.Clone(plan.reclaim)
	created := 0
	var errs []error
	for _, ps := range plan.spawn {
		sess := backlogSession(p, ps)
		if err := controllerutil.SetControllerReference(p, sess, r.Scheme); err != nil {
			errs = append(errs, fmt.Errorf("own session %s: %w", ps.name, err))
			continue
		}
		err := r.Client.Create(ctx, sess)
		switch {
		case err == nil:
			rec.created[ps.name] = now
			created++
			s.backlog.spawned++
			claims = append(claims, ps.issue)
			log.Info("Created backlog session", "agentSession", klog.KObj(sess), "issue", ps.issue.ID)
			s.backlog.events = append(s.backlog.events, backlogEvent{corev1.EventTypeNormal, reasonBacklogSpawned,
				fmt.Sprintf("created AgentSession %s for issue %s", ps.name, ps.issue.ID)})
		case apierrors.IsAlreadyExists(err):
			// Another reconcile (a previous leader's, one before a restart) created it and the
			// cache has not shown it yet: claim the issue if the session is the issue's.
			existing := &agentsv1alpha1.AgentSession{}
			if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(sess), existing); gerr != nil {
				errs = append(errs, fmt.Errorf("read session %s: %w", ps.name, gerr))
				continue
			}
			if sameIssue(existing.Spec.Issue, ps.issue) {
				claims = append(claims, ps.issue)
				continue
			}
			s.backlog.events = append(s.backlog.events, nameConflict(ps.issue, ps.name))
		case apierrors.IsInvalid(err):
			// The tracker's id does not fit spec.issue: no retry can fix it.
			s.backlog.events = append(s.backlog.events, backlogEvent{corev1.EventTypeWarning, reasonBacklogIssueInvalid,
				fmt.Sprintf("issue %s cannot become an AgentSession: %v", ps.issue.ID, err)})
		default:
			errs = append(errs, fmt.Errorf("create backlog session %s: %w", ps.name, err))
		}
	}
	for _, h := range plan.held {
		s.backlog.events = append(s.backlog.events, backlogEvent{corev1.EventTypeWarning, reasonBacklogIssueHasSess,
			fmt.Sprintf("issue %s carries the backlog labels but AgentSession %s already worked on it: delete that session to start a new one", h.issue.ID, h.session)})
	}
	for _, c := range plan.conflicts {
		s.backlog.events = append(s.backlog.events, nameConflict(c.issue, c.session))
	}
	add, remove := stageLabels(b, stageClaimed)
	errs = append(errs, forEachBounded(claims, func(is tracker.Issue) error {
		if err := relabel(ctx, tr, is.ID, add, remove); err != nil {
			gone := errors.Is(err, tracker.ErrNotFound)
			s.recordRelabelFailure(is.ID, err, !gone)
			if !gone {
				// The issue keeps the query labels: the next query claims it again.
				return forgeError(err, "claim issue "+is.ID)
			}
		}
		return nil
	}))
	return created, errors.Join(errs...)
}

func nameConflict(is tracker.Issue, name string) backlogEvent {
	return backlogEvent{corev1.EventTypeWarning, reasonBacklogNameConflict,
		fmt.Sprintf("issue %s matches the backlog but AgentSession %s exists for something else: rename or delete it", is.ID, name)}
}

// backlogSession is the AgentSession for a planned issue. Pure.
func backlogSession(p *agentsv1alpha1.Project, ps plannedSession) *agentsv1alpha1.AgentSession {
	return &agentsv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{
			Name: ps.name, Namespace: p.Namespace,
			Labels: mergeLabels(managedLabels(p.Name), map[string]string{agentsv1alpha1.BacklogLabel: "true", agentsv1alpha1.IssueLabel: tracker.IssueKey(keyOrID(ps.issue))}),
		},
		Spec: agentsv1alpha1.AgentSessionSpec{
			ProjectRef: agentsv1alpha1.LocalObjectReference{Name: p.Name},
			Issue:      ps.issue.ID,
			State:      agentsv1alpha1.SessionRunning,
		},
	}
}

// advanceStages brings each backlog session's issue to the stage its phase calls for, and records
// the stage on the session once the labels are applied.
func (r *ProjectReconciler) advanceStages(ctx context.Context, s *projectScope, tr tracker.Tracker, b *agentsv1alpha1.BacklogSpec) error {
	var todo []*agentsv1alpha1.AgentSession
	for i := range s.sessions {
		o := &s.sessions[i]
		if isBacklogSession(o) && o.Spec.Issue != "" && o.DeletionTimestamp.IsZero() && wantStage(o) != appliedStage(o) {
			todo = append(todo, o)
		}
	}
	return forEachBounded(todo, func(o *agentsv1alpha1.AgentSession) error {
		stage := wantStage(o)
		add, remove := stageLabels(b, stage)
		id := strings.TrimPrefix(o.Spec.Issue, "#")
		if err := relabel(ctx, tr, id, add, remove); err != nil {
			gone := errors.Is(err, tracker.ErrNotFound)
			s.recordRelabelFailure(id, err, !gone)
			if !gone {
				return forgeError(err, fmt.Sprintf("label issue %s %s", id, stage))
			}
			// The issue is gone (deleted, transferred): there is nothing to label. The stage is
			// recorded all the same, so that it is not tried on every reconcile.
		}
		// o is the cache's object (observeSessions does not copy): change a copy.
		patch := client.MergeFrom(o)
		o = o.DeepCopy()
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations[agentsv1alpha1.BacklogStageAnnotation] = string(stage)
		if err := r.Client.Patch(ctx, o, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("record the backlog stage of %s: %w", o.Name, err)
		}
		return nil
	})
}

// recordRelabelFailure records an event for a label call that failed, safe to call from the
// bounded workers.
func (s *projectScope) recordRelabelFailure(id string, err error, retried bool) {
	what := "given up: the issue is gone"
	if retried {
		what = "tried again on the next reconcile"
	}
	s.backlogMu.Lock()
	defer s.backlogMu.Unlock()
	s.backlog.events = append(s.backlog.events, backlogEvent{corev1.EventTypeWarning, reasonBacklogRelabelFail,
		fmt.Sprintf("labels of issue %s not updated (%s): %v", id, what, err)})
}

// relabel removes, then adds labels (both idempotent): an issue is never seen by a query with
// both the query labels and the claim.
func relabel(ctx context.Context, tr tracker.Tracker, id string, add, remove []string) error {
	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	defer cancel()
	if len(remove) > 0 {
		if err := tr.RemoveLabels(cctx, id, remove...); err != nil {
			return err
		}
	}
	if len(add) > 0 {
		if err := tr.AddLabels(cctx, id, add...); err != nil {
			return err
		}
	}
	return nil
}

// forEachBounded runs fn on every item with at most backlogWorkers at once and joins the errors.
func forEachBounded[T any](items []T, fn func(T) error) error {
	if len(items) == 0 {
		return nil
	}
	errs := make([]error, len(items))
	sem := make(chan struct{}, backlogWorkers)
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(it)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// minPositive is the smaller of two delays, ignoring zero.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// setBacklogStatus reports the backlog from what the reconcile observed. Pure.
func setBacklogStatus(p *agentsv1alpha1.Project, s *projectScope) {
	if p.Spec.Backlog == nil {
		p.Status.Backlog = nil
		return
	}
	if s.backlog == nil {
		// The reconcile stopped before the backlog step: keep what was reported.
		return
	}
	st := p.Status.Backlog.DeepCopy()
	if st == nil {
		st = &agentsv1alpha1.BacklogStatus{}
	}
	st.Spawned = s.backlog.spawned
	if s.backlog.queried {
		t := metaTime(s.backlog.queryTime)
		st.LastQueryTime, st.Matching = &t, int32(s.backlog.matching)
	}
	p.Status.Backlog = st
}
