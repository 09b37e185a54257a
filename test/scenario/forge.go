package scenario

import (
	"context"
	"time"
)

// The scenario's repository, issue and review, the same on every forge.
const (
	// RepoName is the repository's name; its owner is the forge's (acme on the fake GitHub,
	// the admin on Gitea).
	RepoName = "greeter"
	// IssueTitle and IssueBody are the issue the session works on.
	IssueTitle = "Greet the world"
	IssueBody  = "Greet() should say hello, world."
	// ReviewPath and ReviewLine are where the reviewer's comment sits; ReviewComment is what it
	// says and ReviewBody the review's own text.
	ReviewPath    = "greet.go"
	ReviewLine    = 1
	ReviewComment = "Please document Greet."
	ReviewBody    = "Needs a doc comment."
	ApprovalBody  = "Thanks!"
	// FailureLog is the failing test's output, where the forge carries CI logs.
	FailureLog = "--- FAIL: TestGreet\n    greet_test.go:9: Greet() = \"hello\", want \"hello, world\"\n"
)

// SeedFiles are the repository's first commit on main.
func SeedFiles() map[string]string {
	return map[string]string{
		"README.md": "# greeter\n",
		"greet.go":  "package greeter\n\nfunc Greet() string { return \"hello\" }\n",
	}
}

// Forge is where the repository, the issue and the pull request live, and what CI and the
// reviewer act on. FakeGitHub and Gitea implement it.
type Forge interface {
	// Name is for people: "the fake GitHub", "Gitea 1.26.0".
	Name() string
	// Provider is the Project's scm.provider and tracker.provider: github or gitea.
	Provider() string
	// Repo is the repository's full name (owner/name).
	Repo() string
	// CloneURL and APIURL are the Project's repository.url and scm.apiURL.
	CloneURL() string
	APIURL() string
	// Token is the bot's token (the Project's credentials): it pushes, opens and merges.
	Token() string
	// WebhookSecret signs the forge's webhooks to the manager.
	WebhookSecret() string
	// HookTo points the repository's webhook at url: the Project's path on the manager's
	// receiver (WebhookURL), known once the Project's namespace is.
	HookTo(ctx context.Context, url string) error
	// Issue is the number of the issue the session works on.
	Issue() int
	// Check is the name of the required check (a check run or a commit status context).
	Check() string
	// FailureEvidence is what of the CI failure the forge hands the manager, so that it reaches
	// the agent: the log on GitHub, the status's target URL on Gitea (no logs).
	FailureEvidence() string

	// PullRequest reads a pull request.
	PullRequest(ctx context.Context, n int) (PullRequest, error)
	// PullRequestsFor lists the pull requests (in any state) whose head is branch.
	PullRequestsFor(ctx context.Context, branch string) ([]PullRequest, error)
	// Commits lists a pull request's commits, oldest first.
	Commits(ctx context.Context, n int) ([]Commit, error)
	// ReportCI reports the required check on sha: passed, or failed with the failure.
	ReportCI(ctx context.Context, sha string, passed bool) error
	// RequestChanges submits the reviewer's review requesting changes, with one line comment.
	RequestChanges(ctx context.Context, n int) error
	// Approve submits the reviewer's approval.
	Approve(ctx context.Context, n int) error
	// Close stops the forge (a no-op for what the caller owns).
	Close() error
}

// PullRequest is a forge's view of a pull request.
type PullRequest struct {
	Number     int
	URL        string
	HeadBranch string
	HeadSHA    string
	State      string // open, closed
	Merged     bool
	MergeSHA   string
}

// Commit is one commit of a pull request.
type Commit struct {
	SHA     string
	Author  string
	Message string // the subject line
	When    time.Time
}

// Short is the commit's abbreviated SHA.
func (c Commit) Short() string { return short(c.SHA) }

func short(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}
