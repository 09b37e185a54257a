package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
	"github.com/shepherd-dev/shepherd/internal/agenthost"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/internal/runner"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnerapi/runnerapitest"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	"github.com/shepherd-dev/shepherd/test/gitserver"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

// runnerBin is the real runner binary (git runs it as the credential helper).
var runnerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runner-test-bin-")
	if err != nil {
		panic(err)
	}
	runnerBin = filepath.Join(dir, "runner")
	fake := filepath.Join(dir, "fakeagent")
	for pkg, out := range map[string]string{"github.com/shepherd-dev/shepherd/cmd/runner": runnerBin, "github.com/shepherd-dev/shepherd/test/fakeagent": fake} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			panic(fmt.Sprintf("build %s: %v: %s", pkg, err, b))
		}
	}
	// One fake binary answers to every agent's name, like the real CLIs on PATH.
	for _, name := range []string{"claude", "codex", "aider", "opencode"} {
		if err := os.Symlink(fake, filepath.Join(dir, name)); err != nil {
			panic(err)
		}
	}
	_ = os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const (
	repo     = "acme/widgets"
	user     = "x-access-token"
	password = "s3cr3t-short-lived-credential"
)

// Hostile input: shell metacharacters, quotes, newlines and unicode.
const (
	hostileBranch  = `shepherd/$(touch${IFS}pwned);a|b&c'"<d>` + "`id`-ünï-🚀"
	hostilePrompt  = "Fix the bug; rm -rf / && echo $(whoami) `id` | tee x > y\n\"double\" 'single' \\back\\slash\n--resume evil -m gpt\nünïcødé 🚀 $HOME ${PATH}"
	hostileMessage = "-n also: $(touch pwned)\n'quote \"nested\"' && exit 1; ✓ 你好"
)

// scenario is a fake agent scenario (see test/fakeagent).
type scenario struct {
	Turns []turn `json:"turns"`
}
type turn struct {
	Steps  []map[string]any `json:"steps"`
	Result string           `json:"result,omitempty"`
}

func write(path, content string) map[string]any {
	return map[string]any{"write": map[string]string{"path": path, "content": content}}
}
func commit(msg string) map[string]any { return map[string]any{"commit": msg} }

type call struct {
	Agent        string   `json:"agent"`
	Args         []string `json:"args"`
	Prompt       string   `json:"prompt"`
	Conversation string   `json:"conversation"`
	Resumed      bool     `json:"resumed"`
	Turn         int      `json:"turn"`
}

type harness struct {
	t         *testing.T
	model     *runner.ModelConfig
	agentHome string
	srv       *gitserver.Server
	env       *runnerapitest.Env
	session   types.NamespacedName
	state     string
	root      string
	// podTmp is the runner's scratch space: an emptyDir, which a restart of the runner's
	// container keeps and a new pod does not.
	podTmp   string
	checkout string
	mode     agentsv1alpha1.WorkspaceMode
	branch   string
	stdout   *syncBuffer
	stderr   *syncBuffer
	// raw is the CLI's own output (RunConfig.RawOutput).
	raw    *syncBuffer
	cancel context.CancelFunc
	done   chan result
	spares *workspace.Spares
	// host is the agent container's host, served in this process: it runs the fake CLIs as the
	// pod's agent container would. ready says the checkout step finished (a pod starts its agent
	// container only then).
	host     *agenthost.Server
	hostAddr string
	ready    atomic.Bool
	// setup and shared are the Project's, for every pod's checkout step.
	setup  []agentsv1alpha1.SetupCommand
	shared []string
	// localAddr is the runner's local server of the current pod.
	localAddr string
	prepared  *workspace.Result
}

type result struct {
	code int
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type options struct {
	agent  agentsv1alpha1.AgentType
	mode   agentsv1alpha1.WorkspaceMode
	branch string
	prompt string
	sc     scenario
	// spares is the Project's spareWorktrees (worktree mode); 0 passes no Spares to Run.
	spares int
	// model is the runner's model proxy; nil serves none.
	model *runner.ModelConfig
	// agentModel is the task's agent.model.
	agentModel string
	// agentHome is the agent's home (RunConfig.AgentHome).
	agentHome string
	// custom is a custom agent's command (type custom).
	custom *runnerapi.CustomAgent
}

// newHarness starts a git server that requires credentials only the manager has, the real
// channel handler with an in-memory backend, and the agent container's host. Each start() is a
// pod: the runner, the checkout step through the runner's git endpoint, then the agent.
func newHarness(t *testing.T, o options) *harness {
	t.Helper()
	g := NewWithT(t)
	h := &harness{t: t, session: types.NamespacedName{Namespace: "team-a", Name: "fix-widgets"}, branch: o.branch, mode: o.mode,
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, raw: &syncBuffer{}, model: o.model, agentHome: o.agentHome, podTmp: t.TempDir()}
	var err error
	h.srv, err = gitserver.New(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	h.srv.Username, h.srv.Password = user, password
	g.Expect(h.srv.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = h.srv.Close() })
	_, err = h.srv.Seed(repo, "main", map[string]string{"README.md": "# widgets\n"})
	g.Expect(err).NotTo(HaveOccurred())

	h.env, err = runnerapitest.Start(h.session, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(h.env.Close)
	h.env.Backend.SetGitRemote(h.srv.URL(repo), http.Header{"Authorization": {basicAuth(user, password)}})
	h.env.Backend.SetTask(h.session, runnerapi.Task{
		Agent:  runnerapi.AgentConfig{Type: o.agent, Model: o.agentModel, PermissionMode: agentsv1alpha1.PermissionBypass, Custom: o.custom},
		Prompt: o.prompt, Title: "Fix the widgets", Issue: &runnerapi.Issue{ID: "42"},
		Repository: h.srv.URL(repo), Branch: o.branch, BaseBranch: "main",
	})

	dir := t.TempDir()
	raw, err := json.Marshal(o.sc)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "scenario.json"), raw, 0o644)).To(Succeed())
	h.state = filepath.Join(dir, "state")
	t.Setenv("FAKEAGENT_SCENARIO", filepath.Join(dir, "scenario.json"))
	t.Setenv("FAKEAGENT_STATE", h.state)
	for _, kv := range gitserver.CommitterEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("HOME", t.TempDir())

	h.root = t.TempDir()
	if o.mode == agentsv1alpha1.WorkspaceWorktree {
		h.checkout = filepath.Join(h.root, "worktrees", "wt-1")
	} else {
		h.checkout = filepath.Join(h.root, "checkout")
	}
	if o.spares > 0 {
		h.spares = &workspace.Spares{Mirror: h.mirror(), Dir: workspace.SpareDir(h.checkout), Base: "main", Count: o.spares}
	}
	h.startHost()
	return h
}

