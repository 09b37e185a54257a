#!/usr/bin/env bash
# Builds kube-router from the Go module proxy once and caches it outside the repository, keyed by
# version, like hack/kube-binaries.sh does for Kubernetes. Prints the directory holding the binary.
#
#   hack/kube-router.sh        ~/.cache/shepherd/bin/kube-router-v2.1.0 (kube-router in it)
#
# The local cluster runs only its network-policy controller (--run-firewall, iptables + ipset):
# it is what enforces NetworkPolicy there. kube-network-policies, SIG Network's, cannot load its
# rules on our kernels (no nftables `queue` expression); docs/local-cluster.md, "NetworkPolicy".
# v2.1.0 has reported security flaws: it only ever runs inside the throwaway test cluster.
#
# The module has no replace directives, so `go install module@version` builds it as released
# (its own go.mod and go.sum, nothing re-resolved).
set -euo pipefail

KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
CACHE="${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}"
BIN="$CACHE/bin/kube-router-$KUBE_ROUTER_VERSION"

log() { echo "kube-router: $*" >&2; }

mkdir -p "$BIN"
# Serialise concurrent callers (two `localcluster up` at once) on one lock.
exec 9>"$CACHE/.kube-router.lock"
flock 9

if [ ! -x "$BIN/kube-router" ]; then
  log "building kube-router $KUBE_ROUTER_VERSION from the Go module proxy (~3 min on 2 cores from a cold build cache)"
  start=$(date +%s)
  tmp=$(mktemp -d "$BIN/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  pkg=github.com/cloudnativelabs/kube-router/v2/pkg/version
  # The compiler with a relaxed GC builds ~20% faster (hack/toolexec-gogc.sh); only the go
  # command sees it, never the binary.
  GOGC="${SHEPHERD_BUILD_GOGC:-400}" CGO_ENABLED=0 GOFLAGS= GOBIN="$tmp" \
    timeout 1800 go install -trimpath \
    -ldflags "-s -w -X $pkg.Version=$KUBE_ROUTER_VERSION -X $pkg.BuildDate=module-proxy" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
  mv "$tmp/kube-router" "$BIN/kube-router"
  log "built kube-router in $(( $(date +%s) - start ))s"
fi

echo "$BIN"
