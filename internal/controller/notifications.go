package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/metrics"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// Notifications leave a session through its status: the reconcile that decides an event also
// appends it to status.notifications with the routes that take its priority; after that write
// the dispatcher delivers each (route, notification) in the background; its result comes back
// here and the next reconcile removes the delivered route from the entry. A manager restart
// re-sends what is still listed, with the same delivery id.

// deliveryResults collects the dispatcher's results until the sessions' status shows them, and
// keeps per-route statistics for the Projects' status.
//
// A result is kept while a session read from the cache may still list its (notification, route):
// a copy older than the write that removed it, or even older than the write that added it (a
// fast receiver answers before the cache shows the new entry). A reconcile working from such a
// copy must not send it again. So a result is forgotten only once the session no longer lists it
// and resultTTL has passed, far longer than any cache lag.
type deliveryResults struct {
	mu      sync.Mutex
	results map[types.NamespacedName]map[string]deliveryResult // session → "id/route" → result
	// inflight holds the job keys handed to the dispatcher and not answered yet. It is set before
	// the job is queued and cleared with its result under one lock, so that no reconcile sees a
	// delivery as neither in flight nor done (and sends it twice).
	inflight map[string]bool
	routes   map[routeKey]*routeStats
	// onSession is called with the session a result belongs to, to reconcile it.
	onSession func(types.NamespacedName)
	// onProject is called when a route starts or stops failing, to reconcile its Project.
	onProject func(types.NamespacedName)
}

type routeKey struct{ namespace, project, route string }

// deliveryResult is the outcome of one delivery: nil (delivered) or the final error.
type deliveryResult struct {
	err error
	at  time.Time
}

// resultTTL is how long a finished delivery is remembered once no session lists it.
const resultTTL = 10 * time.Minute

type routeStats struct {
	delivered, failed int64
	lastErr           string
	lastFailure       time.Time
	lastSuccess       time.Time
}

func (st *routeStats) failing() bool { return st.lastFailure.After(st.lastSuccess) }

func newDeliveryResults() *deliveryResults {
	return &deliveryResults{results: map[types.NamespacedName]map[string]deliveryResult{}, inflight: map[string]bool{}, routes: map[routeKey]*routeStats{}}
}

// jobKey names one delivery: the session, the notification and the route.
func jobKey(session types.NamespacedName, id, route string) string {
	return session.Namespace + "/" + session.Name + "/" + deliveryKey(id, route)
}

// deliveryKey names one delivery within a session.
func deliveryKey(id, route string) string { return id + "/" + route }

func parseJobKey(k string) (types.NamespacedName, string, bool) {
	parts := strings.SplitN(k, "/", 3)
	if len(parts) != 3 {
		return types.NamespacedName{}, "", false
	}
	return types.NamespacedName{Namespace: parts[0], Name: parts[1]}, parts[2], true
}

// record is the dispatcher's OnResult.
func (d *deliveryResults) record(project string, res notify.Result) {
	sess, delivery, ok := parseJobKey(res.Job.Key)
	if errors.Is(res.Err, context.Canceled) {
		// The manager is stopping: not a result. The notification stays listed and is sent
		// again by the next leader.
		d.release(res.Job.Key)
		return
	}
	now := time.Now()
	d.mu.Lock()
	delete(d.inflight, res.Job.Key)
	if ok {
		if d.results[sess] == nil {
			d.results[sess] = map[string]deliveryResult{}
		}
		d.results[sess][delivery] = deliveryResult{err: res.Err, at: now}
	}
	rk := routeKey{sess.Namespace, project, res.Job.Route}
	st := d.routes[rk]
	if st == nil {
		st = &routeStats{}
		d.routes[rk] = st
	}
	wasFailing := st.failing()
	if res.Err == nil {
		st.delivered++
		st.lastSuccess = now
	} else {
		st.failed++
		st.lastErr, st.lastFailure = res.Err.Error(), now
	}
	flipped := st.failing() != wasFailing
	d.mu.Unlock()
	if ok && d.onSession != nil {
		d.onSession(sess)
	}
	if flipped && d.onProject != nil {
		d.onProject(types.NamespacedName{Namespace: sess.Namespace, Name: project})
	}
}

// claim marks a delivery as handed to the dispatcher. It reports false when it already is, or
// has finished.
func (d *deliveryResults) claim(session types.NamespacedName, id, route string) bool {
	key := jobKey(session, id, route)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, done := d.results[session][deliveryKey(id, route)]; done || d.inflight[key] {
		return false
	}
	d.inflight[key] = true
	return true
}

// release forgets a claim whose job was not queued.
func (d *deliveryResults) release(key string) {
	d.mu.Lock()
	delete(d.inflight, key)
	d.mu.Unlock()
}

