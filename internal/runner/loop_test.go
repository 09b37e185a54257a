package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

func TestLoopWatchCountsTheSameFailingCall(t *testing.T) {
	var w loopWatch
	use := func(tool, input string) { w.event(agent.Event{Kind: agent.KindToolUse, Tool: tool, Text: input}) }
	result := func(failed bool) { w.event(agent.Event{Kind: agent.KindToolResult, IsError: failed}) }
	for range 3 {
		use("Bash", "go test ./...")
		result(true)
		use("Read", "main.go") // reads in between do not reset the count
		result(false)
	}
	if r := w.report(); r.RepeatedFailures != 3 || r.FailingCall != "Bash: go test ./..." {
		t.Fatalf("after three failures: %+v", r)
	}
	use("Bash", "go test ./pkg/...") // another call's failure is its own count
	result(true)
	if r := w.report(); r.RepeatedFailures != 3 {
		t.Fatalf("another call: %+v", r)
	}
	use("Bash", "go test ./...")
	result(false) // the call works now
	if r := w.report(); r.RepeatedFailures != 1 || r.FailingCall != "Bash: go test ./pkg/..." {
		t.Fatalf("after it worked: %+v", r)
	}
	result(true) // a result without its use counts nothing
	if r := w.report(); r.RepeatedFailures != 1 {
		t.Fatalf("a stray result: %+v", r)
	}
	for i := range maxWatchedCalls + 10 { // bounded memory
		use("Bash", string(rune('a'+i%26))+string(rune('a'+i/26)))
		result(true)
	}
	if len(w.fails) > maxWatchedCalls || len(w.order) > maxWatchedCalls {
		t.Fatalf("%d calls remembered", len(w.fails))
	}
}

// TestCheckoutDigest: a turn that changed nothing leaves the digest alone; an edit, a new file
// and a commit each change it (the real git).
func TestCheckoutDigest(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q", "-b", "main")
	write("a.go", "package a\n")
	run("add", ".")
	run("commit", "-q", "-m", "one")
	g := &workspace.Git{Path: "git", Env: []string{"GIT_CONFIG_GLOBAL=/dev/null"}}
	ctx := context.Background()
	var w loopWatch
	d0 := checkoutDigest(ctx, g, dir)
	if d0 == "" || checkoutDigest(ctx, g, dir) != d0 {
		t.Fatal("the digest of an untouched checkout changes")
	}
	// The first turn takes a clean checkout's digest from the checkout step's facts: the same.
	facts, err := workspace.ReadFacts(ctx, g, dir)
	if err != nil || facts.Dirty {
		t.Fatalf("facts of the clean checkout: %+v, %v", facts, err)
	}
	if digestOf(facts.Head, "", "") != d0 {
		t.Fatal("a clean checkout's digest from its facts differs from git's")
	}
	w.turnEnded(d0, checkoutDigest(ctx, g, dir))
	w.turnEnded(d0, checkoutDigest(ctx, g, dir))
	if w.unchanged != 2 {
		t.Fatalf("two idle turns: %d", w.unchanged)
	}
	for _, change := range []func(){
		func() { write("a.go", "package a\n\nfunc A() {}\n") },
		func() { write("b.go", "package a\n") },
		func() { run("add", "."); run("commit", "-q", "-m", "two") },
	} {
		before := checkoutDigest(ctx, g, dir)
		change()
		after := checkoutDigest(ctx, g, dir)
		if before == after {
			t.Fatal("a change left the digest as it was")
		}
		w.turnEnded(before, after)
		if w.unchanged != 0 {
			t.Fatalf("a turn that changed something counts as unchanged: %d", w.unchanged)
		}
	}
	if checkoutDigest(ctx, g, t.TempDir()) != "" {
		t.Fatal("a directory that is not a checkout has a digest")
	}
}

// TestMeteredFileCarriesARunnerRestart: the totals kept in the state dir after each request are
// what a restarted runner continues from when its last report never reached the manager, and
// the manager's word wins when it is ahead (a new volume).
func TestMeteredFileCarriesARunnerRestart(t *testing.T) {
	dir := t.TempDir()
	if loadMetered(dir) != nil {
		t.Fatal("nothing kept yet")
	}
	kept := modelproxy.Usage{Requests: 5, InputTokens: 500, OutputTokens: 50,
		ByModel: map[string]modelproxy.ModelUsage{"claude-sonnet-4-5": {Requests: 5, InputTokens: 500, OutputTokens: 50}}}
	saveMetered(dir, kept, nil)
	got := loadMetered(dir)
	if got == nil || got.Requests != 5 || got.ByModel["claude-sonnet-4-5"].OutputTokens != 50 {
		t.Fatalf("kept: %+v", got)
	}
	reported := &runnerapi.Metered{Requests: 4, InputTokens: 400, OutputTokens: 40}
	if c := carriedUsage(reported, got); c.Requests != 5 {
		t.Fatalf("the file is ahead of the last report that arrived: %+v", c)
	}
	ahead := &runnerapi.Metered{Requests: 9, InputTokens: 900}
	if c := carriedUsage(ahead, got); c.Requests != 9 {
		t.Fatalf("the manager is ahead: %+v", c)
	}
	if c := carriedUsage(nil, nil); c != nil {
		t.Fatalf("nothing to carry: %+v", c)
	}
	if err := os.WriteFile(filepath.Join(dir, meteredFile), []byte(`{"requests": -3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if loadMetered(dir) != nil {
		t.Fatal("a negative count is not carried")
	}
}

func TestCallInput(t *testing.T) {
	for in, want := range map[string]string{
		`{"command":"go test ./...","description":"Run the tests"}`: "go test ./...",
		`{"cmd":"make lint"}`:     "make lint",
		`{"file_path":"main.go"}`: `{"file_path":"main.go"}`,
		`{"command":42}`:          `{"command":42}`,
		"go vet ./...":            "go vet ./...",
		`{"command":"x"`:          `{"command":"x"`,
	} {
		if got := callInput(in); got != want {
			t.Errorf("callInput(%q) = %q, want %q", in, got, want)
		}
	}
}
