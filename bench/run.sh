#!/usr/bin/env bash
# bench/run.sh - tycho's workload suite (shared/research/peers.md), run by
# `make bench` after it has built build/cbench, build/bin/tycho and
# build/lib/tycho/core.so.
#
# Every workload runs RUNS times, each in a fresh process with a timeout; a
# process prints "RESULT <value> <unit>", "DETAIL key=value ..." and
# "NOTE text" lines, and the summary is the peers' format:
#   tycho-c <workload>: <median> <unit>      C actors (build/cbench <workload>)
#   tycho <workload>: <median> <unit>        Lua actors (bench/lua/<workload>.lua)
#   # <name> <workload> runs: ... / detail (per-key medians): ... / note: ...
# and a side-by-side table at the end (ratios > 1 mean tycho is better).
#
# Environment:
#   BENCH="spawn ring"  subset (default: every workload below; also passed to
#                       the peers as ONLY)
#   RUNS=3              runs per workload (median)
#   TIMEOUT=90          seconds per benchmark process
#   WORKERS=2           worker threads (tycho --workers, cbench WORKERS)
#   PEERS=1             also run the tokio and erlang suites in the same sitting
#   PEER_NAMES="tokio erlang"   which peer suites PEERS=1 runs; "openresty"
#                       (nginx + lua-nginx-module from Debian .debs, unpacked
#                       under build/debs) is bench/openresty/run.sh in this
#                       tree and runs http and http_json only
#   PEER_VARIANTS="spawn_msg pingpong_oneshot"  peer variants added when BENCH
#                       is empty (the ones shaped like tycho's Lua workloads)
#   SHARED=../shared    where peers/<name>/run.sh live (default: the shared/
#                       folder beside this checkout; not part of it)
#   BUILD=build         where cbench and bin/tycho are
#   TABLE_FROM=file     only print the table of a saved output of this script
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

RUNS=${RUNS:-3}
TIMEOUT=${TIMEOUT:-90}
export WORKERS=${WORKERS:-2}
BENCH=${BENCH:-}
PEERS=${PEERS:-0}
PEER_NAMES=${PEER_NAMES:-"tokio erlang"}
PEER_VARIANTS=${PEER_VARIANTS:-"spawn_msg pingpong_oneshot"}

# The workloads, in the order they run and appear in the table. `http` is
# wrk against a tycho.http server (run_http below; its rows: http, http_json);
# `https` (rows https, https_new) and `http_client` are in bench/net.sh, with
# nginx (and wrk) beside them in the same sitting.
WORKLOADS="spawn pingpong ring skew timers memory processes"
C_WORKLOADS="spawn pingpong ring skew timers"           # build/cbench
LUA_WORKLOADS="spawn pingpong ring skew timers memory processes"  # bench/lua/<w>.lua
# tycho.server (bench/lua/<w>.lua): bytes per idle server; call round trips
# against a recv/reply loop. Ours only: the peers have no gen_server
# workload (their Erlang suite, peers/erlang/bench.erl under SHARED), so
# they are not asked;
# PEERS=1 runs our own Erlang counterpart (bench/erlang/gen_server.sh).
SERVER_LUA_WORKLOADS="memory_server server_call"
# Ours only too: the ping-pong rate while 100 actors keep the blocking pool
# busy, as a share of the unloaded rate (spec/blocking_spec.lua checks only
# that no round trip stalls: a rate is no test on a shared machine); and
# what a call costs with 10^5 messages queued (spec/call_backlog_spec.lua
# checks that no reply is queued behind them).
OWN_LUA_WORKLOADS="blocking_load call_backlog ngx_layer"   # ngx_layer: the tycho.ngx layer per request, no sockets
SERVER_WORKLOADS="http https http_client cluster ws pg web shared http_ab ngx_hello ngx_clients"   # https, http_client: bench/net.sh; ws: bench/ws.sh
# http_ab: bench/http_ab.sh (/ and /json on io_uring and epoll beside
# OpenResty, interleaved, with CPU per request); ngx_hello: bench/ngx_hello.sh
# (a tycho.ngx.serve content handler beside content_by_lua_block);
# ngx_clients: bench/ngx_clients.sh (resty.dns and resty.redis on both).
# Each prints its RESULT lines and MEDIAN lines with the ratios.
# pg: bench/pg.sh (tycho.pg beside pgbench and tycho.blocking on one PostgreSQL)
# web: bench/web.sh (a tycho.web router vs the bare handler, app:static vs
# nginx's static serving), its own lines in the summary.
# shared: tycho.shared.table and tycho.metrics beside ETS and ngx.shared.DICT (bench/shared.sh)

