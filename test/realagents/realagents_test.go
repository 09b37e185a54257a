//go:build integration

package realagents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/test/gitserver"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/realagents"
)

var updateFixtures = flag.Bool("update-fixtures", false,
	"write the real CLIs' output over the adapters' captured fixtures in internal/agent/*/testdata")

// TurnTimeout bounds one CLI process. A turn here takes 1–15 s; the CLIs' own retries of a
// scripted error add a few seconds.
const TurnTimeout = 3 * time.Minute

// Hostile input reaches the CLI unchanged: it starts with a dash and holds shell syntax.
const (
	prompt   = "--resume evil -m x; $(touch pwned) `id` \"double\" 'single' ünïcødé 🚀\nAdd hello.txt with a greeting and commit it."
	followUp = "-n Follow-up: $(touch pwned) — should the API keep 404 for deleted widgets?"
	question = "Should deleted widgets return 404 or 410?"
	summary1 = "Added hello.txt and committed it."
	refused  = "the scripted server refused this request"
)

// cliCase is what differs between the CLIs: their tools, how they show retries, the fields of
// their output the parser reads.
type cliCase struct {
	typ agentsv1alpha1.AgentType
	// fixtures is the adapter's folder under internal/agent.
	fixtures string
	// model, passed as Turn.Model, exercises the CLI's model flag.
	model string
	// editAndCommit is the replies that create path with content and commit it with msg, through
	// the CLI's own file and shell tools.
	editAndCommit func(dir, path, content, msg string) []modelserver.Reply
	// tools are the tool names the parser reports for editAndCommit.
	tools []string
	// retries are the API errors the second turn starts with, each retried by the CLI.
	// retryVisible says the CLI prints its own retry events (OpenCode's JSON output shows none).
	retries      []modelserver.APIError
	retryVisible bool
	// ask is the reply before the question text, if the CLI has a tool for asking.
	ask []modelserver.Reply
	// refusal is an API error the CLI does not retry. Codex retries a 403 ("Reconnecting"),
	// Claude Code varies its request after a 400 (dropping optional fields) before it gives up.
	refusal modelserver.APIError
	// cost says the CLI reports a cost in dollars.
	cost bool
	// contract lists the events and fields the parser relies on.
	contract []rule
}

