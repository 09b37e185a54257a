package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// mountsUnder lists the mount points at or below dir, from /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	dir = strings.TrimSuffix(dir, "/")
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": field 5 is the mount point.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// unescapeMountinfo decodes the octal escapes (\040 for a space) of mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts everything mounted at or below dir, deepest first, repeating while
// mounts remain (the kubelet bind-mounts its root directory onto itself, so one path can carry
// several stacked mounts; facts file, point 5). A busy mount is detached lazily.
func unmountUnder(dir string) error {
	for range 20 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		// Deepest first; among equals, the later mount (stacked on top) first.
		slices.Reverse(mps)
		sort.SliceStable(mps, func(i, j int) bool {
			return strings.Count(mps[i], "/") > strings.Count(mps[j], "/")
		})
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
					return fmt.Errorf("unmount %s: %w", mp, err)
				}
			}
		}
	}
	mps, _ := mountsUnder(dir)
	return fmt.Errorf("mounts remain under %s after 20 rounds: %s", dir, strings.Join(mps, ", "))
}