BUILD=${BUILD:-build}
CBENCH=$ROOT/$BUILD/cbench
TYCHO=$ROOT/$BUILD/bin/tycho

TMPD=$(mktemp -d /tmp/tychobench.XXXXXX)
SUMMARY=$TMPD/summary          # every summary line, ours and the peers'
trap 'rm -rf "$TMPD"' EXIT
trap 'rm -rf "$TMPD"; exit 130' INT TERM

# Prints and records a line of the summary.
out() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }

in_list() { [[ " $2 " == *" $1 "* ]]; }
want() { [ -z "$BENCH" ] || in_list "$1" "$BENCH"; }

# ---------------------------------------------------------------------------
# summarize <name> <workload> <prefix> files...
# The main value is the median of the RESULT values; each DETAIL key is the
# median of its own values (a trailing % is dropped); the NOTE of the first
# run is kept.
summarize() {
    local name=$1 label=$2 prefix=$3; shift 3
    awk -v name="$name" -v label="$label" -v prefix="$prefix" '
    function median(src, n,   i, j, t, a) {
        for (i = 1; i <= n; i++) a[i] = src[i]
        for (i = 2; i <= n; i++) {          # insertion sort: n is tiny
            t = a[i]
            for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
            a[j + 1] = t
        }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function num(v) { return (v >= 100 || v <= -100) ? sprintf("%.0f", v) : sprintf("%.4g", v) }
    FNR == 1 { file++ }
    $1 == "RESULT" { n++; val[n] = $2 + 0; unit = $3; runs = runs " " num($2 + 0) }
    $1 == "DETAIL" {
        for (i = 2; i <= NF; i++) {
            if (split($i, kv, "=") != 2) continue
            k = kv[1]; v = kv[2]; sub(/%$/, "", v)
            if (!(k in cnt)) keys[++nkeys] = k
            dv[k, ++cnt[k]] = v + 0
        }
    }
    $1 == "NOTE" && file == 1 { $1 = ""; note = note $0 }
    END {
        if (n == 0) { printf "%s%s %s: FAILED (no result; see # lines)\n", prefix, name, label; exit }
        printf "%s%s %s: %s %s\n", prefix, name, label, num(median(val, n)), unit
        printf "# %s %s runs:%s (median of %d)\n", name, label, runs, n
        d = ""
        for (o = 1; o <= nkeys; o++) {
            k = keys[o]
            delete tmp
            for (i = 1; i <= cnt[k]; i++) tmp[i] = dv[k, i]
            d = d " " k "=" num(median(tmp, cnt[k]))
        }
        if (d != "") printf "# %s %s detail (per-key medians):%s\n", name, label, d
        if (note != "") printf "# %s %s note:%s\n", name, label, note
    }' "$@"
}

# bench <name> <workload> <command...>: RUNS fresh processes, then the summary.
bench() {
    local name=$1 label=$2; shift 2
    local files=() i rc f
    for i in $(seq 1 "$RUNS"); do
        f="$TMPD/$name.$label.$i"
        timeout -k 5 "$TIMEOUT" "$@" >"$f" 2>"$f.err"
        rc=$?
        if [ $rc -ne 0 ]; then
            if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                out "# $name $label run $i: timed out after ${TIMEOUT}s: $(tail -c 300 "$f.err" | tr '\n' ' ')"
            else
                out "# $name $label run $i: exit $rc: $(tail -c 300 "$f.err" | tr '\n' ' ')"
            fi
        fi
        files+=("$f")
    done
    summarize "$name" "$label" "" "${files[@]}" | tee -a "$SUMMARY"
}

# ---------------------------------------------------------------------------
# http: `tycho --workers $WORKERS [--io epoll] bench/lua/http_server.lua <port>`
# under `wrk -t2 -c64 -d$WRK_DURATION --latency`, on / (`tycho http`) and on
# /json (`tycho http_json`) with the default backend (main lines), then with
# --io epoll (`# tycho http_epoll`, `# tycho http_json_epoll`); each run prints
# RESULT <req/s> req/s and DETAIL p50_ms= p90_ms= p99_ms= (the peers' format),
# so the p99s are on the "# ... detail" lines. Then, in the same sitting, the
# tokio peer's http (hyper) and http_raw (its hand-written responder).
WRK_DURATION=${WRK_DURATION:-5s}

free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$(( 20000 + RANDOM % 20000 ))
        if ! ss -ltnH 2>/dev/null | awk '{print $4}' | grep -q ":$p\$"; then echo "$p"; return; fi
    done
    echo 23457
}

