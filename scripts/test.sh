#!/usr/bin/env bash
# test.sh - every test (what `make test` runs once the build is done):
#   1. the C tests of the core (build/tycho-tests, or $BUILD/tycho-tests)
#   2. the C tests of the codec (build/tycho-lua-tests)
#   3. the spin model of the park protocol (scripts/model.sh)
#   4. lint: the layering of core/, clang-format, luacheck (scripts/lint.sh)
#   5. the busted specs (scripts/spec.sh: parallel lanes), which start first
#      and run beside 1-4 (most specs wait on timers and sockets); their
#      output is shown after 4.
# Each prints "N passed, N failed"; the last line of this script is their sum.
# Exits non-zero when anything failed.
#
#   scripts/test.sh          (environment: BUILD=build, TY_TEST_SCALE=16,
#                             SPEC_JOBS: scripts/spec.sh's lanes)
set -uo pipefail

cd "$(dirname "$0")/.."
source scripts/steps.sh

BUILD=${BUILD:-build}
# The C stress tests at a sixteenth of their full scale (test.h,
# test_scaled): they spin on an oversubscribed machine beside the specs
# (mesh_stress's 4 threads yield on full rings: 48 s at a quarter beside 5
# spec lanes), and a sixteenth still runs every path many times over. make
# chaos runs them at full scale, make tsan at a tenth under the sanitizer.
export TY_TEST_SCALE=${TY_TEST_SCALE:-16}

# The specs start first, in the background; their step below waits for them.
SPEC_LOG="$STEPS_TMP/spec.log"
if [[ -x scripts/spec.sh ]]; then
  (scripts/spec.sh </dev/null >"$SPEC_LOG" 2>&1; echo $? >"$SPEC_LOG.rc") &
else
  echo "scripts/spec.sh is missing or not executable" >"$SPEC_LOG"
  echo 1 >"$SPEC_LOG.rc"
fi

if [[ -x $BUILD/tycho-tests ]]; then
  step "C tests" "$BUILD/tycho-tests"
else
  step "C tests" sh -c "echo '$BUILD/tycho-tests is missing: run make first' >&2; exit 1"
fi

if [[ -x $BUILD/tycho-lua-tests ]]; then
  step "codec tests" env TY_CODEC_NOBENCH=1 "$BUILD/tycho-lua-tests"
else
  step "codec tests" sh -c "echo '$BUILD/tycho-lua-tests is missing: run make first' >&2; exit 1"
fi

# The park protocol's model (spin): part of the tests, cheap (< 1 s).
step "park model" scripts/model.sh

step "lint" env LAYERS_CALLS=require scripts/lint.sh

# (Its time in the summary is what it ran after the steps above.)
specs_output() {
  while [[ ! -s $SPEC_LOG.rc ]]; do sleep 0.5; done
  cat "$SPEC_LOG"
  return "$(cat "$SPEC_LOG.rc")"
}
STEP_TIMEOUT='' step "Lua specs" specs_output # (a function: timeout cannot run it)

finish
