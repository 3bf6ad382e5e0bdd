#!/usr/bin/env bash
# fuzz.sh - runs libFuzzer targets (what `make fuzz` runs once they are
# built in build-fuzz/fuzz/; fuzz/README.md):
#
#   scripts/fuzz.sh codec http_request      FUZZ_S seconds each (default 30)
#
# Each target starts from its committed seeds (fuzz/corpus/NAME) and from
# what earlier runs found (build-fuzz/corpus/NAME, where new inputs go). A
# crash, a leak, a timeout or a failed check is written to
# build-fuzz/crashes/NAME-* and fails the target. Prints each target's runs
# and coverage, then "N passed, N failed" (one per target).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

S=${FUZZ_S:-30}
B=build-fuzz
passed=0 failed=0
for t in "$@"; do
  bin=$B/fuzz/$t
  if [[ ! -x $bin ]]; then
    echo "fuzz: $bin is missing (make fuzz builds it)"
    failed=$((failed + 1))
    continue
  fi
  work=$B/corpus/$t
  mkdir -p "$work" "$B/crashes" fuzz/corpus/"$t"
  log=$B/fuzz-$t.log
  echo "fuzz: $t for ${S}s"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb bounds memory.
  # ASAN_OPTIONS: LeakSanitizer on (libFuzzer reports a leak per input).
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    "$bin" -max_total_time="$S" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$B/crashes/$t-" \
    "$work" fuzz/corpus/"$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)
  if ((rc == 0)); then
    echo "fuzz: $t: ${runs:-?} runs in ${S}s, no crash ($cov, corpus $(ls "$work" | wc -l))"
    passed=$((passed + 1))
  else
    echo "fuzz: $t FAILED (exit $rc) after ${runs:-?} runs; the end of $log:"
    tail -n 40 "$log"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
((failed == 0))
