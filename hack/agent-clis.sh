#!/usr/bin/env bash
# Installs the pinned agent CLIs (hack/agent-clis.versions) from the npm registry into a cache
# outside the repository and prints the directory holding their binaries (claude, codex,
# opencode, gemini). Each package goes to $CACHE/agent-clis/<package>@<version>/ and is reused
# when present: a second run prints the directory in milliseconds.
#
#   hack/agent-clis.sh            install what is missing, print the bin directory
#   hack/agent-clis.sh --check    exit 1 (printing what is missing) instead of installing
#
# Needs node and npm (tested with Node.js 20 and npm 11). Only the npm registry is contacted.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSIONS="${AGENT_CLIS_VERSIONS:-$HERE/agent-clis.versions}"
CACHE="${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}/agent-clis"
NPM_TIMEOUT="${AGENT_CLIS_NPM_TIMEOUT:-900}"

log() { echo "agent-clis: $*" >&2; }

command -v node >/dev/null || { log "node is required (tested with Node.js 20)"; exit 1; }
command -v npm >/dev/null || { log "npm is required"; exit 1; }

pkgs=() vers=() bins=()
while read -r pkg ver bin _; do
  case "$pkg" in ''|'#'*) continue ;; esac
  [ -n "$ver" ] && [ -n "$bin" ] || { log "$VERSIONS: want '<package> <version> <binary>', got '$pkg $ver $bin'"; exit 2; }
  pkgs+=("$pkg") vers+=("$ver") bins+=("$bin")
done <"$VERSIONS"

mkdir -p "$CACHE"
# Serialise concurrent callers (parallel test packages) on one lock.
exec 9>"$CACHE/.lock"
flock 9

# The bin directory is named after the pinned set, so a bump never serves a stale link.
key=$(for i in "${!pkgs[@]}"; do echo "${pkgs[$i]} ${vers[$i]} ${bins[$i]}"; done | sha256sum | cut -c1-12)
BIN="$CACHE/bin-$key"

missing=()
for i in "${!pkgs[@]}"; do
  dir="$CACHE/${pkgs[$i]}@${vers[$i]}"
  [ -f "$dir/.installed" ] || missing+=("$i")
done

if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    for i in "${missing[@]}"; do log "missing ${pkgs[$i]}@${vers[$i]}"; done
    exit 1
  fi
  echo "$BIN"; exit 0
fi

for i in "${missing[@]}"; do
  pkg="${pkgs[$i]}" ver="${vers[$i]}"
  dir="$CACHE/$pkg@$ver"
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  log "installing $pkg@$ver into $dir"
  # A private prefix per package: no global install, no lifecycle surprises shared between CLIs.
  # Optional dependencies stay on: Codex and OpenCode ship their native binary that way.
  if ! timeout "$NPM_TIMEOUT" npm install --prefix "$tmp" --no-save --no-audit --no-fund --include=optional \
      --no-update-notifier --loglevel=error "$pkg@$ver" >&2; then
    rm -rf "$tmp"; log "npm install $pkg@$ver failed"; exit 1
  fi
  touch "$tmp/.installed"
  rm -rf "$dir"; mkdir -p "$(dirname "$dir")"; mv "$tmp" "$dir"
done

mkdir -p "$BIN"
for i in "${!pkgs[@]}"; do
  target="$CACHE/${pkgs[$i]}@${vers[$i]}/node_modules/.bin/${bins[$i]}"
  [ -e "$target" ] || { log "${pkgs[$i]}@${vers[$i]} has no binary ${bins[$i]} ($target)"; exit 1; }
  ln -sfn "$target" "$BIN/${bins[$i]}"
done
echo "$BIN"
