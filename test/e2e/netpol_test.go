package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NetworkPolicy on the local cluster is enforced by kube-router's network-policy controller
// (hack/localcluster/netpol.go; docs/local-cluster.md, "NetworkPolicy"). These specs prove it with
// traffic between two pods on the node's bridge: git's own protocol (`git daemon` and
// `git ls-remote`, both in the runner image), a real TCP exchange rather than a connect.
const (
	netpolPort = 9418 // git daemon's
	// netpolProbeTimeout bounds one attempt inside the pod: a dropped SYN would otherwise wait for
	// TCP's retries (about two minutes).
	netpolProbeTimeout = 3 * time.Second
	// netpolWait bounds each change of verdict: kube-router applies a policy on its event.
	netpolWait = 30 * time.Second
)

// Label values of the three pods; each policy selects by the "app" label.
const (
	netpolServer    = "netpol-server"
	netpolClient    = "netpol-client"
	netpolBystander = "netpol-bystander"
)

// kube-router's chain prefixes and ipset prefixes (hack/localcluster/netpol.go).
var (
	netpolChainPrefixes = []string{"KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"}
	netpolSetPrefixes   = []string{"KUBE-SRC-", "KUBE-DST-"}
)

var _ = Describe("NetworkPolicy on the local cluster", Ordered, func() {
	var (
		c         *cluster
		ctx       context.Context
		ns        string
		server    *corev1.Pod
		clientPod *corev1.Pod
		bystander *corev1.Pod
		url       string
	)

	BeforeAll(func() {
		ctx = context.Background()
		c = buildTool()
		startForNetpol(c)

		ns = restrictedNamespace(ctx, c, "e2e-netpol-").Name
		server = netpolPod(ns, netpolServer,
			[]string{"git", "daemon", "--reuseaddr", "--export-all", "--base-path=/srv", "--listen=0.0.0.0", "--port=" + strconv.Itoa(netpolPort)},
			[]string{"git", "init", "--quiet", "--bare", "/srv/probe.git"})
		clientPod = netpolPod(ns, netpolClient, []string{"sleep", "infinity"}, nil)
		bystander = netpolPod(ns, netpolBystander, []string{"sleep", "infinity"}, nil)
		for _, p := range []*corev1.Pod{server, clientPod, bystander} {
			Expect(c.client.Create(ctx, p)).To(Succeed())
		}
		for _, p := range []*corev1.Pod{server, clientPod, bystander} {
			waitRunning(ctx, c, p)
		}
		url = fmt.Sprintf("git://%s/probe.git", net.JoinHostPort(server.Status.PodIP, strconv.Itoa(netpolPort)))
	})

	// The cluster never outlives the suite (as in e2e_test.go's container): a no-op when down.
	AfterAll(func() {
		if c == nil {
			return
		}
		_, err := c.localcluster(5*time.Minute, "down")
		Expect(err).NotTo(HaveOccurred())
	})

	It("enforces NetworkPolicy egress and ingress rules on pod traffic", func() {
		verdict := func(from *corev1.Pod) func() (string, error) {
			return func() (string, error) { return netpolProbe(c, from, url) }
		}
		expectVerdict := func(from *corev1.Pod, want string) {
			GinkgoHelper()
			Eventually(verdict(from)).WithTimeout(netpolWait).WithPolling(time.Second).Should(Equal(want), "%s to the server", from.Name)
		}

		By("without a policy, the client and the bystander reach the server")
		expectVerdict(clientPod, "connected") // also waits for git daemon to listen
		expectVerdict(bystander, "connected")

		By("a default-deny egress policy on the client blocks it, and only it")
		Expect(c.client.Create(ctx, netpolDenyAll(ns, "client-deny-egress", netpolClient, networkingv1.PolicyTypeEgress))).To(Succeed())
		expectVerdict(clientPod, "blocked")
		expectVerdict(bystander, "connected")

		By("an egress rule to the server's pod IP and port lets the client through again")
		Expect(c.client.Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "client-allow-server", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": netpolClient}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: server.Status.PodIP + "/32"}}},
					Ports: []networkingv1.NetworkPolicyPort{netpolTCPPort()},
				}},
			},
		})).To(Succeed())
		expectVerdict(clientPod, "connected")

		By("a default-deny ingress policy on the server blocks everyone")
		Expect(c.client.Create(ctx, netpolDenyAll(ns, "server-deny-ingress", netpolServer, networkingv1.PolicyTypeIngress))).To(Succeed())
		expectVerdict(clientPod, "blocked")
		expectVerdict(bystander, "blocked")

		By("an ingress rule from the client's pods admits the client, not the bystander")
		Expect(c.client.Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "server-allow-client", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": netpolServer}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": netpolClient}}}},
					Ports: []networkingv1.NetworkPolicyPort{netpolTCPPort()},
				}},
			},
		})).To(Succeed())
		expectVerdict(clientPod, "connected")
		expectVerdict(bystander, "blocked")
	})

	It("leaves no chain, rule or ipset of kube-router behind after down", func() {
		By("with the policies in place, kube-router's chains and its policies' ipsets exist")
		Expect(netpolChainsOnHost()).To(ContainElement("iptables KUBE-ROUTER-FORWARD"))
		Expect(netpolSetsOnHost()).NotTo(BeEmpty())

		_, err := c.localcluster(5*time.Minute, "down")
		Expect(err).NotTo(HaveOccurred())

		By("after down, none of them is left, nor a jump to them, nor the process")
		Expect(netpolChainsOnHost()).To(BeEmpty())
		for _, tool := range []string{"iptables", "ip6tables"} {
			rules, err := run(time.Minute, repoRoot(), nil, tool, "-w", "5", "-t", "filter", "-S")
			Expect(err).NotTo(HaveOccurred())
			Expect(rules).NotTo(ContainSubstring("kube-router"), "%s: no rule of kube-router's", tool)
		}
		Expect(netpolSetsOnHost()).To(BeEmpty())
		Expect(clusterProcesses(c.runDir)).To(BeEmpty())
	})
})

