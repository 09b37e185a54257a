#!/usr/bin/env bash
# Installs Debian's Chromium once (the chromium package) and prints its path. Headless Chromium
# screenshots the dashboard preview (make dashboard-screenshot); apt needs root.
set -euo pipefail
if ! command -v chromium >/dev/null; then
  echo "chromium: installing Debian's chromium package" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2; }
fi
command -v chromium