# wrk's output -> RESULT / DETAIL / NOTE lines.
wrk_parse() {
    awk '
    function ms(s,   v) {
        v = s + 0
        if (s ~ /us$/) return v / 1000
        if (s ~ /ms$/) return v
        if (s ~ /s$/)  return v * 1000
        return v
    }
    $1 == "50%" { p50 = ms($2) } $1 == "90%" { p90 = ms($2) } $1 == "99%" { p99 = ms($2) }
    $1 == "Requests/sec:" { rps = $2 }
    / requests in / { nreq = $1 }
    /Socket errors/ { errs = $0; gsub(/ /, "", errs); sub(/Socketerrors:/, "", errs) }
    /Non-2xx/ { non2xx = $NF }
    END {
        if (rps == "") exit 1
        printf "RESULT %s req/s\n", rps
        printf "DETAIL p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f requests=%d\n", p50, p90, p99, nreq
        if (errs != "" || non2xx != "") printf "NOTE socket errors %s non2xx %s\n", errs, non2xx
    }' "$1"
}

# http_once <out file> <path> <tycho options...>: one server, one wrk run.
http_once() {
    local f=$1 path=$2 port pid ok=0; shift 2
    port=$(free_port)
    timeout -k 5 "$TIMEOUT" "$TYCHO" --workers "$WORKERS" "$@" bench/lua/http_server.lua "$port" \
        >"$f.srv" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then ok=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ $ok -eq 1 ]; then
        timeout -k 5 60 wrk -t2 -c64 -d"$WRK_DURATION" --latency "http://127.0.0.1:$port$path" >"$f.wrk" 2>&1
        wrk_parse "$f.wrk" >"$f" || out "# tycho http run: wrk failed: $(tail -c 300 "$f.wrk" | tr '\n' ' ')"
        # The backend the server got (the main lines use the default one).
        grep -q '^NOTE' "$f" || awk '$1 == "LISTENING" { print "NOTE backend " $3 }' "$f.srv" >>"$f"
    else
        out "# tycho http run: the server did not come up: $(tail -c 300 "$f.srv" | tr '\n' ' ')"
        : >"$f"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    sleep 0.5
}

run_http() {
    local io suffix prefix path label files i f
    if ! command -v wrk >/dev/null || ! command -v curl >/dev/null; then
        out "# tycho http: wrk or curl not installed (make deps), skipped"
        return
    fi
    for io in auto epoll; do
        suffix=""; prefix=""
        [ "$io" = epoll ] && { suffix="_epoll"; prefix="# "; }
        for path in / /json; do
            label=http; [ "$path" = /json ] && label=http_json
            files=()
            for i in $(seq 1 "$RUNS"); do
                f="$TMPD/tycho.$label$suffix.$i"
                http_once "$f" "$path" --io "$io"
                files+=("$f")
            done
            summarize tycho "$label$suffix" "$prefix" "${files[@]}" | tee -a "$SUMMARY"
        done
    done
    # The peer's HTTP servers in the same sitting (PEERS=1 then skips them).
    run_peer tokio "http http_raw"
    HTTP_PEER_DONE=1
}

# https and http_client (bench/net.sh).
source "$ROOT/bench/net.sh"
# The Erlang gen_server counterpart of SERVER_LUA_WORKLOADS.
source "$ROOT/bench/erlang/gen_server.sh"
# shared tables and metrics, with their peers (bench/shared.sh).
source "$ROOT/bench/shared.sh"

