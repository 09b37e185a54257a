package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NetworkPolicy on the local cluster is enforced by kube-router's network-policy controller alone
// (iptables + ipset; no routing, no service proxy: the bridge CNI and kube-proxy keep those jobs).
// kube-network-policies, SIG Network's nftables implementation, was tried first: it cannot load
// its rules on our kernels, which lack the nftables `queue` expression (docs/local-cluster.md,
// "NetworkPolicy"). hack/kube-router.sh builds the binary from the Go module proxy.
const (
	// netpolUser is kube-router's client certificate identity, bound to the ClusterRole below.
	netpolUser = "system:shepherd-local-kube-router"
	netpolRole = "shepherd-local-kube-router"
)

// netpolChainPrefixes name kube-router's filter-table chains: the top-level KUBE-ROUTER-INPUT,
// -FORWARD and -OUTPUT, the per-policy KUBE-NWPLCY-* (and KUBE-NWPLCY-DEFAULT) and the per-pod
// KUBE-POD-FW-*. kube-proxy's chains (KUBE-SERVICES, KUBE-FW-*, ...) share none of them.
var netpolChainPrefixes = []string{"KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"}

// netpolIPSet matches kube-router's ipsets: the pods and peers of each policy (KUBE-SRC-*,
// KUBE-DST-*, "inet6:"-prefixed for IPv6) and the temporary sets of its atomic swaps
// (TMP-<16 base32 characters>), which a crash mid-swap leaves behind.
var netpolIPSet = regexp.MustCompile(`^(inet6:)?(KUBE-SRC-|KUBE-DST-)|^TMP-[A-Z2-7]{16}$`)

// netpolRBAC is what the controller reads: kube-router starts informers for pods, namespaces,
// nodes (its own, for the node IP), Services, Endpoints, EndpointSlices and NetworkPolicies even
// when only the firewall runs, and waits for all of them to sync.
func netpolRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: netpolRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes", "services", "endpoints"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: netpolRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: netpolRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: netpolUser}},
	}
	return role, binding
}

// installNetpolRBAC creates the controller's ClusterRole and its binding (kept when present).
func installNetpolRBAC(ctx context.Context, cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	role, binding := netpolRBAC()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

// netpolArgs runs only the network-policy controller, for the real node, with its own identity.
func netpolArgs(l layout) []string {
	return []string{
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
		"--kubeconfig=" + l.kubeconfig(cNetpol), "--hostname-override=" + nodeName,
		// It exempts traffic to Service IPs on the node's INPUT chain; it must know the range.
		"--service-cluster-ip-range=" + serviceCIDR,
		"--enable-ipv4=true", "--enable-ipv6=false",
		// Policies are applied on their events; the periodic full resync is a safety net.
		"--iptables-sync-period=1m",
		// kube-router binds its health port on every address (it has no option for loopback).
		fmt.Sprintf("--health-port=%d", netpolHealthz), "--metrics-port=0",
	}
}

// netpolBinary runs hack/kube-router.sh (builds once, ~4 min on 2 cores, then cached) and returns
// the binary's path.
func netpolBinary(ctx context.Context, repo string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "kube-router.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/kube-router.sh: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), cNetpol), nil
}

// netpolProbe succeeds when kube-router answers its /healthz (200 once its informers synced) and
// its rules are in place. Reading iptables needs root: `status` run by another user sees the
// health endpoint alone.
func netpolProbe(c *http.Client) func(context.Context) error {
	healthz := httpProbe(c, fmt.Sprintf("http://127.0.0.1:%d/healthz", netpolHealthz), "OK")
	return func(ctx context.Context) error {
		if err := healthz(ctx); err != nil {
			return err
		}
		if os.Geteuid() != 0 {
			return nil
		}
		return netpolRulesLoaded(ctx)
	}
}

// netpolRulesLoaded succeeds once kube-router's top-level chain is in the filter table and
// FORWARD jumps to it: its rules load (it exits when they cannot).
func netpolRulesLoaded(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "iptables", "-w", "5", "-t", "filter", "-S", "FORWARD").Output()
	if err != nil {
		return fmt.Errorf("iptables -S FORWARD: %w", err)
	}
	if len(jumpRuleNumbers(string(out))) == 0 {
		return errors.New("no jump from FORWARD to KUBE-ROUTER-FORWARD yet")
	}
	return nil
}

// isNetpolChain tells whether a filter-table chain is kube-router's.
func isNetpolChain(name string) bool {
	return slices.ContainsFunc(netpolChainPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// netpolChains lists kube-router's chains in `iptables -S` output ("-N <chain>" lines).
func netpolChains(save string) []string {
	var chains []string
	for _, line := range strings.Split(save, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "-N" && isNetpolChain(f[1]) {
			chains = append(chains, f[1])
		}
	}
	return chains
}

// jumpRuleNumbers returns, highest first, the numbers of the rules in `iptables -S <chain>`
// output that jump to one of kube-router's chains. Rules are numbered from 1 in the order of the
// "-A" lines; the "-P" policy line is not a rule. Deleting from the highest keeps the others'
// numbers valid.
func jumpRuleNumbers(rules string) []int {
	var nums []int
	n := 0
	for _, line := range strings.Split(rules, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		n++
		for i := 2; i+1 < len(f); i++ {
			if (f[i] == "-j" || f[i] == "-g") && isNetpolChain(f[i+1]) {
				nums = append(nums, n)
				break
			}
		}
	}
	slices.Reverse(nums)
	return nums
}

// removeNetpolRules deletes what kube-router leaves behind when it stops (on purpose: pods stay
// filtered while it restarts): the jumps from INPUT, FORWARD and OUTPUT to its chains, its chains,
// then its ipsets (only once no rule refers to them), for IPv4 and IPv6. It runs after every
// process of the cluster stopped, so nothing re-creates them; absent rules and sets are fine.
func removeNetpolRules(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	run := func(name string, args ...string) ([]byte, error) {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return out, nil
	}
	removed := 0
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		all, err := run(tool, "-w", "5", "-t", "filter", "-S")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		chains := netpolChains(string(all))
		for _, builtin := range []string{"INPUT", "FORWARD", "OUTPUT"} {
			rules, err := run(tool, "-w", "5", "-t", "filter", "-S", builtin)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, n := range jumpRuleNumbers(string(rules)) {
				if _, err := run(tool, "-w", "5", "-t", "filter", "-D", builtin, strconv.Itoa(n)); err != nil {
					errs = append(errs, err)
				}
			}
		}
		// Flush all first: the chains jump to one another.
		for _, c := range chains {
			if _, err := run(tool, "-w", "5", "-t", "filter", "-F", c); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range chains {
			if _, err := run(tool, "-w", "5", "-t", "filter", "-X", c); err != nil {
				errs = append(errs, err)
			}
		}
		removed += len(chains)
	}
	sets := 0
	if _, err := exec.LookPath("ipset"); err == nil {
		names, err := run("ipset", "list", "-n")
		if err != nil {
			errs = append(errs, err)
		}
		for _, name := range strings.Fields(string(names)) {
			if !netpolIPSet.MatchString(name) {
				continue
			}
			if _, err := run("ipset", "destroy", name); err != nil {
				errs = append(errs, err)
				continue
			}
			sets++
		}
	}
	if removed > 0 || sets > 0 {
		logf("removed kube-router's %d iptables chains and %d ipsets", removed, sets)
	}
	return errors.Join(errs...)
}
