package e2e

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// localRegistry is a real OCI distribution server (go-containerregistry's, in this process) on
// the node's IP, which the node's containerd pulls from over plain HTTP: the path a user's own
// registry takes, where `make push` sends a release.
type localRegistry struct {
	host  string // ip:port
	srv   *http.Server
	hosts string // the hosts.toml written for containerd

	mu sync.Mutex
	// pulled counts manifest GETs by repository: what containerd pulled.
	pulled map[string]int
}

// startRegistry serves a registry on ip and tells the cluster's containerd, through its
// registry config_path (hack/localcluster: containerd/certs.d in the run directory), that the
// registry speaks plain HTTP.
func startRegistry(c *cluster, ip string) *localRegistry {
	GinkgoHelper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	Expect(err).NotTo(HaveOccurred())
	r := &localRegistry{host: ln.Addr().String(), pulled: map[string]int{}}
	// Its log (each request, each error) goes with the spec's output.
	h := registry.New(registry.Logger(log.New(GinkgoWriter, "registry: ", 0)))
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/"); ok && req.Method == http.MethodGet {
			r.mu.Lock()
			r.pulled[repo]++
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	})}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(GinkgoWriter, "registry: %v\n", err)
		}
	}()
	DeferCleanup(func() { _ = r.srv.Close() })

	dir := filepath.Join(c.runDir, "containerd", "certs.d", r.host)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	r.hosts = filepath.Join(dir, "hosts.toml")
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+r.host, "http://"+r.host)
	Expect(os.WriteFile(r.hosts, []byte(toml), 0o644)).To(Succeed())
	DeferCleanup(func() { _ = os.RemoveAll(dir) })
	return r
}

// push sends a built image (bin/images/<repo>_latest.tar) to the registry as <repo>:latest and
// returns its digest.
func (r *localRegistry) push(repo string) string {
	GinkgoHelper()
	local, err := name.NewTag(repo + ":latest")
	Expect(err).NotTo(HaveOccurred())
	img, err := tarball.ImageFromPath(filepath.Join(repoRoot(), "bin", "images", repo+"_latest.tar"), &local)
	Expect(err).NotTo(HaveOccurred())
	dst, err := name.NewTag(r.host+"/"+repo+":latest", name.Insecure)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	Expect(remote.Write(dst, img, remote.WithContext(ctx))).To(Succeed())
	d, err := img.Digest()
	Expect(err).NotTo(HaveOccurred())
	return d.String()
}

// pulls is how many times containerd fetched repo's manifest.
func (r *localRegistry) pulls(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulled[repo]
}
