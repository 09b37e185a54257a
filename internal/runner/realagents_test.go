//go:build integration

package runner_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/runner"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/realagents"
)

// realAgent is what differs between the real CLIs in the runner's test: their tools, how their
// conversation shows on the wire, and where their output prints usage.
type realAgent struct {
	typ  agentsv1alpha1.AgentType
	mode agentsv1alpha1.WorkspaceMode
	// api is the model API the CLI speaks through the runner's proxy; model the session's model.
	api   agentsv1alpha1.ModelAPIKind
	model string
	// commit is the replies that write file (relative to dir) with content and commit it with
	// msg, through the CLI's own file and shell tools.
	commit func(dir, file, content, msg string) []modelserver.Reply
	// conversation is the CLI's conversation id as its model requests carry it (a header each);
	// nil for a CLI whose requests name none (Gemini CLI).
	conversation func(modelserver.Request) string
	// reportsModel says the CLI prints the model it uses (Claude Code's system/init, Gemini
	// CLI's init); Codex's and OpenCode's JSON output names none.
	reportsModel bool
	// usage reads the session's totals the runner must report from everything the CLI printed
	// over both turns.
	usage func(t *testing.T, out string) printedUsage
	// sent is what the model API sent, as the proxy must count it; nil is sentMetered.
	sent func(*modelserver.Server) runnerapi.Metered
}

// printedUsage is what the CLI's output says the session used; cost is "" when the CLI prints
// no cost.
type printedUsage struct {
	cost                     string
	input, output, cacheRead int64
}

var realAgents = []realAgent{
	{
		typ: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree, api: agentsv1alpha1.ModelAPIAnthropic,
		commit: func(dir, file, content, msg string) []modelserver.Reply {
			return []modelserver.Reply{
				modelserver.Tools(modelserver.ToolCall{Name: "Write", Input: map[string]any{"file_path": filepath.Join(dir, file), "content": content}}),
				modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{
					"command": dumpEnv + "git add -- " + file + " && git commit -m '" + msg + "'", "description": "Commit the change"}}),
			}
		},
		conversation: func(r modelserver.Request) string { return r.Header.Get("X-Claude-Code-Session-Id") },
		reportsModel: true,
		usage:        claudeUsage,
	},
	{
		// Codex's default model runs its tools through the free-form "exec" tool: JavaScript that
		// awaits the nested apply_patch and exec_command (see test/realagents).
		typ: agentsv1alpha1.AgentCodex, mode: agentsv1alpha1.WorkspaceClone, api: agentsv1alpha1.ModelAPIOpenAI,
		commit: func(_, file, content, msg string) []modelserver.Reply {
			patch := "*** Begin Patch\n*** Add File: " + file + "\n+" + strings.TrimSuffix(content, "\n") + "\n*** End Patch\n"
			js := fmt.Sprintf("const p = await tools.apply_patch(%s);\ntext(p);\nconst r = await tools.exec_command({cmd: %s});\ntext(r.output);\n",
				jsString(patch), jsString(dumpEnv+"git add -- "+file+" && git commit -m '"+msg+"'"))
			return []modelserver.Reply{modelserver.Tools(modelserver.ToolCall{Name: "exec", Input: js})}
		},
		conversation: func(r modelserver.Request) string { return r.Header.Get("Thread-Id") },
		usage:        codexUsage,
	},
	{
		typ: agentsv1alpha1.AgentOpenCode, mode: agentsv1alpha1.WorkspaceWorktree, api: agentsv1alpha1.ModelAPIAnthropic, model: "claude-sonnet-4-5",
		commit: func(dir, file, content, msg string) []modelserver.Reply {
			return []modelserver.Reply{
				modelserver.Tools(modelserver.ToolCall{Name: "write", Input: map[string]any{"filePath": filepath.Join(dir, file), "content": content}}),
				modelserver.Tools(modelserver.ToolCall{Name: "bash", Input: map[string]any{
					"command": dumpEnv + "git add -- " + file + " && git commit -m '" + msg + "'", "description": "Commit the change"}}),
			}
		},
		conversation: func(r modelserver.Request) string { return r.Header.Get("X-Session-Id") },
		usage:        opencodeUsage,
	},
	{
		// Its requests carry no conversation id: the resumed conversation shows in what the
		// model sees (turn 1 replayed) and in the session id the CLI prints.
		typ: agentsv1alpha1.AgentGemini, mode: agentsv1alpha1.WorkspaceWorktree, api: agentsv1alpha1.ModelAPIGemini, model: "gemini-2.5-pro",
		commit: func(dir, file, content, msg string) []modelserver.Reply {
			return []modelserver.Reply{
				modelserver.Tools(modelserver.ToolCall{Name: "write_file", Input: map[string]any{"file_path": filepath.Join(dir, file), "content": content}}),
				modelserver.Tools(modelserver.ToolCall{Name: "run_shell_command", Input: map[string]any{
					"command": dumpEnv + "git add -- " + file + " && git commit -m '" + msg + "'", "description": "Commit the change"}}),
			}
		},
		reportsModel: true,
		usage:        geminiUsage,
		sent:         sentGeminiMetered,
	},
}

