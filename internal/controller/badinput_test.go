package controller_test

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Bad input", func() {
	// Each entry breaks the Project one way, checks the condition says what to fix (Stalled, not
	// a retry loop), then fixes it and checks the Project recovers.
	DescribeTable("a Project whose credentials or repository are wrong says what to fix, and recovers",
		func(breakIt func(w *world, p *ProjectBuilder), condType, reason, says string, fixIt func(w *world)) {
			w := newWorld()
			p := w.project()
			breakIt(w, p)
			create(p.Obj())
			conds := projectConditions(w.ns, "widgets")
			Eventually(conds).Should(And(
				HaveCondition(condType, metav1.ConditionFalse, reason),
				HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, reason),
				HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, reason),
			))
			Expect(conds()).NotTo(HaveCondition(agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue), "stalled, not retrying")
			Expect(findCond(conds(), condType).Message).To(ContainSubstring(says))

			fixIt(w)
			Eventually(conds).Should(And(
				HaveCondition(agentsv1alpha1.ConditionCredentialsValid, metav1.ConditionTrue),
				HaveCondition(agentsv1alpha1.ConditionRepositoryReachable, metav1.ConditionTrue),
				HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue),
			))
			Expect(conds()).NotTo(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue))
		},
		Entry("the Secret is missing",
			func(_ *world, p *ProjectBuilder) { p.TokenSecret("forge-token", "token") },
			agentsv1alpha1.ConditionCredentialsValid, agentsv1alpha1.ReasonSecretNotFound, `Secret "forge-token"`,
			func(w *world) {
				create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "forge-token"), StringData: map[string]string{"token": ghToken}})
			}),
		Entry("the Secret lacks the key",
			func(_ *world, p *ProjectBuilder) { p.TokenSecret("github", "pat") },
			agentsv1alpha1.ConditionCredentialsValid, agentsv1alpha1.ReasonSecretKeyNotFound, `has no key "pat"`,
			func(w *world) {
				update(&corev1.Secret{ObjectMeta: objMeta(w.ns, "github")}, func(s *corev1.Secret) { s.Data["pat"] = []byte(ghToken) })
			}),
		Entry("the forge rejects the token",
			func(w *world, p *ProjectBuilder) {
				create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "revoked"), StringData: map[string]string{"token": "ghp_revoked"}})
				p.TokenSecret("revoked", "token")
			},
			agentsv1alpha1.ConditionCredentialsValid, agentsv1alpha1.ReasonTokenRejected, "update the token",
			func(w *world) {
				update(&corev1.Secret{ObjectMeta: objMeta(w.ns, "revoked")}, func(s *corev1.Secret) { s.Data["token"] = []byte(ghToken) })
			}),
		Entry("the repository does not exist",
			func(w *world, p *ProjectBuilder) { p.URL(gh.CloneURL(w.full + "-typo")) },
			agentsv1alpha1.ConditionRepositoryReachable, agentsv1alpha1.ReasonRepositoryNotFound, "check spec.repository.url",
			func(w *world) {
				// Creating it is not a change Shepherd can see: the reconcile-request annotation
				// asks for the check now.
				_, err := gh.CreateRepo(w.full+"-typo", "main", map[string]string{"README.md": "# typo\n"})
				Expect(err).NotTo(HaveOccurred())
				proj := &agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}
				gen := fresh(proj).Generation
				annotate(proj, agentsv1alpha1.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))
				Expect(fresh(proj).Generation).To(Equal(gen), "an annotation is not a spec change")
			}),
	)

	It("holds a session naming a missing Project as Stalled, and starts it once the Project exists", func() {
		w := newWorld()
		a := w.agent("early")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Start before the Project").Obj())
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Conditions", And(
			HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonProjectNotFound),
			HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonProjectNotFound))))
		Expect(findCond(a.status().Conditions, agentsv1alpha1.ConditionStalled).Message).To(ContainSubstring(`Project "widgets" not found`))
		Expect(podExists(w.ns, a.podName())()).To(BeFalse())

		create(w.project().Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(a.status().Conditions).NotTo(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue))
	})

	It("holds a custom agent without its command or image, and runs the team's image and command once set", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("own-cli")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Use our CLI").With(func(s *agentsv1alpha1.AgentSessionSpec) {
			s.Agent = &agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCustom}
		}).Obj())
		stalled := func() string {
			if c := meta.FindStatusCondition(a.status().Conditions, agentsv1alpha1.ConditionStalled); c != nil {
				return c.Message
			}
			return ""
		}
		Eventually(stalled).Should(ContainSubstring(`no image for agent type "custom": set spec.agent.image`))
		update(&agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: a.name}}, func(s *agentsv1alpha1.AgentSession) {
			s.Spec.Agent.Image = "registry.example/team/agent:1.4"
		})
		Eventually(stalled).Should(ContainSubstring("agent type custom needs spec.agent.custom.command"))
		Expect(podExists(w.ns, a.podName())()).To(BeFalse())
		update(&agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: a.name}}, func(s *agentsv1alpha1.AgentSession) {
			s.Spec.Agent.Custom = &agentsv1alpha1.CustomAgentSpec{Command: []string{"/opt/team/agent", "--json"}}
		})
		Expect(a.pod().Spec.Containers[0].Image).To(Equal("registry.example/team/agent:1.4"))
		a.start()
		Expect(a.runner.task.Agent.Custom).To(HaveValue(And(HaveField("Command", Equal([]string{"/opt/team/agent", "--json"})),
			HaveField("Output", agentsv1alpha1.CustomOutputShepherd))), "the runner gets the command and the format")
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
	})

	It("keeps a session going while the forge answers 500s, says so on Reconciling, and catches up with the pull request after", func() {
		w := newWorld()
		// A token of its own: the outage hits this test's forge connection only.
		gh.AddToken("ghp_flaky", "flaky-bot")
		create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "flaky"), StringData: map[string]string{"token": "ghp_flaky"}})
		create(w.project().TokenSecret("flaky", "token").Obj())
		a := w.agent("outage")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Survive the outage").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		pullRequestWithCheck().do(a)
		a.expect(agentsv1alpha1.PhasePROpen)

		gh.SetOutage("flaky-bot", http.StatusInternalServerError)
		DeferCleanup(gh.SetOutage, "flaky-bot", 0)
		a.check("failure") // CI fails while the forge cannot be read
		By("the session says that the forge cannot be read")
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue,
			agentsv1alpha1.ReasonForgeUnavailable)))
		Expect(meta.FindStatusCondition(a.status().Conditions, agentsv1alpha1.ConditionReconciling).Message).To(ContainSubstring("The forge cannot be read ("))
		By("the agent's own reports still move the session")
		a.report(agentsv1alpha1.ActivityWaitingForInput, question("Which API version?"))
		a.expect(agentsv1alpha1.PhaseNeedsInput)
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhasePROpen)
		Expect(a.status().PullRequest).To(HaveField("Number", int64(a.pr)), "the pull request it knew is kept")

		By("the forge recovers: the pull request state catches up")
		gh.SetOutage("flaky-bot", 0)
		a.expect(agentsv1alpha1.PhaseCIFailed)
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("PullRequest.Checks", agentsv1alpha1.ChecksFailing))
		Expect(a.status().Conditions).NotTo(ContainElement(HaveField("Reason", agentsv1alpha1.ReasonForgeUnavailable)))
	})

	It("errors a session whose agent image cannot be pulled, and restores it once the image is fixed", func() {
		w := newWorld()
		create(shortActivity(w.project()).Obj())
		a := w.agent("badimage")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix the build").With(func(s *agentsv1alpha1.AgentSessionSpec) {
			s.Agent = &agentsv1alpha1.AgentSpec{Image: "registry.example/no-such-image:1"}
		}).Obj())
		bad := a.pod()
		Expect(bad.Spec.Containers[0].Image).To(Equal("registry.example/no-such-image:1"))
		setPodStatus(bad, agentWaiting("ErrImagePull", "pull access denied for registry.example/no-such-image"))
		a.expect(agentsv1alpha1.PhaseErrored)
		Expect(a.status().Conditions).To(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonImagePullFailed))
		Eventually(podGone(w.ns, a.podName(), bad.UID)).Should(BeTrue())

		By("the user fixes the image and restores the session (Stopped, then Running)")
		update(session(w.ns, a.name), func(o *agentsv1alpha1.AgentSession) {
			o.Spec.Agent.Image = "registry.example/agent:2"
			o.Spec.State = agentsv1alpha1.SessionStopped
		})
		a.expect(agentsv1alpha1.PhaseStopped)
		a.setState(agentsv1alpha1.SessionRunning)
		Eventually(func() bool { return podExists(w.ns, a.podName())() && a.pod().UID != bad.UID }).Should(BeTrue())
		Expect(a.pod().Spec.Containers[0].Image).To(Equal("registry.example/agent:2"))
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(a.status().Conditions).NotTo(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue))
		Expect(a.status().Restores).To(Equal(int32(1)))
	})

	It("keeps a session going when a setup command fails, with SetupSucceeded=False on its Worktree", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Workspace.Setup = []agentsv1alpha1.SetupCommand{{Name: "install", Command: []string{"npm", "ci"}}}
		}).Obj())
		a := w.agent("setup")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix the build").Obj())
		pod := a.pod()
		Expect(pod.Spec.Containers).To(ContainElement(And(HaveField("Name", "prepare"),
			HaveField("Args", ContainElement(And(HavePrefix("--setup="), ContainSubstring(`"command":["npm","ci"]`)))))))
		setPodStatus(pod, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			initDone(p, preparedResult(a.branch(), workspace.Facts{}, workspace.SetupResult{
				State: agentsv1alpha1.SetupFailed, FailedCommand: "install", Error: "npm ERR! could not resolve dependency",
			}))
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "agent", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
		})
		Eventually(worktreeStatus(w.ns, a.name)).Should(And(
			HaveField("Phase", agentsv1alpha1.WorktreeReady),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionFalse, agentsv1alpha1.ReasonSetupFailed))))
		r, err := connectRunnerE(pod, "widgets")
		Expect(err).NotTo(HaveOccurred())
		a.runner = r
		a.report(agentsv1alpha1.ActivityActive, func(r *runnerapi.Report) {
			r.Workspace = &runnerapi.WorkspaceReport{Setup: &runnerapi.SetupReport{State: agentsv1alpha1.SetupFailed, FailedCommand: "install"}}
		})
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(a.status().Conditions).To(HaveCondition(agentsv1alpha1.ConditionWorkspaceReady, metav1.ConditionTrue))

		By("the setup command is fixed on the Project; the session's next pod runs it and the Worktree recovers")
		update(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, func(p *agentsv1alpha1.Project) {
			p.Spec.Workspace.Setup = []agentsv1alpha1.SetupCommand{{Name: "install", Command: []string{"npm", "ci", "--legacy-peer-deps"}}}
		})
		a.setState(agentsv1alpha1.SessionStopped)
		a.expect(agentsv1alpha1.PhaseStopped)
		Eventually(podGone(w.ns, a.podName(), pod.UID)).Should(BeTrue())
		a.setState(agentsv1alpha1.SessionRunning)
		Eventually(func() bool { return podExists(w.ns, a.podName())() && a.pod().UID != pod.UID }).Should(BeTrue())
		Expect(a.pod().Spec.Containers).To(ContainElement(And(HaveField("Name", "prepare"),
			HaveField("Args", ContainElement(ContainSubstring(`"command":["npm","ci","--legacy-peer-deps"]`))))))
		a.prepare = preparedResult(a.branch(), workspace.Facts{}, workspace.SetupResult{State: agentsv1alpha1.SetupSucceeded})
		a.start()
		a.report(agentsv1alpha1.ActivityActive, func(r *runnerapi.Report) {
			r.Workspace = &runnerapi.WorkspaceReport{Setup: &runnerapi.SetupReport{State: agentsv1alpha1.SetupSucceeded}}
		})
		a.expect(agentsv1alpha1.PhaseWorking)
		Eventually(worktreeStatus(w.ns, a.name)).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionSetupSucceeded, metav1.ConditionTrue)))
	})
})