// startForNetpol brings the cluster up (kept when already running) like start, but loads only the
// runner image, whose git plays the server and the client: these specs need no other image.
func startForNetpol(c *cluster) {
	By("bringing the cluster up (the Kubernetes binaries and kube-router are built once and cached)")
	// The same fake nodes as the main suite's, so that one cluster serves both.
	_, err := c.localcluster(60*time.Minute, "up", fmt.Sprintf("--kwok-nodes=%d", kwokNodes))
	Expect(err).NotTo(HaveOccurred(), "localcluster up: its error names the component and its log")
	env, err := c.localcluster(time.Minute, "env")
	Expect(err).NotTo(HaveOccurred())
	c.kubeconfig = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(env), "export KUBECONFIG="))
	c.runDir = filepath.Dir(c.kubeconfig)

	By("building the runner image without Docker and loading it into the cluster's containerd")
	_, err = c.localcluster(30*time.Minute, "images", "--load", "--only=runner")
	Expect(err).NotTo(HaveOccurred())

	dir, err := run(time.Minute, repoRoot(), nil, filepath.Join(repoRoot(), "hack", "kube-binaries.sh"), "kubectl")
	Expect(err).NotTo(HaveOccurred())
	c.kubectlBin = filepath.Join(strings.TrimSpace(dir), "kubectl")

	c.cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	c.client, err = client.New(c.cfg, client.Options{Scheme: clientgoscheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	c.clientset, err = kubernetes.NewForConfig(c.cfg)
	Expect(err).NotTo(HaveOccurred())
}

// netpolPod runs command from the runner image under the restricted profile, labelled app=name;
// init, when given, runs first in an init container. /srv is an emptyDir (the root file system
// is read-only).
func netpolPod(ns, name string, command, init []string) *corev1.Pod {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	ctr := func(name string, command []string) corev1.Container {
		return corev1.Container{
			Name: name, Image: runnerImage, ImagePullPolicy: corev1.PullNever,
			Command:         command,
			Env:             []corev1.EnvVar{{Name: "HOME", Value: "/srv"}},
			VolumeMounts:    []corev1.VolumeMount{{Name: "srv", MountPath: "/srv"}},
			SecurityContext: sc,
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(agentUID),
				RunAsGroup:     ptr.To(agentUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{ctr("main", command)},
			Volumes:    []corev1.Volume{{Name: "srv", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if init != nil {
		pod.Spec.InitContainers = []corev1.Container{ctr("init", init)}
	}
	return pod
}

// waitRunning waits for the pod to run and have its IP.
func waitRunning(ctx context.Context, c *cluster, pod *corev1.Pod) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			StopTrying(fmt.Sprintf("pod %s ended: %s", pod.Name, podLogs(ctx, c, pod))).Now()
		}
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s: %s", pod.Name, describePending(ctx, c, pod))
		g.Expect(pod.Status.PodIP).NotTo(BeEmpty())
	}).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// netpolProbe runs one bounded `git ls-remote` from the pod to the server: "connected" when git's
// protocol completed, "blocked" when the connection failed (timeout's 124: the packets were
// dropped; git's 128: refused or reset). Any other failure (of kubectl exec itself) is an error.
func netpolProbe(c *cluster, from *corev1.Pod, url string) (string, error) {
	secs := strconv.Itoa(int(netpolProbeTimeout / time.Second))
	_, err := run(netpolProbeTimeout+20*time.Second, repoRoot(), []string{"KUBECONFIG=" + c.kubeconfig}, c.kubectlBin,
		"exec", "-n", from.Namespace, from.Name, "-c", "main", "--", "timeout", secs, "git", "ls-remote", url)
	if err == nil {
		return "connected", nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && (exit.ExitCode() == 124 || exit.ExitCode() == 128) {
		return "blocked", nil
	}
	return "", err
}

// netpolDenyAll selects the pods labelled app=app for the policy type and allows nothing.
func netpolDenyAll(ns, name, app string, typ networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			PolicyTypes: []networkingv1.PolicyType{typ},
		},
	}
}

func netpolTCPPort() networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(netpolPort))}
}

// netpolChainsOnHost lists kube-router's chains in the host's IPv4 and IPv6 filter tables.
func netpolChainsOnHost() []string {
	GinkgoHelper()
	var chains []string
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := run(time.Minute, repoRoot(), nil, tool, "-w", "5", "-t", "filter", "-S")
		Expect(err).NotTo(HaveOccurred())
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "-N" && hasAnyPrefix(f[1], netpolChainPrefixes) {
				chains = append(chains, tool+" "+f[1])
			}
		}
	}
	return chains
}

// netpolSetsOnHost lists kube-router's ipsets.
func netpolSetsOnHost() []string {
	GinkgoHelper()
	out, err := run(time.Minute, repoRoot(), nil, "ipset", "list", "-n")
	Expect(err).NotTo(HaveOccurred())
	var sets []string
	for _, name := range strings.Fields(out) {
		if hasAnyPrefix(strings.TrimPrefix(name, "inet6:"), netpolSetPrefixes) {
			sets = append(sets, name)
		}
	}
	return sets
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
