package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/gitserver"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

const (
	managerNamespace  = "shepherd-system"
	managerDeployment = "shepherd-manager"
	metricsService    = scenario.MetricsService
	leaderElectionID  = "shepherd-manager.agents.shepherd.dev"
	runnerImage       = "shepherd-runner:latest"
)

var _ = Describe("Shepherd on the local cluster", Ordered, func() {
	var (
		c   *cluster
		ctx context.Context
	)

	BeforeAll(func() {
		ctx = context.Background()
		c = buildTool()
		c.start()
	})

	// The cluster never outlives the suite: when a spec fails before the teardown spec, this
	// stops it (a no-op when it is already down). The logs stay in the run directory.
	AfterAll(func() {
		if c == nil {
			return
		}
		_, err := c.localcluster(5*time.Minute, "down")
		Expect(err).NotTo(HaveOccurred())
	})

	It("installs the CRDs from config/default", func() {
		_, err := c.kubectl("apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repoRoot(), "config", "default"))
		Expect(err).NotTo(HaveOccurred())
		// The UI's APIService, as make run-local applies it: the agent specs read transcripts
		// and drive the dashboard through the API server.
		_, err = c.kubectl("apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repoRoot(), "config", "ui"))
		Expect(err).NotTo(HaveOccurred())
		for _, gr := range crdNames {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			Eventually(func(g Gomega) {
				g.Expect(c.client.Get(ctx, client.ObjectKey{Name: gr.String()}, crd)).To(Succeed())
				g.Expect(crd.Status.Conditions).To(ContainElement(And(
					HaveField("Type", apiextensionsv1.Established),
					HaveField("Status", apiextensionsv1.ConditionTrue))), "CRD %s is Established", gr)
			}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		}

		By("accepting the samples through the API")
		_, err = c.kubectl("apply", "--server-side", "--force-conflicts", "-k", filepath.Join(repoRoot(), "config", "samples"))
		Expect(err).NotTo(HaveOccurred())
		var projects agentsv1alpha1.ProjectList
		Expect(c.client.List(ctx, &projects, client.InNamespace("default"))).To(Succeed())
		Expect(projects.Items).NotTo(BeEmpty())
	})

	It("runs the manager from the locally built image, Ready", func() {
		want := imageID(filepath.Join(repoRoot(), "bin", "images", "shepherd-manager_latest.tar"), "shepherd-manager:latest")

		// A reused cluster may run a pod of an earlier build under the same tag: restart the
		// Deployment so its pod runs the image just loaded.
		dep := &appsv1.Deployment{}
		Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: managerDeployment}, dep)).To(Succeed())
		patch := client.MergeFrom(dep.DeepCopy())
		if dep.Spec.Template.Annotations == nil {
			dep.Spec.Template.Annotations = map[string]string{}
		}
		dep.Spec.Template.Annotations["e2e.shepherd.dev/image"] = strings.TrimPrefix(want, "sha256:")[:16]
		Expect(c.client.Patch(ctx, dep, patch)).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
			g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
			g.Expect(dep.Status.UpdatedReplicas).To(Equal(int32(1)))
			g.Expect(dep.Status.ReadyReplicas).To(Equal(int32(1)))
			g.Expect(dep.Status.Replicas).To(Equal(int32(1)), "the old pod is gone")
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())

		pod := managerPod(ctx, c)
		Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
		st := pod.Status.ContainerStatuses[0]
		Expect(st.Ready).To(BeTrue())
		Expect(st.ImageID).To(Equal(want), "the pod runs the image built from this tree")
		Expect(st.RestartCount).To(BeZero())
		Expect(pod.Spec.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))

		By("the UI's APIService turns Available: the leader serves it, its caBundle injected")
		uiAvailable(c)
	})

	It("serves the manager's metrics through its Service only to a scraper allowed to read them", func() {
		// From the host through kube-proxy's ClusterIP rules to the pod's :8443, over HTTPS.
		scraper, err := scenario.NewMetricsScraper(ctx, c.clientset)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			body, err := scraper.Scrape(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			// controller-runtime's metrics, and this replica is the leader.
			g.Expect(body).To(ContainSubstring(fmt.Sprintf("leader_election_master_status{name=%q} 1", leaderElectionID)))
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		By("without a token, and with the token of a ServiceAccount not bound to the metrics-reader role")
		code, body, err := scraper.Get(ctx, false)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		stranger := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: "e2e-metrics-stranger"}}
		Expect(client.IgnoreAlreadyExists(c.client.Create(ctx, stranger))).To(Succeed())
		tr, err := c.clientset.CoreV1().ServiceAccounts(managerNamespace).CreateToken(ctx, stranger.Name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scraper.URL, nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's self-signed metrics certificate
		}}).Do(req)
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
	})

	It("clones with real git from the runner image, from a git server on the host", func() {
		By("serving a seeded repository over smart HTTP on all host addresses")
		srv, err := gitserver.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		head, err := srv.Seed("acme/widgets", "main", map[string]string{"README.md": "# widgets\n", "src/main.go": "package main\n"})
		Expect(err).NotTo(HaveOccurred())
		Expect(srv.Start("0.0.0.0:0")).To(Succeed())
		DeferCleanup(srv.Close)
		_, port, err := net.SplitHostPort(srv.Addr())
		Expect(err).NotTo(HaveOccurred())
		url := fmt.Sprintf("http://%s/acme/widgets.git", net.JoinHostPort(nodeIP(ctx, c), port))

		ns := restrictedNamespace(ctx, c, "e2e-git-")
		DeferCleanup(func() { Expect(client.IgnoreNotFound(c.client.Delete(context.Background(), ns))).To(Succeed()) })

		By("cloning in an init container and reading the checkout in the main container")
		pod := gitPod(ns.Name, url)
		Expect(c.client.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).NotTo(Equal(corev1.PodFailed), "pod failed: %s", podLogs(ctx, c, pod))
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded))
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())

		Expect(podLog(ctx, c, pod, "clone")).To(ContainSubstring("Cloning into '/work/repo'"))
		Expect(strings.TrimSpace(podLog(ctx, c, pod, "show"))).To(Equal(head+" Initial commit"),
			"the pod's checkout is at the commit the host's git server holds")
	})

	It("provisions shepherd-local volumes for non-root pods, keeps their data, grows and deletes them", func() {
		By("the default StorageClass, served by the local provisioner")
		sc := &storagev1.StorageClass{}
		Expect(c.client.Get(ctx, client.ObjectKey{Name: localStorageClass}, sc)).To(Succeed())
		Expect(sc.Annotations).To(HaveKeyWithValue("storageclass.kubernetes.io/is-default-class", "true"))
		Expect(sc.Provisioner).To(Equal(localProvisioner))
		Expect(sc.VolumeBindingMode).To(HaveValue(Equal(storagev1.VolumeBindingWaitForFirstConsumer)))
		Expect(sc.ReclaimPolicy).To(HaveValue(Equal(corev1.PersistentVolumeReclaimDelete)))
		Expect(sc.AllowVolumeExpansion).To(HaveValue(BeTrue()))

		ns := restrictedNamespace(ctx, c, "e2e-volume-")
		DeferCleanup(func() { Expect(client.IgnoreNotFound(c.client.Delete(context.Background(), ns))).To(Succeed()) })

		By("a claim without a class gets the default one and waits for its first pod")
		pvc := claim(ns.Name, "workspace", "1Gi")
		Expect(c.client.Create(ctx, pvc)).To(Succeed())
		Expect(pvc.Spec.StorageClassName).To(HaveValue(Equal(localStorageClass)), "the DefaultStorageClass admission plugin")
		Eventually(func() string { return eventsOf(ctx, c, ns.Name, pvc.Name) }).
			WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(ContainSubstring("WaitForFirstConsumer"))
		Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		Expect(pvc.Status.Phase).To(Equal(corev1.ClaimPending), "no pod uses it yet")
		Expect(pvc.Spec.VolumeName).To(BeEmpty())

		By("a pod running as 65532 with fsGroup 65532 writes to it")
		message := "written by the first pod in " + ns.Name
		writer := volumePod(ns.Name, "writer", pvc.Name, "sh", "-c",
			`set -e; echo "$(id -u):$(id -g)"; stat -c '%u:%g %a' /workspace; mkdir /workspace/mirror; echo "$0" >/workspace/mirror/greeting`, message)
		runToCompletion(ctx, c, writer)
		Expect(strings.Split(strings.TrimSpace(podLog(ctx, c, writer, "main")), "\n")).To(Equal([]string{"65532:65532", "0:65532 2770"}),
			"the volume's root is root:65532, group-writable, setgid: what the kubelet makes of fsGroup")

		By("the claim is bound to a local volume the provisioner made on the node")
		pv := boundVolume(ctx, c, pvc)
		Expect(pvc.Annotations).To(HaveKeyWithValue("volume.kubernetes.io/storage-provisioner", localProvisioner))
		Expect(pvc.Annotations).To(HaveKeyWithValue("volume.kubernetes.io/selected-node", "shepherd-node"))
		Expect(pv.Annotations).To(HaveKeyWithValue("pv.kubernetes.io/provisioned-by", localProvisioner))
		Expect(pv.Spec.StorageClassName).To(Equal(localStorageClass))
		Expect(pv.Spec.PersistentVolumeReclaimPolicy).To(Equal(corev1.PersistentVolumeReclaimDelete))
		Expect(pv.Spec.Capacity.Storage().String()).To(Equal("1Gi"))
		Expect(pv.Spec.AccessModes).To(ConsistOf(corev1.ReadWriteOnce))
		Expect(pv.Spec.ClaimRef).To(HaveField("UID", pvc.UID))
		Expect(pv.Spec.Local).NotTo(BeNil())
		Expect(pv.Spec.Local.Path).To(Equal(volumeDir(c, pv)))
		Expect(pv.Spec.NodeAffinity.Required.NodeSelectorTerms).To(ConsistOf(HaveField("MatchExpressions", ConsistOf(And(
			HaveField("Key", corev1.LabelHostname), HaveField("Values", ConsistOf("shepherd-node")))))))
		Expect(eventsOf(ctx, c, ns.Name, pvc.Name)).To(ContainSubstring("ProvisioningSucceeded"))

		By("the data is on the host, owned by the pod's user")
		raw, err := os.ReadFile(filepath.Join(volumeDir(c, pv), "mirror", "greeting"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).To(Equal(message + "\n"))
		st, err := os.Stat(filepath.Join(volumeDir(c, pv), "mirror", "greeting"))
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Sys()).To(And(HaveField("Uid", BeEquivalentTo(agentUID)), HaveField("Gid", BeEquivalentTo(agentUID))))

		By("a second pod reads what the first wrote")
		reader := volumePod(ns.Name, "reader", pvc.Name, "cat", "/workspace/mirror/greeting")
		runToCompletion(ctx, c, reader)
		Expect(podLog(ctx, c, reader, "main")).To(Equal(message + "\n"))

		By("growing the claim grows the volume")
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		Expect(c.client.Patch(ctx, pvc, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
			g.Expect(pvc.Status.Capacity.Storage().String()).To(Equal("2Gi"))
			g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pv), pv)).To(Succeed())
			g.Expect(pv.Spec.Capacity.Storage().String()).To(Equal("2Gi"))
		}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("deleting the claim deletes its volume and the volume's directory")
		deleteAndWait(ctx, c, writer)
		deleteAndWait(ctx, c, reader)
		deleteAndWait(ctx, c, pvc)
		waitGone(ctx, c, pv) // the provisioner's doing: nothing else deletes volumes
		Expect(volumeDir(c, pv)).NotTo(BeAnExistingFile())
	})

	// Each real CLI in its own restricted namespace and pod, from its own image (docs/agents.md,
	// "The agent images"). Focus one with -ginkgo.focus='real.agent.CLI.*Codex'.
	DescribeTable("runs a real agent CLI from its agent image as uid 65532, which commits with its shell tool, and the runner pushes",
		func(a realAgent, steer steerFunc) { realAgentSession(ctx, c, a, steer) },
		// Claude Code's session is then steered from the dashboard in Chromium (dashboard_test.go).
		Entry(claudeCodeAgent.name, claudeCodeAgent, steerFunc(steerFromDashboard)),
		Entry(codexAgent.name, codexAgent, noSteer),
		Entry(openCodeAgent.name, openCodeAgent, noSteer),
	)

	// docs/security.md. Alone: -ginkgo.focus='installs.the.CRDs|runs.the.manager|attack' (it needs the install specs).
	It("tries every attack from inside a real agent container as the agent's user: each fails, the legitimate paths work", func() {
		trustSession(ctx, c)
	})

	It("runs a whole session from issue to merge: real pods, the real Claude Code, the fake GitHub, a manager restart", func() {
		wholeSession(ctx, c)
	})

	// Issue 22: every real CLI through the whole session, configured only through the Project;
	// Claude Code's in clone mode (its worktree-mode session is the spec above). Each loses its
	// pod between turns and resumes the conversation in the new one. Focus one with
	// -ginkgo.focus='installs.the.CRDs|runs.the.manager|whole.session.with.*Codex'.
	DescribeTable("runs the whole session with each real CLI, its pod replaced between turns",
		func(a realAgent, mode agentsv1alpha1.WorkspaceMode) { agentWholeSession(ctx, c, a, mode) },
		Entry(codexAgent.name+", worktree mode", codexAgent, agentsv1alpha1.WorkspaceWorktree),
		Entry(openCodeAgent.name+", worktree mode", openCodeAgent, agentsv1alpha1.WorkspaceWorktree),
		Entry(geminiAgent.name+", worktree mode", geminiAgent, agentsv1alpha1.WorkspaceWorktree),
		Entry(claudeCodeAgent.name+", clone mode", claudeCodeAgent, agentsv1alpha1.WorkspaceClone),
	)

	// Issue 22. Alone: -ginkgo.focus='installs.the.CRDs|runs.the.manager|places'.
	It("places a Project's pods by its scheduling, the pods of one ReadWriteOnce volume on one node", func() {
		scheduledSessions(ctx, c)
	})

	// Issue 24. Alone: -ginkgo.focus='installs.the.CRDs|runs.the.manager|best.of.3'.
	It("runs a best of 3 with the real Claude Code, Codex and OpenCode: Score chooses, the chosen pull request merges, the others close", func() {
		bestOfThree(ctx, c)
	})

	It("runs a whole session with a custom agent: the team's own script, its own protocol, from an image with bash and git", func() {
		customWholeSession(ctx, c)
	})

	It("runs a whole session on a real Gitea: commit statuses, official reviews, webhooks drive the phases", func() {
		giteaSession(ctx, c)
	})

	// Issue 20. Alone: -ginkgo.focus='installs.the.CRDs|runs.the.manager|says.why|issue.is.closed'.
	It("says why a session cannot start in kubectl get agentsessions: unschedulable, then Stalled at its spawnDeadline; a bad image Errored after the grace", func() {
		stalledSessions(ctx, c)
	})

	It("ends a session whose issue is closed on a real Gitea: Done, IssueClosed", func() {
		issueClosedOnGitea(ctx, c)
	})

	It("serves with two replicas: the leader deleted during a stream of signed deliveries and runner calls loses none", func() {
		haFailover(ctx, c)
	})

	It("installs with Helm: a session to its merge through the chart's manager, an upgrade, an uninstall that leaves nothing", func() {
		helmLifecycle(ctx, c)
	})

	It("tears the cluster down cleanly", func() {
		By("leaving a volume mounted by a running pod, which down must unmount and delete")
		ns := restrictedNamespace(ctx, c, "e2e-teardown-")
		pvc := claim(ns.Name, "busy", "1Gi")
		Expect(c.client.Create(ctx, pvc)).To(Succeed())
		holder := volumePod(ns.Name, "holder", pvc.Name, "sh", "-c", "touch /workspace/in-use && exec sleep 3600")
		Expect(c.client.Create(ctx, holder)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(holder), holder)).To(Succeed())
			if holder.Status.Phase == corev1.PodFailed || holder.Status.Phase == corev1.PodSucceeded {
				StopTrying(fmt.Sprintf("pod %s ended: %s", holder.Name, podLogs(ctx, c, holder))).Now()
			}
			g.Expect(holder.Status.Phase).To(Equal(corev1.PodRunning), "pod %s: %s", holder.Name, describePending(ctx, c, holder))
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		pv := boundVolume(ctx, c, pvc)
		Expect(filepath.Join(volumeDir(c, pv), "in-use")).To(BeARegularFile())
		Expect(mountsUnder(c.runDir)).To(ContainElement(HaveSuffix("/volumes/kubernetes.io~local-volume/" + pv.Name)))

		_, err := c.localcluster(5*time.Minute, "down")
		Expect(err).NotTo(HaveOccurred())

		By("leaving no process of the cluster or of its pods")
		Expect(clusterProcesses(c.runDir)).To(BeEmpty())
		By("leaving no mount under the run directory and no pod network namespace")
		Expect(mountsUnder(c.runDir)).To(BeEmpty())
		Expect(filepath.Glob("/run/netns/cni-*")).To(BeEmpty())
		By("keeping only the logs in the run directory")
		entries, err := os.ReadDir(c.runDir)
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		Expect(names).To(ConsistOf("logs"))
		Expect(volumeDir(c, pv)).NotTo(BeAnExistingFile())
		By("reporting no cluster")
		_, err = c.localcluster(time.Minute, "status")
		Expect(err).To(HaveOccurred(), "status exits 1 without a cluster")
	})
})

