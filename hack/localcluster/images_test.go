package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	. "github.com/onsi/gomega"
)

// dockerCopy is one COPY instruction.
type dockerCopy struct {
	from  string // the stage it copies from; "" for the build context
	chown string
	src   string // the sources, space-separated
	dest  string
}

// dockerUser is what a `useradd` adds.
type dockerUser struct {
	name, uid, gid, home, shell string
}

// dockerStage is what the agreement test reads from one stage of the Dockerfile, with what it
// inherits from a stage it is built FROM.
type dockerStage struct {
	name       string
	base       string // the external image at the root of its FROM chain
	user       string
	entrypoint []string
	cmd        []string
	workdir    string
	env        []string // ENV, KEY=VALUE, in order (inherited first)
	copies     []dockerCopy
	// aptPackages are the packages an `apt-get install` line adds.
	aptPackages []string
	users       []dockerUser
	groups      map[string]string // groupadd: name -> gid
	symlinks    map[string]string // ln -s: link -> target
	dirs        map[string]string // install -d -o U -g G: path -> "U:G"
	runs        []string
}

func (s *dockerStage) clone(name string) *dockerStage {
	c := *s
	c.name = name
	c.env = slices.Clone(s.env)
	c.copies = slices.Clone(s.copies)
	c.aptPackages = slices.Clone(s.aptPackages)
	c.users = slices.Clone(s.users)
	c.runs = slices.Clone(s.runs)
	c.groups, c.symlinks, c.dirs = map[string]string{}, map[string]string{}, map[string]string{}
	for k, v := range s.groups {
		c.groups[k] = v
	}
	for k, v := range s.symlinks {
		c.symlinks[k] = v
	}
	for k, v := range s.dirs {
		c.dirs[k] = v
	}
	return &c
}

// copyTo returns the COPY instructions whose destination is dest.
func (s *dockerStage) copyTo(dest string) (dockerCopy, bool) {
	for _, c := range s.copies {
		if c.dest == dest {
			return c, true
		}
	}
	return dockerCopy{}, false
}

