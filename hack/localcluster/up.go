package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// upOptions are the flags of `up`.
type upOptions struct {
	kwokNodes     int
	nodeIP        string
	keepOnFailure bool
}

func cmdUp(ctx context.Context, g globals, args []string) error {
	var o upOptions
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.IntVar(&o.kwokNodes, "kwok-nodes", 0, "Also run KWOK with this many fake nodes (tainted, for scale tests).")
	fs.StringVar(&o.nodeIP, "node-ip", "", "The node's IP (default: the source address of the default route).")
	fs.BoolVar(&o.keepOnFailure, "keep-on-failure", false, "Leave the components running when `up` fails, for debugging.")
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	if o.kwokNodes < 0 {
		return usageErr{"--kwok-nodes must be >= 0"}
	}
	if err := requireRoot(); err != nil {
		return err
	}
	l := newLayout(g.runDir)
	start := time.Now()

	// Keep a healthy cluster with the same settings; replace anything else.
	if st, err := readState(l); err == nil {
		if st.Ready && st.KwokNodes == o.kwokNodes && (o.nodeIP == "" || o.nodeIP == st.NodeIP) {
			if rep := checkHealth(ctx, l, st); rep.ok() {
				logf("the cluster in %s is already running", g.runDir)
				printUp(l, st, time.Since(start))
				return nil
			}
			logf("the cluster in %s is not fully running; replacing it", g.runDir)
		} else {
			logf("the cluster in %s has other settings or did not finish starting; replacing it", g.runDir)
		}
		if err := teardown(ctx, l); err != nil {
			return fmt.Errorf("tear down the previous cluster: %w", err)
		}
	} else if leftovers := clusterProcesses(l); len(leftovers) > 0 {
		logf("processes of an earlier cluster run in %s; stopping them", g.runDir)
		if err := teardown(ctx, l); err != nil {
			return err
		}
	}

	if err := preflight(); err != nil {
		return err
	}
	binDir, err := kubeBinaries(ctx, g.repo)
	if err != nil {
		return err
	}
	netpolBin, err := netpolBinary(ctx, g.repo)
	if err != nil {
		return err
	}
	ip, mtu, err := nodeAddress(o.nodeIP)
	if err != nil {
		return err
	}
	pause, err := ensurePauseImage(ctx, g.cacheDir)
	if err != nil {
		return err
	}
	var kwokDir string
	if o.kwokNodes > 0 {
		if kwokDir, err = moduleDir(ctx, kwokModule); err != nil {
			return err
		}
	}
	st := state{NodeIP: ip.String(), KwokNodes: o.kwokNodes, BinDir: binDir, Sysctls: map[string]string{}}

	err = bringUp(ctx, l, &st, binDir, netpolBin, ip, mtu, pause, kwokDir)
	if err != nil {
		if o.keepOnFailure {
			return fmt.Errorf("%w\n(left running: --keep-on-failure; `localcluster down` stops it)", err)
		}
		logf("up failed; stopping what was started (logs stay in %s)", l.logs())
		if derr := teardown(context.WithoutCancel(ctx), l); derr != nil {
			return errors.Join(err, fmt.Errorf("and the teardown after it: %w", derr))
		}
		return err
	}
	printUp(l, st, time.Since(start))
	return nil
}

func printUp(l layout, st state, took time.Duration) {
	extra := ""
	if st.KwokNodes > 0 {
		extra = fmt.Sprintf(" + %d KWOK nodes", st.KwokNodes)
	}
	logf("cluster ready in %s: node %s (%s)%s; run directory %s", took.Round(100*time.Millisecond), nodeName, st.NodeIP, extra, l.root)
	fmt.Printf("export KUBECONFIG=%s\n", l.adminKubeconfig())
}

