package controller_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// post sends a delivery to the manager's receiver at path, signed with secret.
func post(path, event string, body, secret []byte) int {
	GinkgoHelper()
	code, err := postTo(mgr.webhookAddr, path, event, body, secret)
	Expect(err).NotTo(HaveOccurred())
	return code
}

// postTo sends a signed delivery to the receiver at addr (one replica's).
func postTo(addr, path, event string, body, secret []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("%d", time.Now().UnixNano()))
	req.Header.Set("X-Hub-Signature-256", webhook.Sign(secret, body))
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

var _ = Describe("Webhook deliveries", func() {
	It("are verified with the secret of the Project their path names, never another namespace's", func() {
		victim := newWorld()
		create(victim.project().Obj())
		Eventually(projectConditions(victim.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))

		By("a tenant in another namespace registers the victim's repository, in another case, with its own secret")
		attacker := newNamespace()
		attackerSecret := []byte("the attacker's secret")
		create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: attacker, Name: "github"},
			StringData: map[string]string{"token": ghToken, "webhook": string(attackerSecret)}})
		create(project(attacker, strings.ToUpper(victim.full)).Obj())

		p := &agentsv1alpha1.Project{}
		Eventually(func() string {
			_ = k8sClient.Get(ctx, types.NamespacedName{Namespace: victim.ns, Name: "widgets"}, p)
			if p.Status.Webhook == nil {
				return ""
			}
			return p.Status.Webhook.Path
		}).Should(Equal("/hooks/" + victim.ns + "/widgets"))

		body := []byte(`{"action":"opened","number":1,"repository":{"full_name":"` + victim.full + `"}}`)
		Expect(post(p.Status.Webhook.Path, "pull_request", body, attackerSecret)).To(Equal(http.StatusUnauthorized),
			"the attacker's secret does not verify the victim's deliveries")
		Expect(post(p.Status.Webhook.Path, "pull_request", body, webhookSecret)).To(Equal(http.StatusAccepted))
		By("the attacker's own path verifies its own secret (a canonical-case delivery for its upper-case URL)")
		Expect(post(webhook.ProjectPath(types.NamespacedName{Namespace: attacker, Name: "widgets"}), "pull_request", body, attackerSecret)).
			To(Equal(http.StatusAccepted))
		Expect(post("/hooks/"+victim.ns+"/nobody", "pull_request", body, webhookSecret)).To(Equal(http.StatusNotFound))
		Expect(post("/", "pull_request", body, webhookSecret)).To(Equal(http.StatusNotFound))
	})
})

var _ = Describe("Template bombs", func() {
	It("are refused where the Project is reconciled, with a message saying what to fix, at once", func() {
		for _, tc := range []struct {
			name   string
			mutate func(*agentsv1alpha1.ProjectSpec)
			want   string
		}{
			{"a range over a literal in the prompt", func(s *agentsv1alpha1.ProjectSpec) {
				s.Tracker.PromptTemplate = `{{range 9223372036854775807}}{{end}}`
			}, "spec.tracker.promptTemplate"},
			{"a printf width in a reaction's message", func(s *agentsv1alpha1.ProjectSpec) {
				s.Reactions = &agentsv1alpha1.ReactionsSpec{CIFailed: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent,
					Message: `{{printf "%0999999999d" 1}}{{range .Checks}}{{range $.Checks}}{{indent 999999999 .Name}}{{end}}{{end}}`}}
			}, "spec.reactions"},
			{"ranges over a number in a reaction's message", func(s *agentsv1alpha1.ProjectSpec) {
				s.Reactions = &agentsv1alpha1.ReactionsSpec{ChangesRequested: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent,
					Message: `{{range .PullRequest.Number}}{{range $.PullRequest.Number}}x{{end}}{{end}}`}}
			}, "not a list"},
		} {
			By(tc.name)
			w := newWorld()
			create(w.project().With(tc.mutate).Obj())
			Eventually(projectConditions(w.ns, "widgets")).WithTimeout(10 * time.Second).Should(ContainElement(And(
				HaveField("Type", agentsv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionTrue),
				HaveField("Reason", agentsv1alpha1.ReasonInvalidSpec), HaveField("Message", ContainSubstring(tc.want)))))
			By("the stall is said once as a Warning event, not once per reconcile")
			Eventually(warnings(w.ns, "widgets", agentsv1alpha1.ReasonInvalidSpec)).Should(Equal(1))
			Consistently(warnings(w.ns, "widgets", agentsv1alpha1.ReasonInvalidSpec), "2s").Should(Equal(1))
		}
	})
})

// warnings counts how many times a Warning event with reason was said about the object named
// name in ns.
func warnings(ns, name, reason string) func() int {
	return func() int {
		var events corev1.EventList
		Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
		n := 0
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && e.InvolvedObject.Name == name {
				// A repeated event becomes a series on one object: count each time it was said.
				switch {
				case e.Series != nil:
					n += int(e.Series.Count)
				case e.Count > 1:
					n += int(e.Count)
				default:
					n++
				}
			}
		}
		return n
	}
}

