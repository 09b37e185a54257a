package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/shepherd-dev/shepherd/hack/release"
)

// releaseImages are the images a release ships, by the keys of --only.
var releaseImages = []string{"manager", "runner", "claude-code", "codex", "opencode", "gemini"}

// imagesFile lists a release's images, one "key ref" per line (`push` reads it).
const imagesFile = "images.txt"

// cmdRelease builds every image of a release, writes each as an OCI image layout archive
// (an index with one linux manifest, ready for more platforms) under <out>/images/, and renders
// the manifests with the images pinned as <registry>/<name>:<version>@<index digest>.
func cmdRelease(ctx context.Context, g globals, args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	version := fs.String("version", "", "Release version, the images' tag (default: git describe --tags --always --dirty).")
	registry := fs.String("registry", "ghcr.io/shepherd-dev", "Registry and path the manifests pull the images from.")
	out := fs.String("out", "dist", "Output directory (relative to the source tree).")
	kubectl := fs.String("kubectl", "", "kubectl for kustomize (make release passes the cached one).")
	helm := fs.String("helm", "", "helm that packages the chart (make release passes hack/helm.sh's); empty: no chart.")
	pluginURL := fs.String("plugin-url", "", "Where the kubectl plugin's archives are published, for the krew manifest (default https://github.com/shepherd-dev/shepherd/releases/download/<version>).")
	plugin := fs.Bool("plugin", true, "Build kubectl-shepherd for every krew platform and write the krew manifest.")
	only := fs.String("only", strings.Join(releaseImages, ","), "Images to build, a subset of "+strings.Join(releaseImages, ","))
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	if *kubectl == "" {
		return usageErr{"--kubectl is required"}
	}
	if *version == "" {
		v, err := exec.CommandContext(ctx, "git", "-C", g.repo, "describe", "--tags", "--always", "--dirty").Output()
		if err != nil {
			return fmt.Errorf("git describe (pass --version): %w", err)
		}
		*version = strings.TrimSpace(string(v))
	}
	want := map[string]bool{}
	for _, k := range strings.Split(*only, ",") {
		if !slices.Contains(releaseImages, k) {
			return usageErr{fmt.Sprintf("--only: unknown image %q", k)}
		}
		want[k] = true
	}
	if !want["manager"] || !want["runner"] {
		return usageErr{"--only must include manager and runner: the manifests pin both"}
	}
	dist := filepath.Join(g.repo, *out)
	archives, err := buildImages(ctx, g, want)
	if err != nil {
		return err
	}
	refs := map[string]string{}
	for _, a := range archives {
		key, ref, err := writeOCIArchive(a, filepath.Join(dist, "images"), *registry, *version)
		if err != nil {
			return err
		}
		refs[key] = ref
		logf("%s: %s", key, ref)
	}
	img := release.Images{Manager: refs["manager"], Runner: refs["runner"], Agents: map[string]string{}}
	var lines []string
	for k, ref := range refs {
		lines = append(lines, k+" "+ref)
		if k != "manager" && k != "runner" {
			img.Agents[k] = ref
		}
	}
	sort.Strings(lines)
	if err := os.WriteFile(filepath.Join(dist, imagesFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := release.Write(ctx, *kubectl, g.repo, dist, img); err != nil {
		return err
	}
	if *helm != "" {
		tgz, err := release.PackageChart(ctx, *helm, g.repo, dist, *version, img)
		if err != nil {
			return err
		}
		logf("chart: %s", tgz)
	}
	if *plugin {
		archives, err := release.BuildPlugin(ctx, g.repo, filepath.Join(dist, "plugin"), *version, release.PluginPlatforms)
		if err != nil {
			return err
		}
		base := *pluginURL
		if base == "" {
			base = "https://github.com/shepherd-dev/shepherd/releases/download/" + *version
		}
		m, err := release.KrewManifest(*version, base, archives)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dist, "krew"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dist, "krew", "shepherd.yaml"), m, 0o644); err != nil {
			return err
		}
		logf("kubectl plugin: %d archives in %s, krew manifest dist/krew/shepherd.yaml", len(archives), filepath.Join(dist, "plugin"))
	}
	logf("release %s written to %s", *version, dist)
	return nil
}

