package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// haFailover runs two manager replicas and deletes the leader (a graceful stop, as a rollout or a
// drain does) during a stream of signed webhook deliveries and runner-channel calls sent through
// the Services, which spread them over both replicas. Every call must be answered by a leader:
// a delivery 202 (only the leader's receiver accepts; a standby relays its answer), a runner call
// with a made-up token 401 from the leader's token check (a standby never answers it itself).
func haFailover(ctx context.Context, c *cluster) {
	By("scaling the manager to two replicas")
	scaleManager(ctx, c, 2)
	DeferCleanup(func() {
		// Best effort: after a failure the suite may already have stopped the cluster.
		d := &appsv1.Deployment{}
		if c.client.Get(context.Background(), client.ObjectKey{Namespace: managerNamespace, Name: managerDeployment}, d) == nil {
			scaleManager(context.Background(), c, 1)
		}
	})
	leader := leaderPod(ctx, c)
	lease := &coordinationv1.Lease{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: leaderElectionID}, lease)).To(Succeed())
	Expect(lease.Labels).To(HaveKeyWithValue(controller.LabelLeaderAddress, leader.Status.PodIP), "the leader stamped its address on the Lease")

	By("a Project on the fake GitHub, whose deliveries the stream signs with its secret")
	host := nodeIP(ctx, c)
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: host, Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)
	ns := restrictedNamespace(ctx, c, "e2e-ha-")
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	m, err := scenario.Render(filepath.Join(repoRoot(), "config", "samples", "demo"), ns.Name,
		// No model and no notification receiver: no session runs here, the Project only verifies deliveries.
		scenario.ValuesFor(gh, "http://"+net.JoinHostPort(host, "9"), "http://"+net.JoinHostPort(host, "9")+"/notify", host, time.Minute))
	Expect(err).NotTo(HaveOccurred())
	Expect(m.ApplySetup(ctx, c.client)).To(Succeed())
	Expect(scenario.WaitProjectReady(ctx, c.client, client.ObjectKeyFromObject(m.Project), time.Minute)).To(Succeed())
	hookURL, err := scenario.WebhookURL(ctx, c.client, client.ObjectKeyFromObject(m.Project))
	Expect(err).NotTo(HaveOccurred())
	runnerSvc := &corev1.Service{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: runnerService}, runnerSvc)).To(Succeed())
	taskURL := fmt.Sprintf("https://%s%s", net.JoinHostPort(runnerSvc.Spec.ClusterIP, strconv.Itoa(int(runnerSvc.Spec.Ports[0].Port))), runnerapi.PathTask)
	httpc := &http.Client{Timeout: 25 * time.Second, Transport: &http.Transport{
		// New connections each time, so that kube-proxy spreads them over both replicas.
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // this client only counts answers; the standby's hop verifies
	}}
	body := []byte(`{"action":"synchronize","number":1,"repository":{"full_name":"` + gh.Repo() + `"}}`)
	deliver := func(i int) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hookURL, bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("e2e-ha-%d-%d", i, time.Now().UnixNano()))
		req.Header.Set("X-Hub-Signature-256", webhook.Sign([]byte(gh.WebhookSecret()), body))
		return do(httpc, req)
	}
	call := func() (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, taskURL, nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer not-a-token")
		return do(httpc, req)
	}

	By("the stream, the leader deleted in the middle")
	const n = 60
	var mu sync.Mutex
	var failures []string
	answeredBy := map[string]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer GinkgoRecover()
		for i := range n {
			code, msg, err := deliver(i)
			mu.Lock()
			if err != nil || code != http.StatusAccepted {
				failures = append(failures, fmt.Sprintf("delivery %d: %d %q %v", i, code, msg, err))
			}
			code, msg, err = call()
			if err != nil || code != http.StatusUnauthorized {
				failures = append(failures, fmt.Sprintf("runner call %d: %d %q %v", i, code, msg, err))
			}
			answeredBy[fmt.Sprint(code)]++
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	time.Sleep(2 * time.Second)
	Expect(c.client.Delete(ctx, leader)).To(Succeed(), "a graceful stop: preStop, SIGTERM, the Lease released")
	wg.Wait()
	fmt.Fprintf(GinkgoWriter, "leader %s deleted 2 s into a stream of %d deliveries and %d runner calls; runner answers by code %v\n",
		leader.Name, n, n, answeredBy)
	Expect(failures).To(BeEmpty(), "every delivery accepted and every runner call answered by a leader")

	By("the other replica leads")
	Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: leaderElectionID}, l)).To(Succeed())
		g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
		g.Expect(*l.Spec.HolderIdentity).NotTo(HavePrefix(leader.Name + "_"))
		g.Expect(*l.Spec.HolderIdentity).NotTo(BeEmpty())
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

	By("the UI follows the leader: only its pod carries the ui-serving label, and the API server reaches it")
	Eventually(func(g Gomega) {
		now := leaderPod(ctx, c)
		var pods corev1.PodList
		g.Expect(c.client.List(ctx, &pods, client.InNamespace(managerNamespace), client.MatchingLabels{controller.LabelUIServing: "true"})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1))
		g.Expect(pods.Items[0].Name).To(Equal(now.Name))
		_, err := c.clientset.Discovery().RESTClient().Get().AbsPath("/apis/ui.agents.shepherd.dev/v1alpha1").DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	uiAvailable(c)
}

func do(httpc *http.Client, req *http.Request) (int, string, error) {
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(msg)), nil
}

// scaleManager sets the manager's replicas and waits until that many pods are Ready and none is
// terminating.
func scaleManager(ctx context.Context, c *cluster, replicas int32) {
	GinkgoHelper()
	d := &appsv1.Deployment{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: managerDeployment}, d)).To(Succeed())
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = ptr.To(replicas)
	Expect(c.client.Patch(ctx, d, patch)).To(Succeed())
	Eventually(func(g Gomega) {
		ready, terminating := readyManagers(ctx, g, c, "")
		g.Expect(terminating).To(BeZero(), "a manager pod still terminating")
		g.Expect(ready).To(Equal(int(replicas)))
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// readyManagers counts the manager pods that are Ready (leaving out the pod with UID except) and
// those terminating.
func readyManagers(ctx context.Context, g Gomega, c *cluster, except types.UID) (ready, terminating int) {
	var pods corev1.PodList
	g.Expect(c.client.List(ctx, &pods, client.InNamespace(managerNamespace),
		client.MatchingLabels{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"})).To(Succeed())
	for _, p := range pods.Items {
		switch {
		case p.UID == except:
		case p.DeletionTimestamp != nil:
			terminating++
		case len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready:
			ready++
		}
	}
	return ready, terminating
}

// leaderPod is the manager pod holding the leader-election Lease (its identity is the pod's
// hostname, its name, and a suffix).
func leaderPod(ctx context.Context, c *cluster) *corev1.Pod {
	GinkgoHelper()
	var pod corev1.Pod
	Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: leaderElectionID}, l)).To(Succeed())
		g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
		name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: name}, &pod)).To(Succeed())
		g.Expect(pod.DeletionTimestamp).To(BeNil())
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	return &pod
}
