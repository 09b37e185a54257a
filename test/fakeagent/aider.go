package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// aider follows aider's message mode (--message/--msg/-m or --message-file) and prints its plain
// text output. Its conversation is its chat-history file: with --restore-chat-history the turns
// already in the file are the conversation so far.
func aider(args []string) error {
	a, err := parseArgs(args, map[string]bool{"--message": true, "--msg": true, "-m": true, "--message-file": true, "-f": true,
		"--chat-history-file": true, "--input-history-file": true, "--model": true, "--chat-mode": true, "--edit-format": true})
	if err != nil {
		return err
	}
	prompt, set := "", false
	for _, k := range []string{"--message", "--msg", "-m"} {
		if v, ok := a.flags[k]; ok {
			prompt, set = v, true
		}
	}
	for _, k := range []string{"--message-file", "-f"} {
		if p, ok := a.flags[k]; ok {
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read message file: %w", err)
			}
			prompt, set = string(b), true
		}
	}
	if !set {
		return usageError{"fakeagent aider only implements message mode (--message or --message-file)"}
	}
	e, err := load()
	if err != nil {
		return err
	}
	history := a.flags["--chat-history-file"]
	if history == "" {
		history = filepath.Join(e.dir, ".aider.chat.history.md")
	}
	turnIdx := 0
	resumed := a.bools["--restore-chat-history"]
	if resumed {
		if b, err := os.ReadFile(history); err == nil {
			turnIdx = countTurns(string(b))
		}
	}
	mode := a.flags["--chat-mode"]
	if mode == "" {
		mode = a.flags["--edit-format"]
	}
	readOnly := mode == "ask"
	autoCommit := !a.bools["--no-auto-commits"]
	if err := e.record(Call{Agent: "aider", Args: args, Prompt: prompt, Conversation: history, Resumed: resumed, Turn: turnIdx, ReadOnly: readOnly}); err != nil {
		return err
	}
	model := a.flags["--model"]
	if model == "" {
		model = "anthropic/claude-sonnet-4-5"
	}
	e.println("Aider v0.86.1")
	e.println("Main model: " + model + " with diff edit format, infinite output")
	e.println("Git repo: .git with 3 files")
	e.println("Repo-map: using 4096 tokens, auto refresh")
	if resumed && turnIdx > 0 {
		e.println("Restored previous conversation history.")
	}
	e.println("")
	var reply []string
	t := e.turn(turnIdx)
	result := t.Result
	for _, st := range t.Steps {
		switch {
		case st.Say != "":
			e.println(st.Say)
			reply = append(reply, st.Say)
		case st.Write != nil:
			if readOnly {
				continue
			}
			if err := e.write(*st.Write); err != nil {
				return err
			}
			e.println("Applied edit to " + st.Write.Path)
		case st.Commit != "":
			if readOnly || !autoCommit {
				continue
			}
			sha, err := e.commit(st.Commit)
			if err != nil {
				return err
			}
			e.println(fmt.Sprintf("Commit %s %s", sha, st.Commit))
		case st.Run != nil:
			_, _ = e.run(st.Run)
		case st.Sleep != "":
			sleep(st.Sleep)
		case st.Retry != "":
			e.println("litellm.APIConnectionError: " + st.Retry)
			e.println("Retrying in 0.2 seconds...")
		case st.Ask != "":
			result = st.Ask
		case st.Fail != "":
			e.println("litellm.APIError: " + st.Fail)
			return exitError{1}
		case st.Exit != 0:
			return crash(st)
		}
	}
	if result != "" {
		e.println("")
		e.println(result)
		reply = append(reply, result)
	}
	e.println("")
	e.println(fmt.Sprintf("Tokens: 2.5k sent, 312 received. Cost: $0.01 message, $%.2f session.", 0.01*float64(turnIdx+1)))
	return appendHistory(history, prompt, strings.Join(reply, "\n\n"))
}

// countTurns counts the user messages in an aider chat history: runs of "#### " lines.
func countTurns(history string) int {
	n, in := 0, false
	for _, l := range strings.Split(history, "\n") {
		user := strings.HasPrefix(l, "#### ")
		if user && !in {
			n++
		}
		in = user
	}
	return n
}

func appendHistory(path, prompt, reply string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("history dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open history: %w", err)
	}
	defer func() { _ = f.Close() }()
	var b strings.Builder
	fmt.Fprintf(&b, "\n# aider chat started at %s\n\n", time.Now().Format("2006-01-02 15:04:05"))
	for _, l := range strings.Split(prompt, "\n") {
		b.WriteString("#### " + l + "  \n")
	}
	b.WriteString("\n" + reply + "\n")
	_, err = f.WriteString(b.String())
	return err
}
