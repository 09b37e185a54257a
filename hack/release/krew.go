package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// The kubectl plugin's release: kubectl-shepherd built for each platform krew serves, each as
// kubectl-shepherd_<os>_<arch>.tar.gz (the binary and LICENSE), and dist/krew/shepherd.yaml, the
// krew manifest that names each archive's URL and SHA-256 (docs/kubectl-plugin.md#install).

// Platform is one GOOS/GOARCH the plugin is built for.
type Platform struct{ OS, Arch string }

// PluginPlatforms are the platforms a release builds the plugin for.
var PluginPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"}}

// PluginArchive is one built archive.
type PluginArchive struct {
	Platform
	File   string // the archive's name (under the release's plugin directory)
	SHA256 string
}

// pluginBuildTimeout bounds one cross-compilation.
const pluginBuildTimeout = 10 * time.Minute

// versionVar is where the plugin reads its version.
const versionVar = "github.com/shepherd-dev/shepherd/internal/kubectlplugin.Version"

func (p Platform) bin() string {
	if p.OS == "windows" {
		return "kubectl-shepherd.exe"
	}
	return "kubectl-shepherd"
}

// BuildPlugin cross-compiles kubectl-shepherd for each platform and writes its archives into out.
func BuildPlugin(ctx context.Context, repo, out, version string, platforms []Platform) ([]PluginArchive, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	license, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
	if err != nil {
		return nil, err
	}
	// bin/ is ignored by git: a fresh clone has none until a make target makes it.
	if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(filepath.Join(repo, "bin"), "plugin-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	var archives []PluginArchive
	for _, p := range platforms {
		bin := filepath.Join(work, p.OS+"-"+p.Arch, p.bin())
		bctx, cancel := context.WithTimeout(ctx, pluginBuildTimeout)
		cmd := exec.CommandContext(bctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X "+versionVar+"="+version, "-o", bin, "./cmd/kubectl-shepherd")
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
		outb, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("build kubectl-shepherd for %s/%s: %w: %s", p.OS, p.Arch, err, strings.TrimSpace(string(outb)))
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		a := PluginArchive{Platform: p, File: fmt.Sprintf("kubectl-shepherd_%s_%s.tar.gz", p.OS, p.Arch)}
		tgz, err := tarGz(map[string][]byte{p.bin(): b, "LICENSE": license}, []string{p.bin(), "LICENSE"})
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(tgz)
		a.SHA256 = hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(out, a.File), tgz, 0o644); err != nil {
			return nil, err
		}
		archives = append(archives, a)
	}
	return archives, nil
}

// tarGz packs files (in order) with fixed times and owners, so that the same input gives the
// same archive and digest.
func tarGz(files map[string][]byte, order []string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range order {
		mode := int64(0o644)
		if strings.HasPrefix(name, "kubectl-shepherd") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(files[name])), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, bytes.NewReader(files[name])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// KrewManifest is the krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2) for
// archives published under urlBase (https://github.com/<org>/shepherd/releases/download/<tag>).
func KrewManifest(version, urlBase string, archives []PluginArchive) ([]byte, error) {
	var platforms []map[string]any
	for _, a := range archives {
		platforms = append(platforms, map[string]any{
			"selector": map[string]any{"matchLabels": map[string]string{"os": a.OS, "arch": a.Arch}},
			"uri":      strings.TrimSuffix(urlBase, "/") + "/" + a.File,
			"sha256":   a.SHA256,
			"bin":      a.bin(),
			"files":    []map[string]string{{"from": a.bin(), "to": "."}, {"from": "LICENSE", "to": "."}},
		})
	}
	m := map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]any{"name": "shepherd"},
		"spec": map[string]any{
			"version":          "v" + ChartVersion(version),
			"homepage":         "https://github.com/shepherd-dev/shepherd",
			"shortDescription": "Read and steer Shepherd's AI coding agent sessions",
			"description": "kubectl shepherd lists Shepherd's AgentSessions with their pull requests, CI,\n" +
				"reviews and cost, describes a session's timeline, and steers it: send the agent\n" +
				"a message, answer its question, approve its pull request's head, stop and\n" +
				"restore it, or start a session on an issue or a prompt. Kubernetes RBAC on\n" +
				"AgentSessions decides what you see and steer; writes are server-side applies.\n",
			"platforms": platforms,
		},
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte("# The krew manifest of kubectl shepherd, written by `make release`.\n"), b...), nil
}