var _ = Describe("Outbound calls to addresses a Project names", func() {
	It("refuse cloud metadata before a packet is sent", func() {
		w := newWorld()
		By("a forge API aimed at cloud metadata")
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.SCM.APIURL = "http://169.254.169.254/latest/meta-data"
		}).Obj())
		Eventually(projectConditions(w.ns, "widgets")).WithTimeout(20 * time.Second).Should(ContainElement(
			HaveField("Message", ContainSubstring("outbound address refused"))))
		Expect(projectConditions(w.ns, "widgets")()).To(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse))
	})

	It("refuse a Linear API URL aimed at cloud metadata: the tracker goes through the same guard", func() {
		w := newWorld()
		create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "linear"), StringData: map[string]string{"key": "lin_api_test"}})
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Tracker = &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerLinear, Linear: &agentsv1alpha1.LinearSpec{
				TeamKey: "ENG", APIKeySecretRef: agentsv1alpha1.SecretKeyRef{Name: "linear", Key: "key"},
				APIURL: "http://169.254.169.254/graphql"}}
		}).Obj())
		create(MakeSession("from-linear", w.ns, "widgets").Issue("ENG-1").Obj())
		Eventually(func() []metav1.Condition { return sessionStatus(w.ns, "from-linear")().Conditions }).WithTimeout(20 * time.Second).Should(
			ContainElement(HaveField("Message", ContainSubstring("outbound address refused"))))
	})
})

var _ = Describe("A Worktree whose volume is gone", func() {
	It("does not block its deletion (and so its namespace's) waiting for a remove pod that cannot run", func() {
		w := newWorld()
		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		create(MakeWorktree("orphan", w.ns, "widgets", "shepherd/orphan").Obj())
		wt := &agentsv1alpha1.Worktree{}
		Eventually(func() []string {
			_ = k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "orphan"}, wt)
			return wt.Finalizers
		}).Should(ContainElement(agentsv1alpha1.WorktreeFinalizer))

		By("the Project's workspace volume goes (a namespace being deleted takes every claim)")
		Expect(k8sClient.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "widgets-workspace"}})).To(Succeed())
		Expect(k8sClient.Delete(ctx, wt)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "orphan"}, &agentsv1alpha1.Worktree{}))
		}).WithTimeout(20*time.Second).Should(BeTrue(), "the Worktree was released without its remove pod")
		var events corev1.EventList
		Expect(k8sClient.List(ctx, &events, client.InNamespace(w.ns))).To(Succeed())
		Expect(events.Items).To(ContainElement(HaveField("Reason", agentsv1alpha1.ReasonCheckoutAbandoned)))
	})
})

// noQuota makes a ResourceQuota that admits none of res in ns, playing the quota controller
// (envtest runs none) so that admission enforces it.
func noQuota(ns, name string, res corev1.ResourceName) *corev1.ResourceQuota {
	GinkgoHelper()
	q := &corev1.ResourceQuota{ObjectMeta: objMeta(ns, name), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{res: resource.MustParse("0")}}}
	create(q)
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{res: resource.MustParse("0")}}
	Expect(k8sClient.Status().Update(ctx, q)).To(Succeed())
	return q
}

var _ = Describe("observedGeneration", func() {
	It("moves only when a reconcile of that generation had no error", func() {
		w := newWorld()
		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		By("a quota that admits no Worktree: the session's own Worktree cannot be made")
		quota := noQuota(w.ns, "no-worktrees", "count/worktrees.agents.shepherd.dev")
		create(MakeSession("quota", w.ns, "widgets").Prompt("Fix it").Obj())
		Eventually(sessionStatus(w.ns, "quota")).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonReconcileError)))
		st := sessionStatus(w.ns, "quota")()
		Expect(st.ObservedGeneration).To(BeZero(), "the Worktree the spec asks for was not made")
		Expect(findCond(st.Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("quota"))

		By("the quota goes: the Worktree is made, and the generation is observed")
		Expect(k8sClient.Delete(ctx, quota)).To(Succeed())
		Eventually(func() int64 { return sessionStatus(w.ns, "quota")().ObservedGeneration }).WithTimeout(30 * time.Second).Should(Equal(int64(1)))
	})
})

var _ = Describe("A level action that fails", func() {
	It("is said on the session with the API server's answer and retried until it succeeds", func() {
		w := newWorld()
		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		By("a quota that admits no pod: the agent pod cannot be created")
		quota := noQuota(w.ns, "no-pods", corev1.ResourcePods)
		create(MakeSession("podquota", w.ns, "widgets").Prompt("Fix it").Obj())
		Eventually(sessionStatus(w.ns, "podquota")).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonReconcileError)))
		Expect(findCond(sessionStatus(w.ns, "podquota")().Conditions, agentsv1alpha1.ConditionReady).Message).To(
			And(ContainSubstring("create agent pod"), ContainSubstring("quota")))

		By("the quota goes: the pod is made and the error is no longer said")
		Expect(k8sClient.Delete(ctx, quota)).To(Succeed())
		Eventually(podExists(w.ns, "podquota-agent")).WithTimeout(30 * time.Second).Should(BeTrue())
		Eventually(sessionStatus(w.ns, "podquota")).Should(HaveField("Conditions",
			Not(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonReconcileError))))
	})
})

var _ = Describe("The DeletePod action", func() {
	It("never deletes a newer pod of the same name for the one the decision judged", func() {
		ns := newNamespace()
		pod := func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: objMeta(ns, "s-agent"), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}}
		}
		older := pod()
		create(older)
		judged := older.DeepCopy()                         // what the cache held when the decision was made
		Expect(k8sClient.Delete(ctx, older)).To(Succeed()) // unscheduled: gone at once
		newer := pod()
		Eventually(func() error { return k8sClient.Create(ctx, newer) }).Should(Succeed())
		Expect(newer.UID).NotTo(Equal(judged.UID))

		Expect(controller.DeleteJudgedPod(ctx, k8sClient, judged)).To(Succeed(), "a stale judgement is not an error")
		got := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, objKey(ns, "s-agent"), got)).To(Succeed())
		Expect(got.UID).To(Equal(newer.UID))
		Expect(got.DeletionTimestamp).To(BeNil(), "the newer pod is left alone")

		Expect(controller.DeleteJudgedPod(ctx, k8sClient, got)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, objKey(ns, "s-agent"), &corev1.Pod{})) }).Should(BeTrue(),
			"the pod judged is deleted")
	})
})
