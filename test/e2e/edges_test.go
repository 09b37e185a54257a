package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// sessionReasons reads `kubectl get agentsessions` in ns, as a user would, and returns each
// session's PHASE and REASON columns.
func sessionReasons(c *cluster, ns string) map[string][2]string {
	GinkgoHelper()
	out, err := kubectlIn(c, nil, "get", "agentsessions", "-n", ns, "--no-headers",
		"-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,REASON:.status.conditions[?(@.type==\"Ready\")].reason")
	Expect(err).NotTo(HaveOccurred())
	got := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			got[f[0]] = [2]string{f[1], f[2]}
		}
	}
	return got
}

// demoManifests renders config/samples/demo for forge in a new restricted namespace, with the
// scripted model and a notification receiver on the node IP.
func demoManifests(ctx context.Context, c *cluster, forge scenario.Forge, poll time.Duration) *scenario.Manifests {
	GinkgoHelper()
	host := nodeIP(ctx, c)
	model, err := scenario.StartModel(host)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(model.Close)
	notices, err := scenario.StartReceiver(host, nil)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(notices.Close)
	ns := restrictedNamespace(ctx, c, "e2e-edges-")
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	m, err := scenario.Render(filepath.Join(repoRoot(), "config", "samples", "demo"), ns.Name,
		scenario.ValuesFor(forge, model.URL(), notices.URL(), host, poll))
	Expect(err).NotTo(HaveOccurred())
	return m
}

// stalledSessions: a session whose pod no node can take and one whose agent image cannot be
// pulled each say why in `kubectl get agentsessions` within their deadline (issue 20).
func stalledSessions(ctx context.Context, c *cluster) {
	By("serving the fake GitHub on the node IP; a Project whose pods no node can take, with a spawnDeadline of 20s")
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: nodeIP(ctx, c), Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)
	m := demoManifests(ctx, c, gh, time.Minute)
	ns := m.Project.Namespace
	m.Project.Spec.Activity = &agentsv1alpha1.ActivitySpec{SpawnDeadline: &metav1.Duration{Duration: 20 * time.Second},
		GracePeriod: &metav1.Duration{Duration: 20 * time.Second}}
	Expect(m.ApplySetup(ctx, c.client)).To(Succeed())
	Expect(scenario.WaitProjectReady(ctx, c.client, client.ObjectKeyFromObject(m.Project), time.Minute)).To(Succeed())

	unplaceable := m.Project.DeepCopy()
	unplaceable.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "unplaceable"}
	unplaceable.Status = agentsv1alpha1.ProjectStatus{}
	unplaceable.Spec.Scheduling = &agentsv1alpha1.SchedulingSpec{NodeSelector: map[string]string{"shepherd.dev/e2e-pool": "nowhere"}}
	Expect(c.client.Create(ctx, unplaceable)).To(Succeed())
	Expect(scenario.WaitProjectReady(ctx, c.client, client.ObjectKeyFromObject(unplaceable), time.Minute)).To(Succeed())

	issue := strconv.Itoa(gh.Issue())
	stuck := m.Session.DeepCopy()
	stuck.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "nowhere-to-run"}
	stuck.Spec.ProjectRef.Name, stuck.Spec.Issue = unplaceable.Name, issue
	Expect(c.client.Create(ctx, stuck)).To(Succeed())

	badImage := m.Session.DeepCopy()
	badImage.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "no-such-image"}
	badImage.Spec.Issue = issue
	// Refused at once (nothing listens on port 1 of loopback): the kubelet backs off pulling it.
	badImage.Spec.Agent = &agentsv1alpha1.AgentSpec{Image: "127.0.0.1:1/shepherd/no-such-agent:0"}
	Expect(c.client.Create(ctx, badImage)).To(Succeed())

	By("the unschedulable session says so at once, then Stalled at its 20s deadline; the bad image is Errored after the 20s grace")
	start := time.Now()
	Eventually(func() string { return sessionReasons(c, ns)[stuck.Name][1] }).WithTimeout(time.Minute).WithPolling(time.Second).
		Should(Equal(agentsv1alpha1.ReasonPodUnschedulable))
	Eventually(func() [2]string { return sessionReasons(c, ns)[stuck.Name] }).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).
		Should(Equal([2]string{string(agentsv1alpha1.PhaseSpawning), agentsv1alpha1.ReasonSpawnDeadlineExceeded}))
	fmt.Fprintf(GinkgoWriter, "unschedulable: SpawnDeadlineExceeded after %.0fs\n", time.Since(start).Seconds())
	Eventually(func() [2]string { return sessionReasons(c, ns)[badImage.Name] }).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).
		Should(Equal([2]string{string(agentsv1alpha1.PhaseErrored), agentsv1alpha1.ReasonImagePullFailed}))
	fmt.Fprintf(GinkgoWriter, "bad image: ImagePullFailed after %.0fs\n", time.Since(start).Seconds())

	s := &agentsv1alpha1.AgentSession{}
	Expect(c.client.Get(ctx, client.ObjectKeyFromObject(stuck), s)).To(Succeed())
	stalled := findCondition(s.Status.Conditions, agentsv1alpha1.ConditionStalled)
	Expect(stalled).NotTo(BeNil())
	Expect(stalled.Message).To(And(ContainSubstring("spawnDeadline 20s"), ContainSubstring("node(s) didn't match")), "the scheduler's own words")
	Expect(c.client.Get(ctx, client.ObjectKeyFromObject(badImage), s)).To(Succeed())
	Expect(findCondition(s.Status.Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("no-such-agent"), "the kubelet's own words")
}

