#!/usr/bin/env bash
# Runs the busted specs under LuaJIT from the repository root and ends with
# one line "N passed, N failed". Exits non-zero on any failure or error, or
# when a busted did not finish.
#
#   scripts/spec.sh                       every spec file (spec/**/*_spec.lua), in
#                                         parallel lanes
#   scripts/spec.sh spec/a_spec.lua spec/b_spec.lua   these files, in lanes
#   scripts/spec.sh spec/call_spec.lua    one file: one busted, its output as it comes
#   scripts/spec.sh --filter=x spec/y.lua with a busted option: one busted over all
#
# Lanes (docs/testing.md): SPEC_JOBS busted processes run at once (default:
# 2 per CPU and one more, at least 3: most specs wait on timers, sockets and
# child processes, not on the CPU; on 2 CPUs, 5 lanes keep them ~1.5 busy). Each lane takes the next file from one queue,
# longest first, so the lanes end together: a file's length is its last
# measured run (build/spec-times.txt, written by every run), else the
# checked-in spec/times.txt, else a guess from its size (a new file is
# picked up and placed without anyone listing it). A file runs in its own
# busted process with its own TMPDIR; TYCHO_SPEC_LANE (1..SPEC_JOBS) and
# TYCHO_SPEC_PORTS ("first last", a range of 1000 ports of its own) are
# there for a spec that cannot take port 0. Each file's result is one line
# as it ends; the output of the files that failed follows at the end.
#
# SPEC_TIMEOUT (seconds, default 600; 900 for each file in lanes, where
# install_spec's two builds share the CPUs) bounds each busted process.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

if [ ! -f build/lib/tycho/core.so ] || [ ! -x build/bin/tycho ]; then
  echo "spec.sh: build/lib/tycho/core.so or build/bin/tycho missing; run make" >&2
  exit 2
fi
command -v luajit >/dev/null || { echo "spec.sh: luajit not found" >&2; exit 2; }
BUSTED=$(command -v busted || echo /usr/bin/busted)
[ -f "$BUSTED" ] || { echo "spec.sh: busted not found (apt install lua-busted)" >&2; exit 2; }

# busted's summary: "12 successes / 0 failures / 1 error / 0 pending : 1.2 seconds"
# (the first: a failure's message may quote the summary of a busted it ran).
# Prints "passed failed", or nothing when there is no summary.
counts() {
  local summary
  summary=$(sed 's/\x1b\[[0-9;]*m//g' "$1" |
    grep -E '[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?' | head -n 1)
  [ -n "$summary" ] || return 0
  local s f e
  s=$(echo "$summary" | grep -oE '[0-9]+ success' | grep -oE '[0-9]+')
  f=$(echo "$summary" | grep -oE '[0-9]+ failure' | grep -oE '[0-9]+')
  e=$(echo "$summary" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+')
  echo "$s $((f + e))"
}

files=()
single=0
for a in "$@"; do
  case $a in
    -*) single=1 ;;
    *) files+=("$a") ;;
  esac