// bringUp writes the configuration and starts the components in dependency order, waiting for
// each with a bounded timeout.
func bringUp(ctx context.Context, l layout, st *state, binDir, netpolBin string, ip net.IP, mtu int, pause pauseImage, kwokDir string) error {
	// A fresh run directory: etcd data, certificates and containerd state are per cluster. Never
	// delete through a mount left by a crash (a container's bind mount could reach host files).
	if err := unmountUnder(l.root); err != nil {
		return err
	}
	if err := os.RemoveAll(l.root); err != nil {
		return fmt.Errorf("clean the run directory: %w", err)
	}
	for _, d := range []string{l.logs(), l.path("pids"), l.etcdData(), l.containerd(), l.cniConfDir(), l.cniIPAMDir(), l.kubelet(), l.podLogs(), l.path("components"), l.volumes()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// etcd refuses a data directory others can read.
	if err := os.Chmod(l.etcdData(), 0o700); err != nil {
		return err
	}
	if err := writeState(l, *st); err != nil {
		return err
	}
	if err := writePKI(l, ip); err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(apiserverPort))
	if err := writeKubeconfigs(l, server); err != nil {
		return err
	}
	if err := writeConfigs(l, ip, mtu, pause.name, kwokDir); err != nil {
		return err
	}
	if err := prepareHost(st); err != nil {
		return err
	}
	if err := writeState(l, *st); err != nil { // the sysctls to restore are known now
		return err
	}
	bin := func(n string) string { return filepath.Join(binDir, n) }
	apiClient, err := apiserverHTTPClient(l)
	if err != nil {
		return err
	}
	insecureClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // loopback health checks of self-signed serving certificates
	plainClient := &http.Client{}

	// etcd and containerd need nothing else: start both, then wait.
	etcd, err := l.start(component{name: cEtcd, bin: bin(cEtcd), args: etcdArgs(l)})
	if err != nil {
		return err
	}
	ctrd, err := l.start(component{name: cContainerd, bin: "/usr/bin/containerd", args: []string{"--config", l.containerd("config.toml")}})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, etcd, 30*time.Second, httpProbe(plainClient, fmt.Sprintf("http://127.0.0.1:%d/health", etcdClientPort), `"health":"true"`)); err != nil {
		return err
	}
	apiserver, err := l.start(component{name: cAPIServer, bin: bin(cAPIServer), args: apiserverArgs(l, ip)})
	if err != nil {
		return err
	}
	cri, err := dialCRI(l.containerdSock())
	if err != nil {
		return err
	}
	defer func() { _ = cri.Close() }()
	if err := waitFor(ctx, l, ctrd, 30*time.Second, cri.version); err != nil {
		return err
	}
	// The sandbox image must be in containerd before the kubelet asks for a pod: no registry.
	if err := importArchive(ctx, l.containerdSock(), pause.archive); err != nil {
		return componentErr(l, cContainerd, err.Error())
	}
	if err := waitFor(ctx, l, apiserver, 120*time.Second, httpProbe(apiClient, server+"/readyz", "ok")); err != nil {
		return err
	}
	cs, err := adminClientset(l)
	if err != nil {
		return err
	}
	// The StorageClass and the provisioner's RBAC, then the provisioner (it needs only the API).
	if err := installStorage(ctx, cs); err != nil {
		return componentErr(l, cAPIServer, err.Error())
	}
	if err := installNetpolRBAC(ctx, cs); err != nil {
		return componentErr(l, cAPIServer, err.Error())
	}
	provBin, err := installProvisionerBinary(l)
	if err != nil {
		return err
	}
	prov, err := l.start(component{name: cProvisioner, bin: provBin, args: provisionerArgs(l)})
	if err != nil {
		return err
	}
	cm, err := l.start(component{name: cControllerManager, bin: bin(cControllerManager), args: controllerManagerArgs(l)})
	if err != nil {
		return err
	}
	sched, err := l.start(component{name: cScheduler, bin: bin(cScheduler), args: []string{
		"--config=" + l.component(cScheduler) + "/config.yaml",
		"--authentication-kubeconfig=" + l.kubeconfig("scheduler"), "--authorization-kubeconfig=" + l.kubeconfig("scheduler"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedulerPort), "--cert-dir=" + l.component(cScheduler),
	}})
	if err != nil {
		return err
	}
	kubelet, err := l.start(component{name: cKubelet, bin: bin(cKubelet), args: []string{
		"--config=" + l.kubelet("config.json"), "--kubeconfig=" + l.kubeconfig(cKubelet),
		"--root-dir=" + l.kubelet("root"), "--node-ip=" + ip.String(), "--hostname-override=" + nodeName,
	}})
	if err != nil {
		return err
	}
	proxy, err := l.start(component{name: cProxy, bin: bin(cProxy), args: proxyArgs(l)})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, cm, 60*time.Second, httpProbe(insecureClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", cmPort), "ok")); err != nil {
		return err
	}
	if err := waitFor(ctx, l, sched, 60*time.Second, httpProbe(insecureClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort), "ok")); err != nil {
		return err
	}
	if err := waitFor(ctx, l, kubelet, 60*time.Second, httpProbe(plainClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthz), "ok")); err != nil {
		return err
	}
	if err := waitFor(ctx, l, proxy, 60*time.Second, httpProbe(plainClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthz), "")); err != nil {
		return err
	}
	if err := waitFor(ctx, l, prov, 60*time.Second, httpProbe(plainClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", provisionerPort), "ok")); err != nil {
		return err
	}
	// Ready and without the not-ready taint, which only the controller-manager removes (point 3).
	if err := waitFor(ctx, l, kubelet, 120*time.Second, func(ctx context.Context) error { return nodeReady(ctx, cs, nodeName) }); err != nil {
		return err
	}
	// NetworkPolicy: kube-router reads its node at start (it exits when there is none), so it
	// comes after the node; before any pod of the user's, so every pod is filtered from its start.
	netpol, err := l.start(component{name: cNetpol, bin: netpolBin, args: netpolArgs(l)})
	if err != nil {
		return err
	}
	// Pods need the default ServiceAccount, which the controller-manager creates.
	if err := waitFor(ctx, l, cm, 60*time.Second, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, l, netpol, 60*time.Second, netpolProbe(plainClient)); err != nil {
		return err
	}
	if st.KwokNodes > 0 {
		kwok, err := l.start(component{name: cKwok, bin: bin(cKwok), args: kwokArgs(l)})
		if err != nil {
			return err
		}
		if err := waitFor(ctx, l, kwok, 60*time.Second, httpProbe(plainClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort), "")); err != nil {
			return err
		}
		if err := createKwokNodes(ctx, cs, st.KwokNodes); err != nil {
			return componentErr(l, cKwok, err.Error())
		}
		if err := waitFor(ctx, l, kwok, 5*time.Minute, func(ctx context.Context) error { return kwokNodesReady(ctx, cs, st.KwokNodes) }); err != nil {
			return err
		}
	}
	st.Ready = true
	return writeState(l, *st)
}

