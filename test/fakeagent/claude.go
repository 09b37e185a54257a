package main

import (
	"fmt"
	"strings"
)

var claudePermissionModes = map[string]bool{"acceptEdits": true, "bypassPermissions": true, "default": true, "dontAsk": true, "plan": true}

// claude follows `claude -p --output-format stream-json --verbose` and prints stream-json.
func claude(args []string) error {
	a, err := parseArgs(args, map[string]bool{"--output-format": true, "--permission-mode": true, "--model": true,
		"--resume": true, "-r": true, "--max-turns": true, "--input-format": true, "--append-system-prompt": true,
		"--allowedTools": true, "--disallowedTools": true})
	if err != nil {
		return err
	}
	if !a.bools["-p"] && !a.bools["--print"] {
		return usageError{"fakeagent claude only implements print mode (-p)"}
	}
	if a.flags["--output-format"] != "stream-json" {
		return usageError{"fakeagent claude only implements --output-format stream-json"}
	}
	if !a.bools["--verbose"] {
		return usageError{"When using --print, --output-format=stream-json requires --verbose"}
	}
	mode := a.flags["--permission-mode"]
	if mode == "" {
		mode = "default"
	}
	if !claudePermissionModes[mode] {
		return usageError{fmt.Sprintf("option '--permission-mode <mode>' argument '%s' is invalid. Allowed choices are acceptEdits, bypassPermissions, default, dontAsk, plan.", mode)}
	}
	prompt := strings.Join(a.pos, " ")
	if prompt == "" {
		if prompt, err = readStdin(); err != nil {
			return err
		}
	}
	if strings.TrimSpace(prompt) == "" {
		return usageError{"Input must be provided either through stdin or as a prompt argument when using --print"}
	}
	e, err := load()
	if err != nil {
		return err
	}
	session := a.flags["--resume"]
	if session == "" {
		session = a.flags["-r"]
	}
	resumed, turnIdx := session != "", 0
	if resumed {
		n, ok := e.conversation(session)
		if !ok {
			return usageError{"No conversation found with session ID: " + session}
		}
		turnIdx = n
	} else {
		session = newID("5e55")
	}
	readOnly := mode == "plan"
	if err := e.record(Call{Agent: "claude", Args: args, Prompt: prompt, Conversation: session, Resumed: resumed, Turn: turnIdx, ReadOnly: readOnly}); err != nil {
		return err
	}
	model := a.flags["--model"]
	if model == "" {
		model = "claude-sonnet-4-5"
	}
	e.emit(map[string]any{"type": "system", "subtype": "init", "cwd": e.dir, "session_id": session, "model": model,
		"tools": []string{"Bash", "Edit", "Read", "Write", "AskUserQuestion"}, "permissionMode": mode,
		"claude_code_version": "2.1.332", "apiKeySource": "ANTHROPIC_API_KEY", "uuid": newID("")})
	assistant := func(content ...map[string]any) {
		e.emit(map[string]any{"type": "assistant", "message": map[string]any{"id": newID("msg_"), "type": "message", "role": "assistant",
			"model": model, "content": content}, "parent_tool_use_id": nil, "session_id": session, "uuid": newID("")})
	}
	toolResult := func(id, content string, isErr bool) {
		e.emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []map[string]any{
			{"tool_use_id": id, "type": "tool_result", "content": content, "is_error": isErr}}}, "session_id": session, "uuid": newID("")})
	}
	var denials []map[string]any
	deny := func(tool, id string, input any) {
		denials = append(denials, map[string]any{"tool_name": tool, "tool_use_id": id, "tool_input": input})
		toolResult(id, "Claude requested permissions to use "+tool+", but you haven't granted it yet.", true)
	}
	t := e.turn(turnIdx)
	result, retries := t.Result, 0
	for _, st := range t.Steps {
		switch {
		case st.Say != "":
			assistant(map[string]any{"type": "text", "text": st.Say})
		case st.Write != nil:
			id := newID("toolu_")
			input := map[string]any{"file_path": st.Write.Path, "content": st.Write.Content}
			assistant(map[string]any{"type": "tool_use", "id": id, "name": "Write", "input": input})
			if readOnly {
				deny("Write", id, input)
				continue
			}
			if err := e.write(*st.Write); err != nil {
				return err
			}
			toolResult(id, "File created successfully at: "+st.Write.Path, false)
		case st.Commit != "":
			id := newID("toolu_")
			input := map[string]any{"command": "git add -A && git commit -m " + fmt.Sprintf("%q", st.Commit)}
			assistant(map[string]any{"type": "tool_use", "id": id, "name": "Bash", "input": input})
			if readOnly {
				deny("Bash", id, input)
				continue
			}
			sha, err := e.commit(st.Commit)
			if err != nil {
				return err
			}
			toolResult(id, fmt.Sprintf("[%s] %s", sha, st.Commit), false)
		case st.Run != nil:
			id := newID("toolu_")
			assistant(map[string]any{"type": "tool_use", "id": id, "name": "Bash", "input": map[string]any{"command": strings.Join(st.Run, " ")}})
			// Claude Code marks a command that exited non-zero as a failed tool result.
			out, failed := e.run(st.Run)
			toolResult(id, out, failed)
		case st.Sleep != "":
			sleep(st.Sleep)
		case st.Retry != "":
			retries++
			e.emit(map[string]any{"type": "system", "subtype": "api_retry", "attempt": retries, "max_retries": 10,
				"retry_delay_ms": 500 * retries, "error": st.Retry, "session_id": session, "uuid": newID("")})
		case st.Ask != "":
			if st.AskTool {
				id := newID("toolu_")
				assistant(map[string]any{"type": "tool_use", "id": id, "name": "AskUserQuestion", "input": map[string]any{
					"questions": []map[string]any{{"question": st.Ask, "header": "Question", "multiSelect": false, "options": []any{}}}}})
				// What Claude Code 2.1 answers in print mode, where the tool is not offered.
				toolResult(id, "<tool_use_error>Error: No such tool available: AskUserQuestion. AskUserQuestion is disabled for this session, in subagents as well as here.</tool_use_error>", true)
				result = "I need an answer before I can go on."
			} else {
				result = st.Ask
			}
		case st.Fail != "":
			if err := e.saveConversation(session, turnIdx+1); err != nil {
				return err
			}
			e.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true, "result": st.Fail,
				"session_id": session, "total_cost_usd": 0.001, "usage": map[string]any{"input_tokens": 10, "output_tokens": 0},
				"permission_denials": []any{}, "uuid": newID("")})
			return exitError{1}
		case st.Exit != 0:
			return crash(st)
		}
	}
	if result != "" {
		assistant(map[string]any{"type": "text", "text": result})
	}
	if err := e.saveConversation(session, turnIdx+1); err != nil {
		return err
	}
	if denials == nil {
		denials = []map[string]any{}
	}
	// As Claude Code 2.1 does: total_cost_usd is the conversation's running cost, this
	// process's share is in model_usage_since_last_result.
	e.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1200, "num_turns": len(t.Steps) + 1,
		"result": result, "stop_reason": "end_turn", "session_id": session, "total_cost_usd": 0.0125 * float64(turnIdx+1),
		"usage":                         map[string]any{"input_tokens": 1200, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 300, "output_tokens": 150},
		"model_usage_since_last_result": map[string]any{"claude-sonnet-4-5": map[string]any{"inputTokens": 1200, "outputTokens": 150, "costUSD": 0.0125}},
		"permission_denials":            denials, "uuid": newID("")})
	return nil
}
