package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

// The attack suite (docs/security.md): a Project of two Claude Code sessions, each with the pull
// request it opened; then test/e2e/attacker runs inside the first session's agent container, as
// the agent's user, and tries everything a steered agent would. The same program runs in a pod
// without a NetworkPolicy to show that every network target it could not reach is alive.
const (
	egressProxyDeployment = "shepherd-egress-proxy"
	runnerService         = "shepherd-runner"
	// allowedHost is on the Project's egress list; deniedHost is not. The egress proxy resolves
	// both to the node (hostAliases), where a test server answers.
	allowedHost = "allowed.e2e.test"
	deniedHost  = "denied.e2e.test"
	// tenantPort is the other tenant's server pod's (git daemon).
	tenantPort = 9418
)

// attempt is one line of the attacker's output.
type attempt struct {
	Attempt string `json:"attempt"`
	Reached bool   `json:"reached"`
	Detail  string `json:"detail"`
}

// attackerPlan is test/e2e/attacker's input (its Plan).
type attackerPlan struct {
	Mode          string            `json:"mode"`
	Needles       []string          `json:"needles,omitempty"`
	Files         []string          `json:"files,omitempty"`
	Checkout      string            `json:"checkout,omitempty"`
	Foreign       []string          `json:"foreign,omitempty"`
	Mirror        string            `json:"mirror,omitempty"`
	OwnBranch     string            `json:"ownBranch,omitempty"`
	OtherBranch   string            `json:"otherBranch,omitempty"`
	DefaultBranch string            `json:"defaultBranch,omitempty"`
	ForgeGit      string            `json:"forgeGit,omitempty"`
	Manager       string            `json:"manager,omitempty"`
	LocalRunner   string            `json:"localRunner,omitempty"`
	TCP           map[string]string `json:"tcp,omitempty"`
	DNS           map[string]string `json:"dns,omitempty"`
	ProxyAllowed  string            `json:"proxyAllowed,omitempty"`
	ProxyDenied   map[string]string `json:"proxyDenied,omitempty"`
	ConnectDenied map[string]string `json:"connectDenied,omitempty"`
}

