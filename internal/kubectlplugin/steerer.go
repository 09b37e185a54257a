package kubectlplugin

import (
	"context"
	"io"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Steerer makes the plugin's writes (send, answer, approve, stop, restore, pick) for the dashboard,
// with the same checks and server-side applies, as the field manager DashboardFieldManager. The
// caller has authorised the user (a SubjectAccessReview for patch on the session); the writes
// are made with the clients given, the manager's.
type Steerer struct {
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
}

func (s *Steerer) env(ns string) *env {
	return &env{dyn: s.Dynamic, kube: s.Kube, ns: ns, out: io.Discard, fieldManager: DashboardFieldManager}
}

// Send queues a message from the user from; id "" makes a new one. It returns the id.
func (s *Steerer) Send(ctx context.Context, ns, name, id, text, from string) (string, error) {
	m := &sendOptions{id: id, from: from}
	if from == "" {
		m.from = "dashboard"
	}
	return m.send(ctx, s.env(ns), name, text)
}

// Approve approves the pull request's head, which must start with head when head is set.
func (s *Steerer) Approve(ctx context.Context, ns, name, head string) (string, error) {
	return s.env(ns).approve(ctx, name, head, false)
}

// SetState stops or restores the session.
func (s *Steerer) SetState(ctx context.Context, ns, name string, state agentsv1alpha1.SessionState) (string, error) {
	return s.env(ns).setState(ctx, name, state, false)
}

// Pick chooses attempt for the AgentTask task (spec.selection.pick). The caller has authorised
// patch on the task.
func (s *Steerer) Pick(ctx context.Context, ns, task, attempt string) (string, error) {
	return s.env(ns).Pick(ctx, task, attempt, false)
}
