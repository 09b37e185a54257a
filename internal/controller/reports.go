package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// SessionReport is what the runners of one session reported, merged: each report changes only
// the fields it carries. It lives in memory: a manager restart loses it until the runner's next
// heartbeat (every 30s, a full snapshot), and everything that must survive a restart is copied
// into the session's status by the reconcile it triggers.
type SessionReport struct {
	// PodUID is the pod the latest report came from; a report from another pod starts afresh.
	PodUID   types.UID
	Received time.Time
	Activity *runnerapi.ActivityReport
	Agent    runnerapi.AgentReport
	Summary  string
	Usage    *runnerapi.Usage
	// Workspace facts of the session's Worktree.
	Workspace *runnerapi.WorkspaceReport
	Push      *runnerapi.PushReport
	// Loop is the runner's count of repeated failures and unchanged turns.
	Loop *runnerapi.LoopReport
	// PullRequest is the pull request the runner asked the manager to open.
	PullRequest *runnerapi.PullRequestResult
	// Ask is the runner's request to open or update the pull request, waiting for the
	// OpenPullRequest action of the session's next decision; nil when none waits.
	Ask *PullRequestAsk
	// Worktree is the Worktree the pod uses.
	Worktree string
}

// ReportStore keeps the latest report of every session and wakes its reconcile.
type ReportStore struct {
	mu        sync.Mutex
	bySession map[types.NamespacedName]*SessionReport
	// byWorktree indexes the sessions by the Worktree their latest report names, for Worktree:
	// every Worktree reconcile asks, and a scan of every session made that quadratic in a
	// fan-out (13.7% of the manager's CPU at 2400 of 10,000 sessions, the store's lock held
	// throughout; docs/performance.md).
	byWorktree map[types.NamespacedName]map[types.NamespacedName]struct{}
	// seq numbers the pull request asks.
	seq uint64
	// OnChange is called (outside the lock) after a session's report changed.
	OnChange func(types.NamespacedName)
	// OnWorktreeChange is called (outside the lock) with a Worktree whose checkout a runner
	// reported gone, or back: the Worktree's phase follows that word at once. Other facts wait
	// for the Worktree's next reconcile (they change with every turn, and a fleet's runners
	// report every few seconds).
	OnWorktreeChange func(types.NamespacedName)
}

// NewReportStore returns an empty store.
func NewReportStore() *ReportStore {
	return &ReportStore{bySession: map[types.NamespacedName]*SessionReport{}, byWorktree: map[types.NamespacedName]map[types.NamespacedName]struct{}{}}
}

// indexLocked moves the session key from the Worktree from to the Worktree to (either "": none)
// in byWorktree.
func (s *ReportStore) indexLocked(key types.NamespacedName, from, to string) {
	if from == to {
		return
	}
	if from != "" {
		wt := types.NamespacedName{Namespace: key.Namespace, Name: from}
		delete(s.byWorktree[wt], key)
		if len(s.byWorktree[wt]) == 0 {
			delete(s.byWorktree, wt)
		}
	}
	if to != "" {
		wt := types.NamespacedName{Namespace: key.Namespace, Name: to}
		set := s.byWorktree[wt]
		if set == nil {
			set = map[types.NamespacedName]struct{}{}
			s.byWorktree[wt] = set
		}
		set[key] = struct{}{}
	}
}

// Update merges r into the session's report.
func (s *ReportStore) Update(key types.NamespacedName, pod types.UID, worktree string, received time.Time, r runnerapi.Report) {
	s.mu.Lock()
	cur := s.bySession[key]
	oldWorktree := ""
	if cur != nil {
		oldWorktree = cur.Worktree
	}
	if cur == nil || cur.PodUID != pod {
		prev := cur
		cur = &SessionReport{PodUID: pod}
		if prev != nil {
			// A new pod of the same session keeps the pull request the old one opened, and
			// a request still waiting (its caller gets the answer, or retries).
			cur.PullRequest, cur.Ask = prev.PullRequest, prev.Ask
		}
		s.bySession[key] = cur
	}
	cur.Received, cur.Worktree = received, worktree
	s.indexLocked(key, oldWorktree, worktree)
	if r.Activity != nil {
		a := *r.Activity
		cur.Activity = &a
	}
	if r.Agent != nil {
		if r.Agent.SessionID != "" {
			cur.Agent.SessionID = r.Agent.SessionID
		}
		if r.Agent.Model != "" {
			cur.Agent.Model = r.Agent.Model
		}
	}
	if r.Summary != "" {
		cur.Summary = r.Summary
	}
	if r.Usage != nil {
		u := *r.Usage
		cur.Usage = &u
	}
	missingChanged := false
	if r.Workspace != nil {
		w := *r.Workspace
		missingChanged = worktree != "" && (cur.Workspace == nil && w.Missing || cur.Workspace != nil && cur.Workspace.Missing != w.Missing)
		cur.Workspace = &w
	}
	if r.Push != nil {
		p := *r.Push
		cur.Push = &p
	}
	if r.Loop != nil {
		l := *r.Loop
		cur.Loop = &l
	}
	s.mu.Unlock()
	if s.OnChange != nil {
		s.OnChange(key)
	}
	if missingChanged && s.OnWorktreeChange != nil {
		s.OnWorktreeChange(types.NamespacedName{Namespace: key.Namespace, Name: worktree})
	}
}

