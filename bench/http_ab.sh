#!/usr/bin/env bash
# bench/http_ab.sh - HTTP `/` and `/json` (bench/lua/http_server.lua: the
# `http` workload of bench/run.sh) on tycho.http with io_uring and with
# epoll, beside OpenResty (Debian nginx + lua-nginx-module, the handlers of
# bench/openresty/run.sh), all started once and measured alternately RUNS
# times (wrk $WRK -d$WRK_DURATION --latency): an interleaved comparison that
# a machine loaded by other work distorts the same way for every server.
# Each run prints req/s, p99 and the server's CPU microseconds per request
# (utime + stime of the server's processes over the run / requests: less
# distorted by load than req/s); the end prints medians and ratios.
#
#   RUNS=5 WRK_DURATION=5s WRK="-t1 -c64" bench/http_ab.sh
#   BASE=/path/to/checkout   also that checkout's build/bin/tycho (uring and
#                            epoll): an A/B against another commit's build
#   PIN=1                    also tycho with TYCHO_PIN=1 (workers pinned to
#                            CPUs) on both backends
#   TOKIO=/path/to/peerbench also the Tokio peer's http_raw (2 workers; it
#                            answers every path with its "Hello, World!"),
#                            built from ../shared/peers/tokio (BUILD.md)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
RUNS=${RUNS:-5}
DUR=${WRK_DURATION:-5s}
WRK=${WRK:--t1 -c64}
BASE=${BASE:-}
PIN=${PIN:-0}
DEBS=$ROOT/build/debs
TMPD=$(mktemp -d /tmp/httpab.XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; sleep 0.2; rm -rf "$TMPD"; }
trap cleanup EXIT
NAMES=${NAMES:-}

# summary <names> <file>: medians and ratios of the RESULT lines in file.
summary() {
  awk -v names="$1" '$1 == "RESULT" { k = $2 " " $3; m = ++n[k]; v[k, m] = $5 + 0
      split($7, f1, "="); p[k, m] = f1[2] + 0; split($8, f2, "="); u[k, m] = f2[2] + 0 }
    function med(arr, k,   i, j, t, x, c) { c = n[k]; for (i = 1; i <= c; i++) x[i] = arr[k, i]
      for (i = 2; i <= c; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
      return c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2 }
    END { c = split(names, ns, " ")
      for (q = 1; q <= 2; q++) { path = q == 1 ? "/" : "/json"; o = path " openresty"
        for (i = 1; i <= c; i++) { k = path " " ns[i]
          printf "MEDIAN %-6s %-11s %8.0f req/s p99 %6.2f ms cpu %5.2f us/req", path, ns[i], med(v, k), med(p, k), med(u, k)
          if (ns[i] != "openresty") printf "  vs openresty: req/s %.2f cpu %.2f", med(v, k) / med(v, o), med(u, o) / med(u, k)
          bk = path " base_" ns[i]
          if (n[bk]) printf "  vs base: req/s %.2f cpu %.2f", med(v, k) / med(v, bk), med(u, bk) / med(u, k)
          printf "\n" } } }' "$2"
}
# SUMMARY_FROM=<saved output> NAMES="openresty uring ...": only the summary.
if [ -n "${SUMMARY_FROM:-}" ]; then summary "$NAMES" "$SUMMARY_FROM"; exit 0; fi

# shellcheck source=bench/openresty/conf.sh
source "$ROOT/bench/openresty/conf.sh"
ngx_fetch || { echo "# fetch-debs failed"; exit 1; }
CJSON=/usr/lib/x86_64-linux-gnu/lua/5.1
[ -f "$CJSON/cjson.so" ] || { echo "# $CJSON/cjson.so missing (lua-cjson)"; exit 1; }

# shellcheck source=bench/cpu_ticks.sh
source "$ROOT/bench/cpu_ticks.sh"

declare -A PORT SPID
start() { # start <name> <command...>: a server on a fresh port (its last argument)
  local name=$1; shift
  local p; p=$(port)
  "$@" "$p" >"$TMPD/$name.log" 2>&1 &
  SPID[$name]=$!
  PIDS="$PIDS $!"
  PORT[$name]=$p
  NAMES="$NAMES $name"
}

