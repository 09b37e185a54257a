// Package release renders Shepherd's release manifests: config/release (dist/install.yaml) and
// config/release/namespaced (dist/install-namespaced.yaml), through kustomize (the cached
// kubectl's), with every image pinned by tag and digest. `localcluster release` builds the
// images and calls it; its tests apply the result to a real API server.
package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Manifest is one release manifest: the overlay it renders and the file it becomes.
type Manifest struct {
	Overlay, File string
}

// Manifests are the release's manifests.
var Manifests = []Manifest{
	{Overlay: "config/release", File: "install.yaml"},
	{Overlay: "config/release/namespaced", File: "install-namespaced.yaml"},
}

// Image names the kustomizations use (config/manager, config/egress-proxy) and the manager's
// defaults for --runner-image and --agent-images (cmd/manager).
const (
	ManagerName = "shepherd-manager"
	RunnerName  = "shepherd-runner"
)

// Images are the pinned references of a release: repository:tag@sha256:digest.
type Images struct {
	Manager, Runner string
	// Agents maps an agent (claude-code, codex, opencode, gemini) to its image.
	Agents map[string]string
}

// maxObjectBytes bounds every object: client-side apply stores the whole object in the
// last-applied annotation, which the API server caps at 256 KiB (262144 bytes).
const maxObjectBytes = 200 << 10

// renderTimeout bounds one kustomize run.
const renderTimeout = 2 * time.Minute

// ErrUnpinned is returned for an image reference without a tag and a digest.
var ErrUnpinned = errors.New("image reference is not pinned by tag and digest")

// splitRef splits repository:tag@sha256:hex into the repository and tag@sha256:hex.
func splitRef(ref string) (name, tagDigest string, err error) {
	at := strings.Index(ref, "@sha256:")
	if at < 0 || len(ref)-at-len("@sha256:") != 64 {
		return "", "", fmt.Errorf("%w: %q", ErrUnpinned, ref)
	}
	colon := strings.LastIndex(ref[:at], ":")
	if colon < 0 || strings.Contains(ref[colon:at], "/") || colon == at-1 {
		return "", "", fmt.Errorf("%w: %q has no tag", ErrUnpinned, ref)
	}
	return ref[:colon], ref[colon+1:], nil
}

// overlay is the kustomization that pins the images and points the manager at them.
func overlay(base string, img Images) (string, error) {
	name, tag, err := splitRef(img.Manager)
	if err != nil {
		return "", err
	}
	if _, _, err := splitRef(img.Runner); err != nil {
		return "", err
	}
	agents := make([]string, 0, len(img.Agents))
	for k, ref := range img.Agents {
		if _, _, err := splitRef(ref); err != nil {
			return "", err
		}
		agents = append(agents, k+"="+ref)
	}
	sort.Strings(agents)
	args := []string{"--runner-image=" + img.Runner}
	if len(agents) > 0 {
		args = append(args, "--agent-images="+strings.Join(agents, ","))
	}
	var ops []map[string]any
	for _, a := range args {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": a})
	}
	patch, err := yaml.Marshal(ops)
	if err != nil {
		return "", err
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{base},
		"images":     []map[string]string{{"name": ManagerName, "newName": name, "newTag": tag}},
		"patches":    []map[string]any{{"target": map[string]string{"kind": "Deployment", "name": ManagerName}, "patch": string(patch)}},
	}
	out, err := yaml.Marshal(k)
	return string(out), err
}

// Render renders m from the repository at repo with img, using kubectl's kustomize. The
// overlay is written under work (a directory of its own; kustomize needs a file tree).
func Render(ctx context.Context, kubectl, repo, work string, m Manifest, img Images) ([]byte, error) {
	dir := filepath.Join(work, strings.TrimSuffix(m.File, ".yaml"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base, err := filepath.Rel(dir, filepath.Join(repo, m.Overlay))
	if err != nil {
		return nil, err
	}
	k, err := overlay(filepath.ToSlash(base), img)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	out, err := runKustomize(ctx, kubectl, dir, m.Overlay)
	if err != nil {
		return nil, err
	}
	if err := Check(out); err != nil {
		return nil, fmt.Errorf("%s: %w", m.File, err)
	}
	header := fmt.Sprintf("# Shepherd %s, rendered from %s by `make release`.\n# kubectl apply -f %s   (or --server-side; docs/operations.md#install)\n", img.Manager, m.Overlay, m.File)
	return append([]byte(header), out...), nil
}

// runKustomize renders dir with kubectl's kustomize, bounded by renderTimeout; what names the
// kustomization in the error.
func runKustomize(ctx context.Context, kubectl, dir, what string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, renderTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Object is one object of a manifest, as apply sees it.
type Object struct {
	Kind, Namespace, Name string
	Bytes                 int
}

// Objects splits a manifest into its objects.
func Objects(manifest []byte) ([]Object, error) {
	var objs []Object
	for _, doc := range bytes.Split(manifest, []byte("\n---\n")) {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, err
		}
		if o.Kind == "" {
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		objs = append(objs, Object{Kind: o.Kind, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Bytes: len(j)})
	}
	return objs, nil
}

// Check fails a manifest with an object too large for client-side apply or an image that is
// not pinned.
func Check(manifest []byte) error {
	objs, err := Objects(manifest)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.Bytes > maxObjectBytes {
			return fmt.Errorf("%s %s is %d bytes; client-side apply's last-applied annotation holds at most 262144: keep objects under %d", o.Kind, o.Name, o.Bytes, maxObjectBytes)
		}
	}
	for _, line := range strings.Split(string(manifest), "\n") {
		t := strings.TrimPrefix(strings.TrimSpace(line), "- ")
		if v, ok := strings.CutPrefix(t, "image: "); ok {
			if _, _, err := splitRef(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Kustomization is dist/kustomization.yaml: the release as a kustomize base, remote or local
// (`resources: [https://github.com/shepherd-dev/shepherd/dist?ref=<tag>]`).
const Kustomization = `# Shepherd's release as a kustomize base: list this directory (or its Git URL with ?ref=<tag>)
# under resources: in your kustomization, and patch on top.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- install.yaml
`

// Write renders every manifest into out, with the kustomization.
func Write(ctx context.Context, kubectl, repo, out string, img Images) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Join(repo, "bin"), "release-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	for _, m := range Manifests {
		b, err := Render(ctx, kubectl, repo, work, m, img)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, m.File), b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(out, "kustomization.yaml"), []byte(Kustomization), 0o644)
}