func basicAuth(u, p string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))
}

func (h *harness) mirror() string {
	if h.mode == agentsv1alpha1.WorkspaceWorktree {
		return filepath.Join(h.root, "mirror.git")
	}
	return ""
}

// startHost serves the agent container's host on a port of its own for the whole test.
func (h *harness) startHost() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	NewWithT(h.t).Expect(err).NotTo(HaveOccurred())
	h.hostAddr = l.Addr().String()
	h.host = agenthost.NewServer()
	h.host.Ready = func() error {
		if !h.ready.Load() {
			return errors.New("the checkout step has not finished")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = h.host.Serve(ctx, l) }()
	h.t.Cleanup(cancel)
}

func (h *harness) volume() *workspace.Volume {
	v := &workspace.Volume{Mode: h.mode, Checkout: h.checkout, Dirs: []string{filepath.Join(h.root, "homes", "fix-widgets")}}
	if h.mode == agentsv1alpha1.WorkspaceWorktree {
		v.Mirror, v.Spares = h.mirror(), workspace.SpareDir(h.checkout)
	}
	return v
}

// workspaceOptions are the checkout step's options in the current pod.
func (h *harness) workspaceOptions() workspace.Options {
	o := workspace.Options{Mode: h.mode, Path: h.checkout, MirrorPath: h.mirror(), RemoteURL: runner.LocalGitURL(h.localAddr, h.srv.URL(repo)),
		Branch: h.branch, Base: "main", Setup: h.setup}
	if len(h.shared) > 0 {
		o.SharedPaths, o.SharedDir = h.shared, filepath.Join(h.root, "shared")
	}
	return o
}

// start runs a pod: the runner (whose startup makes the volume ready), then the checkout step
// and the agent container (the host, ready from then on).
func (h *harness) start() {
	// A new pod: a new runner scratch space.
	_ = os.Remove(filepath.Join(h.podTmp, "prepared.json"))
	h.startRunner()
	res, err := runner.Prepare(context.Background(), runner.PrepareConfig{Workspace: h.workspaceOptions(), RunnerAddr: h.localAddr})
	NewWithT(h.t).Expect(err).NotTo(HaveOccurred())
	NewWithT(h.t).Expect(res.Facts.Branch).To(Equal(h.branch))
	h.prepared = res
	h.ready.Store(true)
}

// startRunner starts the runner's container alone, until its startup is over.
func (h *harness) startRunner() {
	h.ready.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan result, 1)
	addr := make(chan string, 1)
	go func() {
		code, err := runner.Run(ctx, runner.RunConfig{Workdir: h.checkout, Channel: h.channel(), Listen: "127.0.0.1:0", HostAddr: h.hostAddr,
			Volume: h.volume(), StateDir: filepath.Join(h.root, "runner", "fix-widgets"), Model: h.model, AgentHome: h.agentHome,
			PreparedFile: filepath.Join(h.podTmp, "prepared.json"),
			Debounce:     20 * time.Millisecond, Heartbeat: time.Hour, PollWait: 20 * time.Second, StopGrace: 2 * time.Second, PublishRetry: 200 * time.Millisecond,
			Stdout: h.stdout, Stderr: h.stderr, RawOutput: h.raw, Spares: h.spares, OnListen: func(a string) { addr <- a }})
		h.done <- result{code, err}
	}()
	h.localAddr = <-addr
	NewWithT(h.t).Expect(runner.WaitLocal(context.Background(), h.localAddr)).Error().NotTo(HaveOccurred())
	h.t.Cleanup(cancel)
}

func (h *harness) channel() runner.Channel {
	return runner.Channel{ManagerURL: h.env.URL(), TokenFile: h.env.TokenFile}
}

func (h *harness) wait() result {
	h.t.Helper()
	var r result
	NewWithT(h.t).Eventually(h.done).WithTimeout(60 * time.Second).Should(Receive(&r))
	return r
}

