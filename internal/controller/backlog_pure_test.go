package controller

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/metrics"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

func ghIssue(n string) tracker.Issue { return tracker.Issue{ID: n, Key: n} }
func lin(id string) tracker.Issue    { return tracker.Issue{ID: id, Key: strings.ToLower(id)} }

func TestBacklogSessionName(t *testing.T) {
	long := strings.Repeat("p", 63)
	cases := []struct {
		name    string
		project string
		issue   tracker.Issue
		want    string
	}{
		{"a GitHub issue", "widgets", ghIssue("42"), "widgets-42"},
		{"a Linear issue", "widgets", lin("ENG-123"), "widgets-eng-123"},
		{"no key: the id", "widgets", tracker.Issue{ID: "7"}, "widgets-7"},
		{"odd characters become dashes", "widgets", tracker.Issue{ID: "x", Key: "A_B.c"}, "widgets-a-b-c"},
		{"a long project is shortened and hashed", long, ghIssue("42"), "HASH"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := backlogSessionName(tc.project, tc.issue)
			g.Expect(validation.IsDNS1123Label(got)).To(BeEmpty(), "%q is a DNS label", got)
			g.Expect(got).To(Equal(backlogSessionName(tc.project, tc.issue)), "deterministic")
			if strings.Contains(tc.want, "HASH") {
				g.Expect(got).To(HaveLen(63))
				g.Expect(got).To(MatchRegexp(`^p{51}-[0-9a-f]{8}-42$`))
				return
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
	g := NewWithT(t)
	g.Expect(backlogSessionName(long, ghIssue("1"))).NotTo(Equal(backlogSessionName(long[:62]+"q", ghIssue("1"))),
		"two long Projects sharing a prefix get different names")
}

func TestIssueOrder(t *testing.T) {
	g := NewWithT(t)
	got := issueOrder([]tracker.Issue{ghIssue("12"), ghIssue("3"), ghIssue("100"), lin("ENG-10"), lin("ENG-9")})
	var ids []string
	for _, is := range got {
		ids = append(ids, is.ID)
	}
	g.Expect(ids).To(Equal([]string{"3", "ENG-9", "ENG-10", "12", "100"}), "oldest (lowest number) first")
}

// bsess is a session of the Project widgets for an issue, made by the backlog or not.
func bsess(name, issue string, phase agentsv1alpha1.SessionPhase, backlog bool) agentsv1alpha1.AgentSession {
	s := MakeSession(name, "ns", "widgets").Issue(issue).Obj()
	s.Status.Phase = phase
	if backlog {
		s.Labels = map[string]string{agentsv1alpha1.BacklogLabel: "true"}
	}
	return *s
}

func TestPlanBacklog(t *testing.T) {
	prompt := MakeSession("widgets-5", "ns", "widgets").Prompt("p").Obj()
	cases := []struct {
		name      string
		issues    []tracker.Issue
		sessions  []agentsv1alpha1.AgentSession
		capacity  int
		spawn     []string
		reclaim   []string
		held      []string
		conflicts []string
	}{
		{name: "room for all", issues: []tracker.Issue{ghIssue("2"), ghIssue("1")}, capacity: 5, spawn: []string{"widgets-1", "widgets-2"}},
		{name: "oldest first within the room", issues: []tracker.Issue{ghIssue("9"), ghIssue("4"), ghIssue("7")}, capacity: 2, spawn: []string{"widgets-4", "widgets-7"}},
		{name: "no room", issues: []tracker.Issue{ghIssue("1")}, capacity: 0},
		{
			name: "an issue whose session works is claimed again, and takes no room", issues: []tracker.Issue{ghIssue("1"), ghIssue("2")},
			sessions: []agentsv1alpha1.AgentSession{bsess("widgets-1", "1", agentsv1alpha1.PhaseWorking, true)},
			capacity: 1, spawn: []string{"widgets-2"}, reclaim: []string{"1"},
		},
		{
			name: "a session made by hand for the issue counts", issues: []tracker.Issue{ghIssue("3")},
			sessions: []agentsv1alpha1.AgentSession{bsess("fix-three", "#3", "", false)},
			capacity: 1, reclaim: []string{"3"},
		},
		{
			name: "a finished session holds its issue", issues: []tracker.Issue{ghIssue("1")},
			sessions: []agentsv1alpha1.AgentSession{bsess("widgets-1", "1", agentsv1alpha1.PhaseErrored, true)},
			capacity: 1, held: []string{"1"},
		},
		{
			name: "a name taken by a session for something else", issues: []tracker.Issue{ghIssue("5")},
			sessions: []agentsv1alpha1.AgentSession{*prompt}, capacity: 1, conflicts: []string{"5"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			plan := planBacklog("widgets", tc.issues, tc.sessions, tc.capacity)
			var spawn, reclaim, held, conflicts []string
			for _, s := range plan.spawn {
				spawn = append(spawn, s.name)
			}
			for _, is := range plan.reclaim {
				reclaim = append(reclaim, is.ID)
			}
			for _, h := range plan.held {
				held = append(held, h.issue.ID)
			}
			for _, c := range plan.conflicts {
				conflicts = append(conflicts, c.issue.ID)
			}
			g.Expect(spawn).To(Equal(tc.spawn))
			g.Expect(reclaim).To(Equal(tc.reclaim))
			g.Expect(held).To(Equal(tc.held))
			g.Expect(conflicts).To(Equal(tc.conflicts))
		})
	}
}

func TestBacklogCapacity(t *testing.T) {
	g := NewWithT(t)
	ten := int32(10)
	g.Expect(backlogCapacity(5, 2, nil, 100)).To(Equal(3), "no Project limit")
	g.Expect(backlogCapacity(5, 2, &ten, 9)).To(Equal(1), "the Project's limit is tighter")
	g.Expect(backlogCapacity(5, 7, nil, 0)).To(BeZero(), "never negative")
	g.Expect(backlogCapacity(5, 0, &ten, 12)).To(BeZero())
}

func TestBacklogStages(t *testing.T) {
	started := metav1.NewTime(t0)
	cases := []struct {
		phase   agentsv1alpha1.SessionPhase
		started bool
		want    backlogStage
	}{
		{"", false, stageClaimed},
		{agentsv1alpha1.PhaseQueued, false, stageClaimed},
		{agentsv1alpha1.PhaseSpawning, false, stageClaimed},
		{agentsv1alpha1.PhaseWorking, true, stageInProgress},
		{agentsv1alpha1.PhaseStopped, true, stageInProgress},
		{agentsv1alpha1.PhaseMerged, true, stageDone},
		{agentsv1alpha1.PhaseDone, true, stageEnded},
		{agentsv1alpha1.PhaseErrored, false, stageEnded},
	}
	for _, tc := range cases {
		s := bsess("widgets-1", "1", tc.phase, true)
		if tc.started {
			s.Status.StartTime = &started
		}
		NewWithT(t).Expect(wantStage(&s)).To(Equal(tc.want), "phase %q", tc.phase)
	}

	b := &agentsv1alpha1.BacklogSpec{Labels: []string{"agent", "ready"}, ClaimedLabel: "agent:claimed", InProgressLabel: "agent:in-progress", DoneLabel: "agent:done"}
	for _, tc := range []struct {
		stage       backlogStage
		add, remove []string
	}{
		{stageClaimed, []string{"agent:claimed"}, []string{"agent", "ready"}},
		{stageInProgress, []string{"agent:in-progress"}, []string{}},
		{stageDone, []string{"agent:done"}, []string{"agent:in-progress"}},
		{stageEnded, []string{}, []string{"agent:in-progress"}},
	} {
		add, remove := stageLabels(b, tc.stage)
		NewWithT(t).Expect(add).To(ConsistOf(tc.add), "%s adds", tc.stage)
		NewWithT(t).Expect(remove).To(ConsistOf(tc.remove), "%s removes", tc.stage)
	}
}

func TestQueryDue(t *testing.T) {
	minute := &metav1.Duration{Duration: time.Minute}
	project := func(lastQuery time.Duration, observed bool, request string) *agentsv1alpha1.Project {
		p := MakeProject("widgets", "ns").Obj()
		p.Generation = 2
		p.Spec.Backlog = &agentsv1alpha1.BacklogSpec{Labels: []string{"a"}, MaxConcurrent: 1, Interval: minute}
		if observed {
			p.Status.ObservedGeneration = 2
		}
		if lastQuery >= 0 {
			at := metav1.NewTime(t0.Add(-lastQuery))
			p.Status.Backlog = &agentsv1alpha1.BacklogStatus{LastQueryTime: &at}
		}
		if request != "" {
			p.Annotations = map[string]string{agentsv1alpha1.ReconcileRequestAnnotation: request}
		}
		return p
	}
	rec := func(at time.Duration, gen int64, request string) *backlogRecord {
		return &backlogRecord{at: t0.Add(-at), generation: gen, request: request}
	}
	cases := []struct {
		name string
		p    *agentsv1alpha1.Project
		rec  *backlogRecord
		due  bool
		wait time.Duration
	}{
		{"never queried", project(-1, true, ""), nil, true, 0},
		{"queried 20s ago, by the status", project(20*time.Second, true, ""), nil, false, 40 * time.Second},
		{"an interval ago", project(time.Minute, true, ""), nil, true, 0},
		{"a spec the status has not seen", project(20*time.Second, false, ""), nil, true, 0},
		{"a request stamped after the last query", project(20*time.Second, true, t0.Add(-5*time.Second).Format(time.RFC3339)), nil, true, 0},
		{"a request stamped before it", project(20*time.Second, true, t0.Add(-30*time.Second).Format(time.RFC3339)), nil, false, 40 * time.Second},
		{"a request that is not a time, unknown to a new process", project(20*time.Second, true, "please"), nil, false, 40 * time.Second},
		{"the process's own query is later than the status", project(50*time.Second, true, ""), rec(10*time.Second, 2, ""), false, 50 * time.Second},
		{"a new request value", project(20*time.Second, true, "again"), rec(20*time.Second, 2, "please"), true, 0},
		{"a new generation", project(20*time.Second, true, ""), rec(20*time.Second, 1, ""), true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			due, wait := queryDue(tc.p, tc.rec, t0)
			g.Expect(due).To(Equal(tc.due))
			g.Expect(wait).To(Equal(tc.wait))
		})
	}
}

func TestSetBacklogStatus(t *testing.T) {
	g := NewWithT(t)
	p := MakeProject("widgets", "ns").Obj()
	p.Spec.Backlog = &agentsv1alpha1.BacklogSpec{Labels: []string{"a"}, MaxConcurrent: 1}
	earlier := metav1.NewTime(t0.Add(-time.Hour))
	p.Status.Backlog = &agentsv1alpha1.BacklogStatus{LastQueryTime: &earlier, Matching: 4, Spawned: 1}

	setBacklogStatus(p, &projectScope{backlog: &backlogScope{spawned: 2}})
	g.Expect(p.Status.Backlog).To(Equal(&agentsv1alpha1.BacklogStatus{LastQueryTime: &earlier, Matching: 4, Spawned: 2}),
		"without a query, the last query's facts stay")

	setBacklogStatus(p, &projectScope{backlog: &backlogScope{spawned: 3, queried: true, queryTime: t0.Add(500 * time.Millisecond), matching: 0}})
	now := metav1.NewTime(t0)
	g.Expect(p.Status.Backlog).To(Equal(&agentsv1alpha1.BacklogStatus{LastQueryTime: &now, Matching: 0, Spawned: 3}))

	setBacklogStatus(p, &projectScope{})
	g.Expect(p.Status.Backlog.Spawned).To(Equal(int32(3)), "a reconcile that stopped before the backlog keeps it")

	p.Spec.Backlog = nil
	setBacklogStatus(p, &projectScope{})
	g.Expect(p.Status.Backlog).To(BeNil())
}

func TestCheckoutOf(t *testing.T) {
	pod := func(message string, code int32) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: containerPrepare, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: message}},
		}}}}
	}
	// A pod made before the checkout step ran beside the agent: an init container.
	oldPod := func(message string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
			Name: containerPrepare, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: message}},
		}}}}
	}
	result := func(r workspace.Result) string {
		r.Path, r.Branch = "/shepherd/workspace/worktrees/x", "b"
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	g := NewWithT(t)
	g.Expect(checkoutOf(nil, nil)).To(Equal(metrics.CheckoutUnknown))
	g.Expect(checkoutOf(pod(result(workspace.Result{FullFetch: true}), 0), nil)).To(Equal(metrics.CheckoutCold))
	g.Expect(checkoutOf(pod(result(workspace.Result{}), 0), nil)).To(Equal(metrics.CheckoutWarm))
	g.Expect(checkoutOf(pod(result(workspace.Result{Restored: true}), 0), nil)).To(Equal(metrics.CheckoutWarm))
	g.Expect(checkoutOf(pod("", 0), nil)).To(Equal(metrics.CheckoutUnknown), "no readable result")
	g.Expect(checkoutOf(oldPod(result(workspace.Result{FullFetch: true})), nil)).To(Equal(metrics.CheckoutCold), "an init container's result")
	g.Expect(checkoutOf(&corev1.Pod{}, nil)).To(Equal(metrics.CheckoutUnknown), "prepare has not finished")
	// The runner, told by the checkout step, reports before the kubelet writes the step's end.
	g.Expect(checkoutOf(&corev1.Pod{}, &runnerapi.WorkspaceReport{Path: "/w", FullFetch: true})).To(Equal(metrics.CheckoutCold))
	g.Expect(checkoutOf(&corev1.Pod{}, &runnerapi.WorkspaceReport{Path: "/w"})).To(Equal(metrics.CheckoutWarm))
	g.Expect(checkoutOf(&corev1.Pod{}, &runnerapi.WorkspaceReport{Path: "/w", Missing: true})).To(Equal(metrics.CheckoutUnknown))
	g.Expect(checkoutOf(pod(result(workspace.Result{}), 0), &runnerapi.WorkspaceReport{Path: "/w", FullFetch: true})).To(Equal(metrics.CheckoutWarm),
		"the step's own result first")
}

func TestReportOutcome(t *testing.T) {
	g := NewWithT(t)
	for status, want := range map[int]string{
		http.StatusNoContent: metrics.ReportAccepted, http.StatusConflict: metrics.ReportOutOfOrder,
		http.StatusBadRequest: metrics.ReportInvalid, http.StatusUnauthorized: metrics.ReportUnauthorized,
		http.StatusForbidden: metrics.ReportUnauthorized, http.StatusServiceUnavailable: metrics.ReportError,
	} {
		g.Expect(reportOutcome(status)).To(Equal(want), "status %d", status)
	}
}
