package tracker

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"text/template"

	"github.com/shepherd-dev/shepherd/internal/clip"

	"github.com/shepherd-dev/shepherd/internal/safetemplate"
)

// DefaultPromptTemplate is used when the Project sets no promptTemplate.
const DefaultPromptTemplate = `Work on {{.Issue.ID}}: {{.Issue.Title}}
{{- if .Issue.URL}}
{{.Issue.URL}}{{end}}
{{- if .Issue.Labels}}
Labels: {{join .Issue.Labels ", "}}{{end}}
{{if .Issue.Body}}
{{.Issue.Body}}
{{end}}
{{- if .Issue.Comments}}
Comments:
{{- range .Issue.Comments}}
- {{.Author}}: {{.Body}}
{{- end}}
{{end}}
{{- if .Issue.OmittedComments}}
({{.Issue.OmittedComments}} comment(s) by authors this project does not trust were left out.)
{{end}}
You are on the branch {{.Branch}} of {{.Project.Repository}}. Make the change, add or update tests,
and commit your work. Shepherd pushes the branch and opens the pull request.
`

// maxPrompt bounds a rendered prompt (the API's prompt limit).
const maxPrompt = 32768

// ErrTemplate marks a promptTemplate that does not parse or render; the Project controller
// reports it on the Project.
var ErrTemplate = errors.New("prompt template")

// PromptIssue is what a template sees as .Issue.
type PromptIssue struct {
	ID, Title, Body, URL string
	Labels               []string
	Comments             []Comment
	// OmittedComments counts the comments left out because the Project does not trust their
	// authors (spec.trustedAuthors).
	OmittedComments int
}

// PromptProject is what a template sees as .Project; it prints as its name.
type PromptProject struct {
	Name, Namespace string
	// Repository is "owner/name".
	Repository    string
	DefaultBranch string
}

func (p PromptProject) String() string { return p.Name }

// PromptData is the template's input.
type PromptData struct {
	Issue   PromptIssue
	Project PromptProject
	Branch  string
}

// NewPromptData builds the input of a template from an issue.
// Long bodies and comment threads are cut so that the prompt stays within the API's bound.
func NewPromptData(issue *Issue, project PromptProject, branch string) PromptData {
	labels := issue.Labels
	if len(labels) > maxPromptLabels {
		labels = labels[:maxPromptLabels]
	}
	comments := issue.Comments
	if len(comments) > maxPromptComments {
		comments = comments[len(comments)-maxPromptComments:]
	}
	cut := make([]Comment, len(comments))
	for i, c := range comments {
		c.Body = clip.Marked(c.Body, maxPromptComment, " […]")
		cut[i] = c
	}
	return PromptData{
		Issue: PromptIssue{ID: issue.ID, Title: clip.Marked(issue.Title, 1024, " […]"), Body: clip.Marked(issue.Body, maxPromptBody, " […]"), URL: issue.URL,
			Labels: labels, Comments: cut, OmittedComments: issue.OmittedComments},
		Project: project,
		Branch:  branch,
	}
}

const (
	maxPromptBody     = 16384
	maxPromptComments = 10
	maxPromptComment  = 1024
	// maxPromptLabels bounds the labels a template can range over (GitHub allows 100 an issue).
	maxPromptLabels = 100
)

// CheckPrompt checks a template for the Project controller before any session needs it: it must
// parse and render an issue that has every field set (a field name that does not exist, a
// function called wrongly, are caught here rather than when a session starts).
func CheckPrompt(tmpl string) error {
	return safetemplate.Checked("prompt\x00"+tmpl, func() error { return checkPrompt(tmpl) })
}

func checkPrompt(tmpl string) error {
	_, err := RenderPrompt(tmpl, NewPromptData(&Issue{
		ID: "42", Key: "42", Title: "A title", Body: "A body", URL: "https://example.com/issues/42",
		Labels: []string{"bug"}, Comments: []Comment{{Author: "someone", Body: "A comment"}},
	}, PromptProject{Name: "project", Namespace: "default", Repository: "owner/name", DefaultBranch: "main"}, "shepherd/42-a-title"))
	return err
}

func parsePrompt(tmpl string) (*template.Template, error) {
	if strings.TrimSpace(tmpl) == "" {
		tmpl = DefaultPromptTemplate
	}
	t, err := safetemplate.Parse("prompt", tmpl, template.FuncMap{
		"join":  strings.Join,
		"upper": strings.ToUpper,
		"lower": strings.ToLower,
		"trim":  strings.TrimSpace,
	}, reflect.TypeFor[PromptData]())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	return t, nil
}

// RenderPrompt renders tmpl (the built-in template when empty) with data. The text is the
// issue's, unchanged: the runner hands the prompt to the agent as one argument, never through a
// shell, so nothing needs escaping.
func RenderPrompt(tmpl string, data PromptData) (string, error) {
	t, err := parsePrompt(tmpl)
	if err != nil {
		return "", err
	}
	text, err := safetemplate.Execute(t, data, maxPrompt, safetemplate.DefaultTimeout)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	return strings.TrimSpace(text) + "\n", nil
}