func etcdArgs(l layout) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", etcdClientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	return []string{
		"--name=shepherd", "--data-dir=" + l.etcdData(),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=shepherd=" + peer,
		// A throwaway cluster on a shared disk: durability buys nothing, fsync costs latency.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func apiserverArgs(l layout, ip net.IP) []string {
	return []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClientPort),
		// Reachable from pods at the node IP; the `kubernetes` Service points there (point 8).
		"--bind-address=0.0.0.0", "--advertise-address=" + ip.String(), fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--tls-cert-file=" + l.pki("apiserver.crt"), "--tls-private-key-file=" + l.pki("apiserver.key"),
		"--client-ca-file=" + l.pki("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + l.pki("sa.pub"), "--service-account-signing-key-file=" + l.pki("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		// The default plugins (ServiceAccount among them: in-cluster pods get their token) plus
		// the kubelet's restriction to its own node.
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		// logs, exec and port-forward dial the kubelet by its InternalIP with our CA (point 4).
		"--kubelet-client-certificate=" + l.pki("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + l.pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + l.pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		// Request-header authentication (aggregated APIs such as metrics-server).
		"--requestheader-client-ca-file=" + l.pki("front-proxy-ca.crt"), "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + l.pki("front-proxy-client.crt"), "--proxy-client-key-file=" + l.pki("front-proxy-client.key"),
		"--cert-dir=" + l.component(cAPIServer),
		// /debug/pprof for cluster-admins (the local cluster's kubeconfig): how the fan-out
		// benchmark's API server time was split (kubectl get --raw '/debug/pprof/profile?seconds=30',
		// docs/performance.md).
		"--profiling=true",
	}
}

