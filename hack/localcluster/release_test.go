package main

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// A release's OCI archive pushes to a registry (go-containerregistry's registry server, the
// distribution API over loopback) under the tag and the digest the manifests pin, and the
// pinned reference resolves there to the same image.
func TestReleaseArchivePushes(t *testing.T) {
	dir := t.TempDir()
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	built := filepath.Join(dir, "shepherd-manager.tar")
	if _, err := writeArchive(built, "shepherd-manager:latest", img); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(dir, "dist")
	key, ref, err := writeOCIArchive(built, filepath.Join(dist, "images"), "ghcr.io/shepherd-dev", "v0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if key != "manager" || !strings.HasPrefix(ref, "ghcr.io/shepherd-dev/shepherd-manager:v0.0.1@sha256:") {
		t.Fatalf("key %q ref %q", key, ref)
	}
	if err := os.WriteFile(filepath.Join(dist, imagesFile), []byte(key+" "+ref+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	if err := cmdPush(context.Background(), globals{repo: dir}, []string{"--dist", "dist", "--registry", u.Host + "/mirror", "--insecure"}); err != nil {
		t.Fatal(err)
	}
	digest := ref[strings.Index(ref, "@")+1:]
	for _, pulled := range []string{u.Host + "/mirror/shepherd-manager:v0.0.1", u.Host + "/mirror/shepherd-manager@" + digest} {
		r, err := name.ParseReference(pulled, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(r)
		if err != nil {
			t.Fatalf("pull %s: %v", pulled, err)
		}
		d, _ := idx.Digest()
		if d.String() != digest {
			t.Fatalf("%s is %s, want %s", pulled, d, digest)
		}
		m, _ := idx.IndexManifest()
		want, _ := img.Digest()
		if len(m.Manifests) != 1 || m.Manifests[0].Digest != want || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.OS != "linux" {
			t.Fatalf("index %+v, want the image %s for linux", m.Manifests, want)
		}
	}

	// A stale archive (rebuilt after the manifests were rendered) is refused, not pushed.
	other, _ := random.Image(512, 1)
	if err := tarball.WriteToFile(built, name.MustParseReference("shepherd-manager:latest"), other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := writeOCIArchive(built, filepath.Join(dir, "stale"), "ghcr.io/shepherd-dev", "v0.0.1"); err == nil {
		if err := os.Rename(filepath.Join(dir, "stale", "shepherd-manager.oci.tar"), filepath.Join(dist, "images", "shepherd-manager.oci.tar")); err != nil {
			t.Fatal(err)
		}
	}
	err = cmdPush(context.Background(), globals{repo: dir}, []string{"--dist", "dist", "--registry", u.Host + "/mirror", "--insecure"})
	if err == nil || !strings.Contains(err.Error(), "run make release again") {
		t.Fatalf("stale archive: %v", err)
	}
}
