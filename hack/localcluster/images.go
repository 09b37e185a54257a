package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image names; config/default and the Makefile use the same.
const (
	managerImage   = "shepherd-manager:latest"
	runnerImage    = "shepherd-runner:latest"
	testAgentImage = "shepherd-test-agent:latest"

	nonRootUser = "65532:65532" // distroless's "nonroot", as in the Dockerfile
	debianPath  = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// debianPackages are what the runner stage of the Dockerfile installs with apt-get on
// debian:bookworm-slim; the local Debian base is debootstrapped with exactly these.
var debianPackages = []string{"git", "ca-certificates"}

// fakeAgentCLIs are the names test/fakeagent answers to (it dispatches on argv[0]).
var fakeAgentCLIs = []string{"claude", "codex", "aider", "opencode"}

// layerEpoch is the modification time of every file the builder writes, so unchanged binaries
// give the same layer digest and containerd reuses what it already unpacked.
var layerEpoch = time.Unix(0, 0).UTC()

// imageFile is one entry of a layer.
type imageFile struct {
	Path     string // absolute, in the image
	Mode     int64
	UID, GID int
	Src      string // regular file from the host
	Data     []byte // regular file content, when Src is empty
	Link     string // symlink target
	Dir      bool
}

// imageSpec is what the local builder makes; the Dockerfile agreement test reads these too.
type imageSpec struct {
	Name string
	// Stage is the Dockerfile stage this image is equivalent to ("" for test-only images).
	Stage string
	// DebianBase puts the image on the debootstrapped Debian root filesystem (git,
	// ca-certificates), like the Dockerfile's debian:bookworm-slim + apt-get.
	DebianBase bool
	// Base is a first layer of files (distroless's equivalent for static images).
	Base []imageFile
	// Big is a layer of large files that rarely change (an agent CLI): written once into the
	// layer cache, keyed by the files' sources, and reused by later builds without reading it.
	Big        []imageFile
	Files      []imageFile
	User       string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	Env        []string
}

// managerSpec mirrors the Dockerfile's manager stage: distroless/static:nonroot, /manager,
// user 65532, WORKDIR /.
func managerSpec(managerBin string) imageSpec {
	return imageSpec{
		Name:       managerImage,
		Stage:      "manager",
		Base:       staticBase(),
		Files:      []imageFile{{Path: "/manager", Mode: 0o755, Src: managerBin}},
		User:       nonRootUser,
		Entrypoint: []string{"/manager"},
		WorkingDir: "/",
		Env:        []string{debianPath, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	}
}

// runnerSpec mirrors the Dockerfile's runner stage: bookworm + git + ca-certificates and the
// runner binary at /usr/local/bin/shepherd-runner, user 65532.
func runnerSpec(runnerBin string) imageSpec {
	return imageSpec{
		Name:       runnerImage,
		Stage:      "runner",
		DebianBase: true,
		Files:      []imageFile{{Path: "/usr/local/bin/shepherd-runner", Mode: 0o755, Src: runnerBin}},
		User:       nonRootUser,
		Entrypoint: []string{"/usr/local/bin/shepherd-runner"},
		Env:        []string{debianPath},
	}
}

// testAgentSpec is an agent image for tests: git plus the fake agent CLIs on PATH (claude,
// codex, aider, opencode all run test/fakeagent), and a writable home, as a real agent image
// has. The runner binary is copied in at start by the runner's init container (architecture §3).
func testAgentSpec(bins map[string]string) imageSpec {
	s := imageSpec{
		Name:       testAgentImage,
		DebianBase: true,
		User:       nonRootUser,
		Env:        []string{debianPath, "HOME=/home/agent"},
		WorkingDir: "/home/agent",
		Files:      []imageFile{{Path: "/home/agent", Dir: true, Mode: 0o755, UID: 65532, GID: 65532}},
	}
	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.Files = append(s.Files, imageFile{Path: "/usr/local/bin/" + n, Mode: 0o755, Src: bins[n]})
	}
	if _, ok := bins["fakeagent"]; ok {
		for _, cli := range fakeAgentCLIs {
			s.Files = append(s.Files, imageFile{Path: "/usr/local/bin/" + cli, Link: "fakeagent"})
		}
		s.Cmd = []string{"/usr/local/bin/fakeagent"}
	}
	return s
}

// pauseSpec is the sandbox image: kubernetes' pause.c compiled statically, run as 65535 like
// registry.k8s.io/pause.
func pauseSpec(imageName, pauseBin string) imageSpec {
	return imageSpec{
		Name:       imageName,
		Files:      []imageFile{{Path: "/pause", Mode: 0o755, Src: pauseBin}},
		User:       "65535:65535",
		Entrypoint: []string{"/pause"},
	}
}

// staticBase is what distroless/static:nonroot provides that a static Go binary may need:
// the nonroot user, /tmp, CA certificates and nsswitch.
func staticBase() []imageFile {
	base := []imageFile{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	}
	// The host's bundle (Debian's ca-certificates) when present.
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		base = append(base, imageFile{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Src: "/etc/ssl/certs/ca-certificates.crt"})
	}
	return base
}