func controllerManagerArgs(l layout) []string {
	kc := l.kubeconfig("controller-manager")
	return []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cmPort), "--cert-dir=" + l.component(cControllerManager),
		"--leader-elect=false",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + l.pki("sa.key"), "--root-ca-file=" + l.pki("ca.crt"),
		"--cluster-signing-cert-file=" + l.pki("ca.crt"), "--cluster-signing-key-file=" + l.pki("ca.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		// The default is /usr/libexec/kubernetes/...; keep it in the run directory, like the kubelet's.
		"--flex-volume-plugin-dir=" + l.kubelet("volume-plugins"),
		fmt.Sprintf("--kube-api-qps=%d", clientQPS), fmt.Sprintf("--kube-api-burst=%d", clientBurst),
	}
}

func proxyArgs(l layout) []string {
	return []string{
		"--kubeconfig=" + l.kubeconfig(cProxy), "--hostname-override=" + nodeName,
		"--proxy-mode=iptables", "--cluster-cidr=" + clusterCIDR,
		// Leave the host's conntrack table size and timeouts alone (point 7).
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", proxyMetrics), fmt.Sprintf("--healthz-bind-address=127.0.0.1:%d", proxyHealthz),
	}
}

func kwokArgs(l layout) []string {
	return []string{
		"--kubeconfig=" + l.kubeconfig(cKwok), "--config=" + l.kwok("stages.yaml"),
		// Only the fake nodes: the real node belongs to the kubelet.
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
		fmt.Sprintf("--server-address=127.0.0.1:%d", kwokPort),
	}
}