// imageKey is the release key of a built image's name (shepherd-agent-codex:latest → codex).
func imageKey(ref string) (key, repo string) {
	repo, _, _ = strings.Cut(ref, ":")
	key = strings.TrimPrefix(strings.TrimPrefix(repo, "shepherd-agent-"), "shepherd-")
	return key, repo
}

// writeOCIArchive turns a built image archive into <dir>/<repo>.oci.tar: an OCI image layout
// whose index holds the image for this platform. It returns the pinned reference.
func writeOCIArchive(archive, dir, registry, version string) (key, ref string, err error) {
	img, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", archive, err)
	}
	built, err := readArchiveStamp(archive)
	if err != nil {
		return "", "", err
	}
	key, repo := imageKey(built.Ref)
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
		Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
	}})
	d, err := idx.Digest()
	if err != nil {
		return "", "", err
	}
	ref = fmt.Sprintf("%s/%s:%s@%s", registry, repo, version, d)
	if _, err := name.NewDigest(ref); err != nil {
		return "", "", fmt.Errorf("reference %s: %w", ref, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(archive), "oci-")
	if err != nil {
		return "", "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if _, err := ocilayout.Write(tmp, idx); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	return key, ref, tarOCILayout(tmp, filepath.Join(dir, repo+".oci.tar"))
}

// tarOCILayout writes dir's files into the tar file p, with fixed times.
func tarOCILayout(dir, p string) (err error) {
	f, err := os.Create(p + ".tmp")
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(p+".tmp", p)
		} else {
			_ = os.Remove(p + ".tmp")
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := e.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), layerEpoch, 0, 0, "", ""
		if e.IsDir() {
			h.Name += "/"
			return tw.WriteHeader(h)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// pushTimeout bounds the push of one image.
const pushTimeout = 10 * time.Minute

// cmdPush pushes a release's images (<dist>/images/*.oci.tar) to --registry under the tag and
// digest the release pinned: the digest is the index's, so the manifests' references resolve.
// --registry may differ from the release's (a mirror): the path after it is kept.
func cmdPush(ctx context.Context, g globals, args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dist := fs.String("dist", "dist", "The release directory (relative to the source tree).")
	registry := fs.String("registry", "", "Registry and path to push to (default: the release's).")
	insecure := fs.Bool("insecure", false, "Plain HTTP to the registry (a local one).")
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	dir := filepath.Join(g.repo, *dist)
	raw, err := os.ReadFile(filepath.Join(dir, imagesFile))
	if err != nil {
		return fmt.Errorf("read the release's image list (run make release first): %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		_, ref, ok := strings.Cut(line, " ")
		if !ok {
			return fmt.Errorf("%s: malformed line %q", imagesFile, line)
		}
		if err := pushOne(ctx, dir, ref, *registry, *insecure); err != nil {
			return err
		}
	}
	return nil
}

// pushOne pushes the index of ref's archive as <registry>/<repo>:<tag> and checks the digest.
func pushOne(ctx context.Context, dir, ref, registry string, insecure bool) error {
	pinned, err := name.NewDigest(ref)
	if err != nil {
		return err
	}
	at := strings.Index(ref, "@")
	tagged, err := name.NewTag(ref[:at])
	if err != nil {
		return err
	}
	repoName := tagged.RepositoryStr()
	base := repoName[strings.LastIndex(repoName, "/")+1:]
	target := ref[:at]
	if registry != "" {
		target = strings.TrimSuffix(registry, "/") + "/" + base + ":" + tagged.TagStr()
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	dst, err := name.NewTag(target, opts...)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "shepherd-push-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := untar(filepath.Join(dir, "images", base+".oci.tar"), tmp); err != nil {
		return err
	}
	lp, err := ocilayout.FromPath(tmp)
	if err != nil {
		return err
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	if d.String() != pinned.DigestStr() {
		return fmt.Errorf("%s holds %s, not the %s the release pinned: run make release again", base, d, pinned.DigestStr())
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	if err := remote.WriteIndex(dst, idx, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	logf("pushed %s@%s", dst, d)
	return nil
}

// untar extracts the archive tarOCILayout wrote (regular files and directories only).
func untar(p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s: entry %q leaves the directory", p, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q is not a file or directory", p, h.Name)
		}
	}
}