// buildImage assembles the image: the Debian base layer (when the spec wants it), the spec's base
// files, its big files and its own files as layers, then the config. Layers are written gzipped
// into dir; the big layer goes to layerCache (dir when empty) and is reused from there.
func buildImage(spec imageSpec, debianBase v1.Layer, dir, layerCache string) (v1.Image, error) {
	img := empty.Image
	var layers []v1.Layer
	if spec.DebianBase {
		if debianBase == nil {
			return nil, fmt.Errorf("%s needs the Debian base layer", spec.Name)
		}
		layers = append(layers, debianBase)
	}
	short := strings.NewReplacer(":", "-", "/", "-").Replace(spec.Name)
	for i, files := range [][]imageFile{spec.Base, spec.Big, spec.Files} {
		if len(files) == 0 {
			continue
		}
		if i == 1 {
			if layerCache == "" {
				layerCache = dir
			}
			start := time.Now()
			l, reused, err := cachedLayer(layerCache, short, files)
			if err != nil {
				return nil, fmt.Errorf("layer of %s: %w", spec.Name, err)
			}
			if !reused {
				logf("layer of %s written to %s in %s (%d MB)", spec.Name, l.path, since(start), l.meta.Size>>20)
			}
			layers = append(layers, l)
			continue
		}
		p := filepath.Join(dir, fmt.Sprintf("%s-layer%d.tar.gz", short, i))
		m, err := writeLayer(p, files)
		if err != nil {
			return nil, fmt.Errorf("layer of %s: %w", spec.Name, err)
		}
		layers = append(layers, &fileLayer{path: p, meta: m})
	}
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, fmt.Errorf("append layers to %s: %w", spec.Name, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: layerEpoch}
	cf.Config.User = spec.User
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.WorkingDir = spec.WorkingDir
	cf.Config.Env = spec.Env
	cf.Config.Labels = map[string]string{"org.opencontainers.image.source": "https://github.com/shepherd-dev/shepherd", "dev.shepherd.built-by": "hack/localcluster"}
	return mutate.ConfigFile(img, cf)
}

// writeLayer writes files (and their missing parent directories) as a gzipped tar and returns
// its digests (computed while writing: nothing is read back).
func writeLayer(p string, files []imageFile) (m layerMeta, err error) {
	f, err := os.Create(p)
	if err != nil {
		return m, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	compressed, uncompressed := sha256.New(), sha256.New()
	counter := &countingWriter{}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(bw, compressed, counter), gzip.BestSpeed)
	if err != nil {
		return m, err
	}
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed))
	seen := map[string]bool{}
	for _, file := range files {
		rel := strings.TrimPrefix(path.Clean(file.Path), "/")
		// Parent directories first, as root 0755 (what every base image has there).
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: layerEpoch, Format: tar.FormatPAX}); err != nil {
				return m, err
			}
		}
		h := &tar.Header{Name: rel, Mode: file.Mode, Uid: file.UID, Gid: file.GID, ModTime: layerEpoch, Format: tar.FormatPAX}
		switch {
		case file.Dir:
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
			seen[h.Name] = true
			err = tw.WriteHeader(h)
		case file.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, file.Link, 0o777
			err = tw.WriteHeader(h)
		case file.Src != "":
			err = writeTarFile(tw, h, file.Src)
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(file.Data))
			if err = tw.WriteHeader(h); err == nil {
				_, err = tw.Write(file.Data)
			}
		}
		if err != nil {
			return m, fmt.Errorf("add %s: %w", file.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return m, err
	}
	if err := gz.Close(); err != nil {
		return m, err
	}
	if err := bw.Flush(); err != nil {
		return m, err
	}
	return layerMeta{Digest: hexHash(compressed), DiffID: hexHash(uncompressed), Size: counter.n}, nil
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(b []byte) (int, error) {
	c.n += int64(len(b))
	return len(b), nil
}

func writeTarFile(tw *tar.Writer, h *tar.Header, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, in)
	return err
}

// archiveStamp is an archive's sidecar (<archive>.json): which image it holds, and the archive
// file's size and modification time when it was written.
type archiveStamp struct {
	Ref     string `json:"ref"`
	Digest  string `json:"digest"` // the image's manifest digest
	ImageID string `json:"imageID"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"modTime"`
}

