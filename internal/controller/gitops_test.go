package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/config/argocd"
)

// The GitOps verdicts (docs/gitops.md): every Project, Worktree, AgentSession, BudgetPolicy and AgentTask the suite's
// controllers write is recorded as it changes, one object per distinct state, and at the end of
// the suite each is judged by Argo CD's health check (the Lua, run as Argo CD runs it) and by
// kstatus (what Flux's wait and kpt read). Both must give the row of the table below that the
// object's state selects, and the table must be the one docs/gitops.md shows. So the Lua, the
// controllers and the documentation cannot drift apart.

// verdictRow is one row of the table: which objects it covers, and the two verdicts.
type verdictRow struct {
	Kind, State, Argo string
	Kstatus           status.Status
}

var verdictTable = []verdictRow{
	{"AgentSession", "Merged, Done", argocd.Healthy, status.CurrentStatus},
	{"AgentSession", "Stopped", argocd.Suspended, status.CurrentStatus},
	{"AgentSession", "NeedsInput", argocd.Suspended, status.FailedStatus},
	{"AgentSession", "a human acts: Stalled AwaitingHuman (the phase's reaction is not SendToAgent) or Escalated", argocd.Suspended, status.FailedStatus},
	{"AgentSession", "a human merges: Mergeable with NeedsAttention", argocd.Suspended, status.InProgressStatus},
	{"AgentSession", "Errored, Stuck, or Stalled for any other reason (a missing Project or Worktree, an invalid spec)", argocd.Degraded, status.FailedStatus},
	{"AgentSession", "any other phase (Queued, Spawning, Working, PROpen, CIFailed or ChangesRequested while the agent fixes it, ReviewPending, Approved, Mergeable)", argocd.Progressing, status.InProgressStatus},
	{"AgentSession", "status behind metadata.generation", argocd.Progressing, status.InProgressStatus},
	{"Project", "Ready", argocd.Healthy, status.CurrentStatus},
	{"Project", "Stalled (a missing Secret or key, a rejected token, an unknown repository)", argocd.Degraded, status.FailedStatus},
	{"Project", "Reconciling, or status behind metadata.generation", argocd.Progressing, status.InProgressStatus},
	{"Worktree", "Ready or Removed", argocd.Healthy, status.CurrentStatus},
	{"Worktree", "Ready, but the setup commands failed", argocd.Degraded, status.CurrentStatus},
	{"Worktree", "Failed (Stalled)", argocd.Degraded, status.FailedStatus},
	{"Worktree", "Pending, Missing, Removing, or status behind metadata.generation", argocd.Progressing, status.InProgressStatus},
	{"BudgetPolicy", "Ready, every cap with room", argocd.Healthy, status.CurrentStatus},
	{"BudgetPolicy", "Ready, a cap spent (the covered Projects' new sessions wait for the window to reset)", argocd.Suspended, status.CurrentStatus},
	{"BudgetPolicy", "Stalled (a selector or a time zone that does not parse)", argocd.Degraded, status.FailedStatus},
	{"BudgetPolicy", "status behind metadata.generation", argocd.Progressing, status.InProgressStatus},
	{"AgentTask", "Merged (the chosen attempt's pull request merged)", argocd.Healthy, status.CurrentStatus},
	{"AgentTask", "WaitingForPick (the Human policy, or the cost cap reached with pull requests open)", argocd.Suspended, status.InProgressStatus},
	{"AgentTask", "Failed (no attempt to choose, the chosen one lost), or Stalled (its Project not found)", argocd.Degraded, status.FailedStatus},
	{"AgentTask", "Running, Chosen (on its way to merge), or status behind metadata.generation", argocd.Progressing, status.InProgressStatus},
	{"any", "being deleted (the message names the finalizers it waits for)", argocd.Progressing, status.TerminatingStatus},
}

// verdictMarkdown is the table as docs/gitops.md shows it.
func verdictMarkdown() string {
	var b strings.Builder
	b.WriteString("| Kind | State | Argo CD health | kstatus |\n|---|---|---|---|\n")
	for _, r := range verdictTable {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Kind, r.State, r.Argo, r.Kstatus)
	}
	return b.String()
}