// issueClosedOnGitea: on a real Gitea, closing the issue a session works on ends the session
// Done with reason IssueClosed (issue 20): the Project's tracker query, asked at once by its
// reconcile request, finds it closed.
func issueClosedOnGitea(ctx context.Context, c *cluster) {
	By("starting Gitea on the node IP with the repository and its issue")
	dir := GinkgoT().TempDir()
	g, err := scenario.StartGitea(ctx, scenario.GiteaOptions{Dir: filepath.Join(dir, "gitea"), Host: nodeIP(ctx, c), Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(g.Close()).To(Succeed()) })
	m := demoManifests(ctx, c, g, time.Minute)
	ns := m.Project.Namespace
	Expect(m.ApplySetup(ctx, c.client)).To(Succeed())
	Expect(scenario.WaitProjectReady(ctx, c.client, client.ObjectKeyFromObject(m.Project), time.Minute)).To(Succeed())
	Expect(m.CreateSession(ctx, c.client)).To(Succeed())
	key := client.ObjectKeyFromObject(m.Session)

	By("the agent starts; then a maintainer closes the issue in Gitea")
	Eventually(func() string { return sessionReasons(c, ns)[key.Name][0] }).WithTimeout(3*time.Minute).WithPolling(2*time.Second).
		Should(BeElementOf(string(agentsv1alpha1.PhaseWorking), string(agentsv1alpha1.PhasePROpen), string(agentsv1alpha1.PhaseReviewPending),
			string(agentsv1alpha1.PhaseCIFailed)), "the session runs")
	admin := g.Server.Client(g.Server.Admin)
	Expect(admin.CloseIssue(ctx, g.Server.Admin.Name, scenario.RepoName, g.Issue())).To(Succeed())
	p := &agentsv1alpha1.Project{}
	Expect(c.client.Get(ctx, client.ObjectKeyFromObject(m.Project), p)).To(Succeed())
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[agentsv1alpha1.ReconcileRequestAnnotation] = time.Now().Format(time.RFC3339Nano)
	Expect(c.client.Patch(ctx, p, patch)).To(Succeed())

	Eventually(func() [2]string { return sessionReasons(c, ns)[key.Name] }).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).
		Should(Equal([2]string{string(agentsv1alpha1.PhaseDone), agentsv1alpha1.ReasonIssueClosed}))
	s := &agentsv1alpha1.AgentSession{}
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(findCondition(s.Status.Conditions, agentsv1alpha1.ConditionReady).Message).
		To(Equal(fmt.Sprintf("Issue %d was closed in the tracker (closed)", g.Issue())))
	Eventually(func() bool {
		return apierrors.IsNotFound(c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: key.Name + "-agent"}, &corev1.Pod{}))
	}).WithTimeout(2*time.Minute).Should(BeTrue(), "its agent pod goes")
}

// findCondition returns the condition of type t, or nil.
func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