func (h *harness) calls() []call {
	f, err := os.Open(filepath.Join(h.state, "calls.jsonl"))
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var out []call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c call
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

func (h *harness) gitOut(args ...string) string {
	out, err := (&workspace.Git{}).Run(context.Background(), h.checkout, args...)
	NewWithT(h.t).Expect(err).NotTo(HaveOccurred())
	return out
}

var agents = []struct {
	typ  agentsv1alpha1.AgentType
	mode agentsv1alpha1.WorkspaceMode
}{
	{agentsv1alpha1.AgentClaudeCode, agentsv1alpha1.WorkspaceWorktree},
	{agentsv1alpha1.AgentCodex, agentsv1alpha1.WorkspaceClone},
	{agentsv1alpha1.AgentAider, agentsv1alpha1.WorkspaceClone},
	{agentsv1alpha1.AgentOpenCode, agentsv1alpha1.WorkspaceWorktree},
}

// TestTurnsPushAndPullRequest: a first turn that commits is pushed and its pull request asked
// for; a follow-up message becomes a resumed turn of the same conversation, pushed and the pull
// request updated. Branch, prompt and message are hostile and must arrive unchanged.
func TestTurnsPushAndPullRequest(t *testing.T) {
	for _, a := range agents {
		t.Run(string(a.typ), func(t *testing.T) {
			g := NewWithT(t)
			h := newHarness(t, options{agent: a.typ, mode: a.mode, branch: hostileBranch, prompt: hostilePrompt, sc: scenario{Turns: []turn{
				{Steps: []map[string]any{write("hello.txt", "hello\n"), commit("Add hello")}, Result: "Added hello.txt."},
				{Steps: []map[string]any{write("follow.txt", "more\n"), commit("Follow up")}, Result: "Handled the follow-up."},
			}}})
			cwd := t.TempDir()
			t.Chdir(cwd)
			h.start()

			be, s := h.env.Backend, h.session
			g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(30 * time.Second).Should(HaveLen(1))
			pr := be.PullRequests(s)[0]
			g.Expect(pr.Branch).To(Equal(hostileBranch))
			g.Expect(pr.Base).To(Equal("main"))
			g.Expect(pr.Title).To(Equal("Fix the widgets"))
			g.Expect(pr.Body).To(ContainSubstring("Added hello.txt."))
			g.Expect(pr.Body).To(ContainSubstring("Resolves #42"))
			g.Expect(h.srv.Ref(repo, "refs/heads/"+hostileBranch)).To(Equal(pr.Head), "the branch was pushed under its exact name")
			g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityReady))

			be.AddMessage(s, runnerapi.Message{ID: "m-1", Text: hostileMessage})
			g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(30 * time.Second).Should(HaveLen(2))
			g.Expect(be.Acked(s)).To(Equal([]string{"m-1"}))
			second := be.PullRequests(s)[1]
			g.Expect(second.Body).To(ContainSubstring("Handled the follow-up."))
			g.Expect(h.srv.Ref(repo, "refs/heads/"+hostileBranch)).To(Equal(second.Head))
			g.Expect(h.gitOut("log", "--format=%s", "-2")).To(Equal("Follow up\nAdd hello"))
			g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityReady))

			calls := h.calls()
			g.Expect(calls).To(HaveLen(2))
			g.Expect(calls[0].Prompt).To(Equal(hostilePrompt), "the prompt reached the agent unchanged")
			g.Expect(calls[0].Resumed).To(BeFalse())
			g.Expect(calls[1].Prompt).To(Equal(hostileMessage), "the message reached the agent unchanged")
			g.Expect(calls[1].Resumed).To(BeTrue())
			g.Expect(calls[1].Turn).To(Equal(1), "the follow-up continued the conversation")
			g.Expect(calls[1].Conversation).To(Equal(calls[0].Conversation))

			reps := be.Reports(s)
			last := reps[len(reps)-1]
			g.Expect(last.Usage.Turns).To(Equal(int32(2)))
			switch a.typ {
			case agentsv1alpha1.AgentClaudeCode:
				// total_cost_usd runs over the conversation (0.0125, then 0.025); each turn counts
				// its own share.
				g.Expect(last.Usage.CostUSD).To(Equal("0.025000"))
			case agentsv1alpha1.AgentCodex:
				// turn.completed reports the thread's totals (1200 uncached in, then 2400); the
				// second turn adds its share only.
				g.Expect(last.Usage.InputTokens).To(Equal(int64(2400)))
				g.Expect(last.Usage.CacheReadTokens).To(Equal(int64(2400)))
			}
			if a.typ != agentsv1alpha1.AgentAider {
				g.Expect(last.Agent.SessionID).To(Equal(calls[0].Conversation), "the agent's session id was reported")
			}
			g.Expect(last.Workspace.UnpushedCommits).To(BeZero())

			h.cancel()
			g.Expect(h.wait()).To(Equal(result{code: 0}))
			g.Expect(be.Activity(s).State).To(Equal(agentsv1alpha1.ActivityExited))

			// The transcript: both turns with their prompts, the agent's words and its tool
			// calls, in order, the same in the manager's window and on the session's volume.
			streamed, _, _ := be.Transcripts.Read(s, 0, 0)
			onDisk := readTranscript(t, filepath.Join(h.root, "runner", "fix-widgets", runner.TranscriptFile))
			g.Expect(streamed).To(Equal(onDisk))
			var started, ended []transcript.Entry
			kinds := map[transcript.Kind]int{}
			for i, e := range streamed {
				g.Expect(e.Seq).To(Equal(uint64(i + 1)))
				kinds[e.Kind]++
				switch e.Kind {
				case transcript.KindTurnStarted:
					started = append(started, e)
				case transcript.KindTurnEnded:
					ended = append(ended, e)
				}
			}
			g.Expect(started).To(HaveLen(2))
			g.Expect(started[0].Text).To(HavePrefix(hostilePrompt))
			g.Expect(started[1].Text).To(Equal(hostileMessage))
			g.Expect(started[1].Turn).To(Equal(int32(2)))
			g.Expect(ended).To(HaveLen(2))
			g.Expect(ended[1].Text).To(Equal("Handled the follow-up."))
			g.Expect(kinds[transcript.KindToolCall]).To(BeNumerically(">", 0), "%v", kinds)
			g.Expect(kinds[transcript.KindNote]).To(BeNumerically(">=", 2), "pushes and the pull request: %v", kinds)

			// The pod's log (stdout) is the readable transcript, not the CLI's JSON; no credential
			// reached any log, config or URL; nothing ran the hostile strings through a shell.
			g.Expect(h.stdout.String()).To(ContainSubstring("── turn 2 ──"))
			g.Expect(h.stdout.String()).To(ContainSubstring("✓ turn 2 ended: Handled the follow-up."))
			g.Expect(h.stdout.String()).NotTo(ContainSubstring(`{"type":`))
			if a.typ != agentsv1alpha1.AgentAider {
				// Said once: the resumed second turn names the same conversation.
				g.Expect(strings.Count(h.stdout.String(), "· conversation "+calls[0].Conversation)).To(Equal(1), h.stdout.String())
			}
			for _, text := range []string{h.stdout.String(), h.stderr.String(), readAll(t, h.checkout)} {
				g.Expect(text).NotTo(ContainSubstring(password))
			}
			for _, dir := range []string{cwd, h.checkout} {
				g.Expect(filepath.Join(dir, "pwned")).NotTo(BeAnExistingFile())
			}
		})
	}
}

// readTranscript reads a transcript file on the volume.
func readTranscript(t *testing.T, path string) []transcript.Entry {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []transcript.Entry
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e transcript.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("transcript line %q: %v", line, err)
		}
		es = append(es, e)
	}
	return es
}

// readAll concatenates the git configuration a credential could have leaked into.
func readAll(t *testing.T, checkout string) string {
	var b strings.Builder
	common, err := (&workspace.Git{}).Run(context.Background(), checkout, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(common, "config"), filepath.Join(common, "FETCH_HEAD"), filepath.Join(common, "packed-refs")} {
		raw, _ := os.ReadFile(f)
		b.Write(raw)
	}
	return b.String()
}

func TestQuestionReportsWaitingForInput(t *testing.T) {
	for _, a := range agents {
		t.Run(string(a.typ), func(t *testing.T) {
			g := NewWithT(t)
			h := newHarness(t, options{agent: a.typ, mode: a.mode, branch: "shepherd/question", prompt: "Fix the widgets", sc: scenario{Turns: []turn{
				{Steps: []map[string]any{{"say": "I looked at the handlers."}, {"ask": "Should deleted widgets return 404 or 410?"}}},
			}}})
			h.start()
			g.Eventually(func() *runnerapi.ActivityReport { return h.env.Backend.Activity(h.session) }).WithTimeout(30 * time.Second).
				Should(And(HaveField("State", agentsv1alpha1.ActivityWaitingForInput),
					HaveField("Question", "Should deleted widgets return 404 or 410?")))
			g.Expect(h.env.Backend.PullRequests(h.session)).To(BeEmpty(), "no commits, no pull request")
			h.cancel()
			g.Expect(h.wait().code).To(Equal(0))
		})
	}
}