done
[ $# -eq 1 ] && single=1

# ---- one busted over everything given (one file, or busted options) ------------
if [ "$single" = 1 ]; then
  out=$(mktemp "${TMPDIR:-/tmp}/tycho-spec.XXXXXX") || exit 2
  trap 'rm -f "$out"' EXIT
  # .busted names LuaJIT too; --ignore-lua keeps busted from re-running itself.
  timeout "${SPEC_TIMEOUT:-600}" luajit "$BUSTED" --ignore-lua -o utfTerminal "$@" 2>&1 |
    tee "$out"
  rc=$?
  c=$(counts "$out")
  if [ -z "$c" ]; then
    echo "spec.sh: busted ended (status $rc) without its summary: crash or timeout"
    echo "0 passed, 1 failed"
    exit 1
  fi
  set -- $c
  echo "$1 passed, $2 failed"
  [ "$2" -eq 0 ] && [ "$rc" -eq 0 ]
  exit $?
fi

# ---- lanes ---------------------------------------------------------------------
if [ ${#files[@]} -eq 0 ]; then
  while IFS= read -r f; do files+=("$f"); done < <(find spec -name '*_spec.lua' | sort)
fi
ncpu=$(nproc 2>/dev/null || echo 2)
jobs=${SPEC_JOBS:-$((ncpu * 2 + 1 > 3 ? ncpu * 2 + 1 : 3))}

work=$(mktemp -d "${TMPDIR:-/tmp}/tycho-spec.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
mkdir -p build

# The queue: "seconds file", longest first. Unknown files: 1 s per 1500
# bytes, about what the measured ones take.
known=()
for t in spec/times.txt build/spec-times.txt; do [ -f "$t" ] && known+=("$t"); done
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "spec.sh: no such file: $f" >&2; exit 2; }
  t=$( ((${#known[@]})) && awk -v f="$f" '$2 == f { t = $1 } END { if (t != "") print t }' \
    "${known[@]}")
  [ -n "$t" ] || t=$(( $(wc -c <"$f") / 1500 + 1 ))
  echo "$t $f"
done | sort -k1,1 -g -r | awk '{ print $2 }' >"$work/queue"
total=$(wc -l <"$work/queue")
: >"$work/next"

# Takes the next file off the queue (under a lock: the lanes share it).
take() {
  flock "$work/lock" awk -v n="$work/next" -v q="$work/queue" 'BEGIN {
    i = 0; getline i < n; close(n); i = i + 1; print i > n; close(n)
    while ((getline line < q) > 0) if (++j == i) { print line; exit } }'
}

lane() {
  local k=$1 f log t0 t1 c rc name tmp cputime=
  tmp="$work/tmp.$k"
  while f=$(take) && [ -n "$f" ]; do
    name=${f//\//_}
    log="$work/$name.log"
    mkdir -p "$tmp"
    [ -x /usr/bin/time ] && cputime="/usr/bin/time -f %U_%S -o $log.cpu"
    t0=$(date +%s.%N)
    # (ports 21000-32999, below the kernel's ephemeral ones, 12 ranges)
    local p0=$((20000 + ((k - 1) % 12 + 1) * 1000))
    # (its CPU seconds, user + sys of the busted and all it waited for, in
    # $log.cpu when /usr/bin/time is there)
    TMPDIR=$tmp TYCHO_SPEC_LANE=$k TYCHO_SPEC_PORTS="$p0 $((p0 + 999))" \
      $cputime timeout "${SPEC_TIMEOUT:-900}" luajit "$BUSTED" --ignore-lua -o utfTerminal "$f" \
      </dev/null >"$log" 2>&1
    rc=$?
    local cpu=-
    [ -s "$log.cpu" ] && cpu=$(awk -F_ 'END { printf "%.1f", $1 + $2 }' "$log.cpu")
    t1=$(date +%s.%N)
    rm -rf "$tmp"
    c=$(counts "$log")
    if [ -z "$c" ]; then # crashed or timed out: one failure
      c="0 1"
      echo "spec.sh: busted ended (status $rc$([ "$rc" = 124 ] && echo ": timeout")) without its summary" >>"$log"
    fi
    set -- $c
    [ "$rc" -ne 0 ] && [ "$2" -eq 0 ] && set -- "$1" 1
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    echo "$1 $2 $secs $rc $f $cpu" >>"$work/results"
    printf '%-4s %-40s %4d passed, %d failed  %6.1f s  %6s s CPU  (lane %d)\n' \
      "$([ "$2" -eq 0 ] && echo ok || echo FAIL)" "$f" "$1" "$2" "$secs" "$cpu" "$k"
  done
}

echo "spec.sh: $total files in $jobs lanes"
t_start=$(date +%s)
pids=()
for k in $(seq 1 "$jobs"); do
  lane "$k" &
  pids+=($!)
done
# Ctrl-C or a timeout around this script: stop the lanes (a terminal's
# Ctrl-C and steps.sh's timeout reach the busteds through the process group).
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"; exit 130' INT TERM
wait "${pids[@]}"

passed=0 failed=0
touch "$work/results"
while read -r p f _ _ file _; do
  passed=$((passed + p))
  failed=$((failed + f))
done <"$work/results"
done_n=$(wc -l <"$work/results")
if [ "$done_n" -lt "$total" ]; then
  echo "spec.sh: only $done_n of $total files ran"
  failed=$((failed + total - done_n))
fi

# Remember the measured lengths (build/, not checked in): the next run's order.
{
  awk '{ print $3, $5 }' "$work/results"
  if [ -f build/spec-times.txt ]; then
    awk 'NR == FNR { seen[$5] = 1; next } !($2 in seen) { print }' "$work/results" \
      build/spec-times.txt | while read -r t f; do if [ -f "$f" ]; then echo "$t $f"; fi; done
  fi
} | sort -k2 >"$work/times"
mv "$work/times" build/spec-times.txt
# and their CPU seconds (user + sys), this run's only, most first
awk '$6 != "-" && $6 != "" { print $6, $5 }' "$work/results" | sort -g -r >build/spec-cpu.txt

if [ "$failed" -gt 0 ]; then
  while read -r p f _ _ file _; do
    [ "$f" -eq 0 ] && continue
    printf '\n==== %s: %d failed; its output ====\n' "$file" "$f"
    cat "$work/${file//\//_}.log"
  done <"$work/results"
  echo
  echo "failed files:"
  awk '$2 > 0 { print "  " $5 " (" $2 " failed)" }' "$work/results"
fi
echo "spec.sh: $(($(date +%s) - t_start)) s wall, $jobs lanes$(awk '{ s += $1 } END {
  if (NR) printf ", %.0f s CPU in the specs (build/spec-cpu.txt)", s }' build/spec-cpu.txt)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
