#!/usr/bin/env bash
# Installs the Debian packages the local cluster and the image builder need, only the missing ones.
#
#   hack/install-deps.sh           install what is missing (root, Debian 12)
#   hack/install-deps.sh --check   list what is missing; exit 1 when something is
#
# What each package is for (docs/local-cluster.md, "What runs"):
#   containerd runc                 the container runtime behind the kubelet (CRI)
#   containernetworking-plugins     bridge, host-local, portmap, loopback CNI plugins in /usr/lib/cni
#   iptables conntrack              kube-proxy (iptables mode) and the CNI bridge's masquerading
#   ipset                           kube-router's network-policy controller (NetworkPolicy), with iptables
#   socat                           kubectl port-forward through the kubelet
#   debootstrap                     the Debian root filesystem (git, ca-certificates) of the runner image
#   gcc libc6-dev                   the pause image, compiled statically from kubernetes' pause.c
#   git                             the test git server (git http-backend) and the runner image's checkouts
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins iptables ipset conntrack socat debootstrap gcc libc6-dev git ca-certificates)

missing=()
for p in "${PACKAGES[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -gt 0 ]; then echo "install-deps: missing: ${missing[*]}"; exit 1; fi
  echo "install-deps: all present"; exit 0
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present" >&2
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: run as root to install: ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}" >&2
start=$(date +%s)
# The package lists of a fresh machine are empty or stale; refresh them once, bounded.
timeout 300 apt-get update -q >/dev/null
# policy-rc.d exit 101 keeps the packages' init scripts from starting a system containerd: the
# local cluster runs its own containerd with its own socket under the run directory.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
timeout 900 apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
echo "install-deps: installed ${#missing[@]} packages in $(( $(date +%s) - start ))s" >&2