// TestRunnerMakesSpares: once its agent has started, the runner tops up the Project's spare
// worktrees; a stop right after the start lets the fill finish (within SpareGrace), so the next
// session's prepare claims a whole spare.
func TestRunnerMakesSpares(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/spares",
		prompt: "Fix the widgets", spares: 2, sc: scenario{Turns: []turn{{Steps: []map[string]any{{"ask": "Which widgets?"}}}}}})
	h.start()
	g.Eventually(func() *runnerapi.ActivityReport { return h.env.Backend.Activity(h.session) }).WithTimeout(30 * time.Second).
		Should(HaveField("State", agentsv1alpha1.ActivityActive))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
	ready, _ := filepath.Glob(filepath.Join(h.spares.Dir, "spare-*.ready"))
	g.Expect(ready).To(HaveLen(2), "runner output:\n%s\nstdout:\n%s\nstates %v", h.stderr.String(), h.stdout.String(), h.env.Backend.States(h.session))
	dirs, _ := filepath.Glob(filepath.Join(h.spares.Dir, "spare-*"))
	g.Expect(dirs).To(HaveLen(4), "each spare whole: its directory and its marker, nothing half-made")
	g.Expect(h.stderr.String()).To(ContainSubstring("made 2 spare worktree(s)"))

	// The next session's pod: its runner moves a spare to the new checkout, prepare claims it.
	h.checkout, h.branch = filepath.Join(filepath.Dir(h.checkout), "wt-2"), "shepherd/next"
	h.env.Backend.SetTask(h.session, runnerapi.Task{Agent: runnerapi.AgentConfig{Type: agentsv1alpha1.AgentClaudeCode},
		Prompt: "Next", Repository: h.srv.URL(repo), Branch: h.branch, BaseBranch: "main"})
	h.start()
	g.Expect(h.prepared.Spare).To(BeTrue())
	g.Expect(h.prepared.Facts.Branch).To(Equal("shepherd/next"))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

func TestCrashReportsExitCodeAndLastLines(t *testing.T) {
	for _, a := range agents {
		t.Run(string(a.typ), func(t *testing.T) {
			g := NewWithT(t)
			h := newHarness(t, options{agent: a.typ, mode: a.mode, branch: "shepherd/crash", prompt: "Fix the widgets", sc: scenario{Turns: []turn{
				{Steps: []map[string]any{write("partial.txt", "x"), commit("Partial work"), {"exit": 3, "stderr": "panic: boom\ngoroutine 1 [running]"}}},
			}}})
			h.start()
			g.Expect(h.wait()).To(Equal(result{code: 3}))
			act := h.env.Backend.Activity(h.session)
			g.Expect(act.State).To(Equal(agentsv1alpha1.ActivityExited))
			g.Expect(act.ExitCode).To(HaveValue(Equal(int32(3))))
			g.Expect(act.Message).To(ContainSubstring("agent exited with code 3"))
			g.Expect(act.Message).To(ContainSubstring("panic: boom"))
			// Work committed before the crash is not lost.
			g.Expect(h.srv.Ref(repo, "refs/heads/shepherd/crash")).NotTo(BeEmpty())
		})
	}
}

func TestRetriesAreBlockedActivityNotACrash(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/retry",
		prompt: "Fix the widgets", sc: scenario{Turns: []turn{{Steps: []map[string]any{
			{"retry": "Connection error."}, {"retry": "Connection error."}, {"say": "Back online."},
		}, Result: "Done."}}}})
	h.start()
	g.Eventually(func() *runnerapi.ActivityReport { return h.env.Backend.Activity(h.session) }).WithTimeout(30 * time.Second).
		Should(HaveField("State", agentsv1alpha1.ActivityReady))
	g.Expect(h.env.Backend.States(h.session)).To(Equal([]agentsv1alpha1.ActivityState{
		agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityBlocked, agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityReady}))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

// TestFailedPublishIsRetried: a push refused while the forge's credentials are not available
// (a manager restart, a revoked token put back) leaves the session Blocked with the reason, and
// the runner pushes and asks for the pull request by itself once it works again, without a new
// message.
func TestFailedPublishIsRetried(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/republish",
		prompt: "Fix the widgets", sc: scenario{Turns: []turn{
			{Steps: []map[string]any{{"sleep": "1s"}, write("hello.txt", "hello\n"), commit("Add hello")}, Result: "Added hello.txt."},
		}}})
	be, s := h.env.Backend, h.session
	h.start()
	// The checkout is made; the forge's credential is revoked before the agent pushes.
	be.SetGitRemote(h.srv.URL(repo), http.Header{"Authorization": {basicAuth(user, "revoked")}})

	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(30 * time.Second).
		Should(And(HaveField("State", agentsv1alpha1.ActivityBlocked),
			HaveField("Message", And(ContainSubstring("push failed"), ContainSubstring("the runner retries it")))))
	g.Expect(be.PullRequests(s)).To(BeEmpty())
	g.Expect(h.srv.Ref(repo, "refs/heads/shepherd/republish")).To(BeEmpty(), "nothing was pushed")

	be.SetGitRemote(h.srv.URL(repo), http.Header{"Authorization": {basicAuth(user, password)}})
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(30 * time.Second).Should(HaveLen(1))
	g.Expect(h.srv.Ref(repo, "refs/heads/shepherd/republish")).To(Equal(be.PullRequests(s)[0].Head))
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityReady))
	g.Expect(h.calls()).To(HaveLen(1), "the retry pushed; it did not run the agent again")
	g.Expect(h.stderr.String() + h.stdout.String()).NotTo(ContainSubstring(password))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

