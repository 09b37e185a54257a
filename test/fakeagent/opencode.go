package main

import (
	"os"
	"strings"
	"time"
)

// opencode follows `opencode run --format json [--session ID] [message..]` and prints its JSON
// events. Like the real CLI, positional words are joined with spaces and those containing a space
// are wrapped in quotes, then piped stdin is appended on a new line.
func opencode(args []string) error {
	if len(args) == 0 || args[0] != "run" {
		return usageError{"fakeagent opencode only implements `opencode run`"}
	}
	a, err := parseArgs(args[1:], map[string]bool{"--format": true, "--session": true, "-s": true, "--model": true, "-m": true,
		"--agent": true, "--title": true, "--file": true, "-f": true, "--port": true, "--variant": true, "--command": true, "--dir": true})
	if err != nil {
		return err
	}
	if a.flags["--format"] != "json" {
		return usageError{"fakeagent opencode only implements --format json"}
	}
	words := make([]string, 0, len(a.pos))
	for _, w := range a.pos {
		if strings.Contains(w, " ") {
			w = `"` + strings.ReplaceAll(w, `"`, `\"`) + `"`
		}
		words = append(words, w)
	}
	prompt := strings.Join(words, " ")
	piped, err := readStdin()
	if err != nil {
		return err
	}
	switch {
	case prompt == "":
		prompt = piped
	case piped != "":
		prompt += "\n" + piped
	}
	if strings.TrimSpace(prompt) == "" {
		return usageError{"You must provide a message or a command"}
	}
	e, err := load()
	if err != nil {
		return err
	}
	session := a.flags["--session"]
	if session == "" {
		session = a.flags["-s"]
	}
	resumed, turnIdx := session != "", 0
	if resumed {
		n, ok := e.conversation(session)
		if !ok {
			return usageError{"Session not found"}
		}
		turnIdx = n
	} else {
		session = newID("ses_")
	}
	config := os.Getenv("OPENCODE_CONFIG_CONTENT")
	skip := a.bools["--dangerously-skip-permissions"] || a.bools["--auto"]
	editDenied := !skip && strings.Contains(config, `"edit":"deny"`)
	bashDenied := !skip && (strings.Contains(config, `"bash":"deny"`) || strings.Contains(config, `"bash":"ask"`))
	if err := e.record(Call{Agent: "opencode", Args: args, Prompt: prompt, Conversation: session, Resumed: resumed, Turn: turnIdx, ReadOnly: editDenied}); err != nil {
		return err
	}
	msg := newID("msg_")
	emit := func(typ string, fields map[string]any) {
		fields["type"], fields["timestamp"], fields["sessionID"] = typ, time.Now().UnixMilli(), session
		e.emit(fields)
	}
	part := func(typ string, fields map[string]any) map[string]any {
		fields["id"], fields["sessionID"], fields["messageID"], fields["type"] = newID("prt_"), session, msg, typ
		return fields
	}
	// A permission `run` auto-rejects ends the turn after that step, as OpenCode 1.18 does.
	rejected := false
	tool := func(name string, input map[string]any, denied bool, output string) {
		state := map[string]any{"status": "completed", "input": input, "output": output, "title": name}
		if denied {
			state = map[string]any{"status": "error", "input": input, "error": "The user rejected permission to use this specific tool call."}
			rejected = true
		}
		emit("tool_use", map[string]any{"part": part("tool", map[string]any{"callID": newID("call_"), "tool": name, "state": state})})
	}
	finish := func(reason string) {
		emit("step_finish", map[string]any{"part": part("step-finish", map[string]any{"reason": reason, "cost": 0.004,
			"tokens": map[string]any{"total": 1420, "input": 900, "output": 120, "reasoning": 0, "cache": map[string]any{"read": 400, "write": 0}}})})
	}
	emit("step_start", map[string]any{"part": part("step-start", map[string]any{})})
	t := e.turn(turnIdx)
	result := t.Result
	for _, st := range t.Steps {
		if rejected {
			finish("tool-calls")
			return e.saveConversation(session, turnIdx+1)
		}
		switch {
		case st.Say != "":
			emit("text", map[string]any{"part": part("text", map[string]any{"text": st.Say})})
		case st.Write != nil:
			if !editDenied {
				if err := e.write(*st.Write); err != nil {
					return err
				}
			}
			tool("write", map[string]any{"filePath": st.Write.Path, "content": st.Write.Content}, editDenied, "")
		case st.Commit != "":
			out := ""
			if !bashDenied {
				sha, err := e.commit(st.Commit)
				if err != nil {
					return err
				}
				out = "[" + sha + "] " + st.Commit
			}
			tool("bash", map[string]any{"command": "git add -A && git commit -m '" + st.Commit + "'"}, bashDenied, out)
		case st.Run != nil:
			_, _ = e.run(st.Run)
		case st.Sleep != "":
			sleep(st.Sleep)
		case st.Retry != "":
			// opencode run --format json does not print its retries; the turn just takes longer.
		case st.Ask != "":
			result = st.Ask
		case st.Fail != "":
			if err := e.saveConversation(session, turnIdx+1); err != nil {
				return err
			}
			emit("error", map[string]any{"error": map[string]any{"name": "UnknownError", "data": map[string]any{"message": st.Fail}}})
			return exitError{1}
		case st.Exit != 0:
			return crash(st)
		}
	}
	if result != "" {
		emit("text", map[string]any{"part": part("text", map[string]any{"text": result})})
	}
	if rejected {
		finish("tool-calls")
		return e.saveConversation(session, turnIdx+1)
	}
	finish("stop")
	return e.saveConversation(session, turnIdx+1)
}
