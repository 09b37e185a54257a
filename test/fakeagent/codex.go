package main

import (
	"fmt"
	"strings"
)

// codex follows `codex exec --json [resume <id>] [PROMPT|-]` and prints exec JSONL events.
func codex(args []string) error {
	if len(args) == 0 || args[0] != "exec" {
		return usageError{"fakeagent codex only implements `codex exec`"}
	}
	a, err := parseArgs(args[1:], map[string]bool{"--sandbox": true, "-s": true, "-m": true, "--model": true, "-c": true,
		"--config": true, "-C": true, "--cd": true, "-o": true, "--output-last-message": true, "--color": true, "-p": true, "--profile": true})
	if err != nil {
		return err
	}
	if !a.bools["--json"] && !a.bools["--experimental-json"] {
		return usageError{"fakeagent codex only implements --json output"}
	}
	sandbox := a.flags["--sandbox"]
	if sandbox == "" {
		sandbox = a.flags["-s"]
	}
	switch sandbox {
	case "", "read-only", "workspace-write", "danger-full-access":
	default:
		return usageError{fmt.Sprintf("invalid value '%s' for '--sandbox <SANDBOX_MODE>'", sandbox)}
	}
	if a.bools["--dangerously-bypass-approvals-and-sandbox"] && sandbox != "" {
		return usageError{"--dangerously-bypass-approvals-and-sandbox cannot be used with --sandbox"}
	}
	pos := a.pos
	thread, resumed := "", false
	if len(pos) > 0 && pos[0] == "resume" {
		if len(pos) < 2 {
			return usageError{"resume needs a SESSION_ID or --last"}
		}
		thread, resumed, pos = pos[1], true, pos[2:]
	}
	prompt := ""
	if len(pos) > 0 && pos[0] != "-" {
		prompt = pos[0]
	} else if prompt, err = readStdin(); err != nil {
		return err
	}
	if strings.TrimSpace(prompt) == "" {
		return usageError{"No prompt provided. Either specify one as an argument or pipe the prompt into stdin."}
	}
	e, err := load()
	if err != nil {
		return err
	}
	turnIdx := 0
	if resumed {
		n, ok := e.conversation(thread)
		if !ok {
			return usageError{"no rollout found for thread id " + thread}
		}
		turnIdx = n
	} else {
		thread = newID("0199a213-")
	}
	// Without --sandbox, exec runs read-only (codex's default for an untrusted directory).
	readOnly := sandbox == "read-only" || (sandbox == "" && !a.bools["--dangerously-bypass-approvals-and-sandbox"])
	if err := e.record(Call{Agent: "codex", Args: args, Prompt: prompt, Conversation: thread, Resumed: resumed, Turn: turnIdx, ReadOnly: readOnly}); err != nil {
		return err
	}
	e.emit(map[string]any{"type": "thread.started", "thread_id": thread})
	e.emit(map[string]any{"type": "turn.started"})
	n := 0
	item := func(typ string, fields map[string]any) map[string]any {
		fields["id"] = fmt.Sprintf("item_%d", n)
		fields["type"] = typ
		n++
		return fields
	}
	t := e.turn(turnIdx)
	result, retries := t.Result, 0
	for _, st := range t.Steps {
		switch {
		case st.Say != "":
			e.emit(map[string]any{"type": "item.completed", "item": item("agent_message", map[string]any{"text": st.Say})})
		case st.Write != nil:
			status := "completed"
			if readOnly {
				status = "failed"
			} else if err := e.write(*st.Write); err != nil {
				return err
			}
			e.emit(map[string]any{"type": "item.completed", "item": item("file_change", map[string]any{
				"changes": []map[string]any{{"path": st.Write.Path, "kind": "add"}}, "status": status})})
		case st.Commit != "":
			command := "bash -lc 'git add -A && git commit -m " + fmt.Sprintf("%q", st.Commit) + "'"
			it := item("command_execution", map[string]any{"command": command, "aggregated_output": "", "exit_code": nil, "status": "in_progress"})
			e.emit(map[string]any{"type": "item.started", "item": it})
			if readOnly {
				it["status"] = "declined"
			} else {
				sha, err := e.commit(st.Commit)
				if err != nil {
					return err
				}
				it["status"], it["exit_code"], it["aggregated_output"] = "completed", 0, fmt.Sprintf("[%s] %s\n", sha, st.Commit)
			}
			e.emit(map[string]any{"type": "item.completed", "item": it})
		case st.Run != nil:
			_, _ = e.run(st.Run)
		case st.Sleep != "":
			sleep(st.Sleep)
		case st.Retry != "":
			retries++
			e.emit(map[string]any{"type": "error", "message": fmt.Sprintf("Reconnecting... %d/5 (%s)", retries, st.Retry)})
		case st.Ask != "":
			// codex exec has no way to ask: its request_user_input tool answers "unavailable in
			// Default mode" and prints nothing, so the question is the final message either way.
			result = st.Ask
		case st.Fail != "":
			if err := e.saveConversation(thread, turnIdx+1); err != nil {
				return err
			}
			e.emit(map[string]any{"type": "turn.failed", "error": map[string]any{"message": st.Fail}})
			return exitError{1}
		case st.Exit != 0:
			return crash(st)
		}
	}
	if result != "" {
		e.emit(map[string]any{"type": "item.completed", "item": item("agent_message", map[string]any{"text": result})})
	}
	if err := e.saveConversation(thread, turnIdx+1); err != nil {
		return err
	}
	// As codex does, the usage is the thread's running total: a resumed thread counts its
	// earlier turns again.
	turns := int64(turnIdx + 1)
	e.emit(map[string]any{"type": "turn.completed", "usage": map[string]any{"input_tokens": 2400 * turns, "cached_input_tokens": 1200 * turns,
		"cache_write_input_tokens": 0, "output_tokens": 180 * turns, "reasoning_output_tokens": 0}})
	return nil
}