// writeArchive writes a docker-archive tarball (what `ctr images import` reads), atomically,
// unless the archive already holds this image (by its sidecar): an unchanged 500 MB agent image
// is not copied again. It reports whether it wrote.
func writeArchive(p, ref string, img v1.Image) (bool, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return false, fmt.Errorf("image name %q: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return false, err
	}
	id, err := img.ConfigName()
	if err != nil {
		return false, err
	}
	want := archiveStamp{Ref: ref, Digest: digest.String(), ImageID: id.String()}
	if st, err := os.Stat(p); err == nil {
		var have archiveStamp
		if raw, err := os.ReadFile(p + ".json"); err == nil && json.Unmarshal(raw, &have) == nil {
			want.Size, want.ModTime = st.Size(), st.ModTime().UnixNano()
			if have == want {
				return false, nil
			}
		}
	}
	_ = os.Remove(p + ".json")
	tmp := p + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return false, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return false, err
	}
	want.Size, want.ModTime = st.Size(), st.ModTime().UnixNano()
	raw, err := json.Marshal(want)
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(p+".json", raw, 0o644)
}

// readArchiveStamp returns what writeArchive recorded about an archive.
func readArchiveStamp(p string) (archiveStamp, error) {
	var s archiveStamp
	raw, err := os.ReadFile(p + ".json")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(raw, &s)
}

// importArchive loads an image archive into the cluster's containerd, in the namespace the CRI
// plugin (and so the kubelet) uses.
func importArchive(ctx context.Context, sock, archive string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "--namespace", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// goBuild builds a static Linux binary of pkg, as the Dockerfile's builder stage does.
func goBuild(ctx context.Context, repo, out, pkg string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = repo
	// The compiler with a relaxed GC builds ~20% faster (hack/toolexec-gogc.sh has the numbers).
	gogc := os.Getenv("SHEPHERD_BUILD_GOGC")
	if gogc == "" {
		gogc = "400"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOGC="+gogc)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// mainPackages lists the commands under pattern (for ./test/fakeagent/...).
func mainPackages(ctx context.Context, repo, pattern string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{if eq .Name \"main\"}}{{.ImportPath}}{{end}}", pattern)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list %s: %w: %s", pattern, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list %s: %w", pattern, err)
	}
	var pkgs []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			pkgs = append(pkgs, l)
		}
	}
	return pkgs, nil
}

// imageArchives are where `images` writes: the repository's bin/ (ignored by git).
func imageArchiveDir(repo string) string { return filepath.Join(repo, "bin", "images") }

func archiveName(ref string) string {
	return strings.NewReplacer(":", "_", "/", "_").Replace(ref) + ".tar"
}

// imageKeys are the images `images --only` takes, in build order; defaultImages what it builds
// without --only: everything run-local uses. The Codex, OpenCode and Gemini CLI agent images
// (~500 MB, ~300 MB, ~200 MB) are built when asked for (the e2e suite asks for all: it runs each
// real CLI).
var (
	imageKeys     = []string{"manager", "runner", "test-agent", "claude-code", "codex", "opencode", "gemini"}
	defaultImages = "manager,runner,test-agent,claude-code"
)

// cmdImages builds the archives of the requested images (and the pause image), and imports them
// into the running cluster with --load.
func cmdImages(ctx context.Context, g globals, args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	load := fs.Bool("load", false, "Import the images into the running cluster's containerd (fails when it does not run).")
	loadIfRunning := fs.Bool("load-if-running", false, "Import the images when the cluster runs; only build them otherwise.")
	only := fs.String("only", defaultImages, "Comma-separated images to build: "+strings.Join(imageKeys, ", ")+", or all.")
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	want, err := parseOnly(*only)
	if err != nil {
		return err
	}
	l := newLayout(g.runDir)
	if *loadIfRunning {
		_, running := l.pidOf(cContainerd, cContainerd)
		*load = running
		if !running {
			logf("the cluster does not run: building the images without loading them")
		}
	}
	if *load {
		if err := requireRoot(); err != nil {
			return err
		}
		if _, ok := l.pidOf(cContainerd, cContainerd); !ok {
			return fmt.Errorf("--load: the cluster's containerd is not running in %s (run `make cluster-up`)", g.runDir)
		}
	}
	start := time.Now()
	archives, err := buildImages(ctx, g, want)
	if err != nil {
		return err
	}
	pause, err := ensurePauseImage(ctx, g.cacheDir)
	if err != nil {
		return err
	}
	logf("images built in %s", since(start))
	if !*load {
		return nil
	}
	cri, err := dialCRI(l.containerdSock())
	if err != nil {
		return err
	}
	defer func() { _ = cri.Close() }()
	start = time.Now()
	for _, a := range append(archives, pause.archive) {
		if stamp, err := readArchiveStamp(a); err == nil {
			if id, err := cri.imageID(ctx, stamp.Ref); err == nil && id == stamp.ImageID {
				logf("%s is already in the cluster (%s)", stamp.Ref, shortID(id))
				continue
			}
		}
		t := time.Now()
		if err := importArchive(ctx, l.containerdSock(), a); err != nil {
			return err
		}
		logf("loaded %s into the cluster in %s", filepath.Base(a), since(t))
	}
	logf("images loaded in %s", since(start))
	return nil
}

