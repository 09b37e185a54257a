package memlimit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		v2, v1   string
	}{
		{"v2 only", "0::/kubepods.slice/pod1/cri-containerd-abc.scope\n", "/kubepods.slice/pod1/cri-containerd-abc.scope", ""},
		{"v2 in a cgroup namespace", "0::/\n", "/", ""},
		{"hybrid", "9:name=systemd:/\n4:memory:/process_api/eec\n1:cpu:/\n0::/\n", "/", "/process_api/eec"},
		{"v1 joined controllers", "5:cpuacct,cpu,memory:/docker/abc\n", "", "/docker/abc"},
		{"garbage", "nonsense\n::\n7\n", "", ""},
		{"empty", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v2, v1 := paths([]byte(tc.in))
			if v2 != tc.v2 || v1 != tc.v1 {
				t.Fatalf("paths(%q) = %q, %q; want %q, %q", tc.in, v2, v1, tc.v2, tc.v1)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		v1      bool
		want    int64
		ok, err bool
	}{
		{"536870912\n", false, 536870912, true, false},
		{"max\n", false, 0, false, false},
		{"536870912\n", true, 536870912, true, false},
		{"9223372036854771712\n", true, 0, false, false}, // v1's "no limit" on 4 KiB pages
		{"9223372036854710272\n", true, 0, false, false}, // and on 64 KiB pages
		{"0\n", false, 0, false, true},
		{"-1\n", true, 0, false, true},
		{"lots\n", false, 0, false, true},
	} {
		got, ok, err := parse([]byte(tc.in), tc.v1)
		if got != tc.want || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("parse(%q, v1=%v) = %d, %v, %v; want %d, %v, error %v", tc.in, tc.v1, got, ok, err, tc.want, tc.ok, tc.err)
		}
	}
}

// TestLimitReadsTheFiles lays out cgroup file systems as a host and a container see them.
func TestLimitReadsTheFiles(t *testing.T) {
	write := func(t *testing.T, root, rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		cgroup string
		want   int64
		ok     bool
	}{
		{"v2 leaf, host's view", map[string]string{"kubepods/pod1/c1/memory.max": "536870912\n"},
			"0::/kubepods/pod1/c1\n", 536870912, true},
		{"v2 in a cgroup namespace", map[string]string{"memory.max": "268435456\n"}, "0::/\n", 268435456, true},
		{"v2 host path not mounted: the mount's root", map[string]string{"memory.max": "268435456\n"},
			"0::/kubepods/pod1/c1\n", 268435456, true},
		{"v2 unlimited", map[string]string{"memory.max": "max\n"}, "0::/\n", 0, false},
		{"hybrid: v2 without memory, v1 leaf", map[string]string{"memory/process_api/x/memory.limit_in_bytes": "1073741824\n"},
			"4:memory:/process_api/x\n0::/\n", 1073741824, true},
		{"v1 bind-mounted root", map[string]string{"memory/memory.limit_in_bytes": "1073741824\n"},
			"4:memory:/docker/abc\n", 1073741824, true},
		{"v1 unlimited", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"},
			"4:memory:/\n", 0, false},
		{"no cgroup file system", nil, "0::/\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, content := range tc.files {
				write(t, root, rel, content)
			}
			got, ok, err := Limit(root, []byte(tc.cgroup))
			if err != nil || got != tc.want || ok != tc.ok {
				t.Fatalf("Limit = %d, %v, %v; want %d, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
	t.Run("a path that climbs out of the root stays in it", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "memory.max", "268435456\n")
		got, ok, err := Limit(root, []byte("0::/../../etc\n"))
		if err != nil || !ok || got != 268435456 {
			t.Fatalf("Limit = %d, %v, %v; want the root's 268435456", got, ok, err)
		}
	})
}

func TestApplyRefusesABadRatio(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	for _, r := range []float64{0, -0.5, 1.5} {
		if _, _, err := Apply(Root, r); err == nil {
			t.Errorf("Apply(ratio %v): no error", r)
		}
	}
}

// helperEnv makes the test binary run apply() in a child process and print what it did.
const helperEnv = "SHEPHERD_MEMLIMIT_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		limit, src, err := Apply(Root, DefaultRatio)
		fmt.Printf("%d %q %v %d\n", limit, src, err, debug.SetMemoryLimit(-1))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestApplyInARealCgroup puts a child process in a real memory cgroup of this machine with a
// 256 MiB limit (v2 where the host has the memory controller there, else v1) and reads what the
// Go runtime's limit became; then the same with GOMEMLIMIT set, which wins.
func TestApplyInARealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a cgroup needs root (the CI machine and the local cluster run as root)")
	}
	limit := 256 << 20
	cg, err := NewCgroup(Root, fmt.Sprintf("shepherd-memlimit-test-%d", os.Getpid()), int64(limit))
	if errors.Is(err, ErrNoCgroup) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Remove(); err != nil {
			t.Errorf("remove the test's cgroup: %v", err)
		}
	})
	run := func(env ...string) string {
		t.Helper()
		// The child moves itself into the cgroup, then becomes the test binary: the runtime
		// starts inside the limit, as in a container.
		args := cg.JoinArgs(os.Args[0], "-test.run=^$")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), append([]string{helperEnv + "=1"}, env...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("child: %v: %s", err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	soft := int64(float64(limit) * DefaultRatio)
	if got, want := run("GOMEMLIMIT="), fmt.Sprintf(`%d "cgroup" <nil> %d`, soft, soft); got != want {
		t.Errorf("in a 256 MiB cgroup: %s; want %s", got, want)
	}
	if got, want := run("GOMEMLIMIT=100MiB"), fmt.Sprintf(`%d "GOMEMLIMIT" <nil> %d`, 100<<20, 100<<20); got != want {
		t.Errorf("with GOMEMLIMIT=100MiB: %s; want %s", got, want)
	}
}