// TestRefusedPullRequestIsAskedAgain: the push worked but the manager refused to open the pull
// request; the runner asks again by itself, without pushing or running the agent again.
func TestRefusedPullRequestIsAskedAgain(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentCodex, mode: agentsv1alpha1.WorkspaceClone, branch: "shepherd/reask",
		prompt: "Fix the widgets", sc: scenario{Turns: []turn{
			{Steps: []map[string]any{write("hello.txt", "hello\n"), commit("Add hello")}, Result: "Added hello.txt."},
		}}})
	be, s := h.env.Backend, h.session
	be.SetPullRequestError(fmt.Errorf("the forge is read-only for maintenance: %w", runnerapi.ErrForbidden))
	h.start()
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(30 * time.Second).
		Should(And(HaveField("State", agentsv1alpha1.ActivityBlocked), HaveField("Message", ContainSubstring("asking for the pull request failed"))))
	pushed := h.srv.Ref(repo, "refs/heads/shepherd/reask")
	g.Expect(pushed).NotTo(BeEmpty(), "the push went through")

	be.SetPullRequestError(nil)
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(30 * time.Second).Should(HaveLen(1))
	g.Expect(be.PullRequests(s)[0].Head).To(Equal(pushed))
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityReady))
	g.Consistently(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(time.Second).Should(HaveLen(1), "asked once it worked, then no more")
	g.Expect(h.calls()).To(HaveLen(1))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

// TestRestoreResumesTheConversation: a stopped session's new pod resumes the same conversation
// when a message arrives, instead of starting over.
func TestRestoreResumesTheConversation(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/restore",
		prompt: "Fix the widgets", sc: scenario{Turns: []turn{
			{Steps: []map[string]any{write("a.txt", "a"), commit("A")}, Result: "Did A."},
			{Result: "Resumed fine."},
		}}})
	h.start()
	g.Eventually(func() []runnerapi.PullRequestRequest { return h.env.Backend.PullRequests(h.session) }).WithTimeout(30 * time.Second).Should(HaveLen(1))
	g.Eventually(func() *runnerapi.ActivityReport { return h.env.Backend.Activity(h.session) }).Should(HaveField("State", agentsv1alpha1.ActivityReady))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))

	h.start() // the restored pod
	h.env.Backend.AddMessage(h.session, runnerapi.Message{ID: "after-restore", Text: "Carry on"})
	g.Eventually(h.calls).WithTimeout(30 * time.Second).Should(HaveLen(2))
	calls := h.calls()
	g.Expect(calls[1].Resumed).To(BeTrue())
	g.Expect(calls[1].Conversation).To(Equal(calls[0].Conversation))
	g.Eventually(func() []string { return h.env.Backend.Acked(h.session) }).Should(Equal([]string{"after-restore"}))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

func TestPrepareReportsFailedSetupAndResult(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/setup", prompt: "x",
		sc: scenario{Turns: []turn{{Steps: []map[string]any{{"ask": "Which widgets?"}}}}}})
	cmds, err := runner.ParseSetup(`[{"name":"deps","command":["sh","-c","echo no registry >&2; exit 7"],"timeout":"30s"}]`)
	g.Expect(err).NotTo(HaveOccurred())
	h.setup = cmds
	h.startRunner()
	resultFile := filepath.Join(t.TempDir(), "termination-log")
	res, err := runner.Prepare(context.Background(), runner.PrepareConfig{Workspace: h.workspaceOptions(), RunnerAddr: h.localAddr, ResultFile: resultFile})
	g.Expect(err).NotTo(HaveOccurred())
	h.ready.Store(true)
	g.Expect(res.Restored).To(BeFalse())
	g.Expect(res.FullFetch).To(BeTrue(), "the runner made the mirror: the whole repository was fetched")
	g.Expect(res.Setup.State).To(Equal(agentsv1alpha1.SetupFailed))
	raw, err := os.ReadFile(resultFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).To(ContainSubstring(`"failedCommand":"deps"`))
	// The runner reports the checkout step's result as its own.
	g.Eventually(func() *runnerapi.WorkspaceReport {
		for _, r := range h.env.Backend.Reports(h.session) {
			if r.Workspace != nil && r.Workspace.Setup != nil {
				return r.Workspace
			}
		}
		return nil
	}).WithTimeout(30 * time.Second).Should(HaveField("Setup", Equal(&runnerapi.SetupReport{State: agentsv1alpha1.SetupFailed, FailedCommand: "deps", Error: res.Setup.Error})))
	h.cancel()
	g.Expect(h.wait()).To(Equal(result{code: 0}))

	_, err = runner.ParseSetup(`{"not":"a list"}`)
	g.Expect(err).To(HaveOccurred())
}

// TestFailedCheckoutEndsTheAgentsContainer: the checkout step runs beside the agent's container;
// when it fails, it tells the runner, which starts no agent, reports the failure as the agent's
// exit and ends (its caller then ends the agent's container, and so the pod).
func TestFailedCheckoutEndsTheAgentsContainer(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/fails", prompt: "x",
		sc: scenario{Turns: []turn{{Result: "never asked"}}}})
	h.startRunner()
	h.ready.Store(true) // the agent's container is up beside the checkout step
	opts := h.workspaceOptions()
	opts.Branch = "bad..branch"
	_, err := runner.Prepare(context.Background(), runner.PrepareConfig{Workspace: opts, RunnerAddr: h.localAddr})
	g.Expect(err).To(HaveOccurred())
	r := h.wait()
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.err).To(MatchError(ContainSubstring("the checkout step failed")))
	act := h.env.Backend.Activity(h.session)
	g.Expect(act).NotTo(BeNil())
	g.Expect(act.State).To(Equal(agentsv1alpha1.ActivityExited))
	g.Expect(act.Message).To(And(ContainSubstring("the checkout step failed"), ContainSubstring("bad..branch")))
	g.Expect(h.calls()).To(BeEmpty(), "no agent started")
}

// TestAgentPushesOnlyItsOwnBranch: an agent steered to push elsewhere (the default branch,
// another session's branch, a tag, a deletion of its branch) is refused by the runner's git
// endpoint; its own branch goes through, and no credential is anywhere the agent can read.
func TestAgentPushesOnlyItsOwnBranch(t *testing.T) {
	g := NewWithT(t)
	push := func(refspec string) map[string]any {
		return map[string]any{"run": []string{"git", "push", "--porcelain", "origin", refspec}}
	}
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/own", prompt: "x",
		sc: scenario{Turns: []turn{{Steps: []map[string]any{
			write("evil.txt", "evil\n"), commit("Evil"),
			push("HEAD:refs/heads/main"), push("HEAD:refs/heads/shepherd/other"), push("HEAD:refs/tags/v9"),
			push("HEAD:refs/heads/shepherd/own"), push(":refs/heads/shepherd/own"),
			{"run": []string{"git", "config", "--get-regexp", "."}},
		}, Result: "Tried."}}}})
	mainBefore := h.srv.Ref(repo, "refs/heads/main")
	h.start()
	g.Eventually(func() *runnerapi.ActivityReport { return h.env.Backend.Activity(h.session) }).WithTimeout(30 * time.Second).
		Should(HaveField("State", agentsv1alpha1.ActivityReady))
	runs := h.runs()
	g.Expect(runs).To(HaveLen(6))
	for i, refused := range []bool{true, true, true, false, true} {
		if refused {
			g.Expect(runs[i].Exit).NotTo(BeZero(), "%v", runs[i].Args)
			g.Expect(runs[i].Output).To(ContainSubstring("shepherd: "), "%v", runs[i].Args)
		} else {
			g.Expect(runs[i].Exit).To(BeZero(), "%v: %s", runs[i].Args, runs[i].Output)
		}
	}
	g.Expect(h.srv.Ref(repo, "refs/heads/main")).To(Equal(mainBefore))
	g.Expect(h.srv.Ref(repo, "refs/heads/shepherd/other")).To(BeEmpty())
	g.Expect(h.srv.Ref(repo, "refs/tags/v9")).To(BeEmpty())
	g.Expect(h.srv.Ref(repo, "refs/heads/shepherd/own")).NotTo(BeEmpty(), "its own branch was pushed, and not deleted")
	g.Expect(runs[5].Output).NotTo(ContainSubstring(password), "the checkout's config holds no credential")
	g.Expect(runs[5].Output).To(ContainSubstring("remote.origin.url http://127.0.0.1:"), "origin is the runner's endpoint")
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

