package controller_test

import (
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gcustom"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// testEnv is one test's world: a namespace, a repository on the fake GitHub with a token Secret,
// and (once created) the Project "widgets" on it.
type world struct {
	ns   string
	full string
}

// newWorld makes a namespace and a repository. Its sessions, Worktrees and Project are removed
// when the test ends, so that earlier tests do not keep the manager and the poller busy.
func newWorld() *world {
	GinkgoHelper()
	w := &world{ns: newNamespace()}
	w.full = newRepo(w.ns)
	DeferCleanup(w.cleanup)
	return w
}

func (w *world) cleanup() {
	opts := []client.DeleteAllOfOption{client.InNamespace(w.ns)}
	Expect(client.IgnoreNotFound(k8sClient.DeleteAllOf(ctx, &agentsv1alpha1.AgentTask{}, opts...))).To(Succeed())
	Expect(client.IgnoreNotFound(k8sClient.DeleteAllOf(ctx, &agentsv1alpha1.AgentSession{}, opts...))).To(Succeed())
	Expect(client.IgnoreNotFound(k8sClient.DeleteAllOf(ctx, &agentsv1alpha1.Worktree{}, opts...))).To(Succeed())
	var wts agentsv1alpha1.WorktreeList
	Expect(k8sClient.List(ctx, &wts, client.InNamespace(w.ns))).To(Succeed())
	for i := range wts.Items {
		wt := &wts.Items[i]
		patch := client.MergeFrom(wt.DeepCopy())
		wt.Finalizers = nil
		Expect(client.IgnoreNotFound(k8sClient.Patch(ctx, wt, patch))).To(Succeed())
	}
	Expect(client.IgnoreNotFound(k8sClient.DeleteAllOf(ctx, &agentsv1alpha1.Project{}, opts...))).To(Succeed())
}

// project returns a builder for the Project "widgets" of the world's repository.
func (w *world) project() *ProjectBuilder { return project(w.ns, w.full) }

// create makes an object and fails the test if it cannot.
func create(obj client.Object) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, obj)).To(Succeed())
}

// update changes an object with a conflict-safe read-modify-write.
func update[T client.Object](obj T, mutate func(T)) {
	GinkgoHelper()
	Eventually(func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return k8sClient.Update(ctx, obj)
	}).Should(Succeed())
}

// annotate sets one annotation with a merge patch of the metadata alone, as `kubectl annotate`
// does (a full update would rewrite the spec in its canonical form and could bump the
// generation on its own).
func annotate(obj client.Object, key, value string) {
	GinkgoHelper()
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value))
	Expect(k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

// fresh reads obj again and returns it (for Eventually on a field of it).
func fresh[T client.Object](obj T) T {
	GinkgoHelper()
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

func objKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func objMeta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

func session(ns, name string) *agentsv1alpha1.AgentSession {
	return &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func worktree(ns, name string) *agentsv1alpha1.Worktree {
	return &agentsv1alpha1.Worktree{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// sessionStatus returns a function that reads a session's status, for Eventually.
func sessionStatus(ns, name string) func() agentsv1alpha1.AgentSessionStatus {
	return func() agentsv1alpha1.AgentSessionStatus {
		s := session(ns, name)
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return agentsv1alpha1.AgentSessionStatus{}
		}
		return s.Status
	}
}

func worktreeStatus(ns, name string) func() agentsv1alpha1.WorktreeStatus {
	return func() agentsv1alpha1.WorktreeStatus {
		w := worktree(ns, name)
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			return agentsv1alpha1.WorktreeStatus{}
		}
		return w.Status
	}
}

func projectConditions(ns, name string) func() []metav1.Condition {
	return func() []metav1.Condition {
		p := &agentsv1alpha1.Project{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			return nil
		}
		return p.Status.Conditions
	}
}

// HaveCondition matches a condition list holding typ with status and, when given, reason.
func HaveCondition(typ string, status metav1.ConditionStatus, reason ...string) OmegaMatcher {
	want := typ + "=" + string(status)
	if len(reason) > 0 {
		want += " (" + reason[0] + ")"
	}
	return gcustom.MakeMatcher(func(conds []metav1.Condition) (bool, error) {
		c := meta.FindStatusCondition(conds, typ)
		return c != nil && c.Status == status && (len(reason) == 0 || c.Reason == reason[0]), nil
	}).WithTemplate("Expected conditions\n{{.FormattedActual}}\n{{.To}} hold " + want)
}

func hasCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Status == status && c.Reason == reason
}

// HavePhase matches a session status in phase p.
func HavePhase(p agentsv1alpha1.SessionPhase) OmegaMatcher {
	return HaveField("Phase", p)
}

// podGone reports whether the pod is absent (or was replaced by a pod with another UID).
func podGone(ns, name string, uid types.UID) func() bool {
	return func() bool {
		p := &corev1.Pod{}
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)
		return apierrors.IsNotFound(err) || (err == nil && p.UID != uid)
	}
}

func podExists(ns, name string) func() bool {
	return func() bool {
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
		return err == nil
	}
}

// setPodStatus plays the kubelet: mutate gets the pod as it is and writes its status.
func setPodStatus(pod *corev1.Pod, mutate func(*corev1.Pod)) {
	GinkgoHelper()
	Eventually(func() error {
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		mutate(p)
		return k8sClient.Status().Update(ctx, p)
	}).Should(Succeed())
}

// initDone marks a pod's checkout step finished, with result (JSON) as its message: the runner
// sidecar running, prepare (beside the agent's container) ended. Callers append the agent's
// container's status.
func initDone(p *corev1.Pod, result any) {
	now := metav1.Now()
	msg := ""
	switch r := result.(type) {
	case nil:
	case string:
		msg = r
	default:
		b, _ := json.Marshal(r)
		msg = string(b)
	}
	initStatuses(p, now)
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		if c.Name == "prepare" {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: msg, FinishedAt: now}}})
		}
	}
}

