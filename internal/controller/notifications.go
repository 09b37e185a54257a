package controller

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/notify"
)

// Notifications leave a session through its status: the reconcile that decides an event also
// appends it to status.notifications with the routes that take its priority; after that write
// the dispatcher delivers each (route, notification) in the background; its result comes back
// here and the next reconcile removes the delivered route from the entry. A manager restart
// re-sends what is still listed, with the same delivery id.

// deliveryResults collects the dispatcher's results until the sessions' reconciles consume them,
// and keeps per-route statistics for the Projects' status.
type deliveryResults struct {
	mu      sync.Mutex
	results map[string]error // job key → nil (delivered) or the final error
	routes  map[routeKey]*routeStats
	// onSession is called with the session a result belongs to, to reconcile it.
	onSession func(types.NamespacedName)
}

type routeKey struct{ namespace, project, route string }

type routeStats struct {
	delivered, failed int64
	lastErr           string
	lastFailure       time.Time
	lastSuccess       time.Time
}

func newDeliveryResults() *deliveryResults {
	return &deliveryResults{results: map[string]error{}, routes: map[routeKey]*routeStats{}}
}

// jobKey names one delivery: the session, the notification and the route.
func jobKey(session types.NamespacedName, id, route string) string {
	return session.Namespace + "/" + session.Name + "/" + id + "/" + route
}

func parseJobKey(k string) (types.NamespacedName, bool) {
	parts := strings.SplitN(k, "/", 4)
	if len(parts) != 4 {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: parts[0], Name: parts[1]}, true
}

// record is the dispatcher's OnResult.
func (d *deliveryResults) record(project string, res notify.Result) {
	d.mu.Lock()
	d.results[res.Job.Key] = res.Err
	sess, ok := parseJobKey(res.Job.Key)
	rk := routeKey{sess.Namespace, project, res.Job.Route}
	st := d.routes[rk]
	if st == nil {
		st = &routeStats{}
		d.routes[rk] = st
	}
	now := time.Now()
	if res.Err == nil {
		st.delivered++
		st.lastSuccess = now
	} else if !errors.Is(res.Err, context.Canceled) {
		st.failed++
		st.lastErr, st.lastFailure = res.Err.Error(), now
	}
	d.mu.Unlock()
	if ok && d.onSession != nil {
		d.onSession(sess)
	}
}

// take returns and forgets the result of a job, if there is one.
func (d *deliveryResults) take(key string) (error, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	err, ok := d.results[key]
	if ok {
		delete(d.results, key)
	}
	return err, ok
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
			if st.lastFailure.After(st.lastSuccess) {
				rs.LastError = truncateMessage(st.lastErr)
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

// pruneDelivered removes routes whose delivery finished (delivered, or given up on: the failure
// is counted on the Project and logged) and entries with no route left.
func (d *deliveryResults) pruneDelivered(key types.NamespacedName, st *agentsv1alpha1.AgentSessionStatus) {
	out := st.Notifications[:0]
	for _, n := range st.Notifications {
		var left []string
		for _, r := range n.Routes {
			if _, done := d.take(jobKey(key, n.ID, r)); !done {
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
