// Package gitea builds a real Gitea from the Go module proxy, runs it headless for tests (one
// process, SQLite, loopback by default) with an admin, a reviewer and their tokens, and drives it
// the way the outside world does: repositories, commits, commit statuses, reviews, branch
// protection and webhooks. hack/gitea.sh is its command line; docs/gitea.md explains the settings.
//
// Nothing here is a fake: the adapter tests in internal/scm/gitea and internal/tracker/gitea talk
// to the Gitea this package starts.
package gitea

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// Version is the pinned Gitea release. v1.26.x still declares `module code.gitea.io/gitea`; later
// releases moved to gitea.dev, which the module proxy here cannot serve.
const Version = "v1.26.0"

// module is Gitea's module path at Version.
const module = "code.gitea.io/gitea"

// buildTags are the tags Gitea's own Makefile uses for a SQLite build.
const buildTags = "sqlite sqlite_unlock_notify"

// buildTimeout bounds a cold build (~3.5 min on 2 cores, more while other builds compete).
const buildTimeout = 30 * time.Minute

// assetDirs are the directories of Gitea's module that it reads at run time (options is required
// at start; templates and public serve the web UI, which is unstyled without the JS/CSS build).
var assetDirs = []string{"options", "templates", "public"}

// CacheDir is the shared cache (SHEPHERD_CACHE, else $XDG_CACHE_HOME/shepherd, else
// ~/.cache/shepherd), the same one hack/kube-binaries.sh uses.
func CacheDir() (string, error) {
	if d := os.Getenv("SHEPHERD_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "shepherd"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "shepherd"), nil
}

// Installed returns the directory of the cached build (binary "gitea" and its assets) and
// whether it is complete.
func Installed() (string, bool, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", false, err
	}
	dir := filepath.Join(cache, "bin", "gitea-"+Version)
	_, err = os.Stat(filepath.Join(dir, ".complete"))
	return dir, err == nil, nil
}

// Build returns the directory holding the gitea binary and its assets, building Gitea into the
// shared cache first when it is not there. Concurrent callers (several test packages, the
// command line) wait on one lock; the second finds the build done. Progress goes to logw.
func Build(ctx context.Context, logw io.Writer) (string, error) {
	if logw == nil {
		logw = io.Discard
	}
	dir, ok, err := Installed()
	if err != nil || ok {
		return dir, err
	}
	cache := filepath.Dir(filepath.Dir(dir))
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, ".gitea.lock"), logw)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, ok, _ := Installed(); ok {
		return dir, nil // built by whoever held the lock
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(logw, "gitea: building Gitea %s into %s (a cold build takes ~3.5 min on 2 cores)\n", Version, dir)
	if err := build(ctx, filepath.Join(cache, "src", "gitea-"+Version), dir, logw); err != nil {
		return "", err
	}
	fmt.Fprintf(logw, "gitea: built Gitea %s in %s\n", Version, time.Since(start).Round(time.Second))
	return dir, nil
}