// initStatuses marks a pod's init containers as the kubelet shows them once the pod runs: the
// runner (a native sidecar) running beside the agent, any other completed.
func initStatuses(p *corev1.Pod, now metav1.Time) {
	p.Status.InitContainerStatuses = nil
	for _, c := range p.Spec.InitContainers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}}
		if c.Name == "runner" {
			st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
			st.Started = ptr.To(true)
		}
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, st)
	}
}

// agentWaiting leaves the agent container waiting with reason (ErrImagePull, ...).
func agentWaiting(reason, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		initDone(p, prepared(p.Labels[agentsv1alpha1.LabelSession]))
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "agent", Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}})
	}
}

// preparedResult is a successful prepare of branch with the given facts and setup outcome.
func preparedResult(branch string, facts workspace.Facts, setup workspace.SetupResult) *workspace.Result {
	facts.Branch = branch
	if facts.Head == "" {
		facts.Head = "0123456789abcdef0123456789abcdef01234567"
	}
	if setup.State == "" {
		setup.State = agentsv1alpha1.SetupSucceeded
	}
	return &workspace.Result{Path: "/shepherd/workspace/worktrees/x", Branch: branch, BranchAction: workspace.BranchCreated, Setup: setup, Facts: facts}
}

// agent drives one session from the outside: the kubelet of its pod, its runner over the
// channel, and its branch and pull request on the fake GitHub.
type agent struct {
	w      *world
	name   string
	runner *fakeRunner
	pr     int
	head   string
	// br is the session's branch when it is not shepherd/<name> (a session for an issue).
	br string
	// prepare is what the pod's prepare step reports; nil reports a warm checkout of branch().
	prepare *workspace.Result
	// project is the session's Project when it is not widgets.
	project string
	// via, when set, is the manager whose runner channel the session's runner calls (else mgr).
	via *managerUnderTest
}

func (w *world) agent(name string) *agent { return &agent{w: w, name: name} }

func (a *agent) branch() string {
	if a.br != "" {
		return a.br
	}
	return "shepherd/" + a.name
}

func (a *agent) podName() string { return a.name + "-agent" }

// pod waits for the session's agent pod.
func (a *agent) pod() *corev1.Pod {
	GinkgoHelper()
	return waitPod(a.w.ns, a.podName())
}