var cases = []cliCase{
	{
		typ: agentsv1alpha1.AgentClaudeCode, fixtures: "claudecode", model: "claude-sonnet-4-5",
		editAndCommit: func(dir, path, content, msg string) []modelserver.Reply {
			return []modelserver.Reply{
				modelserver.Tools(modelserver.ToolCall{Name: "Write", Input: map[string]any{"file_path": filepath.Join(dir, path), "content": content}}),
				modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{
					"command": "git add -- " + path + " && git commit -m '" + msg + "'", "description": "Commit the new file"}}),
			}
		},
		tools: []string{"Write", "Bash"},
		retries: []modelserver.APIError{{Status: 529, Message: "Overloaded"},
			{Status: http.StatusTooManyRequests, Message: "Rate limited", RetryAfter: 1}},
		retryVisible: true,
		// In print mode AskUserQuestion is not offered and the CLI refuses it; a model that asks
		// anyway still means to ask, and the parser takes it as the question.
		ask: []modelserver.Reply{modelserver.Tools(modelserver.ToolCall{Name: "AskUserQuestion", Unoffered: true, Input: map[string]any{
			"questions": []any{map[string]any{"question": question, "header": "Status", "multiSelect": false,
				"options": []any{map[string]any{"label": "404", "description": "Not found"}, map[string]any{"label": "410", "description": "Gone"}}}}}})},
		refusal:  modelserver.APIError{Status: 403, Message: refused},
		cost:     true,
		contract: claudeContract,
	},
	{
		// Not Codex's default model (gpt-6.2-sol), so that -m is seen to take effect; one Codex
		// knows, so that it runs its tools as for the default: through its "exec" tool,
		// JavaScript that calls the nested tools (apply_patch, exec_command) in a V8 isolate.
		typ: agentsv1alpha1.AgentCodex, fixtures: "codex", model: "gpt-6.2-astra",
		editAndCommit: func(_, path, content, msg string) []modelserver.Reply {
			patch := "*** Begin Patch\n*** Add File: " + path + "\n+" + strings.TrimSuffix(content, "\n") + "\n*** End Patch\n"
			js := fmt.Sprintf("const p = await tools.apply_patch(%s);\ntext(p);\nconst r = await tools.exec_command({cmd: %s});\ntext(r.output);\n",
				jsString(patch), jsString("git add -- "+path+" && git commit -m '"+msg+"'"))
			return []modelserver.Reply{modelserver.Tools(modelserver.ToolCall{Name: "exec", Input: js})}
		},
		tools: []string{"file_change", "command_execution"},
		// Codex retries an HTTP 5xx silently and reports a failed stream as "Reconnecting... n/5".
		retries: []modelserver.APIError{{Status: http.StatusServiceUnavailable, Message: "unavailable"},
			{Status: 500, Message: "upstream overloaded", InStream: true}},
		retryVisible: true,
		refusal:      modelserver.APIError{Status: 400, Message: refused},
		contract:     codexContract,
	},
	{
		typ: agentsv1alpha1.AgentOpenCode, fixtures: "opencode", model: realagents.OpenCodeProvider + "/claude-sonnet-4-5",
		editAndCommit: func(dir, path, content, msg string) []modelserver.Reply {
			return []modelserver.Reply{
				modelserver.Tools(modelserver.ToolCall{Name: "write", Input: map[string]any{"filePath": filepath.Join(dir, path), "content": content}}),
				modelserver.Tools(modelserver.ToolCall{Name: "bash", Input: map[string]any{
					"command": "git add -- " + path + " && git commit -m '" + msg + "'", "description": "Commit the new file"}}),
			}
		},
		tools: []string{"write", "bash"},
		retries: []modelserver.APIError{{Status: 529, Message: "Overloaded"},
			{Status: http.StatusTooManyRequests, Message: "Rate limited", RetryAfter: 1}},
		refusal:  modelserver.APIError{Status: 403, Message: refused},
		cost:     true,
		contract: opencodeContract,
	},
	{
		// Not Gemini CLI's default ("auto", which routes every request through a classifier
		// request to a small model first), so that --model is seen to take effect.
		typ: agentsv1alpha1.AgentGemini, fixtures: "gemini", model: "gemini-2.5-pro",
		editAndCommit: func(dir, path, content, msg string) []modelserver.Reply {
			return []modelserver.Reply{
				modelserver.Tools(modelserver.ToolCall{Name: "write_file", Input: map[string]any{"file_path": filepath.Join(dir, path), "content": content}}),
				modelserver.Tools(modelserver.ToolCall{Name: "run_shell_command", Input: map[string]any{
					"command": "git add -- " + path + " && git commit -m '" + msg + "'", "description": "Commit the new file"}}),
			}
		},
		tools: []string{"write_file", "run_shell_command"},
		// Retried after 5 s, then 10 s (its backoff starts at 5 s whatever the RetryInfo says);
		// stream-json prints no retry (stderr does).
		retries: []modelserver.APIError{{Status: http.StatusServiceUnavailable, Message: "The model is overloaded."},
			{Status: http.StatusTooManyRequests, Message: "Resource has been exhausted", RetryAfter: 1}},
		// Headless, ask_user is not offered and the CLI answers "not found"; the parser still
		// takes its question.
		ask: []modelserver.Reply{modelserver.Tools(modelserver.ToolCall{Name: "ask_user", Unoffered: true, Input: map[string]any{
			"questions": []any{map[string]any{"question": question, "header": "Status", "type": "choice",
				"options": []any{map[string]any{"label": "404", "description": "Not found"}, map[string]any{"label": "410", "description": "Gone"}}}}}})},
		refusal:  modelserver.APIError{Status: 403, Message: refused},
		contract: geminiContract,
	},
}