func trustSession(ctx context.Context, c *cluster) {
	host := nodeIP(ctx, c)
	attacker := buildAttacker()

	By("serving an allowed host and a DNS resolver on the node, and naming the node allowed.e2e.test and denied.e2e.test for the egress proxy")
	allowed := serveAllowed(host)
	resolver := serveDNS(host)
	setEgressProxyHosts(ctx, c, host)

	By("running another tenant's server pod and a pod without a NetworkPolicy (the control)")
	tenantNS := restrictedNamespace(ctx, c, "e2e-tenant-")
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), tenantNS) })
	tenant := netpolPod(tenantNS.Name, "tenant-server",
		[]string{"git", "daemon", "--reuseaddr", "--export-all", "--base-path=/srv", "--listen=0.0.0.0", "--port=" + strconv.Itoa(tenantPort)},
		[]string{"git", "init", "--quiet", "--bare", "/srv/private.git"})
	control := netpolPod(tenantNS.Name, "control", []string{"sleep", "infinity"}, nil)
	Expect(c.client.Create(ctx, tenant)).To(Succeed())
	Expect(c.client.Create(ctx, control)).To(Succeed())

	By("a Project of two Claude Code sessions: its egress lists allowed.e2e.test, and opens two wide CIDRs that hold cloud metadata and the API server")
	hostNet := netip.PrefixFrom(netip.MustParseAddr(host), 24).Masked().String()
	p := newAgentProject(ctx, c, claudeCodeAgent, "e2e-trust-", func(s *agentsv1alpha1.ProjectSpec) {
		s.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{
			Hosts: []string{fmt.Sprintf("%s:%d", allowedHost, allowed.port)},
			Allow: []agentsv1alpha1.EgressRule{{CIDR: "169.0.0.0/8", Ports: []int32{80}}, {CIDR: hostNet, Ports: []int32{6443}}},
		}}
	})
	commit := func(file string) modelserver.Reply {
		return claudeCodeAgent.shell(fmt.Sprintf("echo work > %s && git add %s && git commit -m 'Add %s'", file, file, file))
	}
	p.model.Append(commit("a.txt"), modelserver.Text("Added a.txt."))
	sessA, prA := p.session(ctx, c, "trust-a", "Add a.txt and commit it.")
	p.model.Append(commit("b.txt"), modelserver.Text("Added b.txt."))
	sessB, prB := p.session(ctx, c, "trust-b", "Add b.txt and commit it.")
	By("the legitimate paths: each agent's commit was pushed and its pull request opened")
	bare := p.gh.Server.GitDir(p.gh.Repo())
	Expect(gitOut(bare, "log", "--format=%s", "main.."+sessA.Status.Branch)).To(Equal("Add a.txt"))
	Expect(gitOut(bare, "log", "--format=%s", "main.."+sessB.Status.Branch)).To(Equal("Add b.txt"))
	mainBefore := gitOut(bare, "rev-parse", "main")
	Expect(prA.HeadSHA).To(Equal(gitOut(bare, "rev-parse", sessA.Status.Branch)))

	podA := &corev1.Pod{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: sessA.Name + "-agent"}, podA)).To(Succeed())
	By("the secrets are in the pod, in the runner's container: its token and the model key")
	for _, f := range []string{"/var/run/secrets/shepherd/token", "/var/run/secrets/shepherd-model/key"} {
		_, err := kubectlIn(c, nil, "exec", "-n", p.ns, podA.Name, "-c", "runner", "--", "test", "-s", f)
		Expect(err).NotTo(HaveOccurred(), "the runner's container holds %s", f)
	}

	waitRunning(ctx, c, tenant)
	waitRunning(ctx, c, control)
	mgr := managerPod(ctx, c)
	runnerSvc := &corev1.Service{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: runnerService}, runnerSvc)).To(Succeed())
	apiSvc := &corev1.Service{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, apiSvc)).To(Succeed())
	metricsSvc := &corev1.Service{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: metricsService}, metricsSvc)).To(Succeed())
	forgeAddr := strings.TrimPrefix(p.gh.APIURL(), "http://")
	targets := map[string]string{
		"the API server's Service":                                 net.JoinHostPort(apiSvc.Spec.ClusterIP, "443"),
		"the API server on the node":                               net.JoinHostPort(host, "6443"),
		"the node's kubelet":                                       net.JoinHostPort(host, "10250"),
		"the manager's metrics port":                               net.JoinHostPort(mgr.Status.PodIP, "8443"),
		"the manager's probe port":                                 net.JoinHostPort(mgr.Status.PodIP, "8081"),
		"the manager's webhook port":                               net.JoinHostPort(mgr.Status.PodIP, "8091"),
		"another Service (the manager's metrics)":                  net.JoinHostPort(metricsSvc.Spec.ClusterIP, strconv.Itoa(int(metricsSvc.Spec.Ports[0].Port))),
		"another tenant's pod":                                     net.JoinHostPort(tenant.Status.PodIP, strconv.Itoa(tenantPort)),
		"the forge, directly":                                      forgeAddr,
		"the allowed host's address, past the proxy":               net.JoinHostPort(host, strconv.Itoa(allowed.port)),
		"cloud metadata (169.254.169.254), inside an allowed CIDR": "169.254.169.254:80",
	}
	dns := map[string]string{"a DNS resolver that is not the cluster's DNS pods": resolver}

	By("the control: from a pod without a NetworkPolicy every target answers (cloud metadata excepted: nothing serves it here)")
	controlTargets := map[string]string{}
	for name, addr := range targets {
		if !strings.HasPrefix(name, "cloud metadata") {
			controlTargets[name] = addr
		}
	}
	copyAttacker(c, control.Namespace, control.Name, "main", "/srv", attacker)
	got := runAttacker(c, control.Namespace, control.Name, "main", "/srv", attackerPlan{Mode: "control", TCP: controlTargets, DNS: dns})
	Expect(got).To(HaveLen(len(controlTargets) + len(dns)))
	for _, a := range got {
		Expect(a.Reached).To(BeTrue(), "control: %s should answer (%s)", a.Attempt, a.Detail)
	}

	By("the attack: test/e2e/attacker in trust-a's agent container, as the agent's user")
	Expect(podA.Spec.Containers).To(ContainElement(HaveField("Name", "agent")))
	out, err := kubectlIn(c, nil, "exec", "-n", p.ns, podA.Name, "-c", "agent", "--", "id", "-u")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.TrimSpace(out)).To(Equal("65532"))
	copyAttacker(c, p.ns, podA.Name, "agent", "/tmp", attacker)
	const ws = "/shepherd/workspace"
	plan := attackerPlan{
		Mode:    "agent",
		Needles: []string{p.gh.Token(), p.gh.WebhookSecret(), agentModelKey},
		Files: []string{"/var/run/secrets/shepherd/token", "/var/run/secrets/shepherd-model/key",
			"/var/run/secrets/kubernetes.io/serviceaccount/token"},
		Checkout: ws + "/worktrees/" + sessA.Name,
		Foreign: []string{ws + "/worktrees/" + sessB.Name, ws + "/homes/" + sessB.Name, ws + "/runner",
			ws + "/runner/" + sessA.Name, ws + "/worktrees/.spares"},
		Mirror:    ws + "/mirror.git",
		OwnBranch: sessA.Status.Branch, OtherBranch: sessB.Status.Branch, DefaultBranch: "main",
		ForgeGit:     p.gh.CloneURL(),
		Manager:      fmt.Sprintf("https://%s", net.JoinHostPort(runnerSvc.Spec.ClusterIP, strconv.Itoa(int(runnerSvc.Spec.Ports[0].Port)))),
		LocalRunner:  "http://127.0.0.1:8737",
		TCP:          targets,
		DNS:          dns,
		ProxyAllowed: fmt.Sprintf("http://%s:%d/", allowedHost, allowed.port),
		ProxyDenied: map[string]string{
			"a host name not on the list":      fmt.Sprintf("http://%s:%d/", deniedHost, allowed.port),
			"an address instead of a name":     fmt.Sprintf("http://%s/", net.JoinHostPort(host, strconv.Itoa(allowed.port))),
			"the allowed name on another port": fmt.Sprintf("http://%s:%s/", allowedHost, strings.Split(forgeAddr, ":")[1]),
			"the forge's API by its address":   p.gh.APIURL() + "/",
			"the manager's metrics by address": fmt.Sprintf("http://%s/metrics", net.JoinHostPort(mgr.Status.PodIP, "8443")),
		},
		ConnectDenied: map[string]string{
			"a host name not on the list": deniedHost + ":443",
			"cloud metadata":              "169.254.169.254:80",
			"the API server's Service":    net.JoinHostPort(apiSvc.Spec.ClusterIP, "443"),
		},
	}
	results := runAttacker(c, p.ns, podA.Name, "agent", "/tmp", plan)
	var report strings.Builder
	for _, a := range results {
		verdict := "blocked"
		if a.Reached {
			verdict = "REACHED"
		}
		fmt.Fprintf(&report, "%-8s %s: %s\n", verdict, a.Attempt, a.Detail)
	}
	fmt.Fprint(GinkgoWriter, report.String())
	AddReportEntry("attack suite (inside trust-a's agent container)", report.String())
	// Files; environment, processes, file system; the channel (3); pushes (6 refs through origin,
	// 2 to the forge, the legit one); foreign paths and the whole volume; the mirror (4); the
	// proxy's allowed host and refusals; the network targets.
	want := len(plan.Files) + 3 + 3 + 9 + len(plan.Foreign) + 1 + 4 + 1 + len(plan.ProxyDenied) + len(plan.ConnectDenied) + len(targets) + len(dns)
	Expect(results).To(HaveLen(want), "every attempt reported:\n%s", report.String())
	for _, a := range results {
		if strings.HasPrefix(a.Attempt, "legit: ") {
			Expect(a.Reached).To(BeTrue(), "%s should work: %s", a.Attempt, a.Detail)
		} else {
			Expect(a.Reached).To(BeFalse(), "%s should fail: %s", a.Attempt, a.Detail)
		}
	}

	By("the forge shows only the legitimate push: main, the other session's branch and the tags are as they were")
	Expect(gitOut(bare, "rev-parse", "main")).To(Equal(mainBefore))
	Expect(gitOut(bare, "rev-parse", sessB.Status.Branch)).To(Equal(prB.HeadSHA))
	Expect(gitOut(bare, "tag", "--list")).To(BeEmpty())
	Expect(gitOut(bare, "branch", "--list", "attacker/*")).To(BeEmpty())
	Expect(gitOut(bare, "log", "-1", "--format=%s", sessA.Status.Branch)).To(Equal("attacker's commit"),
		"the session's own branch took the agent's push")
	Expect(p.model.Problems()).To(BeEmpty())
}

