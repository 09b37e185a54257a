package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func cmdDown(ctx context.Context, g globals, args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	if err := requireRoot(); err != nil {
		return err
	}
	start := time.Now()
	l := newLayout(g.runDir)
	if err := teardown(ctx, l); err != nil {
		return err
	}
	logf("cluster down in %s; nothing of it runs or is mounted; its logs stay in %s", since(start), l.logs())
	return nil
}

// teardown stops everything `up` started and removes the run directory except its logs:
//  1. the volume provisioner, KWOK, kube-proxy, kube-router and the kubelet (so nothing
//     restarts pods);
//  2. every pod sandbox through CRI, which runs the CNI DEL (veths, IPs, netns mounts, chains);
//  3. containerd, then any shim or container process left (by socket path and kubepods cgroup);
//  4. the control plane;
//  5. the mounts under the run directory, deepest first; kube-proxy's and kube-router's iptables
//     rules and kube-router's ipsets; the cni0 bridge; the kubepods cgroups; the sysctls `up`
//     changed; the run directory.
func teardown(ctx context.Context, l layout) error {
	var errs []error
	st, _ := readState(l)
	stopComponent := func(name string, grace time.Duration) {
		if pid, ok := l.pidOf(name, name); ok {
			start := time.Now()
			if err := stop(pid, grace); err != nil {
				errs = append(errs, fmt.Errorf("stop %s: %w", name, err))
			}
			logf("stopped %s in %s", name, since(start))
		}
	}
	// The provisioner first: no volume is made or deleted while the rest stops. Its volumes'
	// directories go with the run directory, after every mount under it is gone.
	stopComponent(cProvisioner, 5*time.Second)
	stopComponent(cKwok, 5*time.Second)
	stopComponent(cProxy, 5*time.Second)
	// kube-router keeps its rules when it stops; removeNetpolRules below deletes them.
	stopComponent(cNetpol, 5*time.Second)
	stopComponent(cKubelet, 10*time.Second)

	if _, ok := l.pidOf(cContainerd, cContainerd); ok {
		if c, err := dialCRI(l.containerdSock()); err == nil {
			if n, err := c.removeAllPods(ctx); err != nil {
				errs = append(errs, err)
			} else if n > 0 {
				logf("removed %d pod sandboxes", n)
			}
			_ = c.Close()
		}
	}
	stopComponent(cContainerd, 10*time.Second)
	// Shims that outlived containerd (none when the sandboxes were removed).
	for _, p := range clusterProcesses(l, "containerd-shim-runc-v2", "containerd-shim") {
		if err := stop(p.pid, 5*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killKubepods(); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{cScheduler, cControllerManager, cAPIServer, cEtcd} {
		stopComponent(name, 10*time.Second)
	}
	// Anything else still running from the run directory.
	for _, p := range clusterProcesses(l) {
		if err := stop(p.pid, 5*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(l.root); err != nil {
		errs = append(errs, err)
	}
	if st.BinDir != "" {
		cleanupIptables(ctx, filepath.Join(st.BinDir, cProxy), l)
	}
	if err := removeNetpolRules(ctx); err != nil {
		errs = append(errs, err)
	}
	removeKubeletChains(ctx)
	removeOrphanNetns(ctx)
	deleteBridge(ctx)
	if err := removeKubepodsCgroups(); err != nil {
		errs = append(errs, err)
	}
	removeContainerLogLinks(l)
	// The kubelet's device-plugin socket has a fixed path (not under --root-dir).
	_ = os.Remove(devicePluginSocket)
	// Directories containerd, CNI and the kubelet create at fixed paths; removed only when empty.
	for _, d := range []string{"/run/containerd/s", "/run/containerd", "/var/lib/cni/results", "/var/lib/cni", "/run/netns",
		"/var/log/containers", filepath.Dir(devicePluginSocket), "/var/lib/kubelet"} {
		_ = syscall.Rmdir(d)
	}
	for key, v := range st.Sysctls {
		if err := os.WriteFile("/proc/sys/"+key, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", key, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Keep the logs for troubleshooting; everything else goes.
	entries, err := os.ReadDir(l.root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(l.root, e.Name())); err != nil {
			return fmt.Errorf("remove the run directory: %w", err)
		}
	}
	return nil
}

// devicePluginSocket is where the kubelet always serves device-plugin registration.
const devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// clusterBinaries are the executables the cluster runs (by base name).
var clusterBinaries = []string{cEtcd, cAPIServer, cControllerManager, cScheduler, cKubelet, cProxy, cNetpol, cKwok, cProvisioner, cContainerd, "containerd-shim-runc-v2", "containerd-shim"}

// clusterProcesses are the live processes of this cluster: one of its binaries (or of only
// these, when given) with the run directory on its command line (containerd's shims carry the
// socket path).
func clusterProcesses(l layout, only ...string) []procInfo {
	names := clusterBinaries
	if len(only) > 0 {
		names = only
	}
	ancestors := map[int]bool{}
	for pid := os.Getppid(); pid > 1; {
		ancestors[pid] = true
		pid = parentOf(pid)
	}
	return processes(func(p procInfo) bool {
		if ancestors[p.pid] || !slices.Contains(names, filepath.Base(strings.TrimSuffix(p.exe, " (deleted)"))) {
			return false
		}
		for _, a := range p.cmdline {
			if strings.Contains(a, l.root+"/") {
				return true
			}
		}
		return false
	})
}

func parentOf(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// kubepodsDirs are the kubelet's pod cgroups (cgroupfs driver, cgroup v1: one tree per
// controller), deepest first.
func kubepodsDirs() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if d := "/sys/fs/cgroup/kubepods"; isDir(d) { // cgroup v2
		roots = append(roots, d)
	}
	var dirs []string
	for _, r := range roots {
		_ = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// killKubepods kills container processes still in the pod cgroups (a container whose shim was
// killed keeps running otherwise).
func killKubepods() error {
	var pids []int
	for _, d := range kubepodsDirs() {
		raw, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(raw)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	var errs []error
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		if !waitGone(pid, 10*time.Second) {
			errs = append(errs, fmt.Errorf("container process %d survived SIGKILL", pid))
		}
	}
	return errors.Join(errs...)
}

// removeKubepodsCgroups removes the now empty pod cgroups.
func removeKubepodsCgroups() error {
	var errs []error
	for _, d := range kubepodsDirs() {
		var err error
		// An emptied cgroup can stay busy for a moment while the kernel releases it.
		for range 50 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// cleanupIptables removes kube-proxy's chains and rules (kube-proxy --cleanup).
func cleanupIptables(ctx context.Context, kubeProxy string, l layout) {
	if _, err := os.Stat(kubeProxy); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubeProxy, "--cleanup")
	cmd.Env = []string{componentPath}
	out, err := cmd.CombinedOutput()
	_ = os.MkdirAll(l.logs(), 0o755)
	_ = os.WriteFile(l.logFile("kube-proxy-cleanup"), out, 0o644)
	if err != nil {
		logf("kube-proxy --cleanup: %v (see %s)", err, l.logFile("kube-proxy-cleanup"))
	}
}

// removeOrphanNetns deletes the pod network namespaces (/run/netns/cni-*, the names containerd
// gives them) that no process is in any more: those of sandboxes containerd no longer knew when
// it stopped, for example after a cluster whose containerd was killed. Deleting one removes its
// veth, and so the host end on cni0. A namespace a process is still in is left alone.
func removeOrphanNetns(ctx context.Context) {
	paths, _ := filepath.Glob("/run/netns/cni-*")
	if len(paths) == 0 {
		return
	}
	inUse := map[uint64]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", p.Name(), "ns", "net"), &st) == nil {
			inUse[st.Ino] = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || inUse[st.Ino] {
			continue
		}
		if out, err := exec.CommandContext(ctx, "ip", "netns", "delete", filepath.Base(p)).CombinedOutput(); err != nil {
			logf("ip netns delete %s: %v: %s", filepath.Base(p), err, out)
			continue
		}
		logf("removed the orphaned pod network namespace %s", filepath.Base(p))
	}
}

// deleteBridge removes the cni0 bridge once no pod is attached to it.
func deleteBridge(ctx context.Context) {
	if _, err := os.Stat("/sys/class/net/" + bridgeName); err != nil {
		return
	}
	// A deleted network namespace takes its veth with it asynchronously (the kernel cleans up
	// namespaces in a work queue): give the ports a few seconds to go.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ports, _ := os.ReadDir("/sys/class/net/" + bridgeName + "/brif")
		if len(ports) == 0 {
			break
		}
		if time.Now().After(deadline) {
			logf("%s still has %d ports; left in place", bridgeName, len(ports))
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "link", "delete", bridgeName).CombinedOutput(); err != nil {
		logf("ip link delete %s: %v: %s", bridgeName, err, out)
	}
}

// removeContainerLogLinks removes the kubelet's /var/log/containers symlinks into the run
// directory (that path is not configurable).
func removeContainerLogLinks(l layout) {
	entries, _ := os.ReadDir("/var/log/containers")
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, l.root+"/") {
			_ = os.Remove(p)
		}
	}
}

// kubeletChains are the iptables chains the kubelet creates (per table) and does not remove: a
// canary to notice flushes, a hint for kube-proxy's iptables mode detection, and KUBE-FIREWALL,
// which drops packets to 127.0.0.0/8 that do not come from loopback.
var kubeletChains = map[string][]string{
	"filter": {"KUBE-FIREWALL", "KUBE-KUBELET-CANARY"},
	"mangle": {"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"},
	"nat":    {"KUBE-KUBELET-CANARY"},
}

// removeKubeletChains deletes the kubelet's chains and the INPUT/OUTPUT jumps to KUBE-FIREWALL,
// for IPv4 and IPv6. Absent chains are fine.
func removeKubeletChains(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run := func(tool string, args ...string) {
		// Errors mean "no such rule or chain": nothing to remove.
		_ = exec.CommandContext(ctx, tool, append([]string{"-w", "5"}, args...)...).Run()
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		for _, parent := range []string{"INPUT", "OUTPUT"} {
			run(tool, "-t", "filter", "-D", parent, "-j", "KUBE-FIREWALL")
		}
		for table, chains := range kubeletChains {
			for _, c := range chains {
				run(tool, "-t", table, "-F", c)
				run(tool, "-t", table, "-X", c)
			}
		}
	}
}
