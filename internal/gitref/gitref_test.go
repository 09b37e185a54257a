package gitref

import (
	"os/exec"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestValidateBranchTable(t *testing.T) {
	cases, err := Cases()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("the shared table has %d rows; keep at least 30", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			g := NewWithT(t)
			err := ValidateBranch(c.Name)
			if c.Valid {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(c.Message))
		})
	}
}

// TestTableAgreesWithGit runs the real git on every row, so that the table (and through it the
// CEL rules) follow git's own definition.
func TestTableAgreesWithGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is required for this test: install it (apt-get install git)")
	}
	cases, err := Cases()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		// git accepts "@" and "HEAD" as refnames; we refuse them on purpose because
		// `git branch HEAD` and "@" as a branch confuse every tool that reads them.
		if c.Name == "@" || c.Name == "HEAD" {
			continue
		}
		out, err := exec.Command(git, "check-ref-format", "--branch", c.Name).CombinedOutput()
		gitValid := err == nil
		if gitValid != c.Valid {
			t.Errorf("%q: table says valid=%v, git check-ref-format --branch says valid=%v (%s)", c.Name, c.Valid, gitValid, strings.TrimSpace(string(out)))
		}
	}
}

func TestSanitize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Fix the login bug", "fix-the-login-bug"},
		{"$(rm -rf /); `echo pwned`", "rm-rf-echo-pwned"},
		{"  ---  ", ""},
		{"ünïcødé title", "n-c-d-title"},
		{strings.Repeat("a", 300), strings.Repeat("a", 40)},
		{"a--b", "a-b"},
	} {
		g := NewWithT(t)
		got := Sanitize(tc.in, 40)
		g.Expect(got).To(Equal(tc.want), tc.in)
		if got != "" {
			g.Expect(ValidateBranch(got)).To(Succeed())
		}
	}
}

func FuzzSanitizeProducesValidBranch(f *testing.F) {
	for _, s := range []string{"Fix bug", "..", "a.lock", "-x", "@{", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Sanitize(s, 60)
		if len(got) > 60 {
			t.Fatalf("Sanitize(%q) = %q, longer than 60", s, got)
		}
		if got != "" {
			if err := ValidateBranch("shepherd/" + got); err != nil {
				t.Fatalf("Sanitize(%q) = %q, not a valid branch: %v", s, got, err)
			}
		}
	})
}