// buildAttacker compiles test/e2e/attacker for the node (static, so it runs in any image).
func buildAttacker() string {
	GinkgoHelper()
	bin := filepath.Join(GinkgoT().TempDir(), "attacker")
	_, err := run(5*time.Minute, repoRoot(), []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", bin, "./test/e2e/attacker")
	Expect(err).NotTo(HaveOccurred())
	return bin
}

// kubectlIn runs kubectl with stdin.
func kubectlIn(c *cluster, stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectlBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// copyAttacker streams the attacker into dir of the container (an emptyDir: the root file
// system is read-only), as dir/attacker.
func copyAttacker(c *cluster, ns, pod, container, dir, bin string) {
	GinkgoHelper()
	raw, err := os.ReadFile(bin)
	Expect(err).NotTo(HaveOccurred())
	_, err = kubectlIn(c, raw, "exec", "-i", "-n", ns, pod, "-c", container, "--", "sh", "-c",
		`cat > "$0/attacker" && chmod 0755 "$0/attacker"`, dir)
	Expect(err).NotTo(HaveOccurred())
}

// runAttacker runs dir/attacker with plan and reads its attempts.
func runAttacker(c *cluster, ns, pod, container, dir string, plan attackerPlan) []attempt {
	GinkgoHelper()
	raw, err := json.Marshal(plan)
	Expect(err).NotTo(HaveOccurred())
	out, err := kubectlIn(c, raw, "exec", "-i", "-n", ns, pod, "-c", container, "--", dir+"/attacker")
	Expect(err).NotTo(HaveOccurred(), "the attacker ran: %s", out)
	var got []attempt
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var a attempt
		Expect(json.Unmarshal(sc.Bytes(), &a)).To(Succeed(), "attacker output %q", sc.Text())
		got = append(got, a)
	}
	return got
}

type allowedServer struct{ port int }

// serveAllowed answers every request on the node IP with 200.
func serveAllowed(host string) allowedServer {
	GinkgoHelper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("allowed\n"))
	})}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(func() { _ = srv.Close() })
	return allowedServer{port: l.Addr().(*net.TCPAddr).Port}
}

