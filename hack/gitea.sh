#!/usr/bin/env bash
# Builds the pinned Gitea into the shared cache and runs it for tests and the local cluster; the
# logic lives in test/gitea (shared with the Go tests), this is its command line. See docs/gitea.md.
#
#   hack/gitea.sh build                       build once (~3.5 min cold on 2 cores); print the directory
#   hack/gitea.sh start --dir DIR [--addr 0.0.0.0 --host NODE_IP --webhook-hosts loopback,private]
#                                             start a forge (detached); print export lines
#   hack/gitea.sh env --dir DIR               print the export lines of a running forge
#   hack/gitea.sh stop --dir DIR              stop it (SIGTERM, SIGKILL after 20 s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./hack/gitea "$@"
