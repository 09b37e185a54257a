// Command fakeagent stands in for the four coding agent CLIs in tests, the offline demo and the
// benchmarks. One binary answers to each CLI's command-line contract, chosen by the name it is
// run as (argv[0] basename claude, codex, aider or opencode; FAKEAGENT_AS overrides), prints that
// CLI's real output format, and makes real edits and commits in its working directory with git.
//
// What it does is written in a scenario file named by FAKEAGENT_SCENARIO (JSON, see Scenario),
// or given whole in FAKEAGENT_SCENARIO_JSON.
// Turn N of a conversation plays the scenario's turn N; a resumed conversation (--resume,
// `exec resume`, --session, or aider's --restore-chat-history) continues where it stopped, so a
// runner that forgot to resume visibly replays turn 0. Every invocation is appended to
// calls.jsonl in FAKEAGENT_STATE (default: a "state" folder beside the scenario) with its argv,
// prompt and conversation id, so tests can check what reached the agent.
//
// Aider ships only through PyPI, which our machines cannot reach, so its fake is the only Aider
// these tests run; it follows aider's documented flags and output.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Scenario is what the fake agent does, turn by turn.
type Scenario struct {
	// Turns, in conversation order. A turn past the end plays a turn that only says it is done.
	Turns []Turn `json:"turns"`
}

// Turn is one prompt's worth of work.
type Turn struct {
	Steps []Step `json:"steps"`
	// Result is the final text (the summary); a question ending in "?" makes it a question.
	Result string `json:"result,omitempty"`
}

