package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestChildrenDoNotInheritALock: a descriptor inherited without close-on-exec (as flock(1) hands
// its lock to the command) does not reach the programs this process starts, which may be the
// cluster's long-lived components.
func TestChildrenDoNotInheritALock(t *testing.T) {
	g := NewWithT(t)
	fd, err := syscall.Open(filepath.Join(t.TempDir(), "lock"), syscall.O_CREAT|syscall.O_RDWR, 0o600)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = syscall.Close(fd) }()
	g.Expect(syscall.Flock(fd, syscall.LOCK_EX)).To(Succeed())
	children := func() []string {
		out, err := exec.Command("ls", "/proc/self/fd").Output()
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Fields(string(out))
	}
	g.Expect(children()).To(ContainElement(strconv.Itoa(fd)), "inherited before")
	closeInheritedOnExec()
	g.Expect(children()).NotTo(ContainElement(strconv.Itoa(fd)), "not inherited after")
	_, err = os.Stat("/proc/self/fd/" + strconv.Itoa(fd))
	g.Expect(err).NotTo(HaveOccurred(), "this process keeps it open")
}

func TestPercentileIsNearestRank(t *testing.T) {
	g := NewWithT(t)
	var ds []time.Duration
	for i := 20; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	g.Expect(percentile(ds, 50)).To(Equal(10 * time.Second))
	g.Expect(percentile(ds, 99)).To(Equal(20*time.Second), "p99 of 20 samples is the largest")
	g.Expect(percentile(ds[:3], 50)).To(Equal(19 * time.Second))
	g.Expect(percentile(nil, 50)).To(BeZero())
	g.Expect(ds[0]).To(Equal(20*time.Second), "the input is not reordered")
}