// settle forgets the results the session's status, as read, no longer lists, once resultTTL
// has passed.
func (d *deliveryResults) settle(session types.NamespacedName, read []agentsv1alpha1.PendingNotification, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	listed := map[string]bool{}
	for _, n := range read {
		for _, r := range n.Routes {
			listed[deliveryKey(n.ID, r)] = true
		}
	}
	for k, r := range d.results[session] {
		if !listed[k] && now.Sub(r.at) >= resultTTL {
			delete(d.results[session], k)
		}
	}
	if len(d.results[session]) == 0 {
		delete(d.results, session)
	}
}

// forget drops a deleted session's results.
func (d *deliveryResults) forget(session types.NamespacedName) {
	d.mu.Lock()
	delete(d.results, session)
	d.mu.Unlock()
}

// routeStatus reports the Project's routes.
func (d *deliveryResults) routeStatus(namespace, project string, routes []agentsv1alpha1.NotificationRoute) []agentsv1alpha1.NotificationRouteStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []agentsv1alpha1.NotificationRouteStatus
	for _, r := range routes {
		rs := agentsv1alpha1.NotificationRouteStatus{Name: r.Name}
		if st := d.routes[routeKey{namespace, project, r.Name}]; st != nil {
			rs.Delivered, rs.Failed = st.delivered, st.failed
			if st.failing() {
				rs.LastError = clip.Marked(st.lastErr, maxConditionMessage, "…")
				t := metaTime(st.lastFailure)
				rs.LastFailureTime = &t
			}
		}
		out = append(out, rs)
	}
	return out
}

// queueNotifications appends the decision's notifications to the session's outbox, with the
// routes that take each priority. Kubernetes Events are recorded for every event anyway.
func queueNotifications(st *agentsv1alpha1.AgentSessionStatus, p *agentsv1alpha1.Project, pending []agentsv1alpha1.PendingNotification) {
	have := map[string]bool{}
	for _, n := range st.Notifications {
		have[n.ID] = true
	}
	for _, n := range pending {
		if have[n.ID] || len(st.Notifications) >= 32 {
			continue
		}
		var routes []string
		if p.Spec.Notifications != nil {
			for _, r := range notify.Select(p.Spec.Notifications.Routes, n.Priority) {
				routes = append(routes, r.Name)
			}
		}
		if len(routes) == 0 {
			continue
		}
		n.Routes = routes
		st.Notifications = append(st.Notifications, n)
		have[n.ID] = true
	}
}

// finished lists the session's deliveries that finished (delivered, or given up on), by
// deliveryKey: a snapshot, evidence for the status.
func (d *deliveryResults) finished(session types.NamespacedName) map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.results[session]))
	for k := range d.results[session] {
		out[k] = true
	}
	return out
}

