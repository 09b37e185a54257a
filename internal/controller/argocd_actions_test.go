package controller_test

import (
	"context"
	"encoding/json"

	jsonpatch "github.com/evanphx/json-patch/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/config/argocd"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// liveSession is the session as Argo CD reads it: unstructured, with its kind.
func liveSession(ns, name string) *unstructured.Unstructured {
	GinkgoHelper()
	var s agentsv1alpha1.AgentSession
	Expect(k8sClient.Get(context.Background(), objKey(ns, name), &s)).To(Succeed())
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: raw}
	u.SetAPIVersion(agentsv1alpha1.GroupVersion.String())
	u.SetKind("AgentSession")
	return u
}

// enabled is the discovery script's verdict on an action for the live session.
func enabled(ns, name, action string) bool {
	GinkgoHelper()
	actions, err := argocd.Discover(liveSession(ns, name))
	Expect(err).NotTo(HaveOccurred())
	for _, a := range actions {
		if a.Name == action {
			return !a.Disabled
		}
	}
	Fail("no action " + action)
	return false
}

// runArgoAction runs an action as Argo CD's RunResourceAction does: the script on the live
// object, then a JSON merge patch of the difference, which the API server must accept.
func runArgoAction(ns, name, action string, params map[string]string) {
	GinkgoHelper()
	live := liveSession(ns, name)
	out, err := argocd.RunAction(live, action, params)
	Expect(err).NotTo(HaveOccurred())
	before, err := json.Marshal(live.Object)
	Expect(err).NotTo(HaveOccurred())
	after, err := json.Marshal(out.Object)
	Expect(err).NotTo(HaveOccurred())
	patch, err := jsonpatch.CreateMergePatch(before, after)
	Expect(err).NotTo(HaveOccurred())
	var fields map[string]any
	Expect(json.Unmarshal(patch, &fields)).To(Succeed())
	Expect(fields).NotTo(HaveKey("status"), "an action changes what a person asks for, never the status")
	s := &agentsv1alpha1.AgentSession{}
	s.Namespace, s.Name = ns, name
	Expect(k8sClient.Patch(context.Background(), s, client.RawPatch(types.MergePatchType, patch))).To(Succeed(), string(patch))
}

var _ = Describe("Argo CD's AgentSession actions, applied as Argo CD applies them", func() {
	It("approve merges the approved head of a session whose Project leaves merging to a human", func() {
		w := newWorld()
		create(w.project().Obj()) // approvedAndGreen: Notify, the default
		a := greenUnreviewed(w, "argo-approve")
		merges := gh.Stats().ByRoute[mergeRoute]
		Consistently(func() int { return gh.Stats().ByRoute[mergeRoute] - merges }, "2s").Should(BeZero(), "Notify: nobody merges")
		Expect(argocd.Health(liveSession(w.ns, a.name))).To(HaveField("Status", argocd.Suspended), "waiting for a human to merge")
		Expect(enabled(w.ns, a.name, "approve")).To(BeTrue())

		runArgoAction(w.ns, a.name, "approve", nil)
		a.expect(agentsv1alpha1.PhaseMerged)
		Expect(gh.Stats().ByRoute[mergeRoute] - merges).To(Equal(1))
		Expect(argocd.Health(liveSession(w.ns, a.name))).To(HaveField("Status", argocd.Healthy))
		Expect(enabled(w.ns, a.name, "approve")).To(BeFalse())
	})

	It("send-message queues a message the API accepts; stop stops the session and restore runs it again", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("argo-steer")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Tidy").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(enabled(w.ns, a.name, "send-message")).To(BeTrue())
		Expect(enabled(w.ns, a.name, "restore")).To(BeFalse())

		runArgoAction(w.ns, a.name, "send-message", map[string]string{"text": "Please also update the changelog."})
		runArgoAction(w.ns, a.name, "send-message", map[string]string{"text": "And the docs."})
		var sess agentsv1alpha1.AgentSession
		Expect(k8sClient.Get(context.Background(), objKey(w.ns, a.name), &sess)).To(Succeed())
		Expect(sess.Spec.Messages).To(HaveLen(2))
		Expect(sess.Spec.Messages[0]).To(And(HaveField("Text", "Please also update the changelog."), HaveField("From", "argocd")))
		Expect(sess.Spec.Messages[1].ID).NotTo(Equal(sess.Spec.Messages[0].ID))
		// Shepherd takes both up: queued for the agent, or already delivered.
		Eventually(func() []string {
			m := a.status().Messages
			ids := append([]string{}, m.Delivered...)
			for _, p := range m.Pending {
				ids = append(ids, p.ID)
			}
			return ids
		}).Should(ContainElements(ContainSubstring(sess.Spec.Messages[0].ID), ContainSubstring(sess.Spec.Messages[1].ID)))

		Expect(enabled(w.ns, a.name, "stop")).To(BeTrue())
		runArgoAction(w.ns, a.name, "stop", nil)
		a.expect(agentsv1alpha1.PhaseStopped)
		Eventually(func() string { return argocd.Must(argocd.Health(liveSession(w.ns, a.name))).Status }).Should(Equal(argocd.Suspended))
		Expect(enabled(w.ns, a.name, "stop")).To(BeFalse())
		Expect(enabled(w.ns, a.name, "restore")).To(BeTrue())

		runArgoAction(w.ns, a.name, "restore", nil)
		Eventually(func() agentsv1alpha1.SessionPhase { return a.status().Phase }).ShouldNot(Equal(agentsv1alpha1.PhaseStopped))
		Eventually(func() string { return argocd.Must(argocd.Health(liveSession(w.ns, a.name))).Status }).Should(Equal(argocd.Progressing))
	})
})
