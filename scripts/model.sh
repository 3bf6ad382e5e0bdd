#!/usr/bin/env bash
# Model-checks the park protocol (scripts/park.pml) with spin: the protocol as
# coded (with its fences) must have no error, and the model without the
# fences must show the lost wakeup (so the model itself can fail).
# Prints "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v spin >/dev/null; then
  echo "model: spin is not installed (make deps)"; echo "0 passed, 1 failed"; exit 1
fi
work=$(mktemp -d /tmp/tycho-model.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$here/park.pml" "$work/"
cd "$work" || exit 1
passed=0 failed=0
check() { # name, spin flags, expected error count
  local name=$1 flags=$2 want=$3 out errs
  if ! spin -a $flags park.pml >/dev/null || ! cc -O2 -w -o pan pan.c; then
    echo "FAIL $name: spin or cc failed"; failed=$((failed + 1)); return
  fi
  out=$(./pan -m100000 2>&1)
  errs=$(printf '%s\n' "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p' | head -1)
  if [ "${errs:-x}" = "$want" ]; then
    echo "ok   $name (errors: $errs)"; passed=$((passed + 1))
  else
    echo "FAIL $name: errors: ${errs:-?}, expected $want"; printf '%s\n' "$out" | tail -5
    failed=$((failed + 1))
  fi
}
check park_protocol_with_fences "-DFENCE" 0
check park_model_finds_lost_wakeup_without_fences "" 1
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