// serveDNS answers every DNS question on the node IP (port 53 when free) with an empty answer:
// an outside resolver an agent might use to send data out by the names it asks.
func serveDNS(host string) string {
	GinkgoHelper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "53"))
	if err != nil {
		pc, err = net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	}
	Expect(err).NotTo(HaveOccurred())
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			reply := append([]byte{}, buf[:n]...)
			binary.BigEndian.PutUint16(reply[2:], 0x8183) // a response, recursion, NXDOMAIN
			_, _ = pc.WriteTo(reply, from)
		}
	}()
	DeferCleanup(func() { _ = pc.Close() })
	return pc.LocalAddr().String()
}

// setEgressProxyHosts makes the egress proxy resolve allowed.e2e.test and denied.e2e.test to the
// node, and waits for it to run so; the hosts are removed again at the end.
func setEgressProxyHosts(ctx context.Context, c *cluster, host string) {
	GinkgoHelper()
	set := func(aliases []corev1.HostAlias) {
		GinkgoHelper()
		dep := &appsv1.Deployment{}
		Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: egressProxyDeployment}, dep)).To(Succeed())
		patch := client.MergeFrom(dep.DeepCopy())
		dep.Spec.Template.Spec.HostAliases = aliases
		Expect(c.client.Patch(ctx, dep, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
			g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
			g.Expect(dep.Status.UpdatedReplicas).To(Equal(int32(1)))
			g.Expect(dep.Status.ReadyReplicas).To(Equal(int32(1)))
			g.Expect(dep.Status.Replicas).To(Equal(int32(1)), "the old pod is gone")
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}
	set([]corev1.HostAlias{{IP: host, Hostnames: []string{allowedHost, deniedHost}}})
	// Best effort: after a failure the suite's AfterAll may already have stopped the cluster.
	DeferCleanup(func() {
		dep := &appsv1.Deployment{}
		if c.client.Get(context.Background(), client.ObjectKey{Namespace: managerNamespace, Name: egressProxyDeployment}, dep) == nil {
			patch := client.MergeFrom(dep.DeepCopy())
			dep.Spec.Template.Spec.HostAliases = nil
			_ = c.client.Patch(context.Background(), dep, patch)
		}
	})
}
