#!/usr/bin/env bash
# Builds Kubernetes binaries, etcd and KWOK from the Go module proxy and caches them outside the
# repository, keyed by version. Prints the directory that holds the requested binaries.
#
#   hack/kube-binaries.sh envtest             etcd kube-apiserver kubectl (KUBEBUILDER_ASSETS)
#   hack/kube-binaries.sh cluster             everything the local cluster needs
#   hack/kube-binaries.sh kube-apiserver ...  a chosen list
#
# Why build from source: no release download site is reachable on our machines, only the Go
# module proxy. k8s.io/kubernetes points its staging modules at ./staging, so `go install` is
# refused; a wrapper module with one replace line per staging module builds it (see
# docs/local-cluster.md). Reused when present: a second run prints the directory in milliseconds.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE="${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}"
BIN="$CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
SRC="$CACHE/src"

log() { echo "kube-binaries: $*" >&2; }

want=()
for arg in "$@"; do
  case "$arg" in
    envtest) want+=(etcd kube-apiserver kubectl) ;;
    cluster) want+=(etcd kube-apiserver kubectl kube-scheduler kube-controller-manager kubelet kube-proxy kwok) ;;
    etcd|kube-apiserver|kubectl|kube-scheduler|kube-controller-manager|kubelet|kube-proxy|kwok) want+=("$arg") ;;
    *) echo "kube-binaries: unknown component '$arg' (want envtest, cluster, or a binary name)" >&2; exit 2 ;;
  esac
done
[ ${#want[@]} -gt 0 ] || want=(etcd kube-apiserver kubectl)
mkdir -p "$BIN" "$SRC"

# Serialise concurrent callers (make test and make cluster-up at once) on one lock.
exec 9>"$CACHE/.kube-binaries.lock"
flock 9

missing_k8s=()
need_etcd=0
need_kwok=0
for b in "${want[@]}"; do
  [ -x "$BIN/$b" ] && continue
  case "$b" in
    etcd) need_etcd=1 ;;
    kwok) need_kwok=1 ;;
    *) missing_k8s+=("$b") ;;
  esac
done

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
# The compiler with a relaxed GC builds ~20% faster (hack/toolexec-gogc.sh has the numbers); only
# the go commands of this script see it, never the binaries it builds.
export GOGC="${SHEPHERD_BUILD_GOGC:-400}"

if [ ${#missing_k8s[@]} -gt 0 ]; then
  mod="$SRC/k8s-$K8S_VERSION"
  mkdir -p "$mod"
  if [ ! -f "$mod/go.mod" ] || [ ! -f "$mod/.tidy-ok" ]; then
    log "preparing wrapper module for k8s.io/kubernetes $K8S_VERSION"
    gomod=$(cd "$SRC" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -f "$gomod" ] || { echo "kube-binaries: could not download k8s.io/kubernetes@$K8S_VERSION from the module proxy" >&2; exit 1; }
    staging_version="v0.${K8S_VERSION#v1.}"
    {
      echo "module shepherd.local/kubebuild"
      echo
      echo "go 1.26"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      grep -E '=> \./staging/' "$gomod" | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
    } >"$mod/go.mod"
    cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    (cd "$mod" && go mod tidy >/dev/null 2>&1 || (cd "$mod" && go mod tidy))
    touch "$mod/.tidy-ok"
  fi
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  for b in "${missing_k8s[@]}"; do
    log "building $b $K8S_VERSION (kube-apiserver takes ~6 min on 2 cores from a cold build cache)"
    start=$(date +%s)
    (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$BIN/$b.tmp" "$BIN/$b"
    log "built $b in $(( $(date +%s) - start ))s"
  done
fi

if [ "$need_etcd" = 1 ]; then
  mod="$SRC/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  if [ ! -f "$mod/go.mod" ]; then
    log "preparing wrapper module for etcd $ETCD_VERSION"
    printf 'module shepherd.local/etcdbuild\n\ngo 1.26\n' >"$mod/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$mod/tools.go"
    (cd "$mod" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy)
  fi
  log "building etcd $ETCD_VERSION"
  start=$(date +%s)
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "built etcd in $(( $(date +%s) - start ))s"
fi

if [ "$need_kwok" = 1 ]; then
  log "building kwok $KWOK_VERSION"
  GOBIN="$BIN" GOFLAGS= go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi

echo "$BIN"
