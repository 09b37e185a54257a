package scenario

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// The fake GitHub's identities and secrets. They are only valid on the fake.
const (
	fakeOwner         = "acme"
	fakeBotLogin      = "shepherd-bot"
	fakeBotToken      = "ghp_fake_shepherd_bot"
	fakeReviewerLogin = "reviewer"
	fakeReviewerToken = "ghp_fake_reviewer"
	fakeWebhookSecret = "fake-github-webhook-secret"
	fakeIssueAuthor   = "alice"
	// fakeCheck is the required check run.
	fakeCheck = "test"
)

// FakeGitHubOptions configure StartFakeGitHub.
type FakeGitHubOptions struct {
	// Host is the address to listen on and to put in URLs: the node's IP, so that pods reach it.
	Host string
	// Dir holds the bare repositories (a temporary directory when empty, removed by Close).
	Dir string
}

// FakeGitHub is the in-repo fake GitHub (test/fakegithub) serving the scenario's repository.
type FakeGitHub struct {
	// Server is the fake itself, for what the Forge interface does not say (statistics, every
	// pull request).
	Server *fakegithub.Server
	issue  int
}

var _ Forge = (*FakeGitHub)(nil)

// StartFakeGitHub serves the fake GitHub on opts.Host with the repository acme/greeter (seeded,
// main protected by the check "test" and one approval) and its issue.
func StartFakeGitHub(opts FakeGitHubOptions) (*FakeGitHub, error) {
	gh, err := fakegithub.New(fakegithub.Options{Dir: opts.Dir, WebhookSecret: []byte(fakeWebhookSecret)})
	if err != nil {
		return nil, err
	}
	f := &FakeGitHub{Server: gh}
	if err := f.seed(opts.Host); err != nil {
		_ = gh.Close()
		return nil, err
	}
	return f, nil
}

// HookTo sends the repository's webhooks to url from now on.
func (f *FakeGitHub) HookTo(_ context.Context, url string) error {
	f.Server.SetWebhookURL(url)
	return nil
}

func (f *FakeGitHub) seed(host string) error {
	gh := f.Server
	if err := gh.Start(net.JoinHostPort(host, "0")); err != nil {
		return fmt.Errorf("start the fake GitHub: %w", err)
	}
	gh.AddToken(fakeBotToken, fakeBotLogin)
	gh.AddToken(fakeReviewerToken, fakeReviewerLogin)
	if _, err := gh.CreateRepo(f.Repo(), "main", SeedFiles()); err != nil {
		return fmt.Errorf("create %s: %w", f.Repo(), err)
	}
	if err := gh.SetProtection(f.Repo(), fakegithub.Protection{RequiredChecks: []string{fakeCheck}, RequiredApprovals: 1}); err != nil {
		return fmt.Errorf("protect %s: %w", f.Repo(), err)
	}
	n, err := gh.CreateIssue(f.Repo(), fakegithub.Issue{Title: IssueTitle, Body: IssueBody, User: fakeIssueAuthor})
	if err != nil {
		return fmt.Errorf("open the issue: %w", err)
	}
	f.issue = n
	return nil
}

func (f *FakeGitHub) Name() string            { return "the fake GitHub" }
func (f *FakeGitHub) Provider() string        { return "github" }
func (f *FakeGitHub) Repo() string            { return fakeOwner + "/" + RepoName }
func (f *FakeGitHub) CloneURL() string        { return f.Server.CloneURL(f.Repo()) }
func (f *FakeGitHub) APIURL() string          { return f.Server.URL() }
func (f *FakeGitHub) Token() string           { return fakeBotToken }
func (f *FakeGitHub) WebhookSecret() string   { return fakeWebhookSecret }
func (f *FakeGitHub) Issue() int              { return f.issue }
func (f *FakeGitHub) Check() string           { return fakeCheck }
func (f *FakeGitHub) FailureEvidence() string { return "TestGreet" }
func (f *FakeGitHub) Close() error            { return f.Server.Close() }

// PullRequest reads a pull request; its URL is the fake's html_url.
func (f *FakeGitHub) PullRequest(_ context.Context, n int) (PullRequest, error) {
	info, err := f.Server.PullRequest(f.Repo(), n)
	if err != nil {
		return PullRequest{}, err
	}
	return PullRequest{Number: info.Number, URL: fmt.Sprintf("%s/%s/pull/%d", f.Server.URL(), f.Repo(), info.Number),
		HeadBranch: info.HeadRef, HeadSHA: info.HeadSHA, State: info.State, Merged: info.Merged, MergeSHA: info.MergeCommitSHA}, nil
}

// maxNumber bounds the numbers PullRequestsFor reads: issues and pull requests share them, and
// this repository has a handful.
const maxNumber = 100

// PullRequestsFor reads every number of the repository (issues answer not-a-pull-request).
func (f *FakeGitHub) PullRequestsFor(ctx context.Context, branch string) ([]PullRequest, error) {
	var out []PullRequest
	for n := 1; n <= maxNumber; n++ {
		pr, err := f.PullRequest(ctx, n)
		if err == nil && pr.HeadBranch == branch {
			out = append(out, pr)
		}
	}
	return out, nil
}

// Commits reads the pull request's commits from the bare repository with git: those of its head
// that main (before a squash merge, or after it) does not have.
func (f *FakeGitHub) Commits(ctx context.Context, n int) ([]Commit, error) {
	pr, err := f.PullRequest(ctx, n)
	if err != nil {
		return nil, err
	}
	base := "main"
	if pr.Merged && pr.MergeSHA != "" {
		base = pr.MergeSHA + "^"
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "--git-dir", f.Server.GitDir(f.Repo()), "log", "--reverse",
		"--format=%H%x00%an%x00%ct%x00%s", pr.HeadSHA, "^"+base).Output()
	if err != nil {
		return nil, fmt.Errorf("git log of pull request #%d: %w", n, err)
	}
	var commits []Commit
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "\x00", 4)
		if len(parts) != 4 {
			continue
		}
		secs, _ := strconv.ParseInt(parts[2], 10, 64)
		commits = append(commits, Commit{SHA: parts[0], Author: parts[1], When: time.Unix(secs, 0), Message: parts[3]})
	}
	return commits, nil
}

// ReportCI completes the check run "test" on sha; a failure carries the failing test's log.
func (f *FakeGitHub) ReportCI(_ context.Context, sha string, passed bool) error {
	run := fakegithub.CheckRun{Name: fakeCheck, Conclusion: "success"}
	if !passed {
		run.Conclusion, run.Log = "failure", FailureLog
	}
	_, err := f.Server.AddCheckRun(f.Repo(), sha, run)
	return err
}

// RequestChanges opens a review thread on greet.go:1, then requests changes.
func (f *FakeGitHub) RequestChanges(_ context.Context, n int) error {
	if _, err := f.Server.AddReviewThread(f.Repo(), n, fakeReviewerLogin, ReviewPath, ReviewLine, ReviewComment); err != nil {
		return err
	}
	_, err := f.Server.AddReview(f.Repo(), n, fakeReviewerLogin, "CHANGES_REQUESTED", ReviewBody)
	return err
}

// Approve approves as the reviewer.
func (f *FakeGitHub) Approve(_ context.Context, n int) error {
	_, err := f.Server.AddReview(f.Repo(), n, fakeReviewerLogin, "APPROVED", ApprovalBody)
	return err
}
