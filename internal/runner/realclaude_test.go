//go:build integration

package runner_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/realagents"
)

// TestRealClaudeCode: the runner drives the real Claude Code (hack/agent-clis.versions) against
// the scripted model server. The model writes a file and commits it through Claude Code's own
// Write and Bash tools; the runner pushes the branch to a real git server and asks for the pull
// request; a follow-up message resumes the same conversation, whose answer ends with a question.
func TestRealClaudeCode(t *testing.T) {
	g := NewWithT(t)
	bin, err := realagents.Install()
	if err != nil {
		t.Fatalf("installing the pinned agent CLIs (hack/agent-clis.sh) failed: %v", err)
	}
	ms := modelserver.New(nil)
	g.Expect(ms.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = ms.Close() })

	h := newHarness(t, options{agent: agentsv1alpha1.AgentClaudeCode, mode: agentsv1alpha1.WorkspaceWorktree,
		branch: hostileBranch, prompt: hostilePrompt})
	// The runner passes its environment to the agent, as in the pod: the real claude first on
	// PATH, its own HOME, the model API (newHarness set HOME for git; Claude Code gets another).
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	setup, err := realagents.ForAgent(agentsv1alpha1.AgentClaudeCode, filepath.Join(t.TempDir(), "home"), ms.URL())
	g.Expect(err).NotTo(HaveOccurred())
	for _, kv := range append(setup.Env, realagents.ProxyEnv(ms.URL())...) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}

	commit := func(file, content, msg string) []modelserver.Reply {
		return []modelserver.Reply{
			modelserver.Tools(modelserver.ToolCall{Name: "Write", Input: map[string]any{"file_path": filepath.Join(h.checkout, file), "content": content}}),
			modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{
				"command": "git add -- " + file + " && git commit -m '" + msg + "'", "description": "Commit the change"}}),
		}
	}
	ms.Append(commit("hello.txt", "hello\n", "Add hello")...)
	ms.Append(modelserver.Text("Added hello.txt."))
	h.start()

	be, s := h.env.Backend, h.session
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(2 * time.Minute).Should(HaveLen(1))
	pr := be.PullRequests(s)[0]
	g.Expect(pr.Branch).To(Equal(hostileBranch))
	g.Expect(pr.Body).To(ContainSubstring("Added hello.txt."))
	g.Expect(h.srv.Ref(repo, "refs/heads/"+hostileBranch)).To(Equal(pr.Head), "the agent's commit was pushed")
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(time.Minute).
		Should(HaveField("State", agentsv1alpha1.ActivityReady))
	turns := ms.Turns()
	g.Expect(turns).To(HaveLen(3))
	g.Expect(strings.Join(turns[0].UserTexts(), "\n")).To(ContainSubstring(hostilePrompt), "the prompt reached the model unchanged")
	conversation := turns[0].Header.Get("X-Claude-Code-Session-Id")
	g.Expect(conversation).NotTo(BeEmpty())

	const question = "Should I also update the docs?"
	ms.Append(commit("follow.txt", "more\n", "Follow up")...)
	ms.Append(modelserver.Text("Handled the follow-up.\n\n" + question))
	be.AddMessage(s, runnerapi.Message{ID: "m-1", Text: hostileMessage})
	g.Eventually(func() []runnerapi.PullRequestRequest { return be.PullRequests(s) }).WithTimeout(2 * time.Minute).Should(HaveLen(2))
	g.Expect(be.Acked(s)).To(Equal([]string{"m-1"}))
	g.Expect(h.srv.Ref(repo, "refs/heads/"+hostileBranch)).To(Equal(be.PullRequests(s)[1].Head))
	g.Expect(h.gitOut("log", "--format=%s", "-2")).To(Equal("Follow up\nAdd hello"))
	g.Eventually(func() *runnerapi.ActivityReport { return be.Activity(s) }).WithTimeout(time.Minute).
		Should(And(HaveField("State", agentsv1alpha1.ActivityWaitingForInput), HaveField("Question", question)))

	// The follow-up resumed the same conversation: the model saw the first turn and the message.
	turns = ms.Turns()
	g.Expect(turns).To(HaveLen(6))
	follow := turns[3]
	g.Expect(follow.Header.Get("X-Claude-Code-Session-Id")).To(Equal(conversation))
	g.Expect(strings.Join(follow.AssistantTexts(), "\n")).To(ContainSubstring("Added hello.txt."))
	g.Expect(strings.Join(follow.UserTexts(), "\n")).To(ContainSubstring(hostileMessage))
	g.Expect(ms.Problems()).To(BeEmpty())

	// Session id, model, cost and tokens in the reports come from the CLI's own output.
	reps := be.Reports(s)
	last := reps[len(reps)-1]
	g.Expect(last.Agent.SessionID).To(Equal(conversation))
	g.Expect(last.Agent.Model).NotTo(BeEmpty())
	g.Expect(last.Usage.Turns).To(Equal(int32(2)))
	cost, tokens := lastResult(t, h.stdout.String())
	g.Expect(last.Usage.CostUSD).To(Equal(strconv.FormatFloat(cost, 'f', 6, 64)),
		"the conversation's running cost, counted once per turn")
	g.Expect(last.Usage.InputTokens).To(Equal(tokens))

	h.cancel()
	g.Expect(h.wait()).To(Equal(result{code: 0}))
	for _, dir := range []string{h.checkout} {
		g.Expect(filepath.Join(dir, "pwned")).NotTo(BeAnExistingFile())
	}
	g.Expect(h.stdout.String()).NotTo(ContainSubstring(password))
	g.Expect(h.stderr.String()).NotTo(ContainSubstring(password))
}

// lastResult reads Claude Code's output for the last result's total_cost_usd (the
// conversation's running cost) and the input tokens of all results (each process's own).
func lastResult(t *testing.T, out string) (cost float64, inputTokens int64) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var l struct {
			Type         string  `json:"type"`
			TotalCostUSD float64 `json:"total_cost_usd"`
			Usage        struct {
				InputTokens              int64 `json:"input_tokens"`
				CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == "result" {
			cost = l.TotalCostUSD
			inputTokens += l.Usage.InputTokens + l.Usage.CacheCreationInputTokens
		}
	}
	if cost == 0 {
		t.Fatalf("no result with a cost in Claude Code's output:\n%s", out)
	}
	return cost, inputTokens
}
