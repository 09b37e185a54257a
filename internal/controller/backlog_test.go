package controller_test

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// backlogProject is the Project "widgets" with a backlog of the issues labelled both agent and
// ready, at most maxConcurrent unfinished sessions at once, and the default claim, progress and
// done labels.
func (w *world) backlogProject(maxConcurrent int32) *ProjectBuilder {
	return w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
		s.Backlog = &agentsv1alpha1.BacklogSpec{Labels: []string{"agent", "ready"}, MaxConcurrent: maxConcurrent}
	})
}

// issue opens an issue with labels on the world's repository and returns its number as an id.
func (w *world) issue(title string, labels ...string) string {
	GinkgoHelper()
	n, err := gh.CreateIssue(w.full, fakegithub.Issue{Title: title, Body: "Please " + title, Labels: labels})
	Expect(err).NotTo(HaveOccurred())
	return strconv.Itoa(n)
}

// labels returns a function that reads an issue's labels, for Eventually.
func (w *world) labels(id string) func() []string {
	return func() []string {
		n, _ := strconv.Atoi(id)
		l, err := gh.IssueLabels(w.full, n)
		Expect(err).NotTo(HaveOccurred())
		return l
	}
}

// relabel puts labels back on an issue, as a human does.
func (w *world) relabel(id string, labels ...string) {
	GinkgoHelper()
	n, _ := strconv.Atoi(id)
	Expect(gh.LabelIssue(w.full, n, labels...)).To(Succeed())
}

// sessionNames lists the names of the namespace's sessions (all, or those matching labels), read
// from the API server.
func sessionNames(ns string, labels ...client.ListOption) func() []string {
	return func() []string {
		var list agentsv1alpha1.AgentSessionList
		Expect(k8sClient.List(ctx, &list, append([]client.ListOption{client.InNamespace(ns)}, labels...)...)).To(Succeed())
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name)
		}
		sort.Strings(out)
		return out
	}
}

func backlogSessions(ns string) func() []string {
	return sessionNames(ns, client.MatchingLabels{agentsv1alpha1.BacklogLabel: "true"})
}

func backlogStatus(ns string) func() agentsv1alpha1.BacklogStatus {
	return func() agentsv1alpha1.BacklogStatus {
		p := &agentsv1alpha1.Project{}
		if err := k8sClient.Get(ctx, objKey(ns, "widgets"), p); err != nil || p.Status.Backlog == nil {
			return agentsv1alpha1.BacklogStatus{}
		}
		return *p.Status.Backlog
	}
}

// backlogQueries is the number of successful backlog queries of the world's Project. The counter
// moves after the query's sessions were created and its issues claimed.
func (w *world) backlogQueries() float64 {
	return testutil.ToFloat64(mgr.deps.Metrics.BacklogQueries.WithLabelValues(w.ns, "widgets", "ok"))
}

// requery asks for a backlog query now (the reconcile-request annotation, as a user would) and
// returns once it has run and acted on what it found.
func (w *world) requery() {
	GinkgoHelper()
	before := w.backlogQueries()
	// A time, as `date` writes it, so that a manager that just started (and cannot remember the
	// last value) can tell the request from one answered: the status keeps the last query time
	// to the second, so the request is stamped a second ahead.
	at := time.Now().Add(time.Second).Format(time.RFC3339Nano)
	annotate(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, agentsv1alpha1.ReconcileRequestAnnotation, at)
	Eventually(w.backlogQueries).Should(BeNumerically(">", before), "a backlog query runs")
}

// backlogAgent drives a backlog session: its branch is the one the session chose from the issue.
func (w *world) backlogAgent(name string) *agent {
	GinkgoHelper()
	a := w.agent(name)
	Eventually(sessionStatus(w.ns, name)).Should(HaveField("Branch", Not(BeEmpty())))
	a.br = a.status().Branch
	return a
}

