#!/usr/bin/env bash
# Builds krew and its manifest validator from the Go module proxy once and caches them outside
# the repository, keyed by version, like hack/helm.sh. Prints the directory holding both.
#
#   hack/krew.sh        ~/.cache/shepherd/bin/krew-v0.4.3 (krew, validate-krew-manifest)
#
# hack/release's tests validate the release's krew manifest with krew's own validator and
# install the plugin from its archive with the real `krew install --manifest --archive`.
set -euo pipefail

KREW_VERSION="${KREW_VERSION:-v0.4.3}"
CACHE="${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}"
BIN="$CACHE/bin/krew-$KREW_VERSION"

log() { echo "krew: $*" >&2; }

mkdir -p "$BIN"
exec 9>"$CACHE/.krew.lock"
flock 9

if [ ! -x "$BIN/krew" ] || [ ! -x "$BIN/validate-krew-manifest" ]; then
  log "building krew $KREW_VERSION from the Go module proxy (~1 min on 2 cores from a cold build cache)"
  start=$(date +%s)
  tmp=$(mktemp -d "$BIN/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  GOGC="${SHEPHERD_BUILD_GOGC:-400}" CGO_ENABLED=0 GOFLAGS= GOBIN="$tmp" \
    timeout 1800 go install -trimpath -ldflags "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$KREW_VERSION" \
    "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION" "sigs.k8s.io/krew/cmd/validate-krew-manifest@$KREW_VERSION"
  mv "$tmp/krew" "$tmp/validate-krew-manifest" "$BIN/"
  log "built krew in $(( $(date +%s) - start ))s"
fi

echo "$BIN"