// lockFile takes an exclusive flock, waiting for ctx.
func lockFile(ctx context.Context, path string, logw io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("build lock: %w", err)
		}
		if !said {
			fmt.Fprintln(logw, "gitea: another process is building Gitea; waiting for it")
			said = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("wait for the gitea build lock: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// build prepares a wrapper module that requires Gitea and copies its replace lines (Gitea's own
// go.mod carries replace directives, so `go install code.gitea.io/gitea@v…` is refused), builds
// the binary with CGO (mattn/go-sqlite3) and copies the run-time assets next to it.
func build(ctx context.Context, src, dst string, logw io.Writer) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("wrapper module: %w", err)
	}
	goBin := goCommand()
	env := buildEnv()
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		// A throwaway module to ask the proxy where Gitea's go.mod and sources land.
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module shepherd.local/giteabuild\n\ngo 1.26\n"), 0o644); err != nil {
			return fmt.Errorf("wrapper module: %w", err)
		}
	}
	info, err := download(ctx, goBin, env, src)
	if err != nil {
		return err
	}
	gomod, err := os.ReadFile(info.GoMod)
	if err != nil {
		return fmt.Errorf("read gitea's go.mod: %w", err)
	}
	goVersion, replaces := parseGoMod(string(gomod))
	var b strings.Builder
	fmt.Fprintf(&b, "module shepherd.local/giteabuild\n\ngo %s\n\nrequire %s %s\n\n", goVersion, module, Version)
	for _, r := range replaces {
		b.WriteString("replace " + r + "\n")
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("wrapper module: %w", err)
	}
	tools := "//go:build tools\n\npackage tools\n\nimport _ \"" + module + "\"\n"
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools), 0o644); err != nil {
		return fmt.Errorf("wrapper module: %w", err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("gitea cache: %w", err)
	}
	ldflags := fmt.Sprintf("-s -w -X main.Version=%s -X 'main.Tags=%s'", strings.TrimPrefix(Version, "v"), buildTags)
	tmp := filepath.Join(dst, "gitea.tmp")
	cmd := exec.CommandContext(ctx, goBin, "build", "-mod=mod", "-trimpath", "-tags", buildTags, "-ldflags", ldflags, "-o", tmp, module)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = src, env, logw, logw
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s@%s: %w", module, Version, err)
	}
	for _, d := range assetDirs {
		_ = os.RemoveAll(filepath.Join(dst, d))
		if err := copyTree(filepath.Join(info.Dir, d), filepath.Join(dst, d)); err != nil {
			return fmt.Errorf("copy gitea's %s: %w", d, err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(dst, "gitea")); err != nil {
		return fmt.Errorf("install gitea: %w", err)
	}
	// Written last: a build interrupted anywhere above is redone.
	if err := os.WriteFile(filepath.Join(dst, ".complete"), []byte(Version+"\n"), 0o644); err != nil {
		return fmt.Errorf("gitea cache: %w", err)
	}
	return nil
}

type moduleInfo struct {
	Dir   string
	GoMod string
	Error string
}

// download fetches Gitea's module (sources and go.mod) into the module cache.
func download(ctx context.Context, goBin string, env []string, dir string) (moduleInfo, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", module+"@"+Version)
	cmd.Dir, cmd.Env, cmd.Stdout = dir, env, &out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var info moduleInfo
	if jerr := json.Unmarshal(out.Bytes(), &info); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil || info.Error != "" || info.GoMod == "" || info.Dir == "" {
		if err == nil {
			err = errors.New(info.Error)
		}
		return info, fmt.Errorf("download %s@%s from the module proxy: %w: %s %s", module, Version, err, info.Error, strings.TrimSpace(stderr.String()))
	}
	return info, nil
}

// parseGoMod returns the go version and the replace directives (one per line, block or not).
func parseGoMod(gomod string) (string, []string) {
	goVersion := "1.26"
	var replaces []string
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case line == "":
		case inBlock && line == ")":
			inBlock = false
		case inBlock:
			replaces = append(replaces, line)
		case line == "replace (":
			inBlock = true
		case strings.HasPrefix(line, "replace "):
			replaces = append(replaces, strings.TrimSpace(strings.TrimPrefix(line, "replace ")))
		case strings.HasPrefix(line, "go "):
			goVersion = strings.TrimSpace(strings.TrimPrefix(line, "go "))
		}
	}
	return goVersion, replaces
}

// goCommand is the go command on PATH (the toolchain running the tests or make).
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// buildEnv is the environment of the build: CGO on (SQLite), module mode, the toolchain as it is.
func buildEnv() []string {
	env := make([]string, 0, len(os.Environ())+3)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "CGO_ENABLED=") || strings.HasPrefix(kv, "GOOS=") ||
			strings.HasPrefix(kv, "GOARCH=") || strings.HasPrefix(kv, "GOGC=") {
			continue
		}
		env = append(env, kv)
	}
	// The compiler with a relaxed GC builds ~20% faster (hack/toolexec-gogc.sh has the numbers).
	gogc := os.Getenv("SHEPHERD_BUILD_GOGC")
	if gogc == "" {
		gogc = "400"
	}
	return append(env, "CGO_ENABLED=1", "GOFLAGS=-mod=mod -buildvcs=false", "GOGC="+gogc)
}

// copyTree copies a directory of the (read-only) module cache, making the copies writable so that
// the cache can be cleaned like any other directory.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
