// Package memlimit gives the Go runtime a soft memory limit below the container's hard one.
//
// A Go program does not read its cgroup's memory limit (Go 1.26 sizes GOMAXPROCS from the CPU
// limit, not the heap from the memory limit): without GOMEMLIMIT the garbage collector lets the
// heap grow to twice what is live before it collects, whatever the container allows, and the
// kernel kills the process at the limit. The manager's memory grows with the sessions it caches
// (docs/performance.md: about 450 MiB at 10,000 sessions against the chart's 512Mi limit), so a
// burst that doubles the heap for a moment would be an OOM kill, a restart and every session's
// state re-read. With a soft limit the collector works harder near it instead.
package memlimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// DefaultRatio is the share of the container's limit given to the Go heap and runtime: the rest
// is for what the runtime does not count (thread stacks outside the heap, the binary, cgroup
// accounting of the page cache).
const DefaultRatio = 0.9

// Source says where a limit came from.
type Source string

// Sources.
const (
	// FromEnv: GOMEMLIMIT was set; the runtime already applied it and nothing is changed.
	FromEnv Source = "GOMEMLIMIT"
	// FromCgroup: the container's cgroup limit, times the ratio.
	FromCgroup Source = "cgroup"
	// None: no limit anywhere (a process outside a limited cgroup): nothing is changed.
	None Source = ""
)

// Root is where the cgroup file system is mounted.
const Root = "/sys/fs/cgroup"

// Limit reads the memory limit of the cgroup the process runs in, in bytes: cgroup v2's
// memory.max, or v1's memory.limit_in_bytes. ok is false when there is none ("max", an
// unlimited v1 value, no cgroup file system). procCgroup is the content of /proc/self/cgroup;
// root is where the cgroup file system is mounted. A container usually sees its own cgroup at
// the mount's root (a cgroup namespace, or v1's bind mount) while /proc/self/cgroup may name the
// host's path: the path named is tried first, then the mount's root.
func Limit(root string, procCgroup []byte) (limit int64, ok bool, err error) {
	v2, v1 := paths(procCgroup)
	var files []limitFile
	if v2 != "" {
		files = append(files, limitFile{filepath.Join(root, filepath.Clean("/"+v2), "memory.max"), false},
			limitFile{filepath.Join(root, "memory.max"), false})
	}
	if v1 != "" {
		files = append(files, limitFile{filepath.Join(root, "memory", filepath.Clean("/"+v1), "memory.limit_in_bytes"), true},
			limitFile{filepath.Join(root, "memory", "memory.limit_in_bytes"), true})
	}
	for _, f := range files {
		b, err := os.ReadFile(f.path)
		switch {
		case err == nil:
			return parse(b, f.v1)
		case !errors.Is(err, os.ErrNotExist):
			return 0, false, err
		}
		// The root of a v2 hierarchy has no memory.max (and a hybrid host's v2 has no memory
		// controller): try the next.
	}
	return 0, false, nil
}

type limitFile struct {
	path string
	v1   bool
}

// paths finds the process's cgroup v2 path ("0::/path") and its v1 memory controller's path
// ("N:memory[,…]:/path") in /proc/self/cgroup. Pure.
func paths(procCgroup []byte) (v2, v1 string) {
	for _, line := range strings.Split(string(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	return v2, v1
}

// unlimitedV1: cgroup v1 says "no limit" with the largest page-aligned int64 (its exact value
// depends on the page size); nothing real comes near 4 EiB.
const unlimitedV1 = 1 << 62

// parse reads a limit file's content. Pure.
func parse(b []byte, v1 bool) (int64, bool, error) {
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("memory limit %q: not a positive number of bytes", s)
	}
	if v1 && n >= unlimitedV1 {
		return 0, false, nil
	}
	return n, true, nil
}

// Apply sets the runtime's soft memory limit to ratio × the cgroup's limit, unless GOMEMLIMIT
// is set (the runtime applied it at start: an operator's explicit choice wins) or there is no
// limit. It returns the limit in effect and where it came from.
func Apply(root string, ratio float64) (int64, Source, error) {
	if v, set := os.LookupEnv("GOMEMLIMIT"); set && v != "" {
		return debug.SetMemoryLimit(-1), FromEnv, nil
	}
	if ratio <= 0 || ratio > 1 {
		return 0, None, fmt.Errorf("memory limit ratio %v: it must be in (0, 1]", ratio)
	}
	procCgroup, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, None, nil // not Linux, or no /proc
		}
		return 0, None, err
	}
	limit, ok, err := Limit(root, procCgroup)
	if err != nil || !ok {
		return 0, None, err
	}
	soft := int64(float64(limit) * ratio)
	debug.SetMemoryLimit(soft)
	return soft, FromCgroup, nil
}

// Cgroup is a memory cgroup made by NewCgroup, for a process to run under a limit as in a
// container (the tests and the fan-out benchmark).
type Cgroup struct {
	// Dir is its directory; a process joins it by writing its pid to Dir/cgroup.procs.
	Dir string
}

// Procs is the file a process joins the cgroup by.
func (c Cgroup) Procs() string { return filepath.Join(c.Dir, "cgroup.procs") }

// Remove removes the cgroup (its processes must have exited).
func (c Cgroup) Remove() error { return os.Remove(c.Dir) }

// ErrNoCgroup says this process cannot make a memory cgroup here: not root, a read-only cgroup
// file system, or no memory controller.
var ErrNoCgroup = errors.New("cannot make a memory cgroup here")

// NewCgroup makes a memory cgroup named name under this process's own, with limit bytes: v2
// where the host's v2 hierarchy (mounted at root) has the memory controller, else v1.
func NewCgroup(root, name string, limit int64) (Cgroup, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return Cgroup{}, fmt.Errorf("%w: %w", ErrNoCgroup, err)
	}
	v2, v1 := paths(own)
	var parent, limitFile string
	if c, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && v2 != "" && strings.Contains(string(c), "memory") {
		parent, limitFile = filepath.Join(root, filepath.Clean("/"+v2)), "memory.max"
	} else if v1 != "" {
		parent, limitFile = filepath.Join(root, "memory", filepath.Clean("/"+v1)), "memory.limit_in_bytes"
	} else {
		return Cgroup{}, fmt.Errorf("%w: no memory controller (/proc/self/cgroup: %q)", ErrNoCgroup, own)
	}
	dir := filepath.Join(parent, filepath.Base(filepath.Clean("/"+name)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return Cgroup{}, fmt.Errorf("%w: %w", ErrNoCgroup, err)
		}
		return Cgroup{}, err
	}
	c := Cgroup{Dir: dir}
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = c.Remove()
		return Cgroup{}, fmt.Errorf("set the cgroup's limit: %w", err)
	}
	return c, nil
}

// JoinArgs is the argument list that runs argv inside the cgroup: a shell moves itself in, then
// becomes argv (the same pid: the program starts under the limit, as in a container). No input
// is interpreted by the shell: the paths and argv are its positional arguments.
func (c Cgroup) JoinArgs(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", c.Procs()}, argv...)
}