// dumpEnv, before each commit, writes what the CLI's shell tool sees of its environment (and of
// its parent's, the CLI itself) to an untracked file, as a steered agent would look for a key.
const dumpEnv = "{ env; tr '\\0' '\\n' < /proc/$PPID/environ; } > ../agent-env.txt 2>&1; "

// TestRealCLIsInTheRunner: the runner drives each real CLI (hack/agent-clis.versions) against
// the scripted model server. The model writes a file and commits it through the CLI's own tools;
// the runner pushes the branch to a real git server and asks for the pull request; a follow-up
// message resumes the same conversation (the CLI's session id, on the wire and in the reports;
// the earlier turn replayed to the model), whose answer commits again and ends with a question,
// reported as WaitingForInput. None of the CLIs offers a question tool in its headless mode: a
// question is final text ending in "?". Session id, model, cost and tokens in the reports come
// from the CLI's own output. (Named so that `make test-real-agents`, -run 'TestRealCLIs|…',
// picks it up.)
func TestRealCLIsInTheRunner(t *testing.T) {
	bin, err := realagents.Install()
	if err != nil {
		t.Fatalf("installing the pinned agent CLIs (hack/agent-clis.sh) failed: %v", err)
	}
	for _, a := range realAgents {
		// Not parallel: the harness sets the process environment the runner passes on.
		t.Run(string(a.typ), func(t *testing.T) { runRealAgent(t, a, bin) })
	}
}