func condOf(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func isTrue(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }

// behind: the status describes an older generation. A status without observedGeneration (a
// Project or Worktree whose first reconcile failed transiently) is not behind: kstatus and the
// Lua read it by its conditions alone.
func behind(observed int64, obj client.Object) bool {
	return observed > 0 && observed < obj.GetGeneration()
}

// verdictFor is the row an object's state selects.
func verdictFor(obj client.Object) verdictRow {
	row := func(kind, prefix string) verdictRow {
		for _, r := range verdictTable {
			if r.Kind == kind && strings.HasPrefix(r.State, prefix) {
				return r
			}
		}
		panic("no row " + kind + " " + prefix)
	}
	if obj.GetDeletionTimestamp() != nil {
		return row("any", "being deleted")
	}
	switch o := obj.(type) {
	case *agentsv1alpha1.AgentSession:
		st := o.Status
		stalled := condOf(st.Conditions, agentsv1alpha1.ConditionStalled)
		switch {
		case behind(st.ObservedGeneration, o):
			return row("AgentSession", "status behind")
		case st.Phase == agentsv1alpha1.PhaseMerged || st.Phase == agentsv1alpha1.PhaseDone:
			return row("AgentSession", "Merged")
		case st.Phase == agentsv1alpha1.PhaseStopped:
			return row("AgentSession", "Stopped")
		case st.Phase == agentsv1alpha1.PhaseErrored || st.Phase == agentsv1alpha1.PhaseStuck:
			return row("AgentSession", "Errored")
		case st.Phase == agentsv1alpha1.PhaseNeedsInput:
			return row("AgentSession", "NeedsInput")
		case isTrue(stalled) && (stalled.Reason == agentsv1alpha1.ReasonAwaitingHuman || stalled.Reason == agentsv1alpha1.ReasonEscalated):
			return row("AgentSession", "a human acts")
		case isTrue(stalled):
			return row("AgentSession", "Errored")
		case isTrue(condOf(st.Conditions, agentsv1alpha1.ConditionNeedsAttention)):
			return row("AgentSession", "a human merges")
		}
		return row("AgentSession", "any other phase")
	case *agentsv1alpha1.Project:
		switch c := o.Status.Conditions; {
		case behind(o.Status.ObservedGeneration, o):
			return row("Project", "Reconciling")
		case isTrue(condOf(c, agentsv1alpha1.ConditionStalled)):
			return row("Project", "Stalled")
		case isTrue(condOf(c, agentsv1alpha1.ConditionReady)):
			return row("Project", "Ready")
		}
		return row("Project", "Reconciling")
	case *agentsv1alpha1.Worktree:
		c := o.Status.Conditions
		setup := condOf(c, agentsv1alpha1.ConditionSetupSucceeded)
		switch {
		case behind(o.Status.ObservedGeneration, o):
			return row("Worktree", "Pending")
		case isTrue(condOf(c, agentsv1alpha1.ConditionStalled)):
			return row("Worktree", "Failed")
		case setup != nil && setup.Status == metav1.ConditionFalse && setup.Reason == agentsv1alpha1.ReasonSetupFailed:
			return row("Worktree", "Ready, but")
		case isTrue(condOf(c, agentsv1alpha1.ConditionReady)):
			return row("Worktree", "Ready or")
		}
		return row("Worktree", "Pending")
	case *agentsv1alpha1.BudgetPolicy:
		c := o.Status.Conditions
		budget := condOf(c, agentsv1alpha1.ConditionBudgetAvailable)
		switch {
		case behind(o.Status.ObservedGeneration, o):
			return row("BudgetPolicy", "status behind")
		case isTrue(condOf(c, agentsv1alpha1.ConditionStalled)):
			return row("BudgetPolicy", "Stalled")
		case budget != nil && budget.Status == metav1.ConditionFalse:
			return row("BudgetPolicy", "Ready, a cap")
		}
		return row("BudgetPolicy", "Ready, every")
	case *agentsv1alpha1.AgentTask:
		switch {
		case behind(o.Status.ObservedGeneration, o):
			return row("AgentTask", "Running")
		case o.Status.Phase == agentsv1alpha1.TaskMerged:
			return row("AgentTask", "Merged")
		case o.Status.Phase == agentsv1alpha1.TaskWaitingForPick:
			return row("AgentTask", "WaitingForPick")
		case o.Status.Phase == agentsv1alpha1.TaskFailed || isTrue(condOf(o.Status.Conditions, agentsv1alpha1.ConditionStalled)):
			return row("AgentTask", "Failed")
		}
		return row("AgentTask", "Running")
	}
	panic(fmt.Sprintf("no verdict for %T", obj))
}

// stateRecorder keeps one object per distinct state the suite's objects were seen in.
type stateRecorder struct {
	mu   sync.Mutex
	seen map[string]client.Object
}

var gitopsStates = &stateRecorder{seen: map[string]client.Object{}}

// stateKey: the kind, the phase and the conditions' types, statuses and reasons, the
// generation lag and deletion.
func stateKey(obj client.Object, phase string, conds []metav1.Condition, observed int64) string {
	parts := []string{fmt.Sprintf("%T", obj), phase, fmt.Sprint(behind(observed, obj), obj.GetDeletionTimestamp() != nil)}
	for _, c := range conds {
		parts = append(parts, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	sort.Strings(parts[3:])
	return strings.Join(parts, " ")
}

func (r *stateRecorder) add(obj client.Object) {
	var key string
	switch o := obj.(type) {
	case *agentsv1alpha1.AgentSession:
		if o.Status.Phase == "" {
			return // not yet observed: the Lua says so, and kstatus reads no status as Current
		}
		key = stateKey(o, string(o.Status.Phase), o.Status.Conditions, o.Status.ObservedGeneration)
	case *agentsv1alpha1.Project:
		if len(o.Status.Conditions) == 0 {
			return
		}
		key = stateKey(o, "", o.Status.Conditions, o.Status.ObservedGeneration)
	case *agentsv1alpha1.Worktree:
		if len(o.Status.Conditions) == 0 {
			return
		}
		key = stateKey(o, string(o.Status.Phase), o.Status.Conditions, o.Status.ObservedGeneration)
	case *agentsv1alpha1.BudgetPolicy:
		if len(o.Status.Conditions) == 0 {
			return
		}
		key = stateKey(o, "", o.Status.Conditions, o.Status.ObservedGeneration)
	case *agentsv1alpha1.AgentTask:
		if len(o.Status.Conditions) == 0 {
			return // not yet observed (a task waiting for its Project has conditions and no phase)
		}
		key = stateKey(o, string(o.Status.Phase), o.Status.Conditions, o.Status.ObservedGeneration)
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) < 2000 {
		r.seen[key] = obj.DeepCopyObject().(client.Object)
	}
}

// watchStates records every change of the four kinds until ctx ends.
func (r *stateRecorder) watchStates(ctx context.Context, wc client.WithWatch) {
	for _, list := range []client.ObjectList{&agentsv1alpha1.AgentSessionList{}, &agentsv1alpha1.ProjectList{}, &agentsv1alpha1.WorktreeList{},
		&agentsv1alpha1.BudgetPolicyList{}, &agentsv1alpha1.AgentTaskList{}} {
		go func() {
			defer GinkgoRecover()
			for ctx.Err() == nil {
				w, err := wc.Watch(ctx, list.DeepCopyObject().(client.ObjectList))
				if err != nil {
					select { // the API server is not up yet, or going: try again shortly
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				for ev := range w.ResultChan() {
					if obj, ok := ev.Object.(client.Object); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
						r.add(obj)
					}
				}
				w.Stop()
			}
		}()
	}
}

// checkVerdicts judges every recorded state; complete asks that every row was seen (a whole,
// unfocused run).
func (r *stateRecorder) checkVerdicts(complete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := map[verdictRow]int{}
	var failures []string
	for key, obj := range r.seen {
		want := verdictFor(obj)
		rows[want]++
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		Expect(err).NotTo(HaveOccurred())
		u := &unstructured.Unstructured{Object: raw}
		gvk, err := k8sClient.GroupVersionKindFor(obj)
		Expect(err).NotTo(HaveOccurred())
		u.SetGroupVersionKind(gvk)
		hs, err := argocd.Health(u)
		Expect(err).NotTo(HaveOccurred(), key)
		ks, err := status.Compute(u)
		Expect(err).NotTo(HaveOccurred(), key)
		if hs.Status != want.Argo || ks.Status != want.Kstatus {
			failures = append(failures, fmt.Sprintf("%s: Argo CD %s (%q), kstatus %s (%q); the table says %s, %s (%s)", key, hs.Status, hs.Message, ks.Status, ks.Message, want.Argo, want.Kstatus, want.State))
		}
		if hs.Message == "" {
			failures = append(failures, key+": Argo CD shows no message")
		}
	}
	sort.Strings(failures)
	Expect(failures).To(BeEmpty())
	GinkgoWriter.Printf("GitOps verdicts: %d distinct states judged\n", len(r.seen))
	if !complete {
		return
	}
	// Deletion is seen for Worktrees (their finalizer); a state behind the generation is too
	// brief to count on.
	for _, row := range verdictTable {
		if rows[row] == 0 && !strings.HasPrefix(row.State, "status behind") {
			failures = append(failures, row.Kind+": "+row.State)
		}
	}
	Expect(failures).To(BeEmpty(), "rows no object of the suite was seen in")
}

// The table docs/gitops.md shows is verdictTable.
var _ = Describe("GitOps verdict table", func() {
	It("is the one docs/gitops.md documents", func() {
		doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "gitops.md"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(doc)).To(ContainSubstring(verdictMarkdown()))
	})
})
