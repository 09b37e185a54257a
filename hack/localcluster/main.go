// Command localcluster brings up a real single-node Kubernetes cluster on this machine (etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager, containerd, kubelet, kube-proxy,
// kube-router's network-policy controller and optionally KWOK with fake nodes), builds
// Shepherd's images without a Docker engine and loads them into the cluster's containerd.
// docs/local-cluster.md explains every setting.
//
//	localcluster up [--kwok-nodes N] [--node-ip IP]   start (or keep) the cluster; prints KUBECONFIG
//	localcluster down                                 stop everything, unmount, delete the run dir
//	localcluster status                               each component and the node; exit 1 unless all run
//	localcluster env                                  prints `export KUBECONFIG=...`
//	localcluster images [--load] [--only a,b|all]     build the image archives; --load imports them
//	localcluster release --kubectl K [--version V] [--registry R]   images as OCI archives, manifests pinned
//	localcluster push [--registry R] [--insecure]     push a release's images
//	localcluster provisioner --kubeconfig F --volumes-dir D   the volume provisioner (`up` starts it)
//
// Every component runs detached (its own session) so it outlives this command; its log and pid
// file live in the run directory, and `down` finds them there.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const usage = `usage: localcluster [global flags] <command> [flags]

commands:
  up       start the cluster (kept when already running with the same settings)
  down     stop every component, remove the pods' sandboxes, unmount, delete the run directory
  status   show each component; exit status 1 unless all are running and healthy
  env      print "export KUBECONFIG=..." for the running cluster
  images   build the manager, runner, test-agent, agent (claude-code; codex, opencode with --only)
           and pause images; --load imports them
  release  build every image of a release as an OCI archive under dist/images and render
           dist/install.yaml and dist/install-namespaced.yaml with the images pinned
  push     send a release's images to a registry (--registry, --insecure for plain HTTP)
  provisioner  the volume provisioner of StorageClass shepherd-local (up starts it)

global flags:
`

// globals are the flags every command shares.
type globals struct {
	runDir   string
	cacheDir string
	repo     string
}

func main() {
	closeInheritedFiles()
	os.Exit(mainExit())
}

// closeInheritedFiles marks every file descriptor above stderr that this process inherited as
// close-on-exec. The cluster's daemons outlive this command; without this they would keep
// whatever the caller left open: a `flock` lock (held for as long as the cluster runs), or the
// write end of a CI pipe (whose reader then never sees EOF).
func closeInheritedFiles() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func mainExit() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "localcluster:", err)
	var ue usageErr
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

type usageErr struct{ msg string }

func (e usageErr) Error() string { return e.msg }

// errNotHealthy makes `status` exit 1 without printing an error twice.
var errNotHealthy = errors.New("the cluster is not fully running")

func run(ctx context.Context, args []string) error {
	var g globals
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	fs.StringVar(&g.runDir, "run-dir", "", "Run directory (default: $SHEPHERD_CLUSTER_DIR, else <cache>/cluster).")
	fs.StringVar(&g.cacheDir, "cache-dir", "", "Cache for binaries, the Debian root filesystem and the pause image (default: $SHEPHERD_CACHE, else ~/.cache/shepherd).")
	fs.StringVar(&g.repo, "repo", "", "Shepherd's source tree (default: found upwards from the working directory).")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageErr{"missing command"}
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "provisioner" {
		// A component of a running cluster: everything it needs comes in its flags, and it runs
		// outside the source tree.
		return cmdProvisioner(ctx, rest)
	}
	if err := g.defaults(); err != nil {
		return err
	}
	if cmd == "up" || cmd == "down" || cmd == "images" || cmd == "release" {
		// One command at a time changes a cluster: a second `up` (make run-local while the e2e
		// suite starts) waits for the first.
		unlock, err := lockRunDir(g.runDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	switch cmd {
	case "up":
		return cmdUp(ctx, g, rest)
	case "down":
		return cmdDown(ctx, g, rest)
	case "status":
		return cmdStatus(ctx, g, rest)
	case "env":
		return cmdEnv(g, rest)
	case "images":
		return cmdImages(ctx, g, rest)
	case "release":
		return cmdRelease(ctx, g, rest)
	case "push":
		return cmdPush(ctx, g, rest)
	default:
		fs.Usage()
		return usageErr{fmt.Sprintf("unknown command %q", cmd)}
	}
}

func (g *globals) defaults() error {
	if g.cacheDir == "" {
		g.cacheDir = os.Getenv("SHEPHERD_CACHE")
	}
	if g.cacheDir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return fmt.Errorf("find the cache directory: %w", err)
			}
			base = filepath.Join(home, ".cache")
		}
		g.cacheDir = filepath.Join(base, "shepherd")
	}
	if g.runDir == "" {
		g.runDir = os.Getenv("SHEPHERD_CLUSTER_DIR")
	}
	if g.runDir == "" {
		// One cluster per machine: its ports, the cni0 bridge and the kubepods cgroups are
		// machine-wide, so the run directory is too (not per checkout).
		g.runDir = filepath.Join(g.cacheDir, "cluster")
	}
	var err error
	if g.runDir, err = filepath.Abs(g.runDir); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if g.cacheDir, err = filepath.Abs(g.cacheDir); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	if g.repo == "" {
		g.repo, err = findRepo()
		if err != nil {
			return err
		}
	}
	return nil
}

// findRepo walks up from the working directory to Shepherd's go.mod.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(raw), "module github.com/shepherd-dev/shepherd\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside Shepherd's source tree, or pass --repo")
		}
		dir = parent
	}
}

func cmdEnv(g globals, args []string) error {
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	l := newLayout(g.runDir)
	if _, err := os.Stat(l.adminKubeconfig()); err != nil {
		return fmt.Errorf("no cluster in %s (run `make cluster-up`): %w", g.runDir, err)
	}
	fmt.Printf("export KUBECONFIG=%s\n", l.adminKubeconfig())
	return nil
}

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the local cluster needs root (containerd, kubelet, iptables, mounts); run as root")
	}
	return nil
}

// lockRunDir takes an exclusive lock on <run dir>.lock, waiting for another holder.
func lockRunDir(runDir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(runDir), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(runDir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the run directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		logf("another localcluster command holds %s; waiting", runDir+".lock")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock the run directory: %w", err)
		}
	}
	return func() { _ = f.Close() }, nil
}