func runRealAgent(t *testing.T, a realAgent, bin string) {
	g := NewWithT(t)
	ms := modelserver.New(nil)
	g.Expect(ms.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = ms.Close() })

	// The model API as a Project sets it: the runner's proxy reads the key from its own file
	// (the runner container's Secret volume) and forwards to the upstream, here the scripted
	// server; the CLI gets the proxy's address and a placeholder key (agent.Turn.ModelAPI).
	keyFile := filepath.Join(t.TempDir(), "api-key")
	g.Expect(os.WriteFile(keyFile, []byte(realModelKey+"\n"), 0o600)).To(Succeed())
	home := filepath.Join(t.TempDir(), "home")
	h := newHarness(t, options{agent: a.typ, mode: a.mode, branch: hostileBranch, prompt: hostilePrompt, agentModel: a.model, agentHome: home,
		model: &runner.ModelConfig{API: a.api, Upstream: ms.URL(), KeyFile: keyFile}})
	// The runner passes its environment to the agent, as in the pod: the real CLI first on PATH,
	// its own HOME, the settings that keep it offline; no model API and no key (newHarness set
	// HOME for git; the CLI gets another).
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	setup, err := realagents.ForAgent(a.typ, home, "")
	g.Expect(err).NotTo(HaveOccurred())
	for _, kv := range append(setup.Env, realagents.ProxyEnv(ms.URL())...) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}

	first := a.commit(h.checkout, "hello.txt", "hello\n", "Add hello")
	ms.Append(first...)
	ms.Append(modelserver.Text("Added hello.txt."))
	// The runner's own directory (and PWD) is not the checkout, as in a pod whose checkout is
	// below its working directory: the agent must still work in the checkout (OpenCode takes
	// its directory from PWD). ForAgent above read the repository's root from the old one.
	t.Chdir(t.TempDir())
	h.start()

	be, s := h.env.Backend, h.session
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(2*time.Minute).Should(HaveLen(1),
		"stdout:\n%s\nstderr:\n%s", h.stdout, h.stderr)
	pr := be.PullRequests(s)[0]
	g.Expect(pr.Branch).To(Equal(hostileBranch))
	g.Expect(pr.Body).To(ContainSubstring("Added hello.txt."))
	g.Expect(h.srv.Ref(repo, "refs/heads/"+hostileBranch)).To(Equal(pr.Head), "the agent's commit was pushed")
	g.Expect(h.gitOut("log", "--format=%s", "-1")).To(Equal("Add hello"))
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(time.Minute).
		Should(HaveField("State", agentsv1alpha1.ActivityReady))
	turns := ms.Turns()
	g.Expect(turns).To(HaveLen(len(first)+1), "one model request per scripted reply")
	g.Expect(strings.Join(turns[0].UserTexts(), "\n")).To(ContainSubstring(hostilePrompt), "the prompt reached the model unchanged")
	g.Expect(strings.Join(turns[len(turns)-1].ToolResults(), "\n")).To(ContainSubstring("Add hello"), "the commit's output went back to the model")
	conversation := ""
	if a.conversation != nil {
		conversation = a.conversation(turns[0])
		g.Expect(conversation).NotTo(BeEmpty(), "the CLI names its conversation in its requests")
		for _, r := range turns[1:] {
			g.Expect(a.conversation(r)).To(Equal(conversation), "one conversation within the turn")
		}
	}
	var sessionID string
	g.Eventually(func() string {
		reps := be.Reports(s)
		if last := reps[len(reps)-1]; last.Agent != nil {
			sessionID = last.Agent.SessionID
		}
		return sessionID
	}).ShouldNot(BeEmpty(), "the CLI's session id was reported")

	const question = "Should I also update the docs?"
	follow := a.commit(h.checkout, "follow.txt", "more\n", "Follow up")
	ms.Append(follow...)
	ms.Append(modelserver.Text("Handled the follow-up.\n\n" + question))
	be.AddMessage(s, runnerapi.Message{ID: "m-1", Text: hostileMessage})
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(2*time.Minute).Should(HaveLen(2),
		"stdout:\n%s\nstderr:\n%s", h.stdout, h.stderr)
	g.Expect(be.Acked(s)).To(Equal([]string{"m-1"}))
	g.Expect(h.srv.Ref(repo, "refs/heads/"+hostileBranch)).To(Equal(be.PullRequests(s)[1].Head))
	g.Expect(h.gitOut("log", "--format=%s", "-2")).To(Equal("Follow up\nAdd hello"))
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(time.Minute).
		Should(And(HaveField("State", agentsv1alpha1.ActivityWaitingForInput), HaveField("Question", question)))

	// The follow-up resumed the same conversation: the model saw the first turn and the message.
	turns = ms.Turns()
	g.Expect(turns).To(HaveLen(len(first) + 1 + len(follow) + 1))
	for _, r := range turns[len(first)+1:] {
		if a.conversation != nil {
			g.Expect(a.conversation(r)).To(Equal(conversation), "the resumed turn continued the conversation")
		}
		g.Expect(strings.Join(r.AssistantTexts(), "\n")).To(ContainSubstring("Added hello.txt."))
		g.Expect(strings.Join(r.UserTexts(), "\n")).To(ContainSubstring(hostilePrompt))
		g.Expect(strings.Join(r.UserTexts(), "\n")).To(ContainSubstring(hostileMessage))
	}
	g.Expect(ms.Problems()).To(BeEmpty())

	// Every model request came through the runner's proxy with the Project's key; the CLI's
	// environment, and its shell tool's, held only the placeholder.
	for _, r := range ms.Requests() {
		creds := r.Header.Get("X-Api-Key") + " " + r.Header.Get("Authorization") + " " + r.Header.Get("X-Goog-Api-Key")
		g.Expect(creds).To(ContainSubstring(realModelKey), "request %d (%s) carries the real key", r.Seq, r.Path)
		g.Expect(creds).NotTo(ContainSubstring(agent.PlaceholderKey))
	}
	seen, err := os.ReadFile(filepath.Join(filepath.Dir(h.checkout), "agent-env.txt"))
	g.Expect(err).NotTo(HaveOccurred(), "the CLI's shell tool ran")
	g.Expect(string(seen)).To(ContainSubstring(agent.PlaceholderKey), "the CLI has the placeholder")
	g.Expect(string(seen)).NotTo(ContainSubstring(realModelKey), "the CLI never has the real key")
	g.Expect(string(seen)).NotTo(ContainSubstring("SHEPHERD_TOKEN"))

	// Session id, model, cost and tokens in the reports come from the CLI's own output.
	reps := be.Reports(s)
	last := reps[len(reps)-1]
	g.Expect(last.Agent.SessionID).To(Equal(sessionID), "the resumed turn kept the CLI's session id")
	if a.conversation != nil {
		g.Expect(sessionID).To(Equal(conversation), "the id the CLI printed is the one it sends")
	}
	if a.reportsModel {
		g.Expect(last.Agent.Model).NotTo(BeEmpty())
	} else {
		g.Expect(last.Agent.Model).To(BeEmpty(), "the CLI prints no model")
	}
	g.Expect(last.Usage.Turns).To(Equal(int32(2)))
	want := a.usage(t, h.raw.String())
	g.Expect(last.Usage.InputTokens).To(Equal(want.input))
	g.Expect(last.Usage.OutputTokens).To(Equal(want.output))
	g.Expect(last.Usage.CacheReadTokens).To(Equal(want.cacheRead))
	g.Expect(last.Usage.InputTokens + last.Usage.OutputTokens).To(BeNumerically(">", 0))
	if want.cost == "" {
		g.Expect(last.Usage.CostUSD).To(BeEmpty(), "the CLI prints no cost")
	} else {
		g.Expect(strconv.ParseFloat(last.Usage.CostUSD, 64)).To(BeNumerically("~", mustFloat(t, want.cost), 1e-6))
		g.Expect(mustFloat(t, want.cost)).To(BeNumerically(">", 0))
	}
	// The runner's model proxy counted exactly what the model API sent over both turns, every
	// request (side ones too) once; the CLI's own count of output tokens agrees with it. The
	// resumed conversation (Codex reports its thread's totals) is counted once by both.
	sent := sentMetered(ms)
	if a.sent != nil {
		sent = a.sent(ms)
	}
	g.Expect(sent.Requests).To(BeNumerically(">=", len(turns)))
	g.Eventually(h.lastMetered).Should(HaveValue(Equal(sent)), "the proxy's count, as the runner reported it")
	g.Expect(lifecycle.UsageAgrees(last.Usage.OutputTokens, sent.OutputTokens)).To(BeTrue(),
		"the CLI reported %d output tokens, the model API sent %d", last.Usage.OutputTokens, sent.OutputTokens)

	h.cancel()
	g.Expect(h.wait()).To(Equal(result{code: 0}))
	// The real CLI's two turns came out of the runner as the transcript's common kinds: the
	// same for every CLI, with the commit's output in a tool result.
	streamed, _, _ := h.env.Backend.Transcripts.Read(h.session, 0, 0)
	kinds := map[transcript.Kind]int{}
	var results []string
	for _, e := range streamed {
		kinds[e.Kind]++
		if e.Kind == transcript.KindToolResult {
			results = append(results, e.Text)
		}
	}
	for _, k := range []transcript.Kind{transcript.KindTurnStarted, transcript.KindToolCall, transcript.KindToolResult,
		transcript.KindUsage, transcript.KindTurnEnded} {
		g.Expect(kinds[k]).To(BeNumerically(">", 0), "kind %s in %v", k, kinds)
	}
	g.Expect(kinds[transcript.KindTurnEnded]).To(Equal(2))
	g.Expect(strings.Join(results, "\n")).To(ContainSubstring("file changed"))
	g.Expect(h.stdout.String()).To(ContainSubstring("── turn 2 ──"))
	g.Expect(filepath.Join(h.checkout, "pwned")).NotTo(BeAnExistingFile())
	for _, text := range []string{h.stdout.String(), h.stderr.String(), readAll(t, h.checkout)} {
		g.Expect(text).NotTo(ContainSubstring(password))
	}
}