// writeConfigs writes the files the components read.
func writeConfigs(l layout, ip net.IP, mtu int, pauseName, kwokDir string) error {
	kubelet, err := kubeletConfig(l, ip)
	if err != nil {
		return err
	}
	cni, err := cniConfig(l, mtu)
	if err != nil {
		return err
	}
	files := map[string]string{
		l.containerd("config.toml"):                           containerdConfig(l, pauseName),
		filepath.Join(l.cniConfDir(), "10-shepherd.conflist"): cni,
		l.kubelet("config.json"):                              kubelet,
		l.component(cScheduler) + "/config.yaml":              schedulerConfig(l),
	}
	if kwokDir != "" {
		stages, err := kwokConfig(kwokDir)
		if err != nil {
			return err
		}
		files[l.kwok("stages.yaml")] = stages
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// hostSysctls are set for the cluster and restored by `down`: forwarding and bridged traffic
// through iptables for pods, Services and NetworkPolicies. The kubelet itself sets the last three
// (it has no option to leave them alone), so their previous values are recorded too.
var hostSysctls = []struct{ key, value string }{
	{"net/ipv4/ip_forward", "1"},
	// Pod-to-pod traffic on cni0 is bridged: only these two make it traverse the FORWARD chain,
	// where kube-router's NetworkPolicy rules are (bridge netfilter is built into our kernels).
	{"net/bridge/bridge-nf-call-iptables", "1"},
	{"net/bridge/bridge-nf-call-ip6tables", "1"},
	{"vm/overcommit_memory", ""},
	{"kernel/panic", ""},
	{"kernel/panic_on_oops", ""},
	{"net/ipv4/conf/all/route_localnet", ""}, // kube-proxy sets it for localhost NodePorts
}

func prepareHost(st *state) error {
	for _, s := range hostSysctls {
		p := "/proc/sys/" + s.key
		raw, err := os.ReadFile(p)
		if err != nil {
			if s.value == "" {
				continue
			}
			return fmt.Errorf("read sysctl %s: %w", s.key, err)
		}
		st.Sysctls[s.key] = strings.TrimSpace(string(raw))
		if s.value != "" && st.Sysctls[s.key] != s.value {
			if err := os.WriteFile(p, []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("set sysctl %s=%s: %w", s.key, s.value, err)
			}
		}
	}
	return nil
}

// preflight checks the host tools and that no other process holds the cluster's ports.
func preflight() error {
	var missing []string
	for _, t := range []string{cContainerd, "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip6tables", "ipset", "conntrack", "gcc"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat("/usr/lib/cni/" + p); err != nil {
			missing = append(missing, "/usr/lib/cni/"+p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing on this machine: %s (run hack/install-deps.sh)", strings.Join(missing, ", "))
	}
	var busy []string
	for _, p := range []int{apiserverPort, etcdClientPort, etcdPeerPort, kubeletPort, kubeletHealthz, proxyMetrics, proxyHealthz, cmPort, schedulerPort, kwokPort, provisionerPort, netpolHealthz} {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			busy = append(busy, strconv.Itoa(p))
			continue
		}
		_ = ln.Close()
	}
	if len(busy) > 0 {
		return fmt.Errorf("ports %s are in use by another process (`ss -ltnp` shows which); is another cluster running?", strings.Join(busy, ", "))
	}
	return nil
}

// kubeBinaries runs hack/kube-binaries.sh (builds once, ~5 min for the cluster components on
// 2 cores, then cached) and returns the directory of the binaries.
func kubeBinaries(ctx context.Context, repo string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "kube-binaries.sh"), "cluster")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/kube-binaries.sh cluster: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// nodeAddress picks the node IP (the source address of the default route unless given) and the
// MTU of its interface.
func nodeAddress(want string) (net.IP, int, error) {
	var ip net.IP
	if want != "" {
		if ip = net.ParseIP(want).To4(); ip == nil {
			return nil, 0, usageErr{fmt.Sprintf("--node-ip %q is not an IPv4 address", want)}
		}
	} else {
		// No packet is sent: connecting a UDP socket only selects the route and source address.
		c, err := net.Dial("udp4", "192.0.2.255:9")
		if err != nil {
			return nil, 0, fmt.Errorf("find the node IP (no default route? pass --node-ip): %w", err)
		}
		ip = c.LocalAddr().(*net.UDPAddr).IP.To4()
		_ = c.Close()
		if ip == nil || ip.IsLoopback() {
			return nil, 0, errors.New("the default route's address is loopback: pass --node-ip with an address pods can reach")
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, 0, err
	}
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return ip, ifc.MTU, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("no interface has the node IP %s", ip)
}

// waitFor polls probe until it succeeds, the component exits or the timeout passes; the error
// names the component and shows the end of its log.
func waitFor(ctx context.Context, l layout, s *started, timeout time.Duration, probe func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return componentErr(l, s.name, fmt.Sprintf("exited (%v) before it was ready", s.err))
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", s.name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return componentErr(l, s.name, fmt.Sprintf("not ready after %s: %v", timeout, err))
		}
	}
}

func componentErr(l layout, name, what string) error {
	lines := strings.ReplaceAll(tail(l.logFile(name), 25), "\n", "\n    ")
	return fmt.Errorf("%s %s\n  log: %s\n  last lines:\n    %s", name, what, l.logFile(name), lines)
}

// httpProbe succeeds on a 200 whose body contains want.
func httpProbe(c *http.Client, url, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		if want != "" && !strings.Contains(string(body), want) {
			return fmt.Errorf("GET %s: %q lacks %q", url, body, want)
		}
		return nil
	}
}

// apiserverHTTPClient verifies the apiserver with the cluster CA and authenticates as admin.
func apiserverHTTPClient(l layout) (*http.Client, error) {
	ca, err := os.ReadFile(l.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(l.pki("admin.crt"), l.pki("admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}, nil
}

func adminClientset(l layout) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.adminKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	return kubernetes.NewForConfig(cfg)
}

func nodeReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s is not registered yet", name)
	}
	if err != nil {
		return err
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return fmt.Errorf("node %s still has the %s taint", name, t.Key)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s is not Ready: %s: %s", name, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}
