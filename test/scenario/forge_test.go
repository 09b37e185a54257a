package scenario

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
	_ "github.com/shepherd-dev/shepherd/internal/scm/gitea"
	_ "github.com/shepherd-dev/shepherd/internal/scm/github"
)

// The Forge contract, checked through Shepherd's own adapters (what the manager sees): a pull
// request opened by the bot reads back, CI reports fail then pass the required check, the
// reviewer's request for changes carries the line comment, the approval approves, and after the
// merge the commits still read in order. Both forges, so that the e2e specs and the demo play
// the same scenario on either: the fake GitHub here, the real Gitea in forge_gitea_test.go (an
// integration test: `make test-integration`).
func TestForgeContract(t *testing.T) { forgeContract(t, "github") }

func forgeContract(t *testing.T, name string) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var deliveries atomic.Int32
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		deliveries.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer hooks.Close()
	f, push := startForge(ctx, t, name, hooks.URL+"/")
	checkForge(ctx, t, f, push)
	if deliveries.Load() == 0 {
		t.Error("the forge sent no webhook")
	}
}

// pushFunc commits files on a branch of the scenario's repository, as the agent's runner would
// push, and returns the commit.
type pushFunc func(branch string, files map[string]string, message string) string

func startForge(ctx context.Context, t *testing.T, name, webhookURL string) (Forge, pushFunc) {
	t.Helper()
	switch name {
	case "github":
		f, err := StartFakeGitHub(FakeGitHubOptions{Host: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.HookTo(ctx, webhookURL); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f, func(branch string, files map[string]string, message string) string {
			sha, err := f.Server.Push(f.Repo(), branch, files, message)
			if err != nil {
				t.Fatal(err)
			}
			return sha
		}
	default:
		f, err := StartGitea(ctx, GiteaOptions{Dir: filepath.Join(t.TempDir(), "gitea"), Host: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.HookTo(ctx, webhookURL); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f, func(branch string, files map[string]string, message string) string {
			sha, err := f.admin.CommitFiles(ctx, f.owner(), RepoName, branch, "main", files, message)
			if err != nil {
				t.Fatal(err)
			}
			return sha
		}
	}
}

func checkForge(ctx context.Context, t *testing.T, f Forge, push pushFunc) {
	if f.Issue() <= 0 {
		t.Fatalf("issue number %d", f.Issue())
	}
	adapter, err := scm.New(scm.Config{Provider: f.Provider(), APIURL: f.APIURL(), Token: []byte(f.Token())})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := scm.ParseRepoURL(f.CloneURL())
	if err != nil {
		t.Fatal(err)
	}
	if repo.String() != f.Repo() {
		t.Fatalf("clone URL %s names %s, want %s", f.CloneURL(), repo, f.Repo())
	}
	const branch = "shepherd/1-greet-the-world"
	first := push(branch, map[string]string{"greet.go": "package greeter // 1\n"}, "Greet the world")
	created, err := adapter.CreatePullRequest(ctx, repo, scm.NewPullRequest{Head: scm.Head{Branch: branch}, Base: "main", Title: IssueTitle})
	if err != nil {
		t.Fatal(err)
	}
	n := created.Number
	get := func() *scm.PullRequest {
		t.Helper()
		prs, err := adapter.GetPullRequests(ctx, []scm.PRRef{{Repo: repo, Number: n}})
		if err != nil || len(prs) != 1 || prs[0] == nil {
			t.Fatalf("read #%d through the adapter: %v %v", n, prs, err)
		}
		return prs[0]
	}

	pr, err := f.PullRequest(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if pr.HeadBranch != branch || pr.HeadSHA != first || pr.State != "open" || pr.Merged || pr.URL != created.URL {
		t.Errorf("PullRequest(%d) = %+v, want head %s at %s, open, URL %s", n, pr, branch, first, created.URL)
	}
	if prs, err := f.PullRequestsFor(ctx, branch); err != nil || len(prs) != 1 || prs[0].Number != n {
		t.Errorf("PullRequestsFor(%s) = %+v, %v", branch, prs, err)
	}

	if err := f.ReportCI(ctx, first, false); err != nil {
		t.Fatal(err)
	}
	got := get()
	if got.Checks.State != scm.ChecksFailing || len(got.Checks.FailedChecks) != 1 || got.Checks.FailedChecks[0].Name != f.Check() ||
		!got.Checks.FailedChecks[0].Required {
		t.Errorf("after the CI failure: checks %+v, want the required %s failing", got.Checks, f.Check())
	}
	if f.FailureEvidence() == "" {
		t.Error("no failure evidence after the CI failure")
	}
	if g, ok := f.(*Gitea); ok && got.Checks.FailedChecks[0].URL != g.FailureEvidence() {
		t.Errorf("failed status URL %q, want %q", got.Checks.FailedChecks[0].URL, g.FailureEvidence())
	}

	second := push(branch, map[string]string{"greet.go": "package greeter // 2\n"}, "Fix the failing test")
	if err := f.ReportCI(ctx, second, true); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.HeadSHA != second || got.Checks.State != scm.ChecksPassing {
		t.Errorf("after CI passed on %s: head %s, checks %+v", second, got.HeadSHA, got.Checks)
	}

	if err := f.RequestChanges(ctx, n); err != nil {
		t.Fatal(err)
	}
	got = get()
	if got.ReviewDecision != scm.ReviewChangesRequested || len(got.Threads) != 1 ||
		got.Threads[0].Path != ReviewPath || got.Threads[0].Line != ReviewLine || got.Threads[0].Body != ReviewComment {
		t.Errorf("after the request for changes: decision %s, threads %+v", got.ReviewDecision, got.Threads)
	}
	if err := f.Approve(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.ReviewDecision != scm.ReviewApproved {
		t.Errorf("after the approval: decision %s, reviews %+v", got.ReviewDecision, got.Reviews)
	}

	merged, err := mergeWhenReady(ctx, adapter, repo, n, second)
	if err != nil {
		t.Fatal(err)
	}
	pr, err = f.PullRequest(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Merged || pr.MergeSHA != merged.SHA {
		t.Errorf("after the merge: %+v, want merged as %s", pr, merged.SHA)
	}
	commits, err := f.Commits(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(commits) != 2 || commits[0].SHA != first || commits[1].SHA != second ||
		commits[0].Message != "Greet the world" || commits[1].Message != "Fix the failing test" {
		t.Errorf("Commits(%d) = %+v, want %s then %s", n, commits, first, second)
	}
}

// mergeWhenReady merges as the Merge reaction does, retrying while the forge still computes
// mergeability (Gitea checks in the background after a push).
func mergeWhenReady(ctx context.Context, adapter scm.Provider, repo scm.Repo, n int, head string) (scm.MergeResult, error) {
	var last error
	for range 30 {
		res, err := adapter.MergePullRequest(ctx, repo, n, scm.MergeOptions{Method: scm.MergeSquash, ExpectedHeadSHA: head})
		if err == nil {
			return res, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return scm.MergeResult{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return scm.MergeResult{}, fmt.Errorf("merge #%d: %w", n, last)
}