func jsString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// TestRealCLIs drives each real CLI through its adapter, turn by turn, against the scripted
// model server: a first turn that edits and commits, a resumed turn that survives API errors
// and asks a question, and a turn the API refuses, which exits non-zero. Every line the CLI
// printed is then checked against the fields the parser relies on.
func TestRealCLIs(t *testing.T) {
	bin := install(t)
	for _, c := range cases {
		t.Run(string(c.typ), func(t *testing.T) {
			t.Parallel()
			s := newSession(t, c, bin)

			t.Run("first turn edits and commits", func(t *testing.T) {
				g := NewWithT(t)
				turn := s.run(t, "turn", agent.Turn{Prompt: prompt, Model: c.model, Permission: agentsv1alpha1.PermissionBypass},
					append(c.editAndCommit(s.dir, "hello.txt", "hello\n", "Add hello"), modelserver.Text(summary1))...)
				g.Expect(turn.exit).To(Equal(0), "stderr: %s", turn.stderr)

				// The commit is real.
				g.Expect(s.git("log", "--format=%s", "-1")).To(Equal("Add hello"))
				g.Expect(s.git("show", "HEAD:hello.txt")).To(Equal("hello"))
				g.Expect(filepath.Join(s.dir, "pwned")).NotTo(BeAnExistingFile(), "the prompt reached no shell")

				// What the CLI sent: the prompt unchanged, then the tools' results.
				g.Expect(turn.requests).To(HaveLen(len(c.editAndCommit("", "", "", "")) + 1))
				g.Expect(strings.Join(turn.requests[0].UserTexts(), "\n")).To(ContainSubstring(prompt))
				g.Expect(strings.Join(turn.requests[len(turn.requests)-1].ToolResults(), "\n")).To(ContainSubstring("Add hello"),
					"the commit's output went back to the model")

				// What the parser read.
				sessions := kinds(turn.events, agent.KindSession)
				g.Expect(sessions).NotTo(BeEmpty())
				s.sessionID = sessions[0].SessionID
				g.Expect(s.sessionID).NotTo(BeEmpty())
				for _, e := range sessions {
					g.Expect(e.SessionID).To(Equal(s.sessionID))
				}
				g.Expect(kinds(turn.events, agent.KindActivity)).NotTo(BeEmpty())
				var tools []string
				for _, e := range kinds(turn.events, agent.KindToolUse) {
					tools = append(tools, e.Tool)
				}
				g.Expect(tools).To(Equal(c.tools))
				g.Expect(kinds(turn.events, agent.KindTurnResult)).To(Equal([]agent.Event{{Kind: agent.KindTurnResult, Text: summary1}}))
				g.Expect(kinds(turn.events, agent.KindQuestion)).To(BeEmpty())
				g.Expect(kinds(turn.events, agent.KindError)).To(BeEmpty())
				u := usage(turn.events)
				// Through the proxy: its count is what the server sent, request by request; the
				// CLI's own report agrees with it within the tolerance the UsageConsistent
				// condition allows.
				sent, generations := sentUsage(s.server, turn.all)
				pu := s.proxy.Usage()
				g.Expect(pu.Requests).To(Equal(generations), "every generation request, side requests (titles) too")
				g.Expect(pu.OutputTokens).To(Equal(sent.OutputTokens), "output tokens as sent")
				g.Expect(pu.CacheReadTokens).To(Equal(sent.CacheReadTokens), "cache reads as sent")
				if c.typ == agentsv1alpha1.AgentCodex || c.typ == agentsv1alpha1.AgentGemini {
					// OpenAI's input_tokens and Gemini's promptTokenCount include the cached
					// ones; the proxy keeps them apart.
					g.Expect(pu.InputTokens + pu.CacheReadTokens).To(Equal(sent.InputTokens))
				} else {
					g.Expect(pu.InputTokens).To(Equal(sent.InputTokens), "input as sent")
				}
				g.Expect(pu.Unmetered).To(BeZero())
				g.Expect(lifecycle.UsageAgrees(u.OutputTokens, pu.OutputTokens)).To(BeTrue(),
					"the CLI reported %d output tokens, the proxy counted %d", u.OutputTokens, pu.OutputTokens)
				g.Expect(u.InputTokens).To(BeNumerically(">", 0))
				g.Expect(u.OutputTokens).To(BeNumerically(">", 0))
				g.Expect(u.CacheReadTokens).To(BeNumerically(">", 0))
				if c.cost {
					g.Expect(u.CostUSD).To(BeNumerically(">", 0))
				}
			})

			t.Run("resumed turn survives API errors and asks a question", func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(s.sessionID).NotTo(BeEmpty(), "the first turn reported its conversation id")
				var replies []modelserver.Reply
				for _, e := range c.retries {
					replies = append(replies, modelserver.Reply{Error: &e})
				}
				replies = append(replies, c.ask...)
				replies = append(replies, modelserver.Text("I checked the handlers.\n\n"+question))
				turn := s.run(t, "retry_question", agent.Turn{Prompt: followUp, Resume: true, SessionID: s.sessionID, Model: c.model,
					Permission: agentsv1alpha1.PermissionBypass}, replies...)
				g.Expect(turn.exit).To(Equal(0), "stderr: %s", turn.stderr)

				// The same conversation continued: the model saw the first turn and the follow-up.
				last := turn.requests[len(turn.requests)-1]
				g.Expect(strings.Join(last.AssistantTexts(), "\n")).To(ContainSubstring(summary1))
				g.Expect(strings.Join(last.UserTexts(), "\n")).To(ContainSubstring(prompt))
				g.Expect(strings.Join(last.UserTexts(), "\n")).To(ContainSubstring(followUp))
				for _, e := range kinds(turn.events, agent.KindSession) {
					g.Expect(e.SessionID).To(Equal(s.sessionID))
				}

				// The API error was retried by the CLI itself: an activity, not a crash.
				retries := kinds(turn.events, agent.KindError)
				if c.retryVisible {
					g.Expect(retries).NotTo(BeEmpty())
					for _, e := range retries {
						g.Expect(e.Retrying).To(BeTrue(), "%s", e.Text)
					}
				} else {
					g.Expect(retries).To(BeEmpty())
				}
				g.Expect(kinds(turn.events, agent.KindTurnResult)).To(HaveExactElements(HaveField("IsError", false)))

				// The question ends the turn; the runner reports WaitingForInput with it.
				questions := kinds(turn.events, agent.KindQuestion)
				g.Expect(questions).NotTo(BeEmpty())
				for _, q := range questions {
					g.Expect(q.Text).To(Equal(question))
				}
			})

			t.Run("refused request exits non-zero", func(t *testing.T) {
				g := NewWithT(t)
				// Read-only, so this argv form is checked against the real CLI too. The refusal
				// repeats: a CLI may send its request again in another form before giving up.
				refusal := c.refusal
				turn := s.run(t, "error", agent.Turn{Prompt: "One more thing.", Resume: true, SessionID: s.sessionID, Model: c.model,
					Permission: agentsv1alpha1.PermissionReadOnly}, modelserver.Reply{Error: &refusal, Repeat: true})
				g.Expect(turn.exit).NotTo(Equal(0))
				g.Expect(turn.requests).NotTo(BeEmpty(), "the CLI accepted the arguments and called the model")
				results := kinds(turn.events, agent.KindTurnResult)
				g.Expect(results).To(HaveLen(1))
				g.Expect(results[0].IsError).To(BeTrue())
				g.Expect(results[0].Text).To(ContainSubstring(refused))
				for _, e := range kinds(turn.events, agent.KindError) {
					g.Expect(e.Retrying).To(BeFalse(), "a refused request is not retried: %s", e.Text)
				}
			})

			t.Run("output keeps the fields the parser reads", func(t *testing.T) {
				checkContract(t, c, s.lines)
			})

			g := NewWithT(t)
			g.Expect(s.server.Problems()).To(BeEmpty())
			for _, r := range s.server.Requests() {
				g.Expect(r.API).NotTo(Equal(modelserver.APIOther), "%s %s", r.Method, r.Path)
			}
		})
	}
}

