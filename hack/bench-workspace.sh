#!/usr/bin/env bash
# Benchmarks the ways to make a ready checkout (full clone, --filter=blob:none clone, clone with
# the mirror as --reference, git worktree add from the mirror) on a generated repository served
# by the real `git http-backend`, and prints the median times, disk use and ratios.
#
#   hack/bench-workspace.sh                      50k files, 5k commits, ~300 MB history, 3 runs
#   hack/bench-workspace.sh -runs 5 -files 20000 flags of internal/workspace/benchworkspace
#
# The repository is generated once with git fast-import and kept under
# ${SHEPHERD_CACHE:-~/.cache/shepherd}/bench; later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}/bench"
command -v git >/dev/null || { echo "bench-workspace: git is required" >&2; exit 1; }
echo "bench-workspace: $(git version)"
exec go run ./internal/workspace/benchworkspace -cache "$CACHE" "$@"
