//go:build integration

package gitea

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestStartAttachStop starts the real Gitea (built into the shared cache by `make gitea`, which
// `make test-integration` runs first).
func TestStartAttachStop(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := Start(ctx, Options{Dir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = s.Stop() }()
	written, err := os.ReadFile(filepath.Join(dir, "app.ini"))
	g.Expect(err).NotTo(HaveOccurred())

	// Both users work with their tokens.
	for _, u := range []User{s.Admin, s.Reviewer} {
		var me struct {
			Login string `json:"login"`
		}
		g.Expect(s.Client(u).Do(ctx, "GET", "/user", nil, &me)).To(Succeed())
		g.Expect(me.Login).To(Equal(u.Name))
	}
	again, err := os.ReadFile(filepath.Join(dir, "app.ini"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(again)).To(Equal(string(written)), "every secret was pre-generated: Gitea did not rewrite app.ini")

	attached, err := Attach(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(attached.URL).To(Equal(s.URL))
	g.Expect(attached.Admin).To(Equal(s.Admin))
	g.Expect(attached.Running()).To(BeTrue())
	_, err = Start(ctx, Options{Dir: dir})
	g.Expect(err).To(MatchError(ContainSubstring("already holds a forge")))

	g.Expect(attached.Stop()).To(Succeed())
	g.Expect(s.Stop()).To(Succeed(), "stopping a stopped forge succeeds")
	g.Expect(attached.Running()).To(BeFalse())
	g.Expect(s.Running()).To(BeFalse())
}
