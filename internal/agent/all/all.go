// Package all registers every agent adapter. Import it for its side effect; a new agent adds
// its import line here.
package all

import (
	_ "github.com/shepherd-dev/shepherd/internal/agent/aider"
	_ "github.com/shepherd-dev/shepherd/internal/agent/claudecode"
	_ "github.com/shepherd-dev/shepherd/internal/agent/codex"
	_ "github.com/shepherd-dev/shepherd/internal/agent/custom"
	_ "github.com/shepherd-dev/shepherd/internal/agent/gemini"
	_ "github.com/shepherd-dev/shepherd/internal/agent/opencode"
)
