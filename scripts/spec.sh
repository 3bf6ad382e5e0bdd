#!/usr/bin/env bash
# Runs the busted specs under LuaJIT from the repository root, prints busted's
# output, and ends with one line "N passed, N failed". Exits non-zero on any
# failure or error, or when busted did not finish.
#
#   scripts/spec.sh                       every spec under spec/
#   scripts/spec.sh spec/call_spec.lua    some files (or any busted options)
#
# SPEC_TIMEOUT (seconds, default 600) bounds the whole run.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

if [ ! -f build/lib/tycho/core.so ] || [ ! -x build/bin/tycho ]; then
  echo "spec.sh: build/lib/tycho/core.so or build/bin/tycho missing; run make" >&2
  exit 2
fi
command -v luajit >/dev/null || { echo "spec.sh: luajit not found" >&2; exit 2; }
BUSTED=$(command -v busted || echo /usr/bin/busted)
[ -f "$BUSTED" ] || { echo "spec.sh: busted not found (apt install lua-busted)" >&2; exit 2; }

out=$(mktemp "${TMPDIR:-/tmp}/tycho-spec.XXXXXX") || exit 2
trap 'rm -f "$out"' EXIT

# .busted names LuaJIT too; --ignore-lua keeps busted from re-running itself.
timeout "${SPEC_TIMEOUT:-600}" luajit "$BUSTED" --ignore-lua -o utfTerminal "$@" 2>&1 | tee "$out"
rc=$?

# busted's summary: "12 successes / 0 failures / 1 error / 0 pending : 1.2 seconds"
# (the first: a failure's message may quote the summary of a busted it ran)
summary=$(sed 's/\x1b\[[0-9;]*m//g' "$out" |
  grep -E '[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?' | head -n 1)
if [ -z "$summary" ]; then
  echo "spec.sh: busted ended (status $rc) without its summary: crash or timeout"
  echo "0 passed, 1 failed"
  exit 1
fi
count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+'; }
passed=$(count success)
failed=$(( $(count failure) + $(count error) ))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$rc" -eq 0 ]