// parseOnly reads --only: a comma-separated list of imageKeys, or "all".
func parseOnly(only string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, w := range strings.Split(only, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "all":
			for _, k := range imageKeys {
				want[k] = true
			}
		case slices.Contains(imageKeys, w):
			want[w] = true
		default:
			return nil, usageErr{fmt.Sprintf("--only: unknown image %q (want %s, or all)", w, strings.Join(imageKeys, ", "))}
		}
	}
	return want, nil
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func buildImages(ctx context.Context, g globals, want map[string]bool) ([]string, error) {
	outDir := imageArchiveDir(g.repo)
	binDir := filepath.Join(outDir, "build")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	agents := slices.ContainsFunc(agentImageDefs, func(d agentImageDef) bool { return want[d.Key] })
	var debian *fileLayer
	if want["runner"] || want["test-agent"] || agents {
		p, err := ensureDebianBase(ctx, g.cacheDir)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		// The agent images extend the base's passwd and group; read them with the digests.
		if debian, err = openLayer(p, "etc/passwd", "etc/group"); err != nil {
			return nil, fmt.Errorf("read the Debian base %s: %w", p, err)
		}
		logf("Debian base layer %s read in %s", filepath.Base(p), since(start))
	}
	var specs []imageSpec
	if want["manager"] {
		bin := filepath.Join(binDir, "manager")
		if err := timed("built ./cmd/manager", func() error { return goBuild(ctx, g.repo, bin, "./cmd/manager") }); err != nil {
			return nil, err
		}
		specs = append(specs, managerSpec(bin))
	}
	if want["runner"] {
		bin := filepath.Join(binDir, "runner")
		if err := timed("built ./cmd/runner", func() error { return goBuild(ctx, g.repo, bin, "./cmd/runner") }); err != nil {
			return nil, err
		}
		specs = append(specs, runnerSpec(bin))
	}
	if want["test-agent"] {
		pkgs, err := mainPackages(ctx, g.repo, "./test/fakeagent/...")
		if err != nil {
			return nil, err
		}
		if len(pkgs) == 0 {
			return nil, errors.New("no command under ./test/fakeagent/... to put in the test-agent image")
		}
		bins := map[string]string{}
		for _, pkg := range pkgs {
			bin := filepath.Join(binDir, "fakeagent-bin", path.Base(pkg))
			if err := timed("built "+pkg, func() error { return goBuild(ctx, g.repo, bin, pkg) }); err != nil {
				return nil, err
			}
			bins[path.Base(pkg)] = bin
		}
		specs = append(specs, testAgentSpec(bins))
	}
	if agents {
		clis, err := ensureAgentCLIs(ctx, g.repo, g.cacheDir)
		if err != nil {
			return nil, err
		}
		in := agentInputs{Repo: g.repo, CLIs: clis, CLIDir: cliDir(g.cacheDir),
			Passwd: debian.meta.Files["etc/passwd"], Group: debian.meta.Files["etc/group"]}
		if want["opencode"] {
			if in.OpenCodePlugin, err = ensureOpenCodePlugin(ctx, g.cacheDir, clis["opencode"].Version); err != nil {
				return nil, err
			}
		}
		if want["gemini"] {
			if in.Node, err = nodeExecutable(); err != nil {
				return nil, err
			}
		}
		for _, d := range agentImageDefs {
			if !want[d.Key] {
				continue
			}
			s, err := agentSpec(d.Key, in)
			if err != nil {
				return nil, err
			}
			specs = append(specs, s)
		}
	}
	var archives []string
	layerCache := filepath.Join(g.cacheDir, "images", "layers")
	for _, s := range specs {
		start := time.Now()
		var base v1.Layer
		if debian != nil {
			base = debian
		}
		img, err := buildImage(s, base, binDir, layerCache)
		if err != nil {
			return nil, err
		}
		a := filepath.Join(outDir, archiveName(s.Name))
		wrote, err := writeArchive(a, s.Name, img)
		if err != nil {
			return nil, err
		}
		if wrote {
			logf("image %s written to %s in %s", s.Name, a, since(start))
		} else {
			logf("image %s unchanged: %s kept (%s)", s.Name, a, since(start))
		}
		archives = append(archives, a)
	}
	return archives, nil
}

func timed(what string, f func() error) error {
	start := time.Now()
	if err := f(); err != nil {
		return err
	}
	logf("%s in %s", what, since(start))
	return nil
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "localcluster: "+format+"\n", args...)
}
