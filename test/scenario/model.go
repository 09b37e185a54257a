package scenario

import (
	"fmt"
	"net"

	"github.com/shepherd-dev/shepherd/test/modelserver"
)

// ModelAPIKey is what Claude Code sends the scripted model server, which accepts any key.
const ModelAPIKey = "sk-scripted-model-server"

// Summaries the model ends each turn with.
const (
	TaskSummary   = "Greet() now says hello, world."
	FixSummary    = "Fixed the failing test."
	ReviewSummary = "Documented Greet as the reviewer asked."
)

// Script is the model's side of the session, one commit per turn through Claude Code's Bash
// tool, then the turn's summary: the task (the issue), the fix for the CI failure, the doc comment
// the reviewer asked for. The CLI runs the commands for real in the pod's checkout; the runner
// pushes.
func Script() modelserver.Script {
	return ScriptWith(func(command, description string) modelserver.Reply {
		return modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{"command": command, "description": description}})
	})
}

// ScriptWith is Script through another CLI's shell tool: shell is the reply that runs command
// with it (Codex's exec, OpenCode's bash).
func ScriptWith(shell func(command, description string) modelserver.Reply) modelserver.Script {
	commit := func(content, message string) modelserver.Reply {
		return shell(fmt.Sprintf("printf '%%s\\n' %q > greet.go && git commit -am %q", content, message), message)
	}
	return modelserver.Script{
		commit(`package greeter; func Greet() string { return "hello, world" }`, "Greet the world"),
		modelserver.Text(TaskSummary),
		commit(`package greeter; func Greet() string { return "hello, world" } // tested`, "Fix the failing test"),
		modelserver.Text(FixSummary),
		commit(`package greeter; // Greet greets the world.
func Greet() string { return "hello, world" }`, "Document Greet"),
		modelserver.Text(ReviewSummary),
	}
}

// StartModel serves the scripted model API with Script on host (the node's IP), on a free port.
// The server is also the agent's HTTP(S) proxy: it refuses and records any other connection.
func StartModel(host string) (*modelserver.Server, error) {
	return StartModelWith(host, Script())
}

// StartModelWith is StartModel with another script (ScriptWith).
func StartModelWith(host string, script modelserver.Script) (*modelserver.Server, error) {
	ms := modelserver.New(script)
	if err := ms.Start(net.JoinHostPort(host, "0")); err != nil {
		return nil, fmt.Errorf("start the scripted model server: %w", err)
	}
	return ms, nil
}
