#!/bin/sh
# A team's own coding agent, as short as one can be: it speaks Shepherd's JSON-lines agent
# protocol (docs/adding-an-agent.md, "Bring your own agent") and stands in for a CLI Shepherd has no
# adapter for. Each turn it writes the prompt it received to a notes file (as data: nothing here
# runs it) and commits it. The prompt arrives on stdin; SHEPHERD_* variables say the rest.
set -eu
prompt=$(cat)
state=${SHEPHERD_STATE_DIR:-.}
mkdir -p "$state"
n=$(cat "$state/custom-agent-turns" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$state/custom-agent-turns"
# The conversation: a new one on a first turn, the one Shepherd hands back when resuming.
conv=${SHEPHERD_SESSION_ID:-}
if [ "${SHEPHERD_RESUME:-false}" != true ] || [ -z "$conv" ]; then
	conv="conv-$(date +%s)-$$"
fi
printf '{"type":"session","id":"%s","model":"script-agent-1"}\n' "$conv"
printf '{"type":"text","text":"Turn %d (resume %s): writing notes-%d.txt."}\n' "$n" "${SHEPHERD_RESUME:-false}" "$n"
printf '{"type":"tool_call","tool":"git","input":"git commit -m Notes for turn %d"}\n' "$n"
printf '%s\n' "$prompt" >"notes-$n.txt"
git add -- "notes-$n.txt"
git commit -q -m "Notes for turn $n"
printf '{"type":"tool_result","tool":"git","output":"committed notes-%d.txt"}\n' "$n"
printf '{"type":"usage","input_tokens":100,"output_tokens":20,"cost_usd":0.001}\n'
if [ -n "${CUSTOM_AGENT_ASK:-}" ] && [ "$n" -ge 2 ]; then
	printf '{"type":"question","text":"%s"}\n' "$CUSTOM_AGENT_ASK"
fi
printf '{"type":"result","text":"Wrote notes-%d.txt."}\n' "$n"