# ---------------------------------------------------------------------------
# cluster: two tycho nodes on one nats-server (bench/cluster.sh starts the
# server and the nodes, each run in fresh processes): `tycho cluster_msgs`
# (one-way messages/s between actors on two nodes) and `tycho cluster_call`
# (sequential call round trips/s; p50/p99 and 32 concurrent callers on the
# detail line), each beside nats.c alone in the same sitting: `nats-c
# cluster_msgs` (publisher -> subscriber processes, 16-byte messages) and
# `nats-c cluster_call` (request -> echo process -> reply).
run_cluster() {
    if ! { command -v nats-server || [ -x /usr/sbin/nats-server ]; } >/dev/null ||
        [ ! -x "$BUILD/nats_raw" ]; then
        out "# cluster: nats-server or $BUILD/nats_raw missing (make deps; make bench), skipped"
        return
    fi
    # PEERS=1: Erlang distribution beside them (bench/erlang/dist.sh: two
    # BEAM nodes, epmd), each workload right after tycho's and nats.c's.
    local erl=0
    if [ "$PEERS" = 1 ]; then
        if command -v erl >/dev/null && command -v erlc >/dev/null; then erl=1
        else out "# erlang cluster_*: erl not found, skipped (apt-get install erlang-nox)"; fi
    fi
    bench tycho cluster_msgs bench/cluster.sh cluster_msgs
    bench nats-c cluster_msgs bench/cluster.sh nats_raw
    [ $erl = 1 ] && bench erlang cluster_msgs bench/erlang/dist.sh msgs
    bench tycho cluster_call bench/cluster.sh cluster_call
    bench nats-c cluster_call bench/cluster.sh nats_raw_rtt
    [ $erl = 1 ] && bench erlang cluster_call bench/erlang/dist.sh call
    awk '/^(tycho|nats-c|erlang) cluster_(msgs|call): / { v[$1 " " $2] = $3 }
        END {
            t = v["tycho cluster_msgs:"]; r = v["nats-c cluster_msgs:"]; e = v["erlang cluster_msgs:"]
            if (t && r) printf "# cluster_msgs: tycho / nats.c alone = %.2f\n", t / r
            if (t && e) printf "# cluster_msgs: tycho / Erlang distribution = %.2f\n", t / e
            t = v["tycho cluster_call:"]; r = v["nats-c cluster_call:"]; e = v["erlang cluster_call:"]
            if (t && r) printf "# cluster_call: tycho / nats.c alone = %.2f (round trips/s)\n", t / r
            if (t && e) printf "# cluster_call: tycho / Erlang distribution = %.2f (round trips/s)\n", t / e
        }' "$SUMMARY" | tee -a "$SUMMARY"
}

# ---------------------------------------------------------------------------
# Peer suites. Each runs from a private copy under build/peers/<name> (shared/
# stays untouched; the copy keeps its build products between runs).
find_shared() {
    local d
    for d in "${SHARED:-}" "$ROOT/../shared"; do
        [ -n "$d" ] && [ -d "$d/peers" ] && { echo "$d"; return; }
    done
}

run_peer() {
    local peer=$1 only_arg=${2:-} shared src dst only
    if [ "$peer" = openresty ]; then
        # Our own peer (bench/openresty), run in place: only the http rows.
        want http || return
        ONLY="http http_json" RUNS="$RUNS" TIMEOUT="$TIMEOUT" WRK_DURATION="$WRK_DURATION" "$ROOT/bench/openresty/run.sh" 2>&1 | tee -a "$SUMMARY"
        return
    fi
    shared=$(find_shared)
    src=$shared/peers/$peer
    if [ -z "$shared" ] || [ ! -x "$src/run.sh" ]; then
        out "# $peer: no peers/$peer/run.sh found (set SHARED=)"
        return
    fi
    case $peer in
        tokio) command -v cargo >/dev/null || { out "# tokio: cargo not found, skipped (see $src/BUILD.md)"; return; } ;;
        erlang) command -v erl >/dev/null || { out "# erlang: erl not found, skipped (apt-get install erlang-base; see $src/BUILD.md)"; return; } ;;
    esac
    dst=$ROOT/build/peers/$peer
    mkdir -p "$dst"
    # -p keeps the sources' times, so cargo/erlc rebuild only when they change
    cp -rp "$src/." "$dst/" && chmod -R u+w "$dst"
    if [ -n "$only_arg" ]; then
        only=$only_arg
    elif [ -n "$BENCH" ]; then
        only=$BENCH
    else
        only="$WORKLOADS $PEER_VARIANTS"
    fi
    # run_http ran the peer's http workloads already.
    if [ -z "$only_arg" ] && [ -n "${HTTP_PEER_DONE:-}" ]; then
        only=$(printf '%s\n' $only | grep -vx -e http -e http_raw | tr '\n' ' ')
        [ -n "${only// /}" ] || return
    fi
    ONLY="$only" RUNS="$RUNS" TIMEOUT="$TIMEOUT" "$dst/run.sh" 2>&1 | tee -a "$SUMMARY"
}

