package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	_ "github.com/shepherd-dev/shepherd/internal/agent/all"
)

// TestEveryPersonaSpeaksItsAdaptersFormat runs the fake as each CLI, with the command line the
// real adapter builds, and parses its output with the real parser.
func TestEveryPersonaSpeaksItsAdaptersFormat(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fakeagent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), string(out))
	sc := filepath.Join(t.TempDir(), "scenario.json")
	NewWithT(t).Expect(os.WriteFile(sc, []byte(`{"turns":[{"steps":[{"say":"Working."},{"write":{"path":"a.txt","content":"a"}},{"commit":"Add a"}],"result":"Added a.txt."}]}`), 0o644)).To(Succeed())

	// The personas the fake has: the four CLIs it stands in for. Gemini CLI runs for real in
	// every test that needs it, and a custom agent is the team's own program.
	for _, typ := range []agentsv1alpha1.AgentType{agentsv1alpha1.AgentClaudeCode, agentsv1alpha1.AgentCodex,
		agentsv1alpha1.AgentAider, agentsv1alpha1.AgentOpenCode} {
		t.Run(string(typ), func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "root"}} {
				cmd := exec.Command("git", args...)
				cmd.Dir = dir
				o, err := cmd.CombinedOutput()
				g.Expect(err).NotTo(HaveOccurred(), string(o))
			}
			a, err := agent.Get(typ)
			g.Expect(err).NotTo(HaveOccurred())
			spec, err := a.Command(agent.Turn{Prompt: "add a", Workdir: dir, StateDir: filepath.Join(dir, ".git", "shepherd"),
				Permission: agentsv1alpha1.PermissionBypass})
			g.Expect(err).NotTo(HaveOccurred())
			cmd := exec.Command(bin, spec.Args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), append(spec.Env, "FAKEAGENT_AS="+spec.Name, "FAKEAGENT_SCENARIO="+sc,
				"FAKEAGENT_STATE="+filepath.Join(dir, ".fake"))...)
			cmd.Stdin = strings.NewReader(spec.Stdin)
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			g.Expect(cmd.Run()).To(Succeed())
			var result *agent.Event
			for _, ev := range agent.ParseAll(a.NewParser(), &stdout) {
				g.Expect(ev.Malformed).To(BeFalse(), ev.Text)
				if ev.Kind == agent.KindTurnResult {
					e := ev
					result = &e
				}
			}
			g.Expect(result).NotTo(BeNil())
			g.Expect(result.Text).To(ContainSubstring("Added a.txt."))
			log, err := exec.Command("git", "-C", dir, "log", "--format=%s", "-1").Output()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.TrimSpace(string(log))).To(Equal("Add a"))

			raw, err := os.ReadFile(filepath.Join(dir, ".fake", "calls.jsonl"))
			g.Expect(err).NotTo(HaveOccurred())
			var c Call
			g.Expect(json.Unmarshal(bytes.Split(raw, []byte("\n"))[0], &c)).To(Succeed())
			g.Expect(c.Prompt).To(Equal("add a"))
		})
	}
}

func TestContractRefusals(t *testing.T) {
	g := NewWithT(t)
	bin := filepath.Join(t.TempDir(), "fakeagent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	sc := filepath.Join(t.TempDir(), "scenario.json")
	g.Expect(os.WriteFile(sc, []byte(`{"turns":[]}`), 0o644)).To(Succeed())
	for _, tc := range []struct {
		as   string
		args []string
		msg  string
	}{
		{"claude", []string{"-p", "--output-format", "stream-json", "x"}, "requires --verbose"},
		{"claude", []string{"-p", "--output-format", "stream-json", "--verbose", "--resume", "nope", "x"}, "No conversation found"},
		{"claude", []string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "yolo", "x"}, "Allowed choices"},
		{"codex", []string{"exec", "x"}, "--json"},
		{"codex", []string{"exec", "--json", "resume", "nope", "x"}, "no rollout found"},
		{"opencode", []string{"run", "--format", "json", "--session", "nope", "x"}, "Session not found"},
		{"aider", []string{"--yes-always"}, "message mode"},
		{"gemini", nil, "run me as"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "FAKEAGENT_AS="+tc.as, "FAKEAGENT_SCENARIO="+sc, "FAKEAGENT_STATE="+t.TempDir())
		out, err := cmd.CombinedOutput()
		g.Expect(err).To(HaveOccurred(), tc.as)
		g.Expect(string(out)).To(ContainSubstring(tc.msg), tc.as)
	}
}

// TestInlineScenario plays a scenario given in FAKEAGENT_SCENARIO_JSON (how a pod gets one, from
// its Project's agent.env), with the state in the temporary directory; a file and inline JSON
// together are refused.
func TestInlineScenario(t *testing.T) {
	g := NewWithT(t)
	bin := filepath.Join(t.TempDir(), "fakeagent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	tmp := t.TempDir()
	args := []string{"-p", "--output-format", "stream-json", "--verbose", "start"}
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "FAKEAGENT_AS=claude", "TMPDIR="+tmp,
		`FAKEAGENT_SCENARIO_JSON={"turns":[{"steps":[{"say":"Running."}],"result":"Started."}]}`)
	out, err = cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	g.Expect(lines[0]).To(ContainSubstring(`"subtype":"init"`), "the first line is the CLI's init event")
	g.Expect(string(out)).To(ContainSubstring("Running."))
	g.Expect(string(out)).To(ContainSubstring("Started."))
	g.Expect(filepath.Join(tmp, "fakeagent-state", "calls.jsonl")).To(BeAnExistingFile())

	sc := filepath.Join(t.TempDir(), "scenario.json")
	g.Expect(os.WriteFile(sc, []byte(`{"turns":[]}`), 0o644)).To(Succeed())
	cmd = exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "FAKEAGENT_AS=claude", "FAKEAGENT_SCENARIO="+sc, `FAKEAGENT_SCENARIO_JSON={"turns":[]}`)
	out, err = cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("not both"))
}