// parseDockerfile reads the instructions the local builder must agree with: FROM ... AS (a stage
// built FROM another inherits what it set), USER, ENTRYPOINT and CMD (exec form), WORKDIR, ENV,
// COPY, and in RUN: apt-get install, groupadd, useradd, ln -s and install -d; continuation lines
// joined.
func parseDockerfile(t *testing.T, path string) map[string]*dockerStage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open Dockerfile: %v", err)
	}
	defer func() { _ = f.Close() }()
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			cur.WriteString(strings.TrimSuffix(l, `\`) + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	stages := map[string]*dockerStage{}
	var st *dockerStage
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			f := strings.Fields(rest)
			stageName := ""
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				stageName = f[2]
			}
			if parent, ok := stages[f[0]]; ok {
				st = parent.clone(stageName)
			} else {
				st = &dockerStage{name: stageName, base: f[0], groups: map[string]string{}, symlinks: map[string]string{}, dirs: map[string]string{}}
			}
			stages[st.name] = st
		case "USER":
			st.user = rest
		case "WORKDIR":
			st.workdir = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT of stage %s is not in exec form: %v", st.name, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &st.cmd); err != nil {
				t.Fatalf("CMD of stage %s is not in exec form: %v", st.name, err)
			}
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				if !strings.Contains(kv, "=") {
					t.Fatalf("ENV of stage %s: want KEY=VALUE, got %q", st.name, kv)
				}
				k, _, _ := strings.Cut(kv, "=")
				st.env = slices.DeleteFunc(st.env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
				st.env = append(st.env, kv)
			}
		case "COPY":
			var c dockerCopy
			var args []string
			for _, w := range strings.Fields(rest) {
				switch {
				case strings.HasPrefix(w, "--from="):
					c.from = strings.TrimPrefix(w, "--from=")
				case strings.HasPrefix(w, "--chown="):
					c.chown = strings.TrimPrefix(w, "--chown=")
				case strings.HasPrefix(w, "--"):
					t.Fatalf("COPY flag %s is not understood by this test", w)
				default:
					args = append(args, w)
				}
			}
			if len(args) < 2 {
				t.Fatalf("COPY in stage %s: want sources and a destination, got %q", st.name, rest)
			}
			c.src, c.dest = strings.Join(args[:len(args)-1], " "), args[len(args)-1]
			st.copies = append(st.copies, c)
		case "RUN":
			st.runs = append(st.runs, rest)
			for _, cmd := range strings.Split(rest, "&&") {
				parseRun(t, st, shellWords(cmd))
			}
		}
	}
	return stages
}

// shellWords splits a simple command line, honouring double quotes.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, started := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, started = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if started {
				out = append(out, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	if started {
		out = append(out, cur.String())
	}
	return out
}

// parseRun records what one command of a RUN line does to the image.
func parseRun(t *testing.T, st *dockerStage, words []string) {
	t.Helper()
	if len(words) == 0 {
		return
	}
	opts := func(words []string) (map[string]string, []string) {
		o, pos := map[string]string{}, []string(nil)
		for i := 0; i < len(words); i++ {
			w := words[i]
			if strings.HasPrefix(w, "-") {
				if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") && w != "--create-home" && w != "-d" && w != "-s" && w != "-y" && w != "--no-install-recommends" {
					o[w] = words[i+1]
					i++
				} else {
					o[w] = ""
				}
				continue
			}
			pos = append(pos, w)
		}
		return o, pos
	}
	switch words[0] {
	case "apt-get":
		if len(words) > 2 && words[1] == "install" {
			for _, w := range words[2:] {
				if !strings.HasPrefix(w, "-") {
					st.aptPackages = append(st.aptPackages, w)
				}
			}
		}
	case "groupadd":
		o, pos := opts(words[1:])
		st.groups[pos[len(pos)-1]] = o["--gid"]
	case "useradd":
		o, pos := opts(words[1:])
		st.users = append(st.users, dockerUser{name: pos[len(pos)-1], uid: o["--uid"], gid: o["--gid"], home: o["--home-dir"], shell: o["--shell"]})
	case "ln":
		if len(words) == 4 && words[1] == "-s" {
			st.symlinks[words[3]] = words[2]
		}
	case "install":
		o, pos := opts(words[1:])
		if _, ok := o["-d"]; ok {
			owner, group := o["-o"], o["-g"]
			if owner == "" {
				owner = "0" // install -d without -o: the user running it, root in a build
			}
			if group == "" {
				group = "0"
			}
			for _, p := range pos {
				st.dirs[p] = owner + ":" + group
			}
		}
	}
}

// imageView is what an image built by the local builder says about itself.
type imageView struct {
	config v1.Config
	files  map[string]*tar.Header
	data   map[string][]byte // regular files under 64 KiB
}

func inspect(t *testing.T, archive, ref string) imageView {
	t.Helper()
	tag := mustTag(t, ref)
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("read %s: %v", archive, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	v := imageView{config: cf.Config, files: map[string]*tar.Header{}, data: map[string][]byte{}}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := "/" + strings.TrimSuffix(h.Name, "/")
			v.files[p] = h
			if h.Typeflag == tar.TypeReg && h.Size < 64<<10 {
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				v.data[p] = b
			}
		}
		_ = rc.Close()
	}
	return v
}

// build runs the local builder on a spec with a stand-in Debian base and returns the image.
func build(t *testing.T, spec imageSpec) imageView {
	t.Helper()
	dir := t.TempDir()
	img, err := buildImage(spec, standInBase(t, dir), dir, filepath.Join(dir, "layers"))
	if err != nil {
		t.Fatalf("build %s: %v", spec.Name, err)
	}
	archive := filepath.Join(dir, archiveName(spec.Name))
	if _, err := writeArchive(archive, spec.Name, img); err != nil {
		t.Fatal(err)
	}
	return inspect(t, archive, spec.Name)
}

// standInPasswd and standInGroup are the stand-in base's /etc/passwd and /etc/group.
const (
	standInPasswd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	standInGroup  = "root:x:0:\nnogroup:x:65534:\n"
)

// standInBase is a stand-in for the debootstrapped root filesystem: enough to check layering and
// paths.
func standInBase(t *testing.T, dir string) v1.Layer {
	t.Helper()
	base := filepath.Join(dir, "debian-base.tar.gz")
	m, err := writeLayer(base, []imageFile{
		{Path: "/usr/bin/git", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Path: "/bin/bash", Mode: 0o755, Data: []byte("\x7fELF bash")},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(standInPasswd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(standInGroup)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fileLayer{path: base, meta: m}
}

func fakeBinary(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	writeFile(t, p, "\x7fELF stand-in for "+name, 0o755)
	return p
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// TestLocalImagesAgreeWithDockerfile: the Dockerfile is the production recipe and the local
// builder must make equivalent images: same entrypoint, user, working directory, binary paths
// (from the stage's COPY lines) and, for the runner, the same Debian packages.
func TestLocalImagesAgreeWithDockerfile(t *testing.T) {
	g := NewWithT(t)
	stages := parseDockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	specs := []imageSpec{managerSpec(fakeBinary(t, "manager")), runnerSpec(fakeBinary(t, "runner"))}
	for _, spec := range specs {
		t.Run(spec.Stage, func(t *testing.T) {
			g := NewWithT(t)
			st, ok := stages[spec.Stage]
			g.Expect(ok).To(BeTrue(), "the Dockerfile has no stage %q", spec.Stage)
			img := build(t, spec)

			g.Expect(img.config.Entrypoint).To(Equal(st.entrypoint), "ENTRYPOINT")
			g.Expect(img.config.User).To(Equal(st.user), "USER")
			if st.workdir != "" {
				g.Expect(img.config.WorkingDir).To(Equal(st.workdir), "WORKDIR")
			} else {
				g.Expect(img.config.WorkingDir).To(BeElementOf("", "/"), "no WORKDIR: the root")
			}
			g.Expect(st.copies).NotTo(BeEmpty(), "stage %s copies no binary", spec.Stage)
			for _, c := range st.copies {
				g.Expect(c.from).To(Equal("builder"))
				h, ok := img.files[c.dest]
				g.Expect(ok).To(BeTrue(), "the local image lacks %s, which the Dockerfile copies", c.dest)
				g.Expect(h.Typeflag).To(Equal(byte(tar.TypeReg)), "%s is a regular file", c.dest)
				g.Expect(h.Mode&0o111).NotTo(BeZero(), "%s is executable", c.dest)
			}
			// The entrypoint is one of the copied binaries.
			_, ok = st.copyTo(img.config.Entrypoint[0])
			g.Expect(ok).To(BeTrue(), "the entrypoint is a copied binary")
			if len(st.aptPackages) > 0 {
				g.Expect(spec.DebianBase).To(BeTrue(), "the stage installs Debian packages; the local image must be on the Debian base")
				g.Expect(slices.Sorted(slices.Values(debianPackages))).To(Equal(slices.Sorted(slices.Values(st.aptPackages))), "the Debian base's packages")
				g.Expect(st.base).To(HavePrefix("debian:" + debianSuite))
			} else {
				g.Expect(spec.DebianBase).To(BeFalse())
				g.Expect(st.base).To(HavePrefix("gcr.io/distroless/static"), "a static image on distroless")
				// distroless/static:nonroot's user and /tmp exist in the local image too.
				g.Expect(img.files).To(HaveKey("/etc/passwd"))
				g.Expect(img.files).To(HaveKey("/tmp"))
			}
		})
	}
	// Every image stage of the Dockerfile has a local equivalent. Build-only stages: the Go
	// builder, the npm installs of the agent CLIs, and the agent images' common base.
	for _, d := range agentImageDefs {
		specs = append(specs, imageSpec{Stage: d.Stage})
	}
	for name := range stages {
		if name == "builder" || name == "agent-base" || strings.HasSuffix(name, "-install") {
			continue
		}
		if name == "agent-aider" {
			// PyPI only: the one image stage the local builder cannot make here (no PyPI);
			// TestAiderStage checks what it installs.
			continue
		}
		g.Expect(slices.ContainsFunc(specs, func(s imageSpec) bool { return s.Stage == name })).To(BeTrue(), "no local image for Dockerfile stage %q", name)
	}
}

// standInAgentInputs lays out a stand-in agent-clis cache and OpenCode plugin install, as
// hack/agent-clis.sh and npm leave them, with the real pinned versions and the repository's
// hack/agent-images files.
func standInAgentInputs(t *testing.T) agentInputs {
	t.Helper()
	repo := filepath.Join("..", "..")
	clis, err := readPinnedCLIs(repo)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	in := agentInputs{Repo: repo, CLIs: clis, CLIDir: cliDir(cache), Passwd: standInPasswd, Group: standInGroup,
		OpenCodePlugin: filepath.Join(cache, "opencode-plugin", "config"), Node: filepath.Join(cache, "node", "bin", "node")}
	nm := func(bin string) string { return filepath.Join(in.CLIDir(clis[bin]), "node_modules") }
	writeFile(t, filepath.Join(nm("claude"), "@anthropic-ai", "claude-code", "bin", "claude.exe"), "\x7fELF claude", 0o755)
	vendor := filepath.Join(nm("codex"), "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl")
	writeFile(t, filepath.Join(nm("codex"), "@openai", "codex", "bin", "codex.js"), "#!/usr/bin/env node\n", 0o755)
	writeFile(t, filepath.Join(vendor, "bin", "codex"), "\x7fELF codex", 0o755)
	writeFile(t, filepath.Join(vendor, "bin", "codex-code-mode-host"), "\x7fELF host", 0o755)
	writeFile(t, filepath.Join(vendor, "codex-path", "rg"), "\x7fELF rg", 0o755)
	writeFile(t, filepath.Join(vendor, "codex-resources", "bwrap"), "\x7fELF bwrap", 0o755)
	writeFile(t, filepath.Join(nm("opencode"), "opencode-ai", "bin", "opencode.exe"), "\x7fELF opencode", 0o755)
	dep := fmt.Sprintf(`{"dependencies": {"@opencode-ai/plugin": %q}}`, clis["opencode"].Version)
	writeFile(t, filepath.Join(in.OpenCodePlugin, "package.json"), dep, 0o644)
	writeFile(t, filepath.Join(in.OpenCodePlugin, "package-lock.json"), `{"lockfileVersion": 3}`, 0o644)
	writeFile(t, filepath.Join(in.OpenCodePlugin, "node_modules", "@opencode-ai", "plugin", "package.json"), `{"name": "@opencode-ai/plugin"}`, 0o644)
	writeFile(t, in.Node, "\x7fELF node", 0o755)
	bundle := filepath.Join(nm("gemini"), "@google", "gemini-cli", "bundle")
	writeFile(t, filepath.Join(bundle, "gemini.js"), "#!/usr/bin/env node\n", 0o755)
	writeFile(t, filepath.Join(bundle, "chunk-1.js"), "export {};\n", 0o644)
	writeFile(t, filepath.Join(nm("gemini"), "node-pty", "package.json"), `{"name": "node-pty"}`, 0o644)
	if err := os.MkdirAll(filepath.Join(nm("gemini"), ".bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../@google/gemini-cli/bundle/gemini.js", filepath.Join(nm("gemini"), ".bin", "gemini")); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestAgentImagesAgreeWithDockerfile: each agent image of the local builder and its Dockerfile
// stage agree on user, working directory, command, environment, the agent user (uid, home,
// shell) and its writable home, the Debian packages, and every path the stage copies, links or
// creates, with the same owner; files copied from the repository have the same content.
func TestAgentImagesAgreeWithDockerfile(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	in := standInAgentInputs(t)
	for _, def := range agentImageDefs {
		t.Run(def.Stage, func(t *testing.T) {
			g := NewWithT(t)
			st, ok := stages[def.Stage]
			g.Expect(ok).To(BeTrue(), "the Dockerfile has no stage %q", def.Stage)
			spec, err := agentSpec(def.Key, in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(spec.Name).To(Equal(def.Image))
			img := build(t, spec)

			g.Expect(img.config.User).To(Equal(st.user), "USER")
			g.Expect(img.config.User).To(Equal(nonRootUser))
			g.Expect(img.config.WorkingDir).To(Equal(st.workdir), "WORKDIR")
			g.Expect(img.config.Entrypoint).To(Equal(st.entrypoint), "ENTRYPOINT")
			g.Expect(img.config.Cmd).To(Equal(st.cmd), "CMD")
			// debian:bookworm-slim sets PATH; the stages add the rest.
			g.Expect(img.config.Env).To(ConsistOf(append([]string{debianPath}, st.env...)), "ENV")

			// On the Debian base with git and bash.
			g.Expect(st.base).To(HavePrefix("debian:" + debianSuite))
			g.Expect(spec.DebianBase).To(BeTrue())
			g.Expect(slices.Sorted(slices.Values(st.aptPackages))).To(Equal(slices.Sorted(slices.Values(debianPackages))))
			g.Expect(img.files).To(HaveKey("/usr/bin/git"))
			g.Expect(img.files).To(HaveKey("/bin/bash"))

			// The agent user, as useradd makes it, with a home it owns.
			g.Expect(st.users).To(ConsistOf(dockerUser{name: agentUser, uid: fmt.Sprint(agentUID), gid: fmt.Sprint(agentUID), home: agentHome, shell: "/bin/bash"}))
			g.Expect(st.groups).To(HaveKeyWithValue(agentUser, fmt.Sprint(agentUID)))
			g.Expect(string(img.data["/etc/passwd"])).To(HavePrefix(standInPasswd), "the base's users are kept")
			g.Expect(string(img.data["/etc/passwd"])).To(ContainSubstring(fmt.Sprintf("\n%s:x:%d:%d:Shepherd agent:%s:/bin/bash\n", agentUser, agentUID, agentUID, agentHome)))
			g.Expect(string(img.data["/etc/group"])).To(Equal(standInGroup + fmt.Sprintf("%s:x:%d:\n", agentUser, agentUID)))
			g.Expect(img.config.Env).To(ContainElement("HOME=" + agentHome))
			g.Expect(img.files[agentHome]).To(HaveField("Uid", agentUID), "HOME is writable by the image's user")
			g.Expect(img.files[agentHome].Typeflag).To(Equal(byte(tar.TypeDir)))

			// The CLI on PATH under its usual name.
			g.Expect(st.cmd[0]).To(Equal(def.Binary))
			bin, ok := img.files["/usr/local/bin/"+def.Binary]
			g.Expect(ok).To(BeTrue(), "/usr/local/bin/%s", def.Binary)
			if bin.Typeflag == tar.TypeSymlink {
				g.Expect(st.symlinks).To(HaveKeyWithValue("/usr/local/bin/"+def.Binary, bin.Linkname), "the Dockerfile links it the same way")
				bin = img.files[bin.Linkname]
				g.Expect(bin).NotTo(BeNil(), "the link's target is in the image")
			}
			g.Expect(bin.Typeflag).To(Equal(byte(tar.TypeReg)))
			g.Expect(bin.Mode & 0o111).NotTo(BeZero())

			// The stage installs the CLI pinned in hack/agent-clis.versions.
			installs := 0
			for _, c := range st.copies {
				if c.from == "" {
					continue
				}
				inst, ok := stages[c.from]
				g.Expect(ok).To(BeTrue(), "stage %s", c.from)
				g.Expect(inst.copies).To(ContainElement(dockerCopy{src: "hack/agent-clis.versions", dest: "/tmp/agent-clis.versions"}))
				g.Expect(strings.Join(inst.runs, "\n")).To(ContainSubstring(fmt.Sprintf(`$3 == "%s"`, def.Binary)))
				installs++
			}
			g.Expect(installs).To(BeNumerically(">", 0))

			// Every path the stage copies, links or creates is in the local image, with the same owner.
			for _, c := range st.copies {
				h, ok := img.files[c.dest]
				g.Expect(ok).To(BeTrue(), "the local image lacks %s, which the Dockerfile copies", c.dest)
				owner := "0:0"
				if c.chown != "" {
					owner = c.chown
				}
				g.Expect(fmt.Sprintf("%d:%d", h.Uid, h.Gid)).To(Equal(owner), "owner of %s", c.dest)
				if c.from == "" {
					want, err := os.ReadFile(filepath.Join(in.Repo, c.src))
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(string(img.data[c.dest])).To(Equal(string(want)), "%s is the repository's %s", c.dest, c.src)
				}
				if h.Typeflag == tar.TypeDir {
					// What is below a copied directory has its owner too.
					for p, fh := range img.files {
						if strings.HasPrefix(p, c.dest+"/") {
							g.Expect(fmt.Sprintf("%d:%d", fh.Uid, fh.Gid)).To(Equal(owner), "owner of %s", p)
						}
					}
				}
			}
			for link, target := range st.symlinks {
				g.Expect(img.files).To(HaveKey(link))
				g.Expect(img.files[link].Linkname).To(Equal(target), link)
			}
			for dir, owner := range st.dirs {
				g.Expect(img.files).To(HaveKey(dir))
				g.Expect(fmt.Sprintf("%d:%d", img.files[dir].Uid, img.files[dir].Gid)).To(Equal(owner), dir)
			}
		})
	}
}

// TestAgentImagesContent: what each agent CLI needs beyond the binary.
func TestAgentImagesContent(t *testing.T) {
	g := NewWithT(t)
	in := standInAgentInputs(t)
	spec := func(key string) imageView {
		s, err := agentSpec(key, in)
		g.Expect(err).NotTo(HaveOccurred())
		return build(t, s)
	}

	claude := spec("claude-code")
	g.Expect(claude.config.Env).To(ContainElements(claudeEnv))
	g.Expect(claude.config.Env).NotTo(ContainElement(HavePrefix("IS_SANDBOX")), "non-root: bypassPermissions needs no sandbox flag")

	codex := spec("codex")
	for _, p := range []string{"/opt/codex/bin/codex", "/opt/codex/bin/codex-code-mode-host", "/opt/codex/codex-path/rg", "/opt/codex/codex-resources/bwrap"} {
		g.Expect(codex.files).To(HaveKey(p), "Codex finds it next to its executable")
		g.Expect(codex.files[p].Mode & 0o111).NotTo(BeZero())
	}
	g.Expect(codex.config.Env).To(ContainElement("CODEX_HOME=" + codexHome))
	g.Expect(codex.files[codexHome]).To(HaveField("Uid", agentUID), "CODEX_HOME is writable")
	conf := string(codex.data[codexHome+"/config.toml"])
	for _, want := range []string{"check_for_update_on_startup = false", "plugins = false", "remote_plugin = false", "[analytics]\nenabled = false"} {
		g.Expect(conf).To(ContainSubstring(want))
	}

	oc := spec("opencode")
	g.Expect(oc.config.Env).To(ContainElements(openCodeEnv))
	dir := agentHome + "/.config/opencode"
	for _, p := range []string{dir, dir + "/package.json", dir + "/package-lock.json", dir + "/node_modules/@opencode-ai/plugin/package.json", dir + "/opencode.json", dir + "/.gitignore"} {
		g.Expect(oc.files).To(HaveKey(p))
		g.Expect(oc.files[p]).To(HaveField("Uid", 0), "%s is root's: OpenCode leaves a directory it cannot write alone", p)
	}
	g.Expect(string(oc.data[dir+"/package.json"])).To(ContainSubstring(`"@opencode-ai/plugin": "` + in.CLIs["opencode"].Version + `"`))
	var ocConf map[string]any
	g.Expect(json.Unmarshal(oc.data[dir+"/opencode.json"], &ocConf)).To(Succeed())
	g.Expect(ocConf).To(HaveKeyWithValue("autoupdate", false))
	g.Expect(ocConf).To(HaveKeyWithValue("share", "disabled"))

	gem := spec("gemini")
	for _, p := range []string{"/usr/local/bin/node", "/opt/gemini/node_modules/@google/gemini-cli/bundle/gemini.js"} {
		g.Expect(gem.files).To(HaveKey(p), "Gemini CLI is JavaScript: node runs its bundle")
		g.Expect(gem.files[p].Mode & 0o111).NotTo(BeZero())
	}
	g.Expect(gem.files).To(HaveKey("/opt/gemini/node_modules/node-pty/package.json"), "its dependencies come along")
	g.Expect(gem.files["/opt/gemini/node_modules/.bin/gemini"].Linkname).To(Equal("../@google/gemini-cli/bundle/gemini.js"))
	g.Expect(gem.files[geminiSettings]).To(HaveField("Uid", 0), "the system settings are root's")
	var settings struct {
		Security struct {
			Auth struct {
				SelectedType string `json:"selectedType"`
			} `json:"auth"`
		} `json:"security"`
		Privacy struct {
			UsageStatisticsEnabled *bool `json:"usageStatisticsEnabled"`
		} `json:"privacy"`
		Telemetry struct {
			Enabled *bool `json:"enabled"`
		} `json:"telemetry"`
	}
	g.Expect(json.Unmarshal(gem.data[geminiSettings], &settings)).To(Succeed())
	g.Expect(settings.Security.Auth.SelectedType).To(Equal("gemini-api-key"), "else a base URL is refused headless")
	g.Expect(settings.Privacy.UsageStatisticsEnabled).To(HaveValue(BeFalse()), "else it connects to play.googleapis.com")
	g.Expect(settings.Telemetry.Enabled).To(HaveValue(BeFalse()))
}

// TestTestAgentImage: the fake agent answers as each CLI through symlinks on PATH.
func TestTestAgentImage(t *testing.T) {
	g := NewWithT(t)
	img := build(t, testAgentSpec(map[string]string{"fakeagent": fakeBinary(t, "fakeagent")}))
	g.Expect(img.config.User).To(Equal(nonRootUser))
	g.Expect(img.config.Env).To(ContainElement(debianPath))
	g.Expect(img.files).To(HaveKey("/usr/bin/git"), "on the Debian base")
	g.Expect(img.files["/usr/local/bin/fakeagent"].Typeflag).To(Equal(byte(tar.TypeReg)))
	for _, cli := range fakeAgentCLIs {
		h := img.files["/usr/local/bin/"+cli]
		g.Expect(h).NotTo(BeNil(), cli)
		g.Expect(h.Typeflag).To(Equal(byte(tar.TypeSymlink)), cli)
		g.Expect(h.Linkname).To(Equal("fakeagent"), cli)
	}
	home := img.files["/home/agent"]
	g.Expect(home).NotTo(BeNil())
	g.Expect(home.Uid).To(Equal(65532), "the agent's home is writable by the image's user")
}

// TestLayersAreReproducible: unchanged inputs give the same digest, so containerd reuses what it
// already unpacked.
func TestLayersAreReproducible(t *testing.T) {
	g := NewWithT(t)
	bin := fakeBinary(t, "manager")
	digest := func() v1.Hash {
		dir := t.TempDir()
		img, err := buildImage(managerSpec(bin), nil, dir, "")
		g.Expect(err).NotTo(HaveOccurred())
		d, err := img.Digest()
		g.Expect(err).NotTo(HaveOccurred())
		return d
	}
	g.Expect(digest()).To(Equal(digest()))
}

// TestLayerDigests: the digests the builder records while writing a layer, or reads once from a
// layer on disk, are the ones go-containerregistry computes from the file.
func TestLayerDigests(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "layer.tar.gz")
	m, err := writeLayer(p, []imageFile{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(standInPasswd)},
		{Path: "/usr/local/bin/tool", Mode: 0o755, Src: fakeBinary(t, "tool")},
		{Path: "/home/agent", Dir: true, Mode: 0o755, UID: agentUID, GID: agentUID},
		{Path: "/usr/local/bin/alias", Link: "tool"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	ref, err := tarball.LayerFromFile(p)
	g.Expect(err).NotTo(HaveOccurred())
	wantDigest, _ := ref.Digest()
	wantDiffID, _ := ref.DiffID()
	wantSize, _ := ref.Size()
	g.Expect(m.Digest).To(Equal(wantDigest.String()))
	g.Expect(m.DiffID).To(Equal(wantDiffID.String()))
	g.Expect(m.Size).To(Equal(wantSize))

	// Read from disk (as for the Debian base), with files extracted, then from the sidecar.
	l, err := openLayer(p, "etc/passwd")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.meta.Digest).To(Equal(m.Digest))
	g.Expect(l.meta.DiffID).To(Equal(m.DiffID))
	g.Expect(l.meta.Files).To(HaveKeyWithValue("etc/passwd", standInPasswd))
	g.Expect(metaPath(p)).To(BeARegularFile())
	again, err := openLayer(p, "etc/passwd")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.meta).To(Equal(l.meta))
	_, err = openLayer(p, "etc/shadow")
	g.Expect(err).To(MatchError(ContainSubstring("no regular file etc/shadow")))
}

// TestAgentImageCache: a second build with the same inputs reuses the big layer and keeps the
// archive; a changed CLI gives a new layer (the old one is removed) and a new archive.
func TestAgentImageCache(t *testing.T) {
	g := NewWithT(t)
	in := standInAgentInputs(t)
	dir, layers := t.TempDir(), filepath.Join(t.TempDir(), "layers")
	base := standInBase(t, dir)
	archive := filepath.Join(dir, "claude.tar")
	build := func() (bool, v1.Hash) {
		spec, err := claudeCodeSpec(in)
		g.Expect(err).NotTo(HaveOccurred())
		img, err := buildImage(spec, base, dir, layers)
		g.Expect(err).NotTo(HaveOccurred())
		wrote, err := writeArchive(archive, spec.Name, img)
		g.Expect(err).NotTo(HaveOccurred())
		id, err := img.ConfigName()
		g.Expect(err).NotTo(HaveOccurred())
		return wrote, id
	}
	wrote, first := build()
	g.Expect(wrote).To(BeTrue())
	cached, err := filepath.Glob(filepath.Join(layers, "*.tar.gz"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cached).To(HaveLen(1))
	st, err := os.Stat(cached[0])
	g.Expect(err).NotTo(HaveOccurred())

	wrote, second := build()
	g.Expect(wrote).To(BeFalse(), "the archive already holds this image")
	g.Expect(second).To(Equal(first))
	again, err := os.Stat(cached[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.ModTime()).To(Equal(st.ModTime()), "the cached layer was not rewritten")
	stamp, err := readArchiveStamp(archive)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stamp.ImageID).To(Equal(first.String()))
	g.Expect(stamp.Ref).To(Equal(agentDef("claude-code").Image))

	// A new CLI build (another binary, another modification time).
	src := filepath.Join(in.CLIDir(in.CLIs["claude"]), "node_modules", "@anthropic-ai", "claude-code", "bin", "claude.exe")
	writeFile(t, src, "\x7fELF claude, next build", 0o755)
	later := time.Now().Add(time.Minute)
	g.Expect(os.Chtimes(src, later, later)).To(Succeed())
	wrote, third := build()
	g.Expect(wrote).To(BeTrue())
	g.Expect(third).NotTo(Equal(first))
	now, err := filepath.Glob(filepath.Join(layers, "*.tar.gz"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now).To(HaveLen(1), "the old layer is gone")
	g.Expect(now[0]).NotTo(Equal(cached[0]))

	// An archive changed behind the builder's back is written again.
	g.Expect(os.WriteFile(archive, []byte("broken"), 0o644)).To(Succeed())
	wrote, _ = build()
	g.Expect(wrote).To(BeTrue())
}

// TestParseOnly: --only takes image names or all.
func TestParseOnly(t *testing.T) {
	g := NewWithT(t)
	want, err := parseOnly(defaultImages)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(want).To(Equal(map[string]bool{"manager": true, "runner": true, "test-agent": true, "claude-code": true}))
	want, err = parseOnly("all")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(want).To(HaveLen(len(imageKeys)))
	want, err = parseOnly("codex, opencode")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(want).To(Equal(map[string]bool{"codex": true, "opencode": true}))
	_, err = parseOnly("claude")
	g.Expect(err).To(MatchError(ContainSubstring(`unknown image "claude"`)))
}

func mustTag(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// TestAiderStage: the Dockerfile's Aider image installs the pinned aider-chat, as the user and
// with the settings of the other agent images; the manager's default aider image is its name.
func TestAiderStage(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	g.Expect(err).NotTo(HaveOccurred())
	df := string(raw)
	_, stage, found := strings.Cut(df, "AS agent-aider")
	g.Expect(found).To(BeTrue(), "the Dockerfile has the stage agent-aider")
	stage, _, _ = strings.Cut(stage, "\nFROM ")
	for _, want := range []string{"--uid 65532", "COPY hack/agent-images/aider/requirements.txt", "pip install --no-cache-dir -r",
		"AIDER_ANALYTICS=false", "AIDER_CHECK_UPDATE=false", "USER 65532:65532", "git"} {
		g.Expect(stage).To(ContainSubstring(want))
	}
	req, err := os.ReadFile(filepath.Join("..", "agent-images", "aider", "requirements.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(req)).To(MatchRegexp(`(?m)^aider-chat==[0-9]+\.[0-9]+\.[0-9]+$`), "pinned to one version")
	main, err := os.ReadFile(filepath.Join("..", "..", "cmd", "manager", "main.go"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(main)).To(ContainSubstring("aider=shepherd-agent-aider:latest"), "the default is the image this stage makes")
}
