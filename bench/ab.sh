#!/usr/bin/env bash
# bench/ab.sh - A/B of two builds, runs interleaved (the regression check of
# docs/performance.md and bench/RESULTS.md).
#
#   bench/ab.sh <commit-A> [workload ...]
#
# A is <commit-A>, checked out with `git worktree add --detach` under
# $AB_DIR (default /tmp/tycho-ab) and built there (kept: the next A/B of the
# same commit reuses it). B is this working tree as it is (built in build/),
# or another commit with AB_B=<commit>. Both run the same workload scripts
# (this tree's bench/lua/*.lua; AB_OWN=1 runs each side's own copy).
#
# Every round runs each workload once on each side, alternating which side
# goes first from round to round; the summary is the median per side and
# the ratio. Interleaving is the point: the machine is shared, its load
# moves by 2x within minutes, and two medians taken minutes apart compare
# the load, not the builds. Only the ratio of one A/B is a figure; read the
# spread (min-max per side) before trusting a ratio near 1.
#
# Workloads (default: the first eight):
#   c_pingpong c_ring c_spawn     build/cbench pingpong|ring|spawn (C actors)
#   lua_pingpong lua_ring lua_spawn  bench/lua/{pingpong,ring,spawn}.lua
#   timers       bench/lua/timers.lua: 100k Lua sleepers, wall s (+ late_max_ms)
#   memory       bench/lua/memory.lua: bytes per idle actor
#   memory_server  bench/lua/memory_server.lua: bytes per idle tycho.server
#   c_timers     build/cbench timers
#   server_call  bench/lua/server_call.lua
#
# Environment: N=7 rounds, WORKERS=2, TIMEOUT=120 s per run, AB_DIR,
# AB_B=<commit> (B another commit), AB_OWN=1, AB_KEEP_FILES=dir (raw output).
#
# Output, per workload: "<workload> A <median> B <median> <unit> B/A <ratio>"
# with the per-side min-max; for rates the ratio is B/A, for seconds and
# bytes A/B, so > 1 always means B is better. A second line gives the
# process's CPU time (perf stat task-clock, when perf works) per side and
# A/B: the steadier figure on a loaded machine, since time slices lost to
# other processes do not count in it (wall rates swing 2-5x under load).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

N=${N:-7}
export WORKERS=${WORKERS:-2}
TIMEOUT=${TIMEOUT:-120}
AB_DIR=${AB_DIR:-/tmp/tycho-ab}
DEFAULT="c_pingpong c_ring c_spawn lua_pingpong lua_ring lua_spawn timers memory memory_server"

[ $# -ge 1 ] || { sed -n '2,35p' "$0"; exit 2; }
A_REV=$(git rev-parse --short=10 "$1^{commit}") || exit 2
shift
WL=${*:-$DEFAULT}
WL=${WL//,/ }

# prepare <rev> -> prints the tree's path after building it there.
prepare() {
    local rev=$1 dir=$AB_DIR/$1
    if [ ! -d "$dir" ]; then
        mkdir -p "$AB_DIR"
        git worktree add --detach "$dir" "$rev" >/dev/null 2>&1 || {
            echo "ab.sh: git worktree add $dir $rev failed" >&2; return 1; }
    fi
    build "$dir" || return 1
    echo "$dir"
}

# build <tree>: the launcher, the module and cbench (explicit targets: older
# Makefiles have no `lib`).
build() {
    local targets="build/cbench build/lib/tycho/core.so build/bin/tycho"
    case " $WL " in *" lua_"*|*" timers "*|*" memory"*|*" server_call "*) ;;
        *) targets=build/cbench ;; # C workloads only: the core and cbench
    esac
    mkdir -p "$1/build"
    (cd "$1" && nice make -j2 $targets \
        >"$1/build/ab-build.log" 2>&1) || {
        echo "ab.sh: build failed in $1 (see $1/build/ab-build.log)" >&2; return 1; }
}

A_TREE=$(prepare "$A_REV") || exit 1
if [ -n "${AB_B:-}" ]; then
    B_REV=$(git rev-parse --short=10 "$AB_B^{commit}") || exit 2
    B_TREE=$(prepare "$B_REV") || exit 1
else
    B_REV="worktree($(git rev-parse --short=10 HEAD)$(git diff --quiet HEAD -- core bench Makefile || echo '+changes'))"
    B_TREE=$ROOT
    build "$B_TREE" || exit 1
fi

TMPD=${AB_KEEP_FILES:-$(mktemp -d /tmp/tycho-ab-run.XXXXXX)}
mkdir -p "$TMPD"
[ -n "${AB_KEEP_FILES:-}" ] || trap 'rm -rf "$TMPD"' EXIT