// pruneDelivered removes routes whose delivery finished (delivered, or given up on: the failure
// is counted on the Project and logged) and entries with no route left. Pure.
func pruneDelivered(st *agentsv1alpha1.AgentSessionStatus, finished map[string]bool) {
	out := st.Notifications[:0]
	for _, n := range st.Notifications {
		var left []string
		for _, r := range n.Routes {
			if !finished[deliveryKey(n.ID, r)] {
				left = append(left, r)
			}
		}
		if len(left) > 0 {
			n.Routes = left
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	st.Notifications = out
}

// senderFor builds the sender of a route, reading its Secret.
func (d *Deps) senderFor(ctx context.Context, p *agentsv1alpha1.Project, route string) (notify.Sender, error) {
	if p.Spec.Notifications == nil {
		return nil, errors.New("no notification routes")
	}
	client := &http.Client{Timeout: 15 * time.Second}
	if d.Outbound != nil {
		client.Transport = d.Outbound
	}
	for _, r := range p.Spec.Notifications.Routes {
		if r.Name != route {
			continue
		}
		switch {
		case r.Webhook != nil:
			secret, err := d.Secrets.Key(ctx, p.Namespace, r.Webhook.SecretRef, "notification route "+r.Name)
			if err != nil {
				return nil, err
			}
			return &notify.WebhookSender{URL: string(r.Webhook.URL), Secret: secret, Client: client}, nil
		case r.Slack != nil:
			url, err := d.Secrets.Key(ctx, p.Namespace, r.Slack.WebhookURLSecretRef, "notification route "+r.Name)
			if err != nil {
				return nil, err
			}
			return &notify.SlackSender{URL: strings.TrimSpace(string(url)), Client: client}, nil
		}
	}
	return nil, errors.New("route " + route + " not found")
}

// notificationsOf turns the decision's Notify and Escalate actions into outbox entries.
func notificationsOf(d *lifecycle.Decision, now time.Time) []agentsv1alpha1.PendingNotification {
	var out []agentsv1alpha1.PendingNotification
	for _, a := range d.Actions {
		if a.Type != lifecycle.ActionNotify && a.Type != lifecycle.ActionEscalate {
			continue
		}
		t := metav1.NewTime(now.Truncate(time.Second))
		out = append(out, agentsv1alpha1.PendingNotification{
			ID: clip.To(a.ID, 128), Type: clip.To(string(a.Event), 64), Priority: a.Priority,
			Reason: clip.To(a.Reason, 128), Message: clip.To(a.Text, 2048), CreatedTime: &t,
		})
	}
	return out
}

// dispatch hands every undelivered (notification, route) to the dispatcher.
func (r *AgentSessionReconciler) dispatch(ctx context.Context, s *sessionScope) {
	if r.Notifier == nil || s.project == nil {
		return
	}
	for _, n := range s.sess.Status.Notifications {
		for _, route := range n.Routes {
			r.enqueue(ctx, s, n, route)
		}
	}
}

func (r *AgentSessionReconciler) enqueue(ctx context.Context, s *sessionScope, n agentsv1alpha1.PendingNotification, route string) {
	key := jobKey(s.key, n.ID, route)
	if r.Deliveries == nil || r.Notifier.Pending(key) || !r.Deliveries.claim(s.key, n.ID, route) {
		return
	}
	sender, err := r.senderFor(ctx, s.project, route)
	if err != nil {
		r.Deliveries.release(key)
		ctrl.LoggerFrom(ctx).Error(err, "Cannot build the notification sender", "route", route)
		return
	}
	created := r.now()
	if n.CreatedTime != nil {
		created = n.CreatedTime.Time
	}
	prURL := ""
	if pr := s.sess.Status.PullRequest; pr != nil {
		prURL = pr.URL
	}
	dashboard := ""
	if root := r.Options.DashboardURL; root != "" {
		dashboard = ui.SessionLink(root, s.sess.Namespace, s.sess.Name)
	}
	queued := r.Notifier.Enqueue(notify.Job{Key: key, Route: route, Sender: sender, Notification: notify.Notification{
		ID: s.sess.Namespace + "/" + s.sess.Name + "/" + n.ID, Type: n.Type, Priority: n.Priority, Reason: n.Reason,
		Message: n.Message, Namespace: s.sess.Namespace, Session: s.sess.Name, Project: s.project.Name,
		PullRequestURL: prURL, DashboardURL: dashboard, Time: created,
	}})
	if !queued {
		// The queue is full: the notification stays listed and a later reconcile tries again.
		r.Deliveries.release(key)
	}
}

// runNotification hands the notification the action queued to the dispatcher.
func (r *AgentSessionReconciler) runNotification(ctx context.Context, s *sessionScope, a lifecycle.Action) error {
	if r.Notifier == nil || s.project == nil {
		return nil
	}
	for _, n := range s.sess.Status.Notifications {
		if n.ID != clip.To(a.ID, 128) {
			continue
		}
		for _, route := range n.Routes {
			r.enqueue(ctx, s, n, route)
		}
	}
	return nil
}

// setupNotifier adds the notification dispatcher: only the leader delivers, each result recorded
// for the session or Project that owns the notification, counted and, when it failed, logged.
func setupNotifier(mgr ctrl.Manager, cfg Config, deps *Deps) error {
	policy := notify.DefaultPolicy
	if cfg.NotifyPolicy != nil {
		policy = *cfg.NotifyPolicy
	}
	deps.Notifier = notify.NewDispatcher(4, 1024, policy, func(res notify.Result) {
		deps.Deliveries.record(res.Job.Notification.Project, res)
		if !errors.Is(res.Err, context.Canceled) {
			outcome := metrics.NotificationDelivered
			if res.Err != nil {
				outcome = metrics.NotificationFailed
			}
			deps.Metrics.ObserveNotification(destinationType(res.Job.Sender), outcome)
		}
		if res.Err != nil {
			mgr.GetLogger().WithName("notify").Error(res.Err, "Notification not delivered", "route", res.Job.Route, "id", res.Job.Notification.ID)
		}
	})
	if err := mgr.Add(deps.Notifier); err != nil {
		return fmt.Errorf("add notification dispatcher: %w", err)
	}
	return nil
}

// destinationType names a notification sender's kind of destination, for metrics.
func destinationType(s notify.Sender) string {
	switch s.(type) {
	case *notify.WebhookSender:
		return "webhook"
	case *notify.SlackSender:
		return "slack"
	}
	return "other"
}
