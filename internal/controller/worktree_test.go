package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Worktree lifecycle", func() {
	var w *world
	BeforeEach(func() {
		w = newWorld()
		create(w.project().Obj())
	})

	// worktreePod waits for the Worktree's own pod doing op (prepare or remove).
	worktreePod := func(name, op string) *corev1.Pod {
		GinkgoHelper()
		pod := &corev1.Pod{}
		Eventually(func() string {
			if err := k8sClient.Get(ctx, objKey(w.ns, name+"-worktree"), pod); err != nil {
				return ""
			}
			return pod.Annotations["agents.shepherd.dev/operation"]
		}).Should(Equal(op))
		return pod
	}

	It("prepares a standalone Worktree with a worktree pod and reports the checkout's facts", func() {
		create(MakeWorktree("feature", w.ns, "widgets", "feature/login").Obj())
		Eventually(worktreeStatus(w.ns, "feature")).Should(HaveField("Phase", agentsv1alpha1.WorktreePending))

		pod := worktreePod("feature", "prepare")
		Expect(pod.Spec.Containers).To(HaveLen(1))
		Expect(pod.Spec.Containers[0].Args).To(ContainElements(
			"prepare", "--branch=feature/login", "--base=main", "--adopt=false", "--mode=Worktree",
			"--remote-url=http://127.0.0.1:8737/git/"+w.full+".git", "--mirror=/shepherd/workspace/mirror.git",
		))
		Expect(pod.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))

		head := "fedcba9876543210fedcba9876543210fedcba98"
		finishPod(pod, 0, mustJSON(preparedResult("feature/login", workspace.Facts{Head: head, Dirty: true, Unpushed: 2}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "feature")).Should(And(
			HaveField("Phase", agentsv1alpha1.WorktreeReady),
			HaveField("Head", head), HaveField("Dirty", true), HaveField("UnpushedCommits", int32(2)),
			HaveField("Mode", agentsv1alpha1.WorkspaceWorktree),
			HaveField("Setup.State", agentsv1alpha1.SetupSucceeded),
			HaveField("Conditions", And(
				HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue),
				HaveCondition(agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionTrue),
			)),
		))
		Expect(worktreeStatus(w.ns, "feature")().LastObservedTime).NotTo(BeNil())
	})

	It("keeps a checkout whose setup failed Ready, with SetupSucceeded=False", func() {
		create(MakeWorktree("setup", w.ns, "widgets", "feature/setup").Obj())
		pod := worktreePod("setup", "prepare")
		finishPod(pod, 0, mustJSON(preparedResult("feature/setup", workspace.Facts{}, workspace.SetupResult{
			State: agentsv1alpha1.SetupFailed, FailedCommand: "install", Error: "npm ERR! missing script: install",
		})))
		Eventually(worktreeStatus(w.ns, "setup")).Should(And(
			HaveField("Phase", agentsv1alpha1.WorktreeReady),
			HaveField("Setup.State", agentsv1alpha1.SetupFailed),
			HaveField("Setup.FailedCommand", "install"),
			HaveField("Conditions", And(
				HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue),
				HaveCondition(agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionFalse, agentsv1alpha1.ReasonSetupFailed),
			)),
		))
		c := findCond(worktreeStatus(w.ns, "setup")().Conditions, agentsv1alpha1.ConditionSetupSucceeded)
		Expect(c.Message).To(And(ContainSubstring("install"), ContainSubstring("missing script")))
	})

	It("marks a failed prepare Failed and Stalled, and retries on a spec change or a reconcile request", func() {
		create(MakeWorktree("taken", w.ns, "widgets", "feature/taken").Obj())
		pod := worktreePod("taken", "prepare")
		finishPod(pod, 1, `{"error":"branch already exists on the remote: set adopt to take it over"}`)
		Eventually(worktreeStatus(w.ns, "taken")).Should(And(
			HaveField("Phase", agentsv1alpha1.WorktreeFailed),
			HaveField("Conditions", And(
				HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonCheckoutFailed),
				HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonCheckoutFailed),
			)),
		))
		Expect(findCond(worktreeStatus(w.ns, "taken")().Conditions, agentsv1alpha1.ConditionStalled).Message).
			To(ContainSubstring("branch already exists"))

		By("changing the spec (adopt) runs prepare again, with the new spec")
		update(worktree(w.ns, "taken"), func(wt *agentsv1alpha1.Worktree) { wt.Spec.Adopt = true })
		Eventually(podGone(w.ns, pod.Name, pod.UID)).Should(BeTrue())
		retry := worktreePod("taken", "prepare")
		Expect(retry.Spec.Containers[0].Args).To(ContainElement("--adopt=true"))
		Expect(retry.UID).NotTo(Equal(pod.UID))
		finishPod(retry, 0, mustJSON(preparedResult("feature/taken", workspace.Facts{}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "taken")).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))
		Expect(worktreeStatus(w.ns, "taken")().Conditions).NotTo(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue))

		By("the reconcile-request annotation retries without a spec change")
		create(MakeWorktree("flaky", w.ns, "widgets", "feature/flaky").Obj())
		pod = worktreePod("flaky", "prepare")
		finishPod(pod, 1, "fatal: unable to access the remote: connection reset")
		Eventually(worktreeStatus(w.ns, "flaky")).Should(HaveField("Phase", agentsv1alpha1.WorktreeFailed))
		gen := fresh(worktree(w.ns, "flaky")).Generation
		annotate(worktree(w.ns, "flaky"), agentsv1alpha1.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))
		Expect(fresh(worktree(w.ns, "flaky")).Generation).To(Equal(gen))
		Eventually(podGone(w.ns, pod.Name, pod.UID)).Should(BeTrue())
		retry = worktreePod("flaky", "prepare")
		finishPod(retry, 0, mustJSON(preparedResult("feature/flaky", workspace.Facts{}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "flaky")).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))
	})

	It("removes the checkout when Absent, keeping the record and the branch, and restores it when Present", func() {
		_, err := gh.Push(w.full, "feature/absent", map[string]string{"a.go": "package main\n"}, "work")
		Expect(err).NotTo(HaveOccurred())
		create(MakeWorktree("absent", w.ns, "widgets", "feature/absent").With(func(s *agentsv1alpha1.WorktreeSpec) { s.Adopt = true }).Obj())
		finishPod(worktreePod("absent", "prepare"), 0, mustJSON(preparedResult("feature/absent", workspace.Facts{}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "absent")).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))

		update(worktree(w.ns, "absent"), func(wt *agentsv1alpha1.Worktree) { wt.Spec.State = agentsv1alpha1.WorktreeAbsent })
		remove := worktreePod("absent", "remove")
		Expect(remove.Spec.Containers[0].Args).To(ContainElements("remove", "--mode=Worktree", "--path=/shepherd/workspace/worktrees/absent"))
		Eventually(worktreeStatus(w.ns, "absent")).Should(HaveField("Phase", agentsv1alpha1.WorktreeRemoving))
		finishPod(remove, 0, "")
		Eventually(worktreeStatus(w.ns, "absent")).Should(And(
			HaveField("Phase", agentsv1alpha1.WorktreeRemoved),
			HaveField("Head", ""),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonCheckoutRemoved)),
		))
		Expect(gh.Branch(w.full, "feature/absent")).NotTo(BeEmpty(), "the branch is kept")

		update(worktree(w.ns, "absent"), func(wt *agentsv1alpha1.Worktree) { wt.Spec.State = agentsv1alpha1.WorktreePresent })
		Eventually(worktreeStatus(w.ns, "absent")).Should(HaveField("Phase", agentsv1alpha1.WorktreePending))
		restore := worktreePod("absent", "prepare")
		finishPod(restore, 0, mustJSON(preparedResult("feature/absent", workspace.Facts{}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "absent")).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))
	})

	It("refuses deletion while a session is bound or commits are unpushed, unless forced", func() {
		create(MakeWorktree("keep", w.ns, "widgets", "feature/keep").Obj())
		finishPod(worktreePod("keep", "prepare"), 0, mustJSON(preparedResult("feature/keep", workspace.Facts{Unpushed: 3}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "keep")).Should(HaveField("UnpushedCommits", int32(3)))

		user := w.agent("user")
		create(MakeSession(user.name, w.ns, "widgets").Prompt("Use the shared checkout").WorktreeRef("keep").Obj())
		Eventually(worktreeStatus(w.ns, "keep")).Should(HaveField("BoundSessions", ConsistOf("user")))

		Expect(k8sClient.Delete(ctx, worktree(w.ns, "keep"))).To(Succeed())
		Eventually(worktreeStatus(w.ns, "keep")).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, agentsv1alpha1.ReasonSessionBound)))
		Expect(fresh(worktree(w.ns, "keep")).DeletionTimestamp).NotTo(BeNil())

		By("with the session gone, the unpushed commits still hold it")
		Expect(k8sClient.Delete(ctx, session(w.ns, user.name))).To(Succeed())
		deleteIfExists(&corev1.Pod{ObjectMeta: objMeta(w.ns, user.podName())}) // as the garbage collector would
		Eventually(worktreeStatus(w.ns, "keep")).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, agentsv1alpha1.ReasonUnpushedCommits)))
		Expect(findCond(worktreeStatus(w.ns, "keep")().Conditions, agentsv1alpha1.ConditionDeletionBlocked).Message).
			To(And(ContainSubstring("3 unpushed"), ContainSubstring(agentsv1alpha1.ForceDeleteAnnotation)))

		By("the force-delete annotation lets it go")
		annotate(worktree(w.ns, "keep"), agentsv1alpha1.ForceDeleteAnnotation, "true")
		finishPod(worktreePod("keep", "remove"), 0, "")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, objKey(w.ns, "keep"), worktree(w.ns, "keep")))
		}).Should(BeTrue())
	})

	It("refuses to remove a checkout with uncommitted changes, by deletion or Absent, unless forced", func() {
		create(MakeWorktree("dirty", w.ns, "widgets", "feature/dirty").Obj())
		finishPod(worktreePod("dirty", "prepare"), 0, mustJSON(preparedResult("feature/dirty", workspace.Facts{Dirty: true}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "dirty")).Should(And(HaveField("Dirty", true), HaveField("Phase", agentsv1alpha1.WorktreeReady)))

		update(worktree(w.ns, "dirty"), func(wt *agentsv1alpha1.Worktree) { wt.Spec.State = agentsv1alpha1.WorktreeAbsent })
		Eventually(worktreeStatus(w.ns, "dirty")).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonUncommittedChanges)))
		Expect(findCond(worktreeStatus(w.ns, "dirty")().Conditions, agentsv1alpha1.ConditionStalled).Message).
			To(And(ContainSubstring("uncommitted changes"), ContainSubstring(agentsv1alpha1.ForceDeleteAnnotation)))
		Consistently(func() string {
			pod := &corev1.Pod{}
			if err := k8sClient.Get(ctx, objKey(w.ns, "dirty-worktree"), pod); err != nil {
				return ""
			}
			return pod.Annotations["agents.shepherd.dev/operation"]
		}, time.Second).ShouldNot(Equal("remove"), "no remove pod while refused")

		Expect(k8sClient.Delete(ctx, worktree(w.ns, "dirty"))).To(Succeed())
		Eventually(worktreeStatus(w.ns, "dirty")).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, agentsv1alpha1.ReasonUncommittedChanges)))

		By("the force-delete annotation lets it go")
		annotate(worktree(w.ns, "dirty"), agentsv1alpha1.ForceDeleteAnnotation, "true")
		finishPod(worktreePod("dirty", "remove"), 0, "")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, objKey(w.ns, "dirty"), worktree(w.ns, "dirty")))
		}).Should(BeTrue())
	})

	It("passes adopt through to prepare, for a standalone Worktree and a session's own", func() {
		create(MakeWorktree("adopted", w.ns, "widgets", "feature/adopted").With(func(s *agentsv1alpha1.WorktreeSpec) { s.Adopt = true }).Obj())
		Expect(worktreePod("adopted", "prepare").Spec.Containers[0].Args).To(ContainElement("--adopt=true"))

		create(MakeSession("adopter", w.ns, "widgets").Prompt("Continue the work").Branch("feature/old").
			With(func(s *agentsv1alpha1.AgentSessionSpec) { s.Worktree.Adopt = true }).Obj())
		Eventually(func() bool {
			wt := worktree(w.ns, "adopter")
			return k8sClient.Get(ctx, objKey(w.ns, "adopter"), wt) == nil && wt.Spec.Adopt
		}).Should(BeTrue())
		pod := w.agent("adopter").pod()
		Expect(pod.Spec.Containers).To(ContainElement(And(
			HaveField("Name", "prepare"),
			HaveField("Args", ContainElements("--adopt=true", "--branch=feature/old")),
		)))
	})
})

func findCond(conds []metav1.Condition, typ string) *metav1.Condition {
	GinkgoHelper()
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	Fail("no condition " + typ)
	return nil
}
