#!/usr/bin/env bash
# test-repeat.sh - the C tests and the busted specs N times (what `make
# test-repeat N=5` runs once the build is done), to find the tests that fail
# now and then. Each run is what scripts/test.sh runs of them: the specs in
# their lanes (scripts/spec.sh) beside the C tests. At the end: every test
# that failed in any run, with the number of runs it failed in, then one
# line "N passed, N failed" over all runs. Exits non-zero when any test
# failed in any run.
#
#   scripts/test-repeat.sh [N [spec files...]]   (N default 5; only those spec
#                                    files when given; BUILD=build, SPEC_JOBS,
#                                    REPEAT_KEEP=dir keeps every run's logs)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

N=${1:-5}
shift || true
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "test-repeat: N must be a positive number" >&2; exit 2; }
BUILD=${BUILD:-build}
# The C stress tests at a sixteenth of their full scale (test.h,
# test_scaled): they spin on an oversubscribed machine beside the specs
# (mesh_stress's 4 threads yield on full rings: 48 s at a quarter beside 5
# spec lanes), and a sixteenth still runs every path many times over. make
# chaos runs them at full scale, make tsan at a tenth under the sanitizer.
export TY_TEST_SCALE=${TY_TEST_SCALE:-16}
for b in "$BUILD/tycho-tests" "$BUILD/tycho-lua-tests"; do
  [[ -x $b ]] || { echo "test-repeat: $b is missing: run make first" >&2; exit 2; }
done

logs=${REPEAT_KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/tycho-repeat.XXXXXX")}
mkdir -p "$logs"
[[ -n ${REPEAT_KEEP:-} ]] || trap 'rm -rf "$logs"' EXIT
fails="$logs/failures" # one line per failure: "run<TAB>test"
: >"$fails"

# The closing "N passed, N failed" of a log; "0 1" when there is none.
counts() {
  local l
  l=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
  if [[ $l =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
  else
    echo "0 1"
  fi
}

total_p=0 total_f=0
for run in $(seq 1 "$N"); do
  d="$logs/run$run"
  mkdir -p "$d"
  t0=$SECONDS
  # (no file or two and more: spec.sh's lanes)
  scripts/spec.sh "$@" </dev/null >"$d/spec.log" 2>&1 &
  spid=$!
  "$BUILD/tycho-tests" </dev/null >"$d/c.log" 2>&1
  crc=$?
  TY_CODEC_NOBENCH=1 "$BUILD/tycho-lua-tests" </dev/null >"$d/codec.log" 2>&1
  lrc=$?
  wait "$spid"
  src=$?

  # C tests: "FAIL name ..." lines; a runner that died without its line.
  sed -n 's/^FAIL \+\([^ ]*\).*/C test \1/p' "$d/c.log" >"$d/failed"
  ((crc != 0)) && ! grep -q '^FAIL' "$d/c.log" && echo "C tests (exit $crc, no FAIL line)" >>"$d/failed"
  ((lrc != 0)) && echo "codec tests (exit $lrc)" >>"$d/failed"
  # Specs: busted's "Failure → file @ line" / "Error → file @ line", then the
  # test's full name; a file whose busted ended without its summary.
  sed 's/\x1b\[[0-9;]*m//g' "$d/spec.log" | awk '
    /^(Failure|Error) (→|->) / { file = $3; getline name; print "spec " file ": " name; next }
    /^==== spec\/.*: [0-9]+ failed; its output ====$/ { cur = $2; sub(/:$/, "", cur) }
    /^spec.sh: busted ended/ { print "spec " cur ": (busted ended without its summary)" }
  ' >>"$d/failed"
  ((src != 0)) && [[ ! -s $d/failed ]] && echo "specs (exit $src, no failure named)" >>"$d/failed"

  p=0 f=0
  for l in c codec spec; do
    read -r lp lf < <(counts "$d/$l.log")
    p=$((p + lp))
    f=$((f + lf))
  done
  total_p=$((total_p + p))
  total_f=$((total_f + f))
  sort -u "$d/failed" | sed "s/^/$run\t/" >>"$fails"
  printf 'run %d of %d: %d passed, %d failed (%d s, load %s)\n' "$run" "$N" "$p" "$f" \
    $((SECONDS - t0)) "$(cut -d' ' -f1-3 /proc/loadavg)"
  sort -u "$d/failed" | sed 's/^/    /'
done

echo
echo "==== test-repeat: $N runs ===="
if [[ -s $fails ]]; then
  echo "tests that failed (runs failed in, of $N):"
  cut -f2- "$fails" | sort | uniq -c | sort -rn |
    awk -v n="$N" '{ c = $1; $1 = ""; printf "  %d/%d %s\n", c, n, substr($0, 2) }'
else
  echo "no test failed in any run"
fi
echo "$total_p passed, $total_f failed"
((total_f == 0))