OD=$TMPD/openresty
mkdir -p "$OD/tmp"; chmod 755 "$TMPD" "$OD"
OPORT=$(port)
{ ngx_conf_head "$OD" 2 1024; cat <<CONF
  lua_package_cpath "$CJSON/?.so;;";
  init_by_lua_block { cjson = require "cjson" }
  server {
    listen 127.0.0.1:$OPORT reuseport backlog=4096;
    location = / { default_type text/plain; content_by_lua_block {
      local body = "Hello, World!"
      ngx.header["Content-Length"] = #body
      ngx.print(body) } }
    location = /json { default_type application/json; content_by_lua_block {
      local body = cjson.encode{ message = "Hello, World!", runtime = "openresty", id = 1, ok = true }
      ngx.header["Content-Length"] = #body
      ngx.print(body) } }
  }
}
CONF
} >"$OD/nginx.conf"
ngx_start "$OD" &
SPID[openresty]=$!
PIDS="$PIDS $!"
PORT[openresty]=$OPORT
NAMES="openresty"

SRV=$ROOT/bench/lua/http_server.lua
start uring build/bin/tycho --workers 2 --io uring "$SRV"
start epoll build/bin/tycho --workers 2 --io epoll "$SRV"
if [ "$PIN" = 1 ]; then
  start uring_pin env TYCHO_PIN=1 build/bin/tycho --workers 2 --io uring "$SRV"
  start epoll_pin env TYCHO_PIN=1 build/bin/tycho --workers 2 --io epoll "$SRV"
fi
if [ -n "${TOKIO:-}" ]; then start tokio_raw env WORKERS=2 "$TOKIO" http_raw; fi
if [ -n "$BASE" ]; then
  start base_uring "$BASE/build/bin/tycho" --workers 2 --io uring "$SRV"
  start base_epoll "$BASE/build/bin/tycho" --workers 2 --io epoll "$SRV"
fi

for n in $NAMES; do
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:${PORT[$n]}/" && break; sleep 0.05; done
  curl -s -o /dev/null "http://127.0.0.1:${PORT[$n]}/" || { echo "# $n did not answer"; cat "$TMPD/$n.log"; exit 1; }
  wrk -t1 -c64 -d1s "http://127.0.0.1:${PORT[$n]}/" >/dev/null 2>&1 # warm-up, not counted
done

echo "# http_ab: $(date -u +%FT%TZ) nproc=$(nproc) wrk $WRK -d$DUR servers:$NAMES base=${BASE:-none} uptime:$(uptime)"
for run in $(seq 1 "$RUNS"); do
  for path in / /json; do
    for n in $NAMES; do
      pid=${SPID[$n]}
      t0=$(ticks "$pid")
      # shellcheck disable=SC2086
      wrk $WRK -d"$DUR" --latency "http://127.0.0.1:${PORT[$n]}$path" >"$TMPD/wrk.out" 2>&1
      t1=$(ticks "$pid")
      rps=$(awk '/Requests\/sec/ { print $2 }' "$TMPD/wrk.out")
      nreq=$(awk '/requests in/ { print $1 }' "$TMPD/wrk.out")
      p99=$(awk '$1 == "99%" { v = $2; if (v ~ /us$/) v = v / 1000; else if (v ~ /ms$/) v = v + 0; else v = v * 1000; print v }' "$TMPD/wrk.out")
      us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="${nreq:-0}" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print 0 }')
      errs=$(grep -E "Socket errors|Non-2xx" "$TMPD/wrk.out" | tr -s " " | tr "\n" " ")
      echo "RESULT $path $n run=$run ${rps:-0} req/s p99_ms=${p99:-0} cpu_us_per_req=$us $errs" |
        tee -a "$TMPD/results"
    done
  done
done
echo "# after: uptime:$(uptime)"
summary "$NAMES" "$TMPD/results"