// managers lists the field managers that wrote to the sessions named.
func managers(ns string, names ...string) []string {
	GinkgoHelper()
	seen := map[string]bool{}
	for _, n := range names {
		s := fresh(session(ns, n))
		for _, f := range s.ManagedFields {
			seen[f.Manager] = true
		}
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	return out
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

var _ = Describe("The backlog", Serial, func() {
	It("spawns one session per matching issue, oldest first, within maxConcurrent, and relabels each issue as its session goes", func() {
		w := newWorld()
		login := w.issue("Fix the login form", "agent", "ready")
		docs := w.issue("Document the API", "ready", "docs", "agent")
		half := w.issue("Only half labelled", "agent")
		build := w.issue("Speed up the build", "agent", "ready")
		create(w.backlogProject(2).Obj())

		By("the two oldest matching issues get a session each; the third waits for room")
		Eventually(backlogSessions(w.ns)).Should(Equal([]string{"widgets-" + login, "widgets-" + docs}))
		Eventually(w.labels(login)).Should(ConsistOf("agent:claimed"))
		Eventually(w.labels(docs)).Should(ConsistOf("docs", "agent:claimed"))
		Expect(w.labels(half)()).To(ConsistOf("agent"), "an issue with only some of the labels is not picked")
		Expect(w.labels(build)()).To(ConsistOf("agent", "ready"))
		Eventually(backlogStatus(w.ns)).Should(And(HaveField("Matching", int32(3)), HaveField("Spawned", int32(2)),
			HaveField("LastQueryTime", Not(BeNil()))))

		s := fresh(session(w.ns, "widgets-"+login))
		Expect(s.Spec.Issue).To(Equal(login))
		Expect(s.Labels).To(HaveKeyWithValue(agentsv1alpha1.IssueLabel, login))
		p := fresh(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")})
		Expect(metav1.IsControlledBy(s, p)).To(BeTrue(), "backlog sessions are owned by their Project")

		By("the next query respects the limit")
		w.requery()
		Expect(backlogSessions(w.ns)()).To(HaveLen(2))
		Eventually(backlogStatus(w.ns)).Should(HaveField("Matching", int32(1)), "claimed issues left the query")

		By("the agent works: the issue is in progress")
		a := w.backlogAgent("widgets-" + login)
		Expect(a.br).To(Equal("shepherd/" + login + "-fix-the-login-form"))
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		Eventually(w.labels(login)).Should(ConsistOf("agent:claimed", "agent:in-progress"))
		Eventually(func() map[string]string { return fresh(session(w.ns, a.name)).Annotations }).
			Should(HaveKeyWithValue(agentsv1alpha1.BacklogStageAnnotation, "in-progress"))

		By("its pull request merges: the issue is done, and the slot goes to the oldest waiting issue")
		a.openPR()
		a.report(agentsv1alpha1.ActivityReady)
		a.expect(agentsv1alpha1.PhaseMergeable)
		_, err := gh.Merge(w.full, a.pr, "squash")
		Expect(err).NotTo(HaveOccurred())
		a.expect(agentsv1alpha1.PhaseMerged)
		Eventually(w.labels(login)).Should(ConsistOf("agent:claimed", "agent:done"))
		w.requery()
		Expect(backlogSessions(w.ns)()).To(Equal([]string{"widgets-" + login, "widgets-" + docs, "widgets-" + build}))
		Eventually(w.labels(build)).Should(ConsistOf("agent:claimed"))
		Expect(w.labels(half)()).To(ConsistOf("agent"))
		Eventually(backlogStatus(w.ns)).Should(HaveField("Spawned", int32(3)))
	})

	It("never starts a second session for an issue: a claim that did not land, a session made by hand, a manager restart", func() {
		w := newWorld()
		first := w.issue("First", "agent", "ready")
		byHand := w.issue("Taken by hand", "agent", "ready")
		crashed := w.issue("Created before a crash", "agent", "ready")
		// A human already runs a session on one issue; a manager crashed after creating the
		// backlog session of another and before relabelling it.
		create(MakeSession("by-hand", w.ns, "widgets").Issue(byHand).Obj())
		orphan := MakeSession("widgets-"+crashed, w.ns, "widgets").Issue(crashed).Obj()
		orphan.Labels = map[string]string{agentsv1alpha1.BacklogLabel: "true"}
		create(orphan)
		create(w.backlogProject(5).Obj())

		Eventually(backlogSessions(w.ns)).Should(Equal([]string{"widgets-" + first, "widgets-" + crashed}))
		Eventually(w.labels(byHand)).Should(ConsistOf("agent:claimed"))
		Eventually(w.labels(crashed)).Should(ConsistOf("agent:claimed"))
		all := []string{"by-hand", "widgets-" + first, "widgets-" + crashed}
		Expect(sessionNames(w.ns)()).To(ConsistOf(all))

		By("an issue labelled again while its session works is claimed again")
		w.relabel(first, "agent", "ready")
		w.requery()
		Eventually(w.labels(first)).Should(ConsistOf("agent:claimed"))
		Expect(sessionNames(w.ns)()).To(ConsistOf(all))

		By("a restarted manager queries again and finds every issue's session")
		w.relabel(crashed, "agent", "ready")
		mgr.stop()
		mgr.start()
		w.requery()
		Eventually(w.labels(crashed)).Should(ConsistOf("agent:claimed"))
		Expect(sessionNames(w.ns)()).To(ConsistOf(all))
	})

	It("spawns from the leader only when two replicas run, and the next leader takes over without a duplicate", func() {
		w := newWorld()
		mgr.stop()
		DeferCleanup(mgr.start)
		replicas := []*managerUnderTest{
			{runnerAddr: "0", webhookAddr: "0", name: "replica-a", leaseNamespace: w.ns},
			{runnerAddr: "0", webhookAddr: "0", name: "replica-b", leaseNamespace: w.ns},
		}
		for _, r := range replicas {
			r.start()
		}
		DeferCleanup(func() {
			for _, r := range replicas {
				if !isClosed(r.done) {
					r.stop()
				}
			}
		})
		Eventually(func() bool { return isClosed(replicas[0].elected) || isClosed(replicas[1].elected) }).Should(BeTrue())
		leader, standby := replicas[0], replicas[1]
		if !isClosed(leader.elected) {
			leader, standby = standby, leader
		}
		Expect(isClosed(standby.elected)).To(BeFalse(), "one leader at a time")

		ids := []string{w.issue("One", "agent", "ready"), w.issue("Two", "agent", "ready"), w.issue("Three", "agent", "ready")}
		create(w.backlogProject(10).Obj())
		var names []string
		for _, id := range ids {
			names = append(names, "widgets-"+id)
		}
		Eventually(backlogSessions(w.ns)).Should(Equal(names))
		for _, id := range ids {
			Eventually(w.labels(id)).Should(ConsistOf("agent:claimed"))
		}
		Expect(managers(w.ns, names...)).To(ConsistOf(leader.name), "only the leader wrote to the sessions")

		By("the leader stops; the standby takes over and spawns the next issue, once")
		leader.stop()
		Eventually(standby.elected).Should(BeClosed())
		next := w.issue("Four", "agent", "ready")
		w.requery()
		Eventually(backlogSessions(w.ns)).Should(Equal(append(names, "widgets-"+next)))
		Eventually(w.labels(next)).Should(ConsistOf("agent:claimed"))
		Expect(managers(w.ns, "widgets-"+next)).To(ConsistOf(standby.name))
		for _, id := range ids {
			Expect(w.labels(id)()).To(ConsistOf("agent:claimed"), fmt.Sprintf("issue %s claimed once", id))
		}
		standby.stop()
	})
})