# ---------------------------------------------------------------------------
# The side-by-side table, from the summary lines. Rows: the main value of
# every workload, skew efficiency and timers lateness, and the peer variants
# that are shaped like tycho's Lua workloads (compared with tycho's main line).
# A ratio is tycho/peer for rates and percentages, peer/tycho for times and
# sizes: > 1 means tycho is better.
table() {
    awk -v order="$WORKLOADS $SERVER_LUA_WORKLOADS $OWN_LUA_WORKLOADS $SERVER_WORKLOADS http_json https_new" -v peers="$PEER_NAMES" '
    function human(v) {
        if (v == "") return "-"
        if (v == "FAILED") return v
        if (v >= 1e6) return sprintf("%.2fM", v / 1e6)
        if (v >= 1e4) return sprintf("%.0fk", v / 1e3)
        return sprintf("%.4g", v)
    }
    # higher-is-better for rates and percentages
    function higher(u) { return u ~ /\/s$/ || u == "%" }
    function ratio(t, p, u) {
        if (t == "" || p == "" || t == "FAILED" || p == "FAILED" || t + 0 == 0 || p + 0 == 0) return "-"
        return sprintf("%.2f", higher(u) ? t / p : p / t)
    }
    function row(label, u, tc, ty,   s, i) {
        s = sprintf("| %-22s | %-12s | %9s | %9s", label, u, human(tc), human(ty))
        for (i = 1; i <= np; i++) s = s sprintf(" | %9s", human(pv[i]))
        for (i = 1; i <= np; i++) s = s sprintf(" | %9s", ratio(ty, pv[i], u))
        for (i = 1; i <= np; i++) s = s sprintf(" | %9s", ratio(tc, pv[i], u))
        print s " |"
    }
    BEGIN { nw = split(order, wl, " "); np = split(peers, pn, " ") }
    # main lines:  <name> <workload>: <value> <unit>
    # variants:    # <name> <workload>: <value> <unit>
    /^(# )?[a-z-]+ [a-z_]+: [-0-9.eE+]+ / {
        s = $0; sub(/^# /, "", s); split(s, f, " ")
        nm = f[1]; w = f[2]; sub(/:$/, "", w)
        val[nm, w] = f[3]; unit[w] = f[4]
    }
    /^(# )?[a-z-]+ [a-z_]+: FAILED/ {
        s = $0; sub(/^# /, "", s); split(s, f, " ")
        w = f[2]; sub(/:$/, "", w)
        if (!((f[1], w) in val)) val[f[1], w] = "FAILED"
    }
    /^# [a-z-]+ [a-z_]+ detail \(per-key medians\):/ {
        nm = $2; w = $3
        for (i = 7; i <= NF; i++) { split($i, kv, "="); det[nm, w, kv[1]] = kv[2] }
    }
    END {
        h = sprintf("| %-22s | %-12s | %9s | %9s", "workload", "unit", "tycho-c", "tycho")
        sep = "|------------------------|--------------|-----------|-----------"
        for (i = 1; i <= np; i++) { h = h sprintf(" | %9s", pn[i]); sep = sep "|-----------" }
        for (i = 1; i <= np; i++) { h = h sprintf(" | %9s", substr("ty/" pn[i], 1, 9)); sep = sep "|-----------" }
        for (i = 1; i <= np; i++) { h = h sprintf(" | %9s", substr("c/" pn[i], 1, 9)); sep = sep "|-----------" }
        print h " |"; print sep "|"
        for (k = 1; k <= nw; k++) {
            w = wl[k]; any = 0
            if ((("tycho-c", w) in val) || (("tycho", w) in val)) any = 1
            for (i = 1; i <= np; i++) { pv[i] = val[pn[i], w]; if (pv[i] != "") any = 1 }
            if (!any) continue
            row(w, unit[w], val["tycho-c", w], val["tycho", w])
            if (w == "skew") {
                for (i = 1; i <= np; i++) pv[i] = det[pn[i], w, "efficiency"]
                row("skew efficiency", "%", det["tycho-c", w, "efficiency"], det["tycho", w, "efficiency"])
            }
            if (w == "timers") {
                split("late_mean_ms late_max_ms", lk, " ")
                for (j = 1; j <= 2; j++) {
                    for (i = 1; i <= np; i++) pv[i] = det[pn[i], w, lk[j]]
                    row("timers " lk[j], "ms", det["tycho-c", w, lk[j]], det["tycho", w, lk[j]])
                }
            }
        }
        # peer variants shaped like tycho Lua workloads
        nv = split("spawn_msg:spawn pingpong_oneshot:pingpong memory_oneshot:memory http_raw:http", vm, " ")
        for (k = 1; k <= nv; k++) {
            split(vm[k], ab, ":"); v = ab[1]; w = ab[2]; any = 0
            for (i = 1; i <= np; i++) { pv[i] = val[pn[i], v]; if (pv[i] != "") any = 1 }
            if (!any || !(("tycho", w) in val)) continue
            row(v "*", unit[w], "", val["tycho", w]); starred = starred " " v "* = tycho " w
        }
        if (starred != "") print "# peer variants compared with tycho'"'"'s main line:" starred
    }' "$SUMMARY"
}

# ---------------------------------------------------------------------------
# TABLE_FROM=<saved output of this script>: print only its table.
if [ -n "${TABLE_FROM:-}" ]; then
    cp "$TABLE_FROM" "$SUMMARY" && table
    exit
fi

for w in $BENCH; do
    in_list "$w" "$WORKLOADS $SERVER_LUA_WORKLOADS $OWN_LUA_WORKLOADS $SERVER_WORKLOADS" ||
        echo "# tycho: no workload '$w' (known: $WORKLOADS; peers may still run it)"
done
if [ ! -x "$CBENCH" ] || [ ! -x "$TYCHO" ]; then
    echo "bench/run.sh: build first: make bench (needs $BUILD/cbench and $BUILD/bin/tycho)" >&2
    exit 1
fi

out "# tycho suite: $(date -u +%FT%TZ) host=$(uname -n) nproc=$(nproc) loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)] runs=$RUNS workers=$WORKERS"
out "# tycho version: $("$TYCHO" --version) commit $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    out "# warning: the 1-minute load is $load on $(nproc) CPUs: numbers will be noisy"
fi

for w in $WORKLOADS $SERVER_LUA_WORKLOADS $OWN_LUA_WORKLOADS $SERVER_WORKLOADS; do
    want "$w" || continue
    if in_list "$w" "$SERVER_LUA_WORKLOADS $OWN_LUA_WORKLOADS"; then
        bench tycho "$w" "$TYCHO" --workers "$WORKERS" "bench/lua/$w.lua"; continue
    fi
    if [ "$w" = http ]; then run_http; continue; fi
    if [ "$w" = https ]; then run_https; continue; fi
    if [ "$w" = http_client ]; then run_http_client; continue; fi
    if [ "$w" = cluster ]; then run_cluster; continue; fi
    if [ "$w" = ws ]; then RUNS=$RUNS WORKERS=$WORKERS BUILD=$BUILD bench/ws.sh | tee -a "$SUMMARY"; continue; fi
    if [ "$w" = pg ]; then bench/pg.sh | tee -a "$SUMMARY"; continue; fi
    if [ "$w" = web ]; then RUNS=$RUNS bench/web.sh; continue; fi
    if [ "$w" = shared ]; then run_shared; continue; fi
    if [ "$w" = http_ab ] || [ "$w" = ngx_hello ] || [ "$w" = ngx_clients ]; then
        RUNS=$RUNS "bench/$w.sh" 2>&1 | grep -E '^(MEDIAN|#)' | tee -a "$SUMMARY"; continue
    fi
    in_list "$w" "$C_WORKLOADS" && bench tycho-c "$w" "$CBENCH" "$w"
    in_list "$w" "$LUA_WORKLOADS" && bench tycho "$w" "$TYCHO" --workers "$WORKERS" "bench/lua/$w.lua"
done
out "# tycho suite done: loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)]"

if [ "$PEERS" = 1 ]; then
    for p in $PEER_NAMES; do
        run_peer "$p"
        if [ "$p" = erlang ]; then run_erlang_server; fi
    done
else
    PEER_NAMES=${HTTP_PEER_DONE:+tokio}  # run_http ran the tokio peer's http
fi
PEER_NAMES="$PEER_NAMES$NET_PEERS"      # nginx, wrk beside https, http_client

echo
echo "# side by side (medians; ratios are tycho/peer for rates and %, peer/tycho for times, ms and bytes: > 1 = tycho better)"
table
# The sitting's summary lines, for `make bench-chart` (bench/chart.lua).
cp "$SUMMARY" "$ROOT/bench/last-sitting.txt"
exit 0
