#!/usr/bin/env bash
# make fuzz: runs every native Go fuzz test of the module (func FuzzXxx in a _test.go file) for
# FUZZTIME each (default 10s), one at a time (go test -fuzz takes one target of one package).
# Each starts from its seed corpus (real samples: webhook deliveries, agent output, tokens,
# templates) and from what earlier runs found interesting (Go's fuzz cache). A failing input is
# written under the package's testdata/fuzz/ and fails the run: commit it with the fix, and it
# becomes a regular test case.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
start=$(date +%s)
n=0
# file:line:func FuzzName(  →  "dir FuzzName"
while read -r dir name; do
  pkg="./${dir}"
  echo "=== ${pkg} ${name} (${fuzztime})"
  go test "${pkg}" -run '^$' -fuzz "^${name}\$" -fuzztime "${fuzztime}" >/tmp/shepherd-fuzz.$$ 2>&1 || {
    cat /tmp/shepherd-fuzz.$$; rm -f /tmp/shepherd-fuzz.$$
    echo "fuzz: ${pkg} ${name} failed (the input is under ${dir}/testdata/fuzz/${name}/)" >&2
    exit 1
  }
  tail -n 1 /tmp/shepherd-fuzz.$$
  n=$((n + 1))
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' internal test cmd 2>/dev/null \
  | sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)#\1 \2#' | sort -u)
rm -f /tmp/shepherd-fuzz.$$
echo "fuzz: ${n} targets, ${fuzztime} each, passed in $(( $(date +%s) - start ))s"