// start plays the kubelet (prepare done, agent running) and connects a runner for the current
// pod.
func (a *agent) start() {
	GinkgoHelper()
	pod := a.pod()
	result := a.prepare
	if result == nil {
		result = prepared(a.branch())
	}
	setPodStatus(pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		initDone(p, result)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "agent", Image: p.Spec.Containers[0].Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	})
	Eventually(func() error {
		project := a.project
		if project == "" {
			project = "widgets"
		}
		addr := mgr.runnerAddr
		if a.via != nil {
			addr = a.via.runnerAddr
		}
		r, err := connectRunnerAt(addr, pod, project)
		a.runner = r
		return err
	}).Should(Succeed())
}

// report sends an activity report, with extra changes.
func (a *agent) report(state agentsv1alpha1.ActivityState, mutate ...func(*runnerapi.Report)) {
	GinkgoHelper()
	a.runner.report(state, mutate...)
}

// push commits to the session's branch on the fake GitHub.
func (a *agent) push(file string) string {
	GinkgoHelper()
	sha, err := gh.Push(a.w.full, a.branch(), map[string]string{file: "package main\n// " + file + time.Now().String() + "\n"}, "Change "+file)
	Expect(err).NotTo(HaveOccurred())
	a.head = sha
	return sha
}

// openPR pushes a commit and asks the manager to open the pull request, as the runner does at
// the end of a turn.
func (a *agent) openPR() {
	GinkgoHelper()
	head := a.push("work.go")
	pr, err := a.runner.OpenPullRequest(ctx, runnerapi.PullRequestRequest{Branch: a.branch(), Base: "main", Head: head, Title: "Work on " + a.name, Body: "Done"})
	Expect(err).NotTo(HaveOccurred())
	a.pr = int(pr.Number)
}

func (a *agent) check(conclusion string) {
	GinkgoHelper()
	c := fakegithub.CheckRun{Name: "test", Conclusion: conclusion, Log: "--- FAIL: TestWidgets\n"}
	if conclusion == "" {
		c.Status = "in_progress"
	}
	_, err := gh.AddCheckRun(a.w.full, a.head, c)
	Expect(err).NotTo(HaveOccurred())
}

func (a *agent) review(state string) {
	GinkgoHelper()
	_, err := gh.AddReview(a.w.full, a.pr, "reviewer", state, "review: "+state)
	Expect(err).NotTo(HaveOccurred())
}

// pending reads the messages queued for the agent, as the runner's long poll does.
func (a *agent) pending() []runnerapi.Message {
	GinkgoHelper()
	msgs, err := a.runner.Pending(ctx, 0)
	Expect(err).NotTo(HaveOccurred())
	return msgs
}

func (a *agent) status() agentsv1alpha1.AgentSessionStatus { return sessionStatus(a.w.ns, a.name)() }

// expect waits for the session to reach phase.
func (a *agent) expect(phase agentsv1alpha1.SessionPhase) {
	GinkgoHelper()
	Eventually(sessionStatus(a.w.ns, a.name)).Should(HavePhase(phase), "session %s/%s should reach %s", a.w.ns, a.name, phase)
}

// setState sets the session's desired state.
func (a *agent) setState(s agentsv1alpha1.SessionState) {
	GinkgoHelper()
	update(session(a.w.ns, a.name), func(o *agentsv1alpha1.AgentSession) { o.Spec.State = s })
}

func exitCode(code int32) func(*runnerapi.Report) {
	return func(r *runnerapi.Report) { r.Activity.ExitCode = &code }
}

func question(q string) func(*runnerapi.Report) {
	return func(r *runnerapi.Report) { r.Activity.Question = q }
}

// silentFor backdates the agent's last activity.
func silentFor(d time.Duration) func(*runnerapi.Report) {
	return func(r *runnerapi.Report) { r.Activity.LastActivityTime = time.Now().Add(-d) }
}

func agentSessionID(id string) func(*runnerapi.Report) {
	return func(r *runnerapi.Report) { r.Agent = &runnerapi.AgentReport{SessionID: id} }
}

// mustJSON encodes v (a prepare result, as the runner writes it to its termination message).
func mustJSON(v any) string {
	GinkgoHelper()
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// deleteIfExists deletes obj, ignoring NotFound.
func deleteIfExists(obj client.Object) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed())
}