// PullRequestAsk is a runner's request to open or update the session's pull request. Seq names
// it in the action's id; the callers waiting for it are answered together.
type PullRequestAsk struct {
	Seq     uint64
	Request runnerapi.PullRequestRequest
	waiters []chan PullRequestAnswer
}

// PullRequestAnswer is what the OpenPullRequest action answered an ask.
type PullRequestAnswer struct {
	Result *runnerapi.PullRequestResult
	Err    error
}

// AskPullRequest records the runner's request and wakes the session's reconcile; the returned
// channel gets the answer of the action that runs it. A request equal to the waiting one joins
// it (a runner that retried); a different one replaces it, and its callers get the newer
// request's answer (the session has one pull request, and the latest title and body win).
func (s *ReportStore) AskPullRequest(key types.NamespacedName, req runnerapi.PullRequestRequest) <-chan PullRequestAnswer {
	ch := make(chan PullRequestAnswer, 1)
	s.mu.Lock()
	cur := s.bySession[key]
	if cur == nil {
		cur = &SessionReport{}
		s.bySession[key] = cur
	}
	if cur.Ask == nil || cur.Ask.Request != req {
		s.seq++
		waiters := []chan PullRequestAnswer(nil)
		if cur.Ask != nil {
			waiters = cur.Ask.waiters
		}
		cur.Ask = &PullRequestAsk{Seq: s.seq, Request: req, waiters: waiters}
	}
	cur.Ask.waiters = append(cur.Ask.waiters, ch)
	s.mu.Unlock()
	if s.OnChange != nil {
		s.OnChange(key)
	}
	return ch
}

// AnswerPullRequest answers the ask seq (a newer ask is left waiting): on success the pull
// request is recorded for the session.
func (s *ReportStore) AnswerPullRequest(key types.NamespacedName, seq uint64, ans PullRequestAnswer) {
	s.mu.Lock()
	cur := s.bySession[key]
	if cur == nil || cur.Ask == nil || cur.Ask.Seq != seq {
		s.mu.Unlock()
		return
	}
	waiters := cur.Ask.waiters
	cur.Ask = nil
	if ans.Err == nil && ans.Result != nil {
		p := *ans.Result
		cur.PullRequest = &p
	}
	s.mu.Unlock()
	for _, w := range waiters {
		w <- ans // buffered, one answer each
	}
	if s.OnChange != nil {
		s.OnChange(key)
	}
}

// Get returns a copy of the session's report.
func (s *ReportStore) Get(key types.NamespacedName) (SessionReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.bySession[key]
	if !ok {
		return SessionReport{}, false
	}
	return *cur, true
}

// Forget drops a session's report (the session was deleted).
func (s *ReportStore) Forget(key types.NamespacedName) {
	s.mu.Lock()
	if cur := s.bySession[key]; cur != nil {
		s.indexLocked(key, cur.Worktree, "")
	}
	delete(s.bySession, key)
	s.mu.Unlock()
}

// Worktree returns the most recent workspace facts any session reported for a Worktree.
func (s *ReportStore) Worktree(namespace, name string) (*runnerapi.WorkspaceReport, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *runnerapi.WorkspaceReport
	var at time.Time
	for k := range s.byWorktree[types.NamespacedName{Namespace: namespace, Name: name}] {
		r := s.bySession[k]
		if r == nil || r.Workspace == nil {
			continue
		}
		if best == nil || r.Received.After(at) {
			w := *r.Workspace
			best, at = &w, r.Received
		}
	}
	return best, at
}