// runs are the fake agent's Run steps, in order.
func (h *harness) runs() []fakeRun {
	raw, _ := os.ReadFile(filepath.Join(h.state, "runs.jsonl"))
	var out []fakeRun
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r fakeRun
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

type fakeRun struct {
	Args   []string `json:"args"`
	Exit   int      `json:"exit"`
	Output string   `json:"output"`
}

// TestSharedPathsThroughThePrepareBinary: the runner binary's prepare links the shared paths from
// its flags (and their environment twins), the setup commands fill the cache, and an agent that
// commits everything pushes no link.
func TestSharedPathsThroughThePrepareBinary(t *testing.T) {
	for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
		t.Run(string(mode), func(t *testing.T) {
			g := NewWithT(t)
			h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: mode, branch: "shepherd/shared", prompt: "x", sc: scenario{Turns: []turn{
				{Steps: []map[string]any{write("feature.txt", "feature\n"), commit("Add feature")}, Result: "Added feature.txt."},
			}}})
			shared := filepath.Join(h.root, "shared")
			h.shared = []string{"node_modules"} // the runner makes the cache's directory
			h.startRunner()
			prepare := func(env []string, flags ...string) {
				t.Helper()
				args := []string{"prepare", "--mode=" + string(mode), "--path=" + h.checkout, "--remote-url=" + runner.LocalGitURL(h.localAddr, h.srv.URL(repo)),
					"--branch=shepherd/shared", "--runner-addr=" + h.localAddr,
					`--setup=[{"name":"install","command":["sh","-c","echo dep > node_modules/dep"]}]`}
				if mode == agentsv1alpha1.WorkspaceWorktree {
					args = append(args, "--mirror="+h.mirror())
				}
				cmd := exec.Command(runnerBin, append(args, flags...)...)
				cmd.Env = append(os.Environ(), env...)
				out, err := cmd.CombinedOutput()
				g.Expect(err).NotTo(HaveOccurred(), "%s", out)
				g.Expect(string(out)).To(ContainSubstring("setup Succeeded"))
			}
			prepare(nil, "--shared-paths=node_modules", "--shared-dir="+shared)
			g.Expect(os.Readlink(filepath.Join(h.checkout, "node_modules"))).To(Equal(filepath.Join(shared, "node_modules")))
			g.Expect(filepath.Join(shared, "node_modules", "dep")).To(BeARegularFile())

			// The environment twins, as a pod spec may set them.
			prepare([]string{"SHEPHERD_SHARED_PATHS=node_modules,dist", "SHEPHERD_SHARED_DIR=" + shared})
			g.Expect(os.Readlink(filepath.Join(h.checkout, "dist"))).To(Equal(filepath.Join(shared, "dist")))

			h.ready.Store(true) // the agent container starts
			be, s := h.env.Backend, h.session
			g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(30 * time.Second).Should(HaveLen(1))
			pushed, err := exec.Command("git", "-C", h.srv.Path(repo), "ls-tree", "-r", "--name-only", "refs/heads/shepherd/shared").Output()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Fields(string(pushed))).To(ConsistOf("README.md", "feature.txt"), "the agent staged everything; no link was pushed")
			g.Expect(h.gitOut("status", "--porcelain")).To(BeEmpty())
			h.cancel()
			g.Expect(h.wait()).To(Equal(result{code: 0}))
		})
	}
}

func TestParseSharedPaths(t *testing.T) {
	g := NewWithT(t)
	g.Expect(runner.ParseSharedPaths("")).To(BeEmpty())
	g.Expect(runner.ParseSharedPaths("node_modules, web/node_modules,")).To(Equal([]string{"node_modules", "web/node_modules"}))
	_, err := runner.ParseSharedPaths("node_modules,../escape")
	g.Expect(err).To(MatchError(ContainSubstring("must stay inside the checkout")))
}

