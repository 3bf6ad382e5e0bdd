# steps.sh - sourced by scripts/test.sh and .ci/run: runs named steps, shows
# their output as it comes, and adds up the "N passed, N failed" line each
# test step prints into one total.
#
#   source scripts/steps.sh
#   step "C tests" build/tycho-tests       # a test step: its last summary line counts
#   step -b "make deps" make deps          # a plain step: no tests, a failure counts as 1
#   finish                                 # prints "N passed, N failed", exits 0 or 1
#
# A test step that fails without a summary line, or whose line says
# "0 failed" although it exited non-zero, adds one failure, so a crash or a
# timeout never passes silently. STEP_TIMEOUT (seconds; unset: none) bounds
# each step; on expiry the step's whole process group is killed.

STEPS_PASSED=0
STEPS_FAILED=0
STEPS_SUMMARY=()
STEP_TIMEOUT=${STEP_TIMEOUT:-}
STEPS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tycho-steps.XXXXXX")
trap 'rm -rf "$STEPS_TMP"' EXIT

# The runners' closing line: "N passed, N failed", maybe with a leading
# "word: " and a trailing ", N skipped".
STEPS_LINE_RE='^([A-Za-z_-]+: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?[[:space:]]*$'

step() {
  local counts=1
  if [[ ${1:-} == -b ]]; then
    counts=0
    shift
  fi
  local name=$1
  shift
  local log="$STEPS_TMP/step.log"
  local t0=$SECONDS rc=0

  printf '\n==== %s: %s ====\n' "$name" "$*"
  # stdin is /dev/null (CI has none). PIPESTATUS[0] is the step's status; the
  # `|| true` keeps a caller's `set -e` from stopping at a failed step.
  local run=("$@")
  if [[ -n $STEP_TIMEOUT ]]; then
    # timeout moves the step into its own process group and kills all of it
    # (which also keeps terminal Ctrl-C from it: only set for CI).
    run=(timeout -k 30 "$STEP_TIMEOUT" "$@")
  fi
  { "${run[@]}" </dev/null 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}; } || true
  if [[ -n $STEP_TIMEOUT ]] && ((rc == 124)); then
    echo "step '$name' timed out after ${STEP_TIMEOUT}s"
  fi

  local p=0 f=0 line
  line=$(grep -E "$STEPS_LINE_RE" "$log" | tail -n 1 || true)
  if ((counts)) && [[ -n $line ]]; then
    [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]
    p=${BASH_REMATCH[1]}
    f=${BASH_REMATCH[2]}
  fi
  if ((rc != 0 && f == 0)); then
    f=1 # failed without saying so
  fi
  STEPS_PASSED=$((STEPS_PASSED + p))
  STEPS_FAILED=$((STEPS_FAILED + f))
  STEPS_SUMMARY+=("$(printf '%-24s %s (exit %d, %ds)' "$name" \
    "$( ((counts)) && echo "$p passed, $f failed" || { ((rc)) && echo "FAILED" || echo "ok"; })" \
    "$rc" $((SECONDS - t0)))")
  printf '==== %s: exit %d ====\n' "$name" "$rc"
  return 0
}

# Prints the per-step summary, then the total as the very last line.
finish() {
  printf '\n==== summary ====\n'
  local s
  for s in "${STEPS_SUMMARY[@]}"; do echo "  $s"; done
  echo "$STEPS_PASSED passed, $STEPS_FAILED failed"
  ((STEPS_FAILED == 0))
  exit $?
}