// imageID is the image ID (config digest) of an archive written by `localcluster images`: what
// the kubelet reports as a container's imageID for an image without a registry digest.
func imageID(archive, ref string) string {
	tag, err := name.NewTag(ref)
	Expect(err).NotTo(HaveOccurred())
	img, err := tarball.ImageFromPath(archive, &tag)
	Expect(err).NotTo(HaveOccurred())
	h, err := img.ConfigName()
	Expect(err).NotTo(HaveOccurred())
	return h.String()
}

func managerPod(ctx context.Context, c *cluster) *corev1.Pod {
	var pods corev1.PodList
	Expect(c.client.List(ctx, &pods, client.InNamespace(managerNamespace),
		client.MatchingLabels{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"})).To(Succeed())
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	Expect(live).To(HaveLen(1))
	return &live[0]
}

func nodeIP(ctx context.Context, c *cluster) string {
	GinkgoHelper()
	ip, err := scenario.NodeIP(ctx, c.client)
	Expect(err).NotTo(HaveOccurred())
	return ip
}

// gitPod clones url with the runner image's git (init container) and prints the checked-out
// commit (main container), under the restricted Pod Security Standard like agent pods.
func gitPod(ns, url string) *corev1.Pod {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	env := []corev1.EnvVar{{Name: "HOME", Value: "/work"}}
	mounts := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "git-clone", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name: "clone", Image: runnerImage, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"git", "clone", "--progress", "--branch", "main", url, "/work/repo"},
				Env:             env,
				VolumeMounts:    mounts,
				SecurityContext: sc,
			}},
			Containers: []corev1.Container{{
				Name: "show", Image: runnerImage, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"git", "-C", "/work/repo", "log", "-1", "--format=%H %s"},
				Env:             env,
				VolumeMounts:    mounts,
				SecurityContext: sc,
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func podLog(ctx context.Context, c *cluster, pod *corev1.Pod, container string) string {
	raw, err := c.clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "kubectl logs goes through the kubelet at the node IP")
	return string(raw)
}

// podLogs is every container's log, for failure messages.
func podLogs(ctx context.Context, c *cluster, pod *corev1.Pod) string {
	return podLogsTail(ctx, c, pod, 0)
}

// podLogsTail is podLogs limited to the last tail lines of each container (0: all of them).
func podLogsTail(ctx context.Context, c *cluster, pod *corev1.Pod, tail int64) string {
	var b strings.Builder
	for _, ct := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		opts := &corev1.PodLogOptions{Container: ct.Name}
		if tail > 0 {
			opts.TailLines = &tail
		}
		raw, err := c.clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).DoRaw(ctx)
		fmt.Fprintf(&b, "--- %s (err %v)\n%s\n", ct.Name, err, raw)
	}
	return b.String()
}

// clusterProcesses lists live processes that belong to the cluster: anything with the run
// directory on its command line (every component and containerd's shims carry it) and every
// process in a kubelet pod cgroup (the containers). Other etcd or kube-apiserver processes on the
// machine (envtest's) are not the cluster's.
func clusterProcesses(runDir string) []string {
	var found []string
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // a zombie runs nothing
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cgroup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if !strings.Contains(string(cmdline), runDir+"/") && !strings.Contains(string(cgroup), "/kubepods") {
			continue
		}
		found = append(found, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return found
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return out
}

// uiAPIService is the APIService of Shepherd's aggregated API (config/ui, the chart).
const uiAPIService = "v1alpha1.ui.agents.shepherd.dev"

// uiAvailable waits until the API server reaches the manager's UI through its APIService.
func uiAvailable(c *cluster) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		out, err := c.kubectl("get", "apiservice", uiAPIService, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].message}`)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(HavePrefix("True"))
	}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}
