package controller_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

const createPullRoute = "POST /repos/{o}/{r}/pulls"

// crashAt makes the manager die at point p of the first action of type t for session key: that
// reconcile, and every later call of the hook in this manager, blocks until the manager is
// stopped, and then runs nothing more (as a process that died there). The returned channel is
// closed once it happened.
func crashAt(t lifecycle.ActionType, p controller.ActionPoint, key types.NamespacedName) <-chan struct{} {
	hit := make(chan struct{})
	var dead atomic.Bool
	hook := controller.ActionHook(func(ctx context.Context, point controller.ActionPoint, k types.NamespacedName, a lifecycle.Action) error {
		if !dead.Load() && (point != p || a.Type != t || k != key) {
			return nil
		}
		if dead.CompareAndSwap(false, true) {
			close(hit)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	mgr.actionHook.Store(&hook)
	return hit
}

// restartAfterCrash waits for the crash, then starts a new manager without the hook; the runner
// sends its next heartbeat to it.
func restartAfterCrash(a *agent, hit <-chan struct{}) {
	GinkgoHelper()
	Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
	mgr.stop()
	mgr.actionHook.Store(nil)
	mgr.start()
	a.report(agentsv1alpha1.ActivityReady)
}

// mergeWorld is a session whose pull request needs one approval and a passing "test" check, under
// a Project that merges once both hold; it returns once the pull request is open.
func mergeWorld(name string) (*world, *agent) {
	GinkgoHelper()
	w := newWorld()
	return w, mergeSession(w, name)
}

// mergeSession is mergeWorld's session in an existing world; opts change the Project.
func mergeSession(w *world, name string, opts ...func(*agentsv1alpha1.ProjectSpec)) *agent {
	GinkgoHelper()
	Expect(gh.SetProtection(w.full, fakegithub.Protection{RequiredChecks: []string{"test"}, RequiredApprovals: 1})).To(Succeed())
	p := w.project().Reaction(agentsv1alpha1.TriggerApprovedAndGreen, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge})
	for _, o := range opts {
		p = p.With(o)
	}
	create(p.Obj())
	a := w.agent(name)
	create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix the flaky test").Obj())
	a.start()
	a.report(agentsv1alpha1.ActivityActive)
	a.expect(agentsv1alpha1.PhaseWorking)
	a.openPR()
	a.report(agentsv1alpha1.ActivityReady)
	a.expect(agentsv1alpha1.PhaseReviewPending)
	return a
}

// The crash-point harness: for each action type the manager dies right after the status write
// that decided it (BeforeAction) and right after the action ran, before anything recorded what
// it did (AfterAction); a new manager takes over.
var _ = Describe("At every crash point around an action", Serial, func() {
	AfterEach(func() { mgr.actionHook.Store(nil) })

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("merges exactly once when the manager dies at "+string(point)+" of the merge", func() {
			w, a := mergeWorld("merge-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			merges := gh.Stats().ByRoute[mergeRoute]
			hit := crashAt(lifecycle.ActionMerge, point, objKey(w.ns, a.name))
			a.check("success")
			a.review("APPROVED")
			restartAfterCrash(a, hit)
			a.expect(agentsv1alpha1.PhaseMerged)
			info, err := gh.PullRequest(w.full, a.pr)
			Expect(err).NotTo(HaveOccurred())
			Expect(info.Merged).To(BeTrue())
			Expect(gh.Stats().ByRoute[mergeRoute]-merges).To(Equal(1), "one merge call across the crash")
			Consistently(func() int { return gh.Stats().ByRoute[mergeRoute] - merges }, "2s").Should(Equal(1))
		})

		It("delivers a reaction's message exactly once when the manager dies at "+string(point)+" of sending it", func() {
			w, a := mergeWorld("send-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			hit := crashAt(lifecycle.ActionSendToAgent, point, objKey(w.ns, a.name))
			a.check("failure")
			restartAfterCrash(a, hit)
			a.expect(agentsv1alpha1.PhaseCIFailed)
			var msgs []runnerapi.Message
			Eventually(func() []runnerapi.Message { msgs = a.pending(); return msgs }).Should(HaveLen(1))
			Expect(msgs[0].Source).To(Equal(agentsv1alpha1.MessageFromReaction))
			Expect(a.runner.Ack(ctx, msgs[0].ID)).To(Succeed())
			Expect(a.pending()).To(BeEmpty())
			err := a.runner.Ack(ctx, msgs[0].ID)
			Expect(runnerapi.IsStatus(err, http.StatusConflict)).To(BeTrue(), "a second ack is refused: %v", err)
			Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Messages.Delivered", ConsistOf(msgs[0].ID)))
			Expect(a.status().Reactions).To(ContainElement(And(HaveField("Trigger", agentsv1alpha1.TriggerCIFailed), HaveField("Attempts", int32(1)))))
		})
	}

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("opens one pull request when the manager dies at "+string(point)+" of opening it", func() {
			w := newWorld()
			create(w.project().Obj())
			a := w.agent("pr-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix it").Obj())
			a.start()
			a.report(agentsv1alpha1.ActivityActive)
			a.expect(agentsv1alpha1.PhaseWorking)
			creates := gh.Stats().ByRoute[createPullRoute]
			req := runnerapi.PullRequestRequest{Branch: a.branch(), Base: "main", Head: a.push("work.go"), Title: "Work on " + a.name, Body: "Done"}
			hit := crashAt(lifecycle.ActionOpenPullRequest, point, objKey(w.ns, a.name))
			inFlight := make(chan error, 1)
			go func() {
				_, err := a.runner.OpenPullRequest(ctx, req)
				inFlight <- err
			}()
			Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
			mgr.stop()
			if point == controller.BeforeAction {
				Eventually(inFlight).Should(Receive(HaveOccurred()), "the call in flight fails with the manager that held it")
			} else {
				Eventually(inFlight).Should(Receive(Succeed()), "the action answered the call before the manager died")
			}
			mgr.actionHook.Store(nil)
			mgr.start()
			By("the runner asks again")
			var pr *runnerapi.PullRequestResult
			Eventually(func() error {
				var err error
				pr, err = a.runner.OpenPullRequest(ctx, req)
				return err
			}).WithTimeout(20 * time.Second).Should(Succeed())
			a.pr = int(pr.Number)
			Expect(gh.Stats().ByRoute[createPullRoute]-creates).To(Equal(1), "one pull request created across the crash")
			Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("PullRequest.Number", int64(a.pr)))
		})
	}

	It("shows the pull request it opened as soon as the runner's call is answered", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("pr-shown")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix it").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		a.openPR()
		answered := time.Now()
		Eventually(sessionStatus(w.ns, a.name)).WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(And(
			HaveField("PullRequest.Number", int64(a.pr)),
			HaveField("PullRequest.URL", Not(BeEmpty())),
			HaveField("PullRequest.HeadSHA", a.head)))
		GinkgoWriter.Printf("the status showed pull request #%d %s after the runner's call was answered\n", a.pr, time.Since(answered).Round(time.Millisecond))
	})

	for _, t := range []lifecycle.ActionType{lifecycle.ActionCreateWorktree, lifecycle.ActionCreatePod} {
		for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
			It("makes one Worktree and one agent pod when the manager dies at "+string(point)+" of "+string(t), func() {
				w := newWorld()
				create(w.project().Obj())
				a := w.agent(map[lifecycle.ActionType]string{lifecycle.ActionCreateWorktree: "wt-", lifecycle.ActionCreatePod: "pod-"}[t] +
					map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
				hit := crashAt(t, point, objKey(w.ns, a.name))
				create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix it").Obj())
				Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
				mgr.stop()
				mgr.actionHook.Store(nil)
				mgr.start()
				a.start()
				a.report(agentsv1alpha1.ActivityActive)
				a.expect(agentsv1alpha1.PhaseWorking)
				var pods corev1.PodList
				Expect(k8sClient.List(ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{agentsv1alpha1.LabelSession: a.name})).To(Succeed())
				Expect(pods.Items).To(ConsistOf(HaveField("Name", a.podName())), "one pod, by its deterministic name")
				var wts agentsv1alpha1.WorktreeList
				Expect(k8sClient.List(ctx, &wts, client.InNamespace(w.ns), client.MatchingLabels{agentsv1alpha1.LabelSession: a.name})).To(Succeed())
				Expect(wts.Items).To(ConsistOf(HaveField("Name", a.name)), "one Worktree, by its deterministic name")
				Expect(wts.Items[0].OwnerReferences).To(ConsistOf(HaveField("Name", a.name)), "owned by its session")
				Expect(a.status().WorktreeName).To(Equal(a.name))
			})
		}
	}

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("stops with its pod gone, and none made again, when the manager dies at "+string(point)+" of deleting it", func() {
			w := newWorld()
			create(w.project().Obj())
			a := w.agent("delete-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix it").Obj())
			agentRuns().do(a)
			a.expect(agentsv1alpha1.PhaseWorking)
			hit := crashAt(lifecycle.ActionDeletePod, point, objKey(w.ns, a.name))
			a.setState(agentsv1alpha1.SessionStopped)
			Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
			mgr.stop()
			mgr.actionHook.Store(nil)
			mgr.start()
			a.expect(agentsv1alpha1.PhaseStopped)
			podRemoved().do(a)
			Consistently(podExists(w.ns, a.podName()), "2s").Should(BeFalse(), "a stopped session gets no pod again")
		})

		It("releases the Worktree after the merge when the manager dies at "+string(point)+" of releasing it", func() {
			w := newWorld()
			create(removeAfterMerge(w.project()).Obj())
			a := w.agent("release-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix it").Obj())
			agentRuns().do(a)
			pullRequestWithCheck().do(a)
			a.expect(agentsv1alpha1.PhasePROpen)
			hit := crashAt(lifecycle.ActionReleaseWorktree, point, objKey(w.ns, a.name))
			humanMerges().do(a)
			Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
			mgr.stop()
			mgr.actionHook.Store(nil)
			mgr.start()
			a.expect(agentsv1alpha1.PhaseMerged)
			Eventually(func() agentsv1alpha1.WorktreeState { return fresh(worktree(w.ns, a.name)).Spec.State }).
				Should(Equal(agentsv1alpha1.WorktreeAbsent))
			Expect(podExists(w.ns, a.podName())()).To(BeFalse())
		})
	}

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("delivers a notification at least once, under one id, when the manager dies at "+string(point)+" of sending it", func() {
			w := newWorld()
			rcv := newReceiver("s3cret", http.StatusOK)
			create(w.project().With(withWebhook(w, rcv.URL)).Obj())
			a := w.agent("notify-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			create(MakeSession(a.name, w.ns, "widgets").Prompt("Ask first").Obj())
			a.start()
			a.report(agentsv1alpha1.ActivityActive)
			a.expect(agentsv1alpha1.PhaseWorking)
			hit := crashAt(lifecycle.ActionNotify, point, objKey(w.ns, a.name))
			a.report(agentsv1alpha1.ActivityWaitingForInput, question("May I drop Python 3.9?"))
			Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
			mgr.stop()
			mgr.actionHook.Store(nil)
			mgr.start()
			a.report(agentsv1alpha1.ActivityWaitingForInput, question("May I drop Python 3.9?"))
			a.expect(agentsv1alpha1.PhaseNeedsInput)
			Eventually(rcv.types).Should(ConsistOf(string(agentsv1alpha1.EventSessionNeedsInput)), "delivered, once per id")
			Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Notifications", BeEmpty()))
			posts, bad := rcv.counts()
			Expect(bad).To(BeZero())
			Expect(posts).To(HaveLen(1), "every attempt carried the same delivery id: %v", posts)
		})
	}

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("escalates a refused merge once, under one id, when the manager dies at "+string(point)+" of escalating", func() {
			w := newWorld()
			rcv := newReceiver("s3cret", http.StatusOK)
			a := mergeSession(w, "escalate-"+map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point], withWebhook(w, rcv.URL))
			gh.FailRoute(mergeRoute, http.StatusMethodNotAllowed)
			hit := crashAt(lifecycle.ActionEscalate, point, objKey(w.ns, a.name))
			a.check("success")
			a.review("APPROVED")
			restartAfterCrash(a, hit)
			escalations := func() int {
				n := 0
				for _, t := range rcv.types() {
					if t == string(agentsv1alpha1.EventReactionEscalated) {
						n++
					}
				}
				return n
			}
			Eventually(escalations).Should(Equal(1), "delivered")
			Consistently(escalations, "2s").Should(Equal(1), "one id across the crash")
			_, bad := rcv.counts()
			Expect(bad).To(BeZero())
			Expect(a.status().Reactions).To(ContainElement(And(HaveField("Trigger", agentsv1alpha1.TriggerApprovedAndGreen), HaveField("Escalated", true))))
		})
	}

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("closes a deleted session's pull request once, with one comment, when the manager dies at "+string(point)+" of closing it", func() {
			w := newWorld()
			create(w.project().Obj())
			a := onDeleteSession(w, "close-"+map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			closes := gh.Stats().ByRoute[closePullRoute]
			hit := crashAt(lifecycle.ActionClosePullRequest, point, objKey(w.ns, a.name))
			Expect(k8sClient.Delete(ctx, session(w.ns, a.name))).To(Succeed())
			Eventually(hit).Should(BeClosed(), "the manager reached the crash point")
			mgr.stop()
			mgr.actionHook.Store(nil)
			mgr.start()
			Eventually(sessionGone(w.ns, a.name)).Should(BeTrue())
			info, err := gh.PullRequest(w.full, a.pr)
			Expect(err).NotTo(HaveOccurred())
			Expect(info.State).To(Equal("closed"))
			Expect(closingComments(w, a)).To(Equal(1), "one comment across the crash")
			Expect(gh.Stats().ByRoute[closePullRoute]-closes).To(Equal(1), "one close call across the crash")
		})
	}

	for _, point := range []controller.ActionPoint{controller.BeforeAction, controller.AfterAction} {
		It("takes a chosen attempt's draft out of draft once when the manager dies at "+string(point)+" of it", func() {
			w := newWorld()
			create(w.project().Obj())
			a := w.agent("ready-" + map[controller.ActionPoint]string{controller.BeforeAction: "before", controller.AfterAction: "after"}[point])
			create(MakeSession(a.name, w.ns, "widgets").Prompt("Draft it").With(func(s *agentsv1alpha1.AgentSessionSpec) {
				s.PullRequest = &agentsv1alpha1.SessionPullRequest{Draft: ptr.To(true)}
			}).Obj())
			a.start()
			a.report(agentsv1alpha1.ActivityActive)
			a.openPR()
			Eventually(func() bool { i, _ := gh.PullRequest(w.full, a.pr); return i.Draft }).Should(BeTrue(), "opened as a draft")
			Eventually(func() bool { return a.status().PullRequest != nil && a.status().PullRequest.Draft }).Should(BeTrue())
			mutations := gh.Stats().GraphQLMutations
			hit := crashAt(lifecycle.ActionMarkReady, point, objKey(w.ns, a.name))
			update(session(w.ns, a.name), func(o *agentsv1alpha1.AgentSession) { o.Spec.PullRequest.Draft = ptr.To(false) })
			restartAfterCrash(a, hit)
			Eventually(func() bool { i, _ := gh.PullRequest(w.full, a.pr); return i.Draft }).Should(BeFalse(), "ready for review")
			Eventually(func() bool { return a.status().PullRequest.Draft }).Should(BeFalse())
			Consistently(func() int { return gh.Stats().GraphQLMutations - mutations }, "2s").Should(Equal(1), "one mutation across the crash")
		})
	}

	It("merges once when the forge answers 502 to the first merge call, and says it retries meanwhile", func() {
		w, a := mergeWorld("merge-502")
		merges := gh.Stats().ByRoute[mergeRoute]
		gh.FailRoute(mergeRoute, http.StatusBadGateway)
		a.check("success")
		a.review("APPROVED")
		Eventually(func() []metav1.Condition { return a.status().Conditions }).WithPolling(20 * time.Millisecond).
			Should(HaveCondition(agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue, agentsv1alpha1.ReasonMergeRetrying))
		a.expect(agentsv1alpha1.PhaseMerged)
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Merged).To(BeTrue())
		Expect(gh.Stats().ByRoute[mergeRoute]-merges).To(Equal(2), "the failed call and the one that merged")
		Expect(a.status().Conditions).NotTo(HaveCondition(agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue, agentsv1alpha1.ReasonMergeRetrying))
	})

	It("tells a human once when the forge refuses the merge, and does not ask again", func() {
		_, a := mergeWorld("merge-refused")
		merges := gh.Stats().ByRoute[mergeRoute]
		gh.FailRoute(mergeRoute, http.StatusMethodNotAllowed)
		a.check("success")
		a.review("APPROVED")
		Eventually(func() []metav1.Condition { return a.status().Conditions }).
			Should(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonEscalated))
		Consistently(func() int { return gh.Stats().ByRoute[mergeRoute] - merges }, "3s").Should(Equal(1))
		Expect(a.status().Phase).To(Equal(agentsv1alpha1.PhaseMergeable))
		Expect(a.status().Reactions).To(ContainElement(And(HaveField("Trigger", agentsv1alpha1.TriggerApprovedAndGreen), HaveField("Escalated", true))))
	})
})
