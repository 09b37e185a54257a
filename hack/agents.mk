# Real agent CLIs (docs/agents.md). Included by the Makefile.

##@ Agents

.PHONY: agent-clis
agent-clis: ## Install the pinned agent CLIs (hack/agent-clis.versions) and print their bin dir.
	@hack/agent-clis.sh

.PHONY: test-real-agents
test-real-agents: ## Run the real Claude Code, Codex and OpenCode against the scripted model server.
	go test -tags integration -count=1 ./test/realagents/ ./internal/runner/ -run 'TestRealCLIs'

.PHONY: agent-fixtures
agent-fixtures: ## Rewrite internal/agent/*/testdata from the pinned CLIs' real output.
	go test -tags integration -count=1 ./test/realagents/ -update-fixtures