// Step is one action. Exactly one field is set.
type Step struct {
	// Say prints assistant text.
	Say string `json:"say,omitempty"`
	// Write creates or replaces a file in the checkout.
	Write *WriteStep `json:"write,omitempty"`
	// Commit stages everything and commits with this message.
	Commit string `json:"commit,omitempty"`
	// Sleep pauses, as a Go duration ("2s").
	Sleep string `json:"sleep,omitempty"`
	// Retry prints the CLI's own model-API retry event with this error.
	Retry string `json:"retry,omitempty"`
	// Ask ends the turn with this question (Claude Code: with AskTool, as an AskUserQuestion
	// tool use the CLI refuses, as the real one does in print mode; the other CLIs have no
	// question tool headless, so their question is the final text).
	Ask     string `json:"ask,omitempty"`
	AskTool bool   `json:"askTool,omitempty"`
	// Fail ends the turn as the CLI's failed turn, with this error, and exits 1.
	Fail string `json:"fail,omitempty"`
	// Exit crashes: prints Stderr to stderr and exits with this code, mid-output.
	Exit   int    `json:"exit,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Run runs a program (an argument list, no shell) in the checkout, as an agent's shell tool
	// would when a prompt steers it; its exit code and output go to runs.jsonl in the state
	// folder and are printed as the tool's result. The turn goes on whatever it returned.
	Run []string `json:"run,omitempty"`
}

// RunRecord is one Run step's outcome, as recorded in runs.jsonl.
type RunRecord struct {
	Args   []string `json:"args"`
	Exit   int      `json:"exit"`
	Output string   `json:"output"`
}

// WriteStep writes Content to Path (relative to the checkout).
type WriteStep struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Call is one invocation, as recorded in calls.jsonl.
type Call struct {
	Agent        string   `json:"agent"`
	Args         []string `json:"args"`
	Prompt       string   `json:"prompt"`
	Conversation string   `json:"conversation"`
	Resumed      bool     `json:"resumed"`
	Turn         int      `json:"turn"`
	Dir          string   `json:"dir"`
	ReadOnly     bool     `json:"readOnly"`
}

func main() {
	as := os.Getenv("FAKEAGENT_AS")
	if as == "" {
		as = filepath.Base(os.Args[0])
	}
	var err error
	switch as {
	case "claude":
		err = claude(os.Args[1:])
	case "codex":
		err = codex(os.Args[1:])
	case "aider":
		err = aider(os.Args[1:])
	case "opencode":
		err = opencode(os.Args[1:])
	default:
		err = usageError{fmt.Sprintf("fakeagent: run me as claude, codex, aider or opencode (or set FAKEAGENT_AS), not %q", as)}
	}
	if err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			os.Exit(ex.code)
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// env is what every persona shares: the scenario, the state folder and the checkout.
type env struct {
	scenario Scenario
	state    string
	dir      string
	out      *bufio.Writer
}

// load reads the scenario: the file FAKEAGENT_SCENARIO names, or the JSON in
// FAKEAGENT_SCENARIO_JSON (for pods, whose environment is all a Project can give the agent). The
// state folder is FAKEAGENT_STATE, else "state" beside the file, else fakeagent-state in the
// temporary directory.
func load() (*env, error) {
	path, inline := os.Getenv("FAKEAGENT_SCENARIO"), os.Getenv("FAKEAGENT_SCENARIO_JSON")
	var raw []byte
	var err error
	switch {
	case path != "" && inline != "":
		return nil, usageError{"set FAKEAGENT_SCENARIO or FAKEAGENT_SCENARIO_JSON, not both"}
	case path != "":
		if raw, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read scenario: %w", err)
		}
	case inline != "":
		raw, path = []byte(inline), "FAKEAGENT_SCENARIO_JSON"
	default:
		return nil, usageError{"FAKEAGENT_SCENARIO (or FAKEAGENT_SCENARIO_JSON) is not set"}
	}
	e := &env{out: bufio.NewWriter(os.Stdout)}
	if err := json.Unmarshal(raw, &e.scenario); err != nil {
		return nil, fmt.Errorf("parse scenario %s: %w", path, err)
	}
	e.state = os.Getenv("FAKEAGENT_STATE")
	switch {
	case e.state != "":
	case inline != "":
		e.state = filepath.Join(os.TempDir(), "fakeagent-state")
	default:
		e.state = filepath.Join(filepath.Dir(path), "state")
	}
	if err := os.MkdirAll(e.state, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	e.dir, err = os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("getwd: %w", err)
	}
	return e, nil
}

func (e *env) turn(i int) Turn {
	if i < len(e.scenario.Turns) {
		return e.scenario.Turns[i]
	}
	return Turn{Result: "Nothing left to do."}
}

// conversation returns how many turns conversation id has had; ok is false when it is unknown.
func (e *env) conversation(id string) (turns int, ok bool) {
	raw, err := os.ReadFile(filepath.Join(e.state, "conv-"+id))
	if err != nil {
		return 0, false
	}
	_, _ = fmt.Sscanf(string(raw), "%d", &turns)
	return turns, true
}

func (e *env) saveConversation(id string, turns int) error {
	return os.WriteFile(filepath.Join(e.state, "conv-"+id), []byte(fmt.Sprint(turns)), 0o644)
}

func (e *env) record(c Call) error {
	c.Dir = e.dir
	f, err := os.OpenFile(filepath.Join(e.state, "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("record call: %w", err)
	}
	defer func() { _ = f.Close() }()
	return json.NewEncoder(f).Encode(c)
}

func (e *env) emit(v any) {
	b, _ := json.Marshal(v)
	_, _ = e.out.Write(append(b, '\n'))
	_ = e.out.Flush()
}

func (e *env) println(s string) {
	_, _ = e.out.WriteString(s + "\n")
	_ = e.out.Flush()
}

func (e *env) write(w WriteStep) error {
	p := filepath.Join(e.dir, filepath.FromSlash(w.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	return os.WriteFile(p, []byte(w.Content), 0o644)
}

// commit stages everything and commits; it returns the short hash.
func (e *env) commit(msg string) (string, error) {
	for _, args := range [][]string{{"add", "-A"}, {"-c", "user.name=Fake Agent", "-c", "user.email=fake-agent@shepherd.dev", "commit", "-q", "-m", msg}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = e.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git %s: %w: %s", args[len(args)-1], err, out)
		}
	}
	out, err := exec.Command("git", "-C", e.dir, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("rev-parse: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// run runs a Run step and records it.
// run runs args in the checkout, records it, and returns the tool result as the CLI would show
// it and whether the program failed.
func (e *env) run(args []string) (string, bool) {
	rec := RunRecord{Args: args}
	if len(args) == 0 {
		rec.Exit, rec.Output = 127, "run: no program"
	} else {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = e.dir
		out, err := cmd.CombinedOutput()
		rec.Output = string(out)
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			rec.Exit = ee.ExitCode()
		case err != nil:
			rec.Exit, rec.Output = 127, err.Error()
		}
	}
	if f, err := os.OpenFile(filepath.Join(e.state, "runs.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		_ = json.NewEncoder(f).Encode(rec)
		_ = f.Close()
	}
	return fmt.Sprintf("exit %d: %s", rec.Exit, rec.Output), rec.Exit != 0
}

func sleep(s string) {
	if d, err := time.ParseDuration(s); err == nil {
		time.Sleep(d)
	}
}

func crash(st Step) error {
	if st.Stderr != "" {
		fmt.Fprintln(os.Stderr, st.Stderr)
	}
	return exitError{st.Exit}
}

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func readStdin() (string, error) {
	st, err := os.Stdin.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice != 0 {
		return "", nil
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	return string(b), nil
}

// flagValue returns the value of --name (as "--name v" or "--name=v") and the remaining args.
type argv struct {
	flags map[string]string
	bools map[string]bool
	pos   []string
}

// parseArgs splits args into flags and positionals; valued lists the flags that take a value.
func parseArgs(args []string, valued map[string]bool) (argv, error) {
	a := argv{flags: map[string]string{}, bools: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		s := args[i]
		if s == "--" {
			a.pos = append(a.pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(s, "-") || s == "-" {
			a.pos = append(a.pos, s)
			continue
		}
		name, val, hasVal := strings.Cut(s, "=")
		if valued[name] {
			if !hasVal {
				if i+1 >= len(args) {
					return a, usageError{"option " + name + " needs a value"}
				}
				i++
				val = args[i]
			}
			a.flags[name] = val
			continue
		}
		a.bools[name] = true
	}
	return a, nil
}
