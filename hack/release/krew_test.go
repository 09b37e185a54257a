package release

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// krewTools is the cached krew and validate-krew-manifest (hack/krew.sh builds them from the Go
// module proxy once).
func krewTools(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(), "hack", "krew.sh")).Output()
	if err != nil {
		t.Fatalf("hack/krew.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// The release's krew manifest passes krew's own validator, and krew installs the plugin from
// the archive it names (this machine's platform: the others are cross-compiled the same way),
// checking the archive's SHA-256; the installed plugin runs and knows its version.
func TestKrewManifestInstalls(t *testing.T) {
	g := NewWithT(t)
	tools := krewTools(t)
	dir := t.TempDir()
	host := Platform{runtime.GOOS, runtime.GOARCH}
	// One platform here (a cross-compilation of client-go costs minutes on 2 cores); make release
	// builds every PluginPlatforms the same way. The Windows entry shows the .exe naming.
	archives, err := BuildPlugin(context.Background(), repoRoot(), filepath.Join(dir, "plugin"), "v0.0.0-test", []Platform{host})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(archives).To(HaveLen(1))
	windows := PluginArchive{Platform: Platform{"windows", "amd64"}, File: "kubectl-shepherd_windows_amd64.tar.gz", SHA256: strings.Repeat("0", 64)}
	m, err := KrewManifest("v0.0.0-test", "https://github.com/shepherd-dev/shepherd/releases/download/v0.0.0-test", append(archives, windows))
	g.Expect(err).NotTo(HaveOccurred())
	manifest := filepath.Join(dir, "shepherd.yaml")
	g.Expect(os.WriteFile(manifest, m, 0o644)).To(Succeed())
	var parsed struct {
		Spec struct {
			Version   string
			Platforms []struct{ URI, SHA256, Bin string }
		}
	}
	g.Expect(yaml.Unmarshal(m, &parsed)).To(Succeed())
	g.Expect(parsed.Spec.Version).To(Equal("v0.0.0-test"))
	g.Expect(parsed.Spec.Platforms[1].Bin).To(Equal("kubectl-shepherd.exe"))
	g.Expect(parsed.Spec.Platforms[0].URI).To(HaveSuffix("/kubectl-shepherd_" + host.OS + "_" + host.Arch + ".tar.gz"))

	out, err := exec.Command(filepath.Join(tools, "validate-krew-manifest"), "-manifest", manifest, "-skip-install").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	root := filepath.Join(dir, "krew")
	install := exec.Command(filepath.Join(tools, "krew"), "install", "--manifest", manifest, "--archive", filepath.Join(dir, "plugin", archives[0].File))
	install.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_NO_UPGRADE_CHECK=1")
	out, err = install.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring(`Installed plugin: shepherd`))
	ver, err := exec.Command(filepath.Join(root, "bin", "kubectl-shepherd"), "version").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(ver))).To(Equal("v0.0.0-test"))
	g.Expect(filepath.Join(root, "store", "shepherd", "v0.0.0-test", "LICENSE")).To(BeARegularFile())

	// An archive whose digest is not the manifest's is refused.
	bad := filepath.Join(dir, "tampered.tar.gz")
	g.Expect(os.WriteFile(bad, []byte("not the release"), 0o644)).To(Succeed())
	again := exec.Command(filepath.Join(tools, "krew"), "install", "--manifest", manifest, "--archive", bad)
	again.Env = append(os.Environ(), "KREW_ROOT="+filepath.Join(dir, "krew2"), "KREW_NO_UPGRADE_CHECK=1")
	out, err = again.CombinedOutput()
	g.Expect(err).To(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("checksum does not match"))
}
