#!/usr/bin/env bash
# Deploys config/default with the given manager image, without a kustomize binary: a temporary
# overlay inside config/ sets the image (kustomize refuses absolute resource paths) and
# `kubectl apply -k` (kustomize is built into kubectl) applies it.
set -euo pipefail
img="${1:?usage: hack/deploy.sh IMAGE[:TAG]}"
root="$(cd "$(dirname "$0")/.." && pwd)"
kubectl="$("$root/hack/kube-binaries.sh" kubectl)/kubectl"
name="${img%:*}"; tag="${img##*:}"; [ "$tag" != "$img" ] || tag=latest
overlay="$(mktemp -d -p "$root/config" .deploy-XXXX)"; trap 'rm -rf "$overlay"' EXIT
cat >"$overlay/kustomization.yaml" <<YAML
resources:
- ../default
images:
- name: shepherd-manager
  newName: $name
  newTag: $tag
YAML
"$kubectl" apply --server-side --force-conflicts -k "$overlay"