func install(t *testing.T) string {
	t.Helper()
	bin, err := realagents.Install()
	if err != nil {
		t.Fatalf("installing the pinned agent CLIs (hack/agent-clis.sh) failed: %v", err)
	}
	return bin
}

// session is one CLI's conversation: its checkout, HOME and model server.
type session struct {
	c      cliCase
	bin    string
	dir    string
	env    []string
	server *modelserver.Server
	// proxy is Shepherd's model proxy between the CLI and the server, as in a pod: its count is
	// checked against what the server sent.
	proxy     *modelproxy.Proxy
	sessionID string
	lines     [][]byte
}

func newSession(t *testing.T, c cliCase, bin string) *session {
	g := NewWithT(t)
	s := &session{c: c, bin: bin, dir: filepath.Join(t.TempDir(), "checkout"), server: modelserver.New(nil)}
	g.Expect(s.server.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = s.server.Close() })
	s.proxy = startModelProxy(t, c.typ, s.server.URL())
	setup, err := realagents.ForAgent(c.typ, filepath.Join(t.TempDir(), "home"), proxyURL(s.proxy))
	g.Expect(err).NotTo(HaveOccurred())
	// A clean environment: nothing of the caller's (API keys, config dirs) reaches the CLI.
	s.env = []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "LANG=C.UTF-8"}
	for _, kv := range gitserver.CommitterEnv() {
		if !strings.HasPrefix(kv, "HOME=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, setup.Env...)
	s.env = append(s.env, realagents.ProxyEnv(s.server.URL())...)
	g.Expect(os.MkdirAll(s.dir, 0o755)).To(Succeed())
	s.gitT(t, "init", "-q", "-b", "main")
	g.Expect(os.WriteFile(filepath.Join(s.dir, "README.md"), []byte("# widgets\n"), 0o644)).To(Succeed())
	s.gitT(t, "add", "README.md")
	s.gitT(t, "commit", "-q", "-m", "Initial commit")
	return s
}

type turnResult struct {
	exit     int
	stdout   []byte
	stderr   string
	events   []agent.Event
	requests []modelserver.Request
	// all is every request the server received in the turn, side requests too.
	all []modelserver.Request
}

// run plays one turn: the adapter's command, run with the real CLI, against replies.
func (s *session) run(t *testing.T, fixture string, turn agent.Turn, replies ...modelserver.Reply) turnResult {
	t.Helper()
	g := NewWithT(t)
	a, err := agent.Get(s.c.typ)
	g.Expect(err).NotTo(HaveOccurred())
	turn.Workdir = s.dir
	cmd, err := a.Command(turn)
	g.Expect(err).NotTo(HaveOccurred())

	before := len(s.server.Requests())
	played := s.server.Played()
	s.server.Append(replies...)
	res := turnResult{}
	res.stdout, res.stderr, res.exit = s.exec(t, cmd)
	res.events = agent.ParseAll(a.NewParser(), bytes.NewReader(res.stdout))
	res.all = s.server.Requests()[before:]
	for _, r := range res.all {
		if r.Reply >= 0 {
			res.requests = append(res.requests, r)
		}
	}
	for _, line := range bytes.Split(res.stdout, []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			s.lines = append(s.lines, line)
		}
	}
	if *updateFixtures {
		s.writeFixture(t, fixture, res.stdout)
	}
	t.Logf("%s %s: exit %d, %d requests, %d output lines", s.c.typ, fixture, res.exit, len(res.requests), bytes.Count(res.stdout, []byte("\n")))
	if turn.Model != "" {
		// The adapter's model flag reached the model API (OpenCode names provider/model).
		_, model, _ := strings.Cut(turn.Model, "/")
		if model == "" {
			model = turn.Model
		}
		for _, r := range res.requests {
			g.Expect(r.Model()).To(Equal(model), "the model the turn asked for")
		}
	}
	g.Expect(s.server.Played()).To(Equal(played+len(replies)), "the turn used every scripted reply; stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	return res
}

// exec runs the command in its own process group with a timeout and returns its output and
// exit code.
func (s *session) exec(t *testing.T, cmd agent.Command) ([]byte, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), TurnTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(s.bin, cmd.Name), cmd.Args...)
	c.Dir = s.dir
	c.Env = append(append([]string{}, s.env...), cmd.Env...)
	c.Stdin = strings.NewReader(cmd.Stdin)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	if c.Process != nil {
		// Helpers the CLI left behind (Codex's code-mode host, OpenCode's watchers) go with it.
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s\nstdout:\n%s\nstderr:\n%s", cmd.Name, TurnTimeout, stdout.String(), stderr.String())
	}
	exit := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", cmd.Name, err)
	}
	return stdout.Bytes(), stderr.String(), exit
}