# The process's CPU time (task-clock) beside the wall-clock result: on a
# loaded machine it moves much less than the rate (time slices lost to
# others do not count), so it is the steadier regression figure.
CPUSTAT=()
command -v perf >/dev/null && perf stat -x, -e task-clock true >/dev/null 2>&1 &&
    CPUSTAT=(perf stat -x, -o /dev/fd/3 -e task-clock)

# run1 <tree> <workload> <out>
run1() {
    local tree=$1 w=$2 f=$3 script
    local sdir=$ROOT/bench/lua
    [ -n "${AB_OWN:-}" ] && sdir=$tree/bench/lua
    case $w in
        c_*) (cd "$tree" && "${CPUSTAT[@]}" timeout -k 5 "$TIMEOUT" build/cbench "${w#c_}") \
                 >"$f" 2>&1 3>"$f.cpu" ;;
        lua_*|timers|memory|memory_server|server_call)
            script=${w#lua_}
            (cd "$tree" && "${CPUSTAT[@]}" timeout -k 5 "$TIMEOUT" build/bin/tycho \
                --workers "$WORKERS" "$sdir/$script.lua") >"$f" 2>&1 3>"$f.cpu" ;;
        *) echo "RESULT nan unknown-workload" >"$f" ;;
    esac
    awk -F, '/task-clock/ { printf "CPUMS %s\n", $1 }' "$f.cpu" >>"$f" 2>/dev/null
    rm -f "$f.cpu"
}

echo "# ab: A=$A_REV ($A_TREE) B=$B_REV ($B_TREE)"
echo "# $N rounds, interleaved (A,B then B,A), WORKERS=$WORKERS; $(date -u '+%F %T UTC'); $(uptime | sed 's/.*load/load/')"
echo "# the machine is shared: compare the ratio, not the absolute figures"
for r in $(seq 1 "$N"); do
    for w in $WL; do
        if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
        for side in $order; do
            if [ "$side" = A ]; then tree=$A_TREE; else tree=$B_TREE; fi
            run1 "$tree" "$w" "$TMPD/$w.$side.$r"
        done
    done
    printf '# round %d/%d done %s\n' "$r" "$N" "$(uptime | sed 's/.*load average: //')" >&2
done
echo "# end $(date -u '+%T UTC'); $(uptime | sed 's/.*load/load/')"

# One line per workload: medians, spread, ratio (> 1: B better).
for w in $WL; do
    for side in A B; do
        awk -v side=$side '
            $1 == "RESULT" { print side, $2, $3 }
            $1 == "DETAIL" { for (i = 2; i <= NF; i++) if ($i ~ /^late_max_ms=/) { split($i, kv, "="); print side "late", kv[2], "ms" } }
            $1 == "CPUMS" { print side "cpu", $2, "ms" }
        ' "$TMPD/$w.$side".* 2>/dev/null
    done | awk -v w="$w" '
    function median(src, n,   i, j, t, a) {
        for (i = 1; i <= n; i++) a[i] = src[i]
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function mm(src, n,   i, lo, hi) { lo = src[1]; hi = src[1]
        for (i = 2; i <= n; i++) { if (src[i] < lo) lo = src[i]; if (src[i] > hi) hi = src[i] }
        return num(lo) "-" num(hi) }
    function num(v) { return (v >= 1e6) ? sprintf("%.3gM", v / 1e6) : (v >= 1e4) ? sprintf("%.3gk", v / 1e3) : sprintf("%.4g", v) }
    $1 == "A" { a[++na] = $2; unit = $3 } $1 == "B" { b[++nb] = $2 }
    $1 == "Alate" { la[++nla] = $2 } $1 == "Blate" { lb[++nlb] = $2 }
    $1 == "Acpu" { ca[++nca] = $2 } $1 == "Bcpu" { cb[++ncb] = $2 }
    END {
        if (na == 0 || nb == 0) { printf "%-14s FAILED (A %d results, B %d)\n", w, na, nb; exit }
        ma = median(a, na); mb = median(b, nb)
        lower = (unit == "s" || unit ~ /^bytes/)
        ratio = lower ? ma / mb : mb / ma
        printf "%-14s A %-8s B %-8s %-14s %s %.3f   (A %s, B %s; n=%d/%d)\n", w, num(ma), num(mb), unit,
            lower ? "A/B" : "B/A", ratio, mm(a, na), mm(b, nb), na, nb
        if (nla && nlb) printf "%-14s A %-8s B %-8s late_max_ms\n", "", num(median(la, nla)), num(median(lb, nlb))
        if (nca && ncb) printf "%-14s A %-8s B %-8s cpu_ms         A/B %.3f   (process CPU, median; range A %s, B %s)\n", "",
            num(median(ca, nca)), num(median(cb, ncb)), median(ca, nca) / median(cb, ncb), mm(ca, nca), mm(cb, ncb)
    }'
done
