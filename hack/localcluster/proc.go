package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// componentPath is the PATH every component runs with: containerd finds its shim and runc, the
// kubelet and kube-proxy find iptables, mount and conntrack.
const componentPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// component is one long-running process of the cluster.
type component struct {
	name string
	bin  string
	args []string
}

// started is a component this `up` started; exited closes when it dies.
type started struct {
	component
	pid    int
	exited chan struct{}
	err    error
}

// start runs the component detached in its own session (Setsid), so it outlives `up`, with
// stdout and stderr in its log file and its pid in its pid file.
func (l layout) start(c component) (*started, error) {
	for _, d := range []string{l.logs(), l.path("pids")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(l.logFile(c.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", c.name, err)
	}
	defer func() { _ = logf.Close() }() // the child holds its own copy
	fmt.Fprintf(logf, "=== localcluster: %s %s %s\n", time.Now().Format(time.RFC3339), c.bin, strings.Join(c.args, " "))
	// A long-running daemon: no timeout on purpose; `down` stops it.
	cmd := exec.Command(c.bin, c.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{componentPath, "HOME=" + l.component(c.name)}
	cmd.Dir = l.component(c.name)
	if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", c.name, c.bin, err)
	}
	s := &started{component: c, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	if err := os.WriteFile(l.pidFile(c.name), []byte(strconv.Itoa(s.pid)+"\n"), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// pidOf returns the pid recorded for a component when that process still runs the component's
// binary (a recycled pid running something else does not count).
func (l layout) pidOf(name, bin string) (int, bool) {
	raw, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	return pid, runs(pid, bin)
}

// runs tells whether pid is alive (not a zombie) and executes bin.
func runs(pid int, bin string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)) // fails for zombies
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	return bin == "" || exe == bin || filepath.Base(exe) == filepath.Base(bin)
}

// alive tells whether pid exists and is not a zombie.
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 || i+2 >= len(raw) {
		return false
	}
	return raw[i+2] != 'Z' && raw[i+2] != 'X'
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the process to be gone.
func stop(pid int, grace time.Duration) error {
	if !alive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGTERM %d: %w", pid, err)
	}
	if waitGone(pid, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL %d: %w", pid, err)
	}
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d survived SIGKILL for 10s", pid)
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procInfo is a running process as /proc shows it.
type procInfo struct {
	pid     int
	exe     string
	cmdline []string
}

// processes lists live processes (not zombies) that match.
func processes(match func(procInfo) bool) []procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !alive(pid) {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(raw) == 0 {
			continue // kernel thread or gone
		}
		p := procInfo{pid: pid, cmdline: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")}
		p.exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if match(p) {
			out = append(out, p)
		}
	}
	return out
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