func (s *session) writeFixture(t *testing.T, name string, out []byte) {
	root, err := realagents.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "internal", "agent", s.c.fixtures, "testdata", name+".jsonl")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

func (s *session) git(args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "git", args...)
	c.Dir = s.dir
	c.Env = s.env
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (s *session) gitT(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "git", args...)
	c.Dir = s.dir
	c.Env = s.env
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
}

func kinds(events []agent.Event, k agent.Kind) []agent.Event {
	var out []agent.Event
	for _, e := range events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func usage(events []agent.Event) agent.Usage {
	var u agent.Usage
	for _, e := range kinds(events, agent.KindUsage) {
		u.Add(*e.Usage)
	}
	return u
}

// proxies maps each proxy to its base URL.
var proxies sync.Map

func proxyURL(p *modelproxy.Proxy) string { v, _ := proxies.Load(p); return v.(string) }

// startModelProxy serves Shepherd's model proxy on loopback in front of upstream, with the API
// the CLI of typ speaks, as the runner does in a pod.
func startModelProxy(t *testing.T, typ agentsv1alpha1.AgentType, upstream string) *modelproxy.Proxy {
	t.Helper()
	kind := agentsv1alpha1.ModelAPIAnthropic
	switch typ {
	case agentsv1alpha1.AgentCodex:
		kind = agentsv1alpha1.ModelAPIOpenAI
	case agentsv1alpha1.AgentGemini:
		kind = agentsv1alpha1.ModelAPIGemini
	}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p, err := modelproxy.New(modelproxy.Config{Kind: kind, Upstream: u, Key: func() (string, error) { return "sk-test-upstream", nil },
		Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	proxies.Store(p, "http://"+l.Addr().String())
	return p
}

// sentUsage sums the usage the server sent in answer to the generation requests among requests
// (Messages, Responses, Chat Completions, generateContent), and counts them: a scripted reply's
// own usage or the server's default, side answers (titles) the default, an error reply none.
func sentUsage(s *modelserver.Server, requests []modelserver.Request) (modelserver.Usage, int64) {
	var out modelserver.Usage
	var n int64
	script := s.Script()
	for _, r := range requests {
		generation := strings.HasSuffix(r.Path, "/messages") || strings.HasSuffix(r.Path, "/responses") || strings.HasSuffix(r.Path, "/chat/completions") ||
			r.API == modelserver.APIGenerateContent
		if r.Method != http.MethodPost || !generation {
			continue
		}
		n++
		var u modelserver.Usage
		if r.Reply >= 0 && r.Reply < len(script) {
			if script[r.Reply].Error != nil {
				continue
			}
			u = script[r.Reply].Usage
		}
		if u == (modelserver.Usage{}) {
			u = modelserver.DefaultUsage
		}
		out.InputTokens += u.InputTokens
		out.OutputTokens += u.OutputTokens
		out.CacheReadTokens += u.CacheReadTokens
	}
	return out, n
}
