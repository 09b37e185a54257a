#!/usr/bin/env bash
# Prints a content hash of everything controller-gen reads (the API types, the controllers' RBAC
# markers, the boilerplate header) and of its version. `make codegen` records it in
# hack/codegen.sha256 after regenerating; `make test` regenerates only when the hash differs,
# so that a fresh clone (whose generated files are committed and current) does not have to build
# controller-gen first. `make verify` regenerates unconditionally and fails on any diff, the
# recorded hash included.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: hack/codegen-stamp.sh CONTROLLER_TOOLS_VERSION}"
# From internal/controller only the RBAC markers count (the ClusterRole is made of them alone), so
# that an ordinary change to a controller does not ask for a regeneration.
{
  echo "controller-gen $version"
  find api -name '*.go' ! -name '*_test.go' ! -name 'zz_generated.*' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum
  { find internal/controller -name '*.go' ! -name '*_test.go' -print0 |
      xargs -0 grep -h -E '^[[:space:]]*//[[:space:]]*\+kubebuilder:rbac' || true; } | LC_ALL=C sort
  sha256sum hack/boilerplate.go.txt
} | sha256sum | cut -d' ' -f1
