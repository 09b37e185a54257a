#!/usr/bin/env bash
# Builds Helm from the Go module proxy once and caches it outside the repository, keyed by
# version, like hack/kube-binaries.sh does for Kubernetes. Prints the directory holding the binary.
#
#   hack/helm.sh        ~/.cache/shepherd/bin/helm-v3.22.0-k8s1.37 (helm in it)
#
# The chart's tests (hack/release: helm lint, helm template against a real API server) and the
# e2e suite (helm install, upgrade, uninstall on the local cluster) run this binary. ~3 min on
# 2 cores from a cold build cache.
#
# helm.sh/helm/v3 has no replace directives, so `go install module@version` builds it as
# released (its own go.mod and go.sum, nothing re-resolved).
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
# The Kubernetes minor version of the client-go that HELM_VERSION's go.mod requires.
HELM_K8S_MINOR="${HELM_K8S_MINOR:-37}"
CACHE="${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}"
BIN="$CACHE/bin/helm-$HELM_VERSION-k8s1.$HELM_K8S_MINOR"

log() { echo "helm: $*" >&2; }

mkdir -p "$BIN"
# Serialise concurrent callers (two test packages at once) on one lock.
exec 9>"$CACHE/.helm.lock"
flock 9

if [ ! -x "$BIN/helm" ]; then
  log "building helm $HELM_VERSION from the Go module proxy (~3 min on 2 cores from a cold build cache)"
  start=$(date +%s)
  tmp=$(mktemp -d "$BIN/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # As Helm's Makefile sets them: without the Kubernetes version (that of its client-go, 1.37
  # for v3.22), `helm template` and `helm lint` assume v1.20 and refuse the chart's kubeVersion.
  pkg=helm.sh/helm/v3
  ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
  for p in pkg/lint/rules pkg/chartutil; do
    ldflags="$ldflags -X $pkg/$p.k8sVersionMajor=1 -X $pkg/$p.k8sVersionMinor=$HELM_K8S_MINOR"
  done
  GOGC="${SHEPHERD_BUILD_GOGC:-400}" CGO_ENABLED=0 GOFLAGS= GOBIN="$tmp" \
    timeout 1800 go install -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$tmp/helm" "$BIN/helm"
  log "built helm in $(( $(date +%s) - start ))s"
fi

echo "$BIN"