// TestRunnerRestartMidTurnKeepsTheMeteredTotals: the runner's model proxy counts what the model
// API sent while the agent is mid-turn; the runner restarts (its container, the agent's turn
// interrupted and resumed) and counts on from where it was, whatever the manager's task carries:
// nothing (no report with usage reached it), totals that lag behind (the last report was lost),
// or the last reported totals. Only the runner's own file on the volume knows everything; the totals
// at the end are exactly what the model API sent, not one request lost nor counted twice.
func TestRunnerRestartMidTurnKeepsTheMeteredTotals(t *testing.T) {
	for _, c := range []struct {
		name string
		// carried is the task's Metered the restarted runner gets, picked from the totals the
		// runner reported after each model call before the restart; nil carries none.
		carried func(before []*runnerapi.Metered) *runnerapi.Metered
	}{
		{name: "the task carries nothing", carried: func([]*runnerapi.Metered) *runnerapi.Metered { return nil }},
		{name: "the task lags behind", carried: func(before []*runnerapi.Metered) *runnerapi.Metered { return before[1] }},
		{name: "the task carries the last report", carried: func(before []*runnerapi.Metered) *runnerapi.Metered { return before[len(before)-1] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			ms := modelserver.New(nil)
			g.Expect(ms.Start("127.0.0.1:0")).To(Succeed())
			t.Cleanup(func() { _ = ms.Close() })
			keyFile := filepath.Join(t.TempDir(), "api-key")
			g.Expect(os.WriteFile(keyFile, []byte(realModelKey+"\n"), 0o600)).To(Succeed())
			// The follow-up's turn is long: the agent is mid-turn whenever the test plays its model
			// calls. (The fake CLI resumes only a conversation with a finished turn, hence the
			// first one.)
			midTurn := turn{Steps: []map[string]any{{"say": "Looking at the widgets."}, {"sleep": "10m"}}, Result: "Done."}
			h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/metered",
				prompt: "Fix the widgets", sc: scenario{Turns: []turn{{Result: "Had a look."}, midTurn}},
				model: &runner.ModelConfig{API: agentsv1alpha1.ModelAPIAnthropic, Upstream: ms.URL(), KeyFile: keyFile}})
			be, s := h.env.Backend, h.session
			meteredFile := filepath.Join(h.root, "runner", "fix-widgets", "metered.json")

			h.start()
			g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(30 * time.Second).
				Should(HaveField("State", agentsv1alpha1.ActivityReady))
			be.AddMessage(s, runnerapi.Message{ID: "m-1", Text: "Now fix them"})
			g.Eventually(h.calls).WithTimeout(30 * time.Second).Should(HaveLen(2))
			g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityActive))

			// The agent's model calls, each answered with usage of its own, on two models.
			var before []*runnerapi.Metered
			for i, call := range []struct {
				model  string
				stream bool
			}{{"claude-sonnet-4-5", true}, {"claude-haiku-4-5", false}, {"claude-sonnet-4-5", true}} {
				ms.Append(modelserver.Reply{Text: fmt.Sprintf("Step %d.", i), Usage: distinctUsage(i)})
				askModel(t, h.localAddr, call.model, call.stream)
				want := sentMetered(ms)
				g.Eventually(h.lastMetered).WithTimeout(10*time.Second).Should(Equal(&want), "the runner reported the proxy's count after model call %d", i)
				before = append(before, &want)
			}
			g.Expect(before[2].Requests).To(Equal(int64(3)))
			g.Expect(before[2].ByModel).To(HaveLen(2))
			g.Expect(readMetered(t, meteredFile)).To(Equal(*before[2]), "the runner keeps its count on the volume")

			// The runner restarts mid-turn. The manager's task is what it holds when the runner
			// went away with the agent's turn under way: the conversation, and its usage as
			// carried (a lost report, or none at all).
			h.cancel()
			g.Expect(h.wait().code).To(Equal(0))
			task, err := be.Task(context.Background(), runnerapi.Session{NamespacedName: s})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(task.Usage.Metered).To(Equal(before[2]), "the memory backend holds the last report's totals, as the manager does")
			task.LastActivity = agentsv1alpha1.ActivityActive
			task.Usage = runnerapi.Usage{Metered: c.carried(before)}
			be.SetTask(s, *task)

			// A runner container's restart: the checkout step does not run again; the agent's
			// container is there.
			h.startRunner()
			h.ready.Store(true)
			g.Eventually(h.calls).WithTimeout(30*time.Second).Should(HaveLen(3), "stderr:\n%s", h.stderr)
			g.Expect(h.calls()[2]).To(And(HaveField("Resumed", BeTrue()), HaveField("Turn", 1)), "the interrupted turn was resumed")
			g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityActive))
			g.Eventually(h.lastMetered).WithTimeout(10*time.Second).Should(Equal(before[2]), "the restarted runner reports the totals it continues from")

			for i, call := range []struct {
				model  string
				stream bool
			}{{"claude-sonnet-4-5", false}, {"claude-haiku-4-5", true}, {"claude-opus-4-1", true}} {
				ms.Append(modelserver.Reply{Text: fmt.Sprintf("Step %d.", 3+i), Usage: distinctUsage(3 + i)})
				askModel(t, h.localAddr, call.model, call.stream)
			}
			want := sentMetered(ms)
			g.Expect(want.Requests).To(Equal(int64(6)))
			g.Expect(want.ByModel).To(HaveLen(3))
			g.Eventually(h.lastMetered).WithTimeout(10*time.Second).Should(Equal(&want), "every request and token the model API sent, counted once")
			g.Expect(readMetered(t, meteredFile)).To(Equal(want))
			g.Expect(ms.Problems()).To(BeEmpty())
			for _, r := range ms.Requests() {
				g.Expect(r.Header.Get("X-Api-Key")).To(Equal(realModelKey), "request %d went through the proxy", r.Seq)
			}

			h.cancel()
			g.Expect(h.wait().code).To(Equal(0))
			g.Expect(h.lastMetered()).To(Equal(&want))
		})
	}
}

// realModelKey is the Project's model API key: the runner's proxy adds it; the CLI never has it.
const realModelKey = "sk-ant-real-key-only-the-runner-reads-0123456789"

// distinctUsage is the i-th model answer's usage: each answer's counts differ, so that a lost or
// doubled one shows in every total.
func distinctUsage(i int) modelserver.Usage {
	n := int64(i + 1)
	return modelserver.Usage{InputTokens: 1000*n + 7, OutputTokens: 100*n + 3, CacheReadTokens: 10*n + 1}
}

