package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// Versions of what the cluster is built from; hack/kube-binaries.sh builds the same.
const (
	kubernetesModule = "k8s.io/kubernetes@v1.37.2"
	kwokModule       = "sigs.k8s.io/kwok@v0.8.0"
)

// moduleDir downloads (or finds in the module cache) a module and returns its directory.
func moduleDir(ctx context.Context, mod string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "localcluster-mod-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// Outside any module, so the repository's go.mod is neither read nor changed.
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", mod, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	return info.Dir, nil
}

// pauseImage is the built sandbox image.
type pauseImage struct {
	name    string
	archive string
}

var pauseTagRE = regexp.MustCompile(`(?m)^TAG \?= (\S+)$`)

// ensurePauseImage builds the pause image from kubernetes' build/pause/linux/pause.c with
// `gcc -static` (the flags of build/pause/Makefile), cached by version.
func ensurePauseImage(ctx context.Context, cacheDir string) (pauseImage, error) {
	kdir, err := moduleDir(ctx, kubernetesModule)
	if err != nil {
		return pauseImage{}, err
	}
	mk, err := os.ReadFile(filepath.Join(kdir, "build", "pause", "Makefile"))
	if err != nil {
		return pauseImage{}, fmt.Errorf("read the pause Makefile: %w", err)
	}
	m := pauseTagRE.FindSubmatch(mk)
	if m == nil {
		return pauseImage{}, fmt.Errorf("no `TAG ?=` in %s", filepath.Join(kdir, "build", "pause", "Makefile"))
	}
	tag := string(m[1])
	// Not registry.k8s.io/pause: this is our build of the same source, and nothing may pull it.
	p := pauseImage{name: "shepherd.local/pause:" + tag, archive: filepath.Join(cacheDir, "images", "pause-"+tag+".tar")}
	if _, err := os.Stat(p.archive); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(p.archive), 0o755); err != nil {
		return p, err
	}
	work, err := os.MkdirTemp(filepath.Dir(p.archive), "pause-")
	if err != nil {
		return p, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	bin := filepath.Join(work, "pause")
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(gctx, "gcc", "-Os", "-Wall", "-Werror", "-static", "-s",
		"-DVERSION=v"+tag+"-shepherd", "-o", bin, filepath.Join(kdir, "build", "pause", "linux", "pause.c")).CombinedOutput()
	if err != nil {
		return p, fmt.Errorf("gcc -static pause.c (install gcc and libc6-dev: hack/install-deps.sh): %w: %s", err, out)
	}
	img, err := buildImage(pauseSpec(p.name, bin), nil, work, "")
	if err != nil {
		return p, err
	}
	if _, err := writeArchive(p.archive, p.name, img); err != nil {
		return p, err
	}
	logf("pause image %s built from pause.c", p.name)
	return p, nil
}
