package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// DeleteJudgedPod runs the DeletePod action's runner for the pod a decision judged, as the
// AgentSession controller does after the status write (for the envtest suite, package
// controller_test).
func DeleteJudgedPod(ctx context.Context, c client.Client, judged *corev1.Pod) error {
	r := &AgentSessionReconciler{Deps: &Deps{Client: c}}
	return r.runDeletePod(ctx, &sessionScope{pod: judged}, lifecycle.Action{Type: lifecycle.ActionDeletePod, PodUID: string(judged.UID)})
}

// ProjectIssues is the UI's issue lister (kubectl shepherd batch) over d.
func ProjectIssues(d *Deps) ui.IssueLister { return projectIssues{deps: d} }

// SetClosePullRequestGiveUp shortens how long a deleted session waits for its pull request's
// close (envtest cannot wait 5 minutes); the returned func restores it. Set it while no
// session is being deleted.
func SetClosePullRequestGiveUp(d time.Duration) (restore func()) {
	old := closePullRequestGiveUpNanos.Swap(int64(d))
	return func() { closePullRequestGiveUpNanos.Store(old) }
}

// SetVolumeHeldAfter shortens how long a scheduled agent pod waits before Shepherd looks for
// what holds its volume; the returned func restores it.
func SetVolumeHeldAfter(d time.Duration) (restore func()) {
	old := volumeHeldAfter.Swap(int64(d))
	return func() { volumeHeldAfter.Store(old) }
}

// CacheBehindWrites runs the session reconciler's check of its own last writes against what c
// reads, with the session's Worktree created by this manager at createdAt, at now (for the
// envtest suite: c reads the API server, standing for a cache that has or has not caught up).
func CacheBehindWrites(ctx context.Context, c client.Client, sess *agentsv1alpha1.AgentSession, createdAt, now time.Time) (bool, error) {
	r := &AgentSessionReconciler{Deps: &Deps{Client: c, Now: func() time.Time { return now }}}
	key := client.ObjectKeyFromObject(sess)
	r.worktreesCreated.set(key, createdAt)
	return r.cacheBehindWrites(ctx, key, sess)
}