func jsString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("cost %q: %v", s, err)
	}
	return f
}

// jsonLines calls fn with every JSON object line of out.
func jsonLines(out string, fn func(raw []byte)) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "{") {
			fn(sc.Bytes())
		}
	}
}

// claudeUsage: each result's total_cost_usd is the conversation's running cost, so the last
// one is the session's; each result's usage is its own process's tokens.
func claudeUsage(t *testing.T, out string) printedUsage {
	var u printedUsage
	var cost float64
	jsonLines(out, func(raw []byte) {
		var l struct {
			Type         string  `json:"type"`
			TotalCostUSD float64 `json:"total_cost_usd"`
			Usage        struct {
				InputTokens              int64 `json:"input_tokens"`
				CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
				CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
				OutputTokens             int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(raw, &l) == nil && l.Type == "result" {
			cost = l.TotalCostUSD
			u.input += l.Usage.InputTokens + l.Usage.CacheCreationInputTokens
			u.cacheRead += l.Usage.CacheReadInputTokens
			u.output += l.Usage.OutputTokens
		}
	})
	if cost == 0 {
		t.Fatalf("no result with a cost in Claude Code's output:\n%s", out)
	}
	u.cost = strconv.FormatFloat(cost, 'f', -1, 64)
	return u
}

// codexUsage: turn.completed carries the thread's running totals (input including cached
// input), so the last one is the session's; Codex prints no cost.
func codexUsage(t *testing.T, out string) printedUsage {
	var u printedUsage
	completed := 0
	jsonLines(out, func(raw []byte) {
		var l struct {
			Type  string `json:"type"`
			Usage *struct {
				InputTokens       int64 `json:"input_tokens"`
				CachedInputTokens int64 `json:"cached_input_tokens"`
				OutputTokens      int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(raw, &l) == nil && l.Type == "turn.completed" && l.Usage != nil {
			completed++
			u = printedUsage{input: l.Usage.InputTokens - l.Usage.CachedInputTokens, cacheRead: l.Usage.CachedInputTokens,
				output: l.Usage.OutputTokens}
		}
	})
	if completed != 2 {
		t.Fatalf("want a turn.completed with usage per turn in Codex's output, got %d:\n%s", completed, out)
	}
	return u
}

// opencodeUsage: every step_finish carries its own model request's tokens and cost.
func opencodeUsage(t *testing.T, out string) printedUsage {
	var u printedUsage
	var cost float64
	steps := 0
	jsonLines(out, func(raw []byte) {
		var l struct {
			Type string `json:"type"`
			Part struct {
				Cost   float64 `json:"cost"`
				Tokens struct {
					Input     int64 `json:"input"`
					Output    int64 `json:"output"`
					Reasoning int64 `json:"reasoning"`
					Cache     struct {
						Read  int64 `json:"read"`
						Write int64 `json:"write"`
					} `json:"cache"`
				} `json:"tokens"`
			} `json:"part"`
		}
		if json.Unmarshal(raw, &l) == nil && l.Type == "step_finish" {
			steps++
			cost += l.Part.Cost
			u.input += l.Part.Tokens.Input + l.Part.Tokens.Cache.Write
			u.output += l.Part.Tokens.Output + l.Part.Tokens.Reasoning
			u.cacheRead += l.Part.Tokens.Cache.Read
		}
	})
	if steps == 0 || cost == 0 {
		t.Fatalf("no step_finish with a cost in OpenCode's output:\n%s", out)
	}
	u.cost = strconv.FormatFloat(cost, 'f', -1, 64)
	return u
}

// geminiUsage: every result carries its own process's tokens (a resumed session counts from
// zero): input is the prompt tokens less the cached ones; Gemini CLI prints no cost.
func geminiUsage(t *testing.T, out string) printedUsage {
	var u printedUsage
	results := 0
	jsonLines(out, func(raw []byte) {
		var l struct {
			Type  string `json:"type"`
			Stats *struct {
				Input        int64 `json:"input"`
				Cached       int64 `json:"cached"`
				OutputTokens int64 `json:"output_tokens"`
			} `json:"stats"`
		}
		if json.Unmarshal(raw, &l) == nil && l.Type == "result" && l.Stats != nil {
			results++
			u.input += l.Stats.Input
			u.cacheRead += l.Stats.Cached
			u.output += l.Stats.OutputTokens
		}
	})
	if results != 2 {
		t.Fatalf("want a result with stats per turn in Gemini CLI's output, got %d:\n%s", results, out)
	}
	return u
}

// sentGeminiMetered is sentMetered for the Gemini API: every generateContent and
// streamGenerateContent request, the reply's usage (promptTokenCount including the cached
// tokens, which the proxy counts apart), by the model in the request's path.
func sentGeminiMetered(ms *modelserver.Server) runnerapi.Metered {
	script := ms.Script()
	var m runnerapi.Metered
	for _, r := range ms.Requests() {
		if r.API != modelserver.APIGenerateContent {
			continue
		}
		u := modelserver.DefaultUsage
		if r.Reply >= 0 && r.Reply < len(script) {
			if script[r.Reply].Error != nil {
				u = modelserver.Usage{}
			} else if script[r.Reply].Usage != (modelserver.Usage{}) {
				u = script[r.Reply].Usage
			}
		}
		u.CacheReadTokens = min(u.CacheReadTokens, u.InputTokens)
		u.InputTokens -= u.CacheReadTokens
		if m.ByModel == nil {
			m.ByModel = map[string]runnerapi.MeteredModel{}
		}
		x := m.ByModel[r.Model()]
		x.Requests++
		x.InputTokens += u.InputTokens
		x.OutputTokens += u.OutputTokens
		x.CacheReadTokens += u.CacheReadTokens
		m.ByModel[r.Model()] = x
		m.Requests++
		m.InputTokens += u.InputTokens
		m.OutputTokens += u.OutputTokens
		m.CacheReadTokens += u.CacheReadTokens
	}
	return m
}
