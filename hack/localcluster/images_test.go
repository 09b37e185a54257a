package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	. "github.com/onsi/gomega"
)

// dockerStage is what the agreement test reads from one stage of the Dockerfile.
type dockerStage struct {
	name       string
	base       string
	user       string
	entrypoint []string
	workdir    string
	// copies maps the destination path to the builder output it copies (COPY --from=builder).
	copies map[string]string
	// aptPackages are the packages an `apt-get install` line adds.
	aptPackages []string
}

// parseDockerfile reads the instructions the local builder must agree with: FROM ... AS, USER,
// ENTRYPOINT (exec form), WORKDIR, COPY --from, and apt-get install; continuation lines joined.
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
			st = &dockerStage{base: f[0], copies: map[string]string{}}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
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
		case "COPY":
			f := strings.Fields(rest)
			if len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
				st.copies[f[2]] = f[1]
			}
		case "RUN":
			for _, cmd := range strings.Split(rest, "&&") {
				words := strings.Fields(cmd)
				if len(words) > 2 && words[0] == "apt-get" && words[1] == "install" {
					for _, w := range words[2:] {
						if !strings.HasPrefix(w, "-") {
							st.aptPackages = append(st.aptPackages, w)
						}
					}
				}
			}
		}
	}
	return stages
}

// imageView is what an image built by the local builder says about itself.
type imageView struct {
	config v1.Config
	files  map[string]*tar.Header
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
	v := imageView{config: cf.Config, files: map[string]*tar.Header{}}
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
			v.files["/"+strings.TrimSuffix(h.Name, "/")] = h
		}
		_ = rc.Close()
	}
	return v
}

// build runs the local builder on a spec with a stand-in Debian base and returns the image.
func build(t *testing.T, spec imageSpec) imageView {
	t.Helper()
	dir := t.TempDir()
	base := filepath.Join(dir, "debian-base.tar.gz")
	// A stand-in for the debootstrapped root filesystem: enough to check layering and paths.
	if err := writeLayer(base, []imageFile{{Path: "/usr/bin/git", Mode: 0o755, Data: []byte("#!/bin/sh\n")}}); err != nil {
		t.Fatal(err)
	}
	debian, err := tarball.LayerFromFile(base)
	if err != nil {
		t.Fatal(err)
	}
	img, err := buildImage(spec, debian, dir)
	if err != nil {
		t.Fatalf("build %s: %v", spec.Name, err)
	}
	archive := filepath.Join(dir, archiveName(spec.Name))
	if err := writeArchive(archive, spec.Name, img); err != nil {
		t.Fatal(err)
	}
	return inspect(t, archive, spec.Name)
}

func fakeBinary(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("\x7fELF stand-in for "+name), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
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
			for dest := range st.copies {
				h, ok := img.files[dest]
				g.Expect(ok).To(BeTrue(), "the local image lacks %s, which the Dockerfile copies", dest)
				g.Expect(h.Typeflag).To(Equal(byte(tar.TypeReg)), "%s is a regular file", dest)
				g.Expect(h.Mode&0o111).NotTo(BeZero(), "%s is executable", dest)
			}
			// The entrypoint is one of the copied binaries.
			g.Expect(st.copies).To(HaveKey(img.config.Entrypoint[0]))
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
	// Every image stage of the Dockerfile has a local equivalent.
	for name := range stages {
		if name == "builder" {
			continue
		}
		g.Expect(slices.ContainsFunc(specs, func(s imageSpec) bool { return s.Stage == name })).To(BeTrue(), "no local image for Dockerfile stage %q", name)
	}
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
		img, err := buildImage(managerSpec(bin), nil, dir)
		g.Expect(err).NotTo(HaveOccurred())
		d, err := img.Digest()
		g.Expect(err).NotTo(HaveOccurred())
		return d
	}
	g.Expect(digest()).To(Equal(digest()))
}

func mustTag(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}