// askModel plays one model call of the agent's CLI through the runner's model proxy, as Claude
// Code makes it: the placeholder key, the API's version, a conversation that offers a tool (so
// the scripted server answers with its next reply), streamed or not.
func askModel(t *testing.T, localAddr, model string, stream bool) {
	t.Helper()
	g := NewWithT(t)
	body, err := json.Marshal(map[string]any{"model": model, "max_tokens": 1024, "stream": stream,
		"tools": []map[string]any{{"name": "Bash", "description": "Run a shell command",
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}},
		"messages": []map[string]any{{"role": "user", "content": "Fix the widgets"}}})
	g.Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequest(http.MethodPost, "http://"+localAddr+"/v1/messages", bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("X-Api-Key", agent.PlaceholderKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second} // no proxy from the environment
	resp, err := c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s", answer)
	if stream {
		g.Expect(string(answer)).To(ContainSubstring("event: message_stop"))
	} else {
		g.Expect(string(answer)).To(ContainSubstring(`"stop_reason":"end_turn"`))
	}
}

// lastMetered is the model proxy's count in the runner's last report.
func (h *harness) lastMetered() *runnerapi.Metered {
	reps := h.env.Backend.Reports(h.session)
	if len(reps) == 0 || reps[len(reps)-1].Usage == nil {
		return nil
	}
	return reps[len(reps)-1].Usage.Metered
}

// readMetered reads the runner's own copy of the proxy's count (the same JSON as Metered).
func readMetered(t *testing.T, path string) runnerapi.Metered {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m runnerapi.Metered
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// sentMetered is what the model proxy must have counted of what the scripted server sent: every
// generation request (an error answer is a request without tokens), with its reply's usage
// (DefaultUsage when it set none, as for side requests), split by the model the request named.
// OpenAI's input tokens include the cached ones, which the proxy keeps apart.
func sentMetered(ms *modelserver.Server) runnerapi.Metered {
	script := ms.Script()
	var m runnerapi.Metered
	for _, r := range ms.Requests() {
		if r.Method != http.MethodPost || r.API != modelserver.APIMessages && r.API != modelserver.APIResponses && r.API != modelserver.APIChatCompletions {
			continue
		}
		var u modelserver.Usage
		failed := false
		if r.Reply >= 0 && r.Reply < len(script) {
			u, failed = script[r.Reply].Usage, script[r.Reply].Error != nil
		}
		if u == (modelserver.Usage{}) {
			u = modelserver.DefaultUsage
		}
		if failed {
			u = modelserver.Usage{}
		}
		if r.API != modelserver.APIMessages {
			u.CacheReadTokens = min(u.CacheReadTokens, u.InputTokens)
			u.InputTokens -= u.CacheReadTokens
		}
		model := r.Model()
		if model == "" {
			model = modelproxy.UnknownModel
		}
		if m.ByModel == nil {
			m.ByModel = map[string]runnerapi.MeteredModel{}
		}
		x := m.ByModel[model]
		x.Requests++
		x.InputTokens += u.InputTokens
		x.OutputTokens += u.OutputTokens
		x.CacheReadTokens += u.CacheReadTokens
		m.ByModel[model] = x
		m.Requests++
		m.InputTokens += u.InputTokens
		m.OutputTokens += u.OutputTokens
		m.CacheReadTokens += u.CacheReadTokens
	}
	return m
}

// TestModelCallsWaitForTheCarriedTotals: a restarted runner serves its loopback before it has
// read the task; a model call from the agent still running beside it waits until the session's
// earlier totals are carried, so that the count (and the state file saved after each request)
// never starts again from zero.
func TestModelCallsWaitForTheCarriedTotals(t *testing.T) {
	g := NewWithT(t)
	var served atomic.Int32
	ready := make(chan struct{})
	l := &runner.Local{Model: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ModelReady: ready}
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	done := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/messages", "application/json", strings.NewReader("{}"))
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	g.Consistently(served.Load, "300ms").Should(BeZero(), "held until the totals are carried")
	close(ready)
	g.Eventually(done).Should(Receive(Equal(http.StatusNoContent)))
	g.Expect(served.Load()).To(Equal(int32(1)))
}

// TestRepeatedFailingCallIsReported: a scripted agent runs the same failing command again and
// again mid-turn (other calls between); the runner's reports count the failures in a row and
// name the call, which the manager stops at the Project's maxRepeatedFailures (envtest "Runaway
// limits").
func TestRepeatedFailingCallIsReported(t *testing.T) {
	g := NewWithT(t)
	failing := map[string]any{"run": []string{"git", "frobnicate", "--all"}}
	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/loop",
		prompt: "Fix the widgets", sc: scenario{Turns: []turn{{Steps: []map[string]any{
			failing, {"run": []string{"git", "status", "--short"}}, failing, write("notes.txt", "try again"), failing,
			{"sleep": "10m"}}}}}})
	h.start()
	g.Eventually(func() *runnerapi.LoopReport {
		reps := h.env.Backend.Reports(h.session)
		if len(reps) == 0 {
			return nil
		}
		return reps[len(reps)-1].Loop
	}).WithTimeout(30*time.Second).Should(HaveValue(And(HaveField("RepeatedFailures", int32(3)), HaveField("FailingCall", "Bash: git frobnicate --all"))),
		"stderr:\n%s", h.stderr)
	g.Expect(h.env.Backend.Activity(h.session)).To(HaveField("State", agentsv1alpha1.ActivityActive), "mid-turn")
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}

// TestCustomAgentRunsTheTeamsOwnCLI: a custom agent (a short shell script speaking Shepherd's
// JSON-lines protocol, test/customagent) runs under the real runner: its commit is pushed and
// the pull request asked for, a follow-up resumes its conversation by the id it reported, its
// question ends the turn as WaitingForInput, and its usage adds up.
func TestCustomAgentRunsTheTeamsOwnCLI(t *testing.T) {
	g := NewWithT(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "test", "customagent", "agent.sh"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Setenv("CUSTOM_AGENT_ASK", "Should the notes go in the docs?")
	h := newHarness(t, options{agent: agentsv1alpha1.AgentCustom, mode: agentsv1alpha1.WorkspaceWorktree, branch: "shepherd/custom",
		prompt: "Write notes; $(touch pwned)", custom: &runnerapi.CustomAgent{Command: []string{script}}})
	h.start()
	be, s := h.env.Backend, h.session
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(30*time.Second).Should(HaveLen(1),
		"stdout:\n%s\nstderr:\n%s", h.stdout, h.stderr)
	g.Expect(h.gitOut("log", "--format=%s", "-1")).To(Equal("Notes for turn 1"))
	g.Expect(h.srv.Ref(repo, "refs/heads/shepherd/custom")).To(Equal(be.PullRequests(s)[0].Head))
	g.Expect(be.PullRequests(s)[0].Body).To(ContainSubstring("Wrote notes-1.txt."))
	notes, err := os.ReadFile(filepath.Join(h.checkout, "notes-1.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(notes)).To(ContainSubstring("Write notes; $(touch pwned)"), "the prompt reached the agent unchanged, on stdin")
	g.Expect(filepath.Join(h.checkout, "pwned")).NotTo(BeAnExistingFile())
	var conv string
	g.Eventually(func() string {
		reps := be.Reports(s)
		if a := reps[len(reps)-1].Agent; a != nil {
			conv = a.SessionID
		}
		return conv
	}).Should(HavePrefix("conv-"))
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).Should(HaveField("State", agentsv1alpha1.ActivityReady))

	be.AddMessage(s, runnerapi.Message{ID: "m-1", Text: "Now the follow-up"})
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(30*time.Second).Should(And(
		HaveField("State", agentsv1alpha1.ActivityWaitingForInput), HaveField("Question", "Should the notes go in the docs?")),
		"stderr:\n%s", h.stderr)
	g.Expect(h.gitOut("log", "--format=%s", "-2")).To(Equal("Notes for turn 2\nNotes for turn 1"))
	reps := be.Reports(s)
	last := reps[len(reps)-1]
	g.Expect(last.Agent.SessionID).To(Equal(conv), "the follow-up resumed the conversation the agent named")
	g.Expect(last.Agent.Model).To(Equal("script-agent-1"))
	g.Expect(last.Usage).To(And(HaveField("InputTokens", int64(200)), HaveField("OutputTokens", int64(40)), HaveField("Turns", int32(2))))
	h.cancel()
	g.Expect(h.wait().code).To(Equal(0))
}
