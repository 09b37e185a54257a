package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// debianSuite and debianRecipe key the cached root filesystem: change the recipe (packages,
// trimming) and bump debianRecipe so machines rebuild it.
const (
	debianSuite  = "bookworm"
	debianRecipe = "v1"
)

// debianTrim are removed after debootstrap, as debian:bookworm-slim's dpkg excludes do: docs,
// manuals, translations and package caches. Globs relative to the root.
var debianTrim = []string{
	"usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*",
	"usr/share/lintian/*", "usr/share/linda/*", "usr/share/groff/*",
	"var/cache/apt/*", "var/lib/apt/lists/*", "var/cache/debconf/*-old", "var/log/*",
	"dev/*", "proc/*", "sys/*", "run/*", "tmp/*",
}

func debianMirror() string {
	if m := os.Getenv("DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// ensureDebianBase returns the cached gzipped tarball of a minimal Debian root filesystem with
// git and ca-certificates, building it with debootstrap on first use (~1 min).
func ensureDebianBase(ctx context.Context, cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "images")
	out := filepath.Join(dir, fmt.Sprintf("debian-%s-minbase-%s-%s.tar.gz", debianSuite, strings.Join(debianPackages, "-"), debianRecipe))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("debootstrap is missing (run hack/install-deps.sh): %w", err)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("building the Debian base %s needs root (debootstrap)", out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	root, err := os.MkdirTemp(dir, "rootfs-")
	if err != nil {
		return "", err
	}
	defer func() {
		// debootstrap mounts /proc and /sys inside the target; a failed run can leave them.
		_ = unmountUnder(root)
		_ = os.RemoveAll(root)
	}()
	start := time.Now()
	logf("building the Debian base with debootstrap (%s, minbase, %s) from %s; cached in %s", debianSuite, strings.Join(debianPackages, ","), debianMirror(), out)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(dctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(debianPackages, ","), debianSuite, root, debianMirror())
	logPath := filepath.Join(dir, "debootstrap.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	err = cmd.Run()
	_ = logFile.Close()
	if err != nil {
		return "", fmt.Errorf("debootstrap failed: %w; its log %s ends with:\n%s", err, logPath, tail(logPath, 20))
	}
	if err := unmountUnder(root); err != nil {
		return "", err
	}
	for _, g := range debianTrim {
		matches, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return "", fmt.Errorf("trim %s: %w", m, err)
			}
		}
	}
	tmp := out + ".tmp"
	if err := tarDir(root, tmp); err != nil {
		return "", fmt.Errorf("pack the Debian base: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	st, _ := os.Stat(out)
	logf("Debian base built in %s (%d MB compressed)", since(start), st.Size()>>20)
	return out, nil
}

// tarDir packs a root filesystem as a gzipped tar with owners, modes, symlinks and hard links
// (git's many hard-linked helpers would otherwise be stored dozens of times). Device nodes and
// sockets are left out: the runtime provides /dev.
func tarDir(root, out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	gz, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
			return nil
		}
		var link string
		if mode&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if info.IsDir() {
			h.Name += "/"
		}
		h.Format = tar.FormatPAX
		h.Uname, h.Gname = "", ""
		st, ok := info.Sys().(*syscall.Stat_t)
		if ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
			if mode.IsRegular() && st.Nlink > 1 {
				key := inode{st.Dev, st.Ino}
				if first, seen := links[key]; seen {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
					return tw.WriteHeader(h)
				}
				links[key] = rel
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !mode.IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, in)
		_ = in.Close()
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return bw.Flush()
}
