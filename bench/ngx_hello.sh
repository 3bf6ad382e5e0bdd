#!/usr/bin/env bash
# bench/ngx_hello.sh - a content handler ngx.say("hello") on tycho.ngx.serve
# beside OpenResty's content_by_lua_block (Debian's nginx + lua-nginx-module,
# unpacked by scripts/fetch-debs.sh as bench/openresty/run.sh does), both
# with 2 workers, wrk -t2 -c64, alternated RUNS times in one sitting.
# Prints one RESULT line per server and run, and the load (uptime) before
# and after. Usage: bench/ngx_hello.sh   (RUNS=5 WRK_DURATION=5s WRK="-t1 -c64")
# BASE=/path/to/other/checkout: its build/bin/tycho serves the same handler
# too, alternated with ours (an A/B against another commit's build: make
# it with `git archive <commit> | tar -x -C DIR && make -C DIR lib`).
# IO=epoll: both tycho servers on epoll (default: the default backend).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
RUNS=${RUNS:-5}
WRK=${WRK:--t1 -c64}
BASE=${BASE:-}
IO=${IO:-}
IOARG=""; [ -n "$IO" ] && IOARG="--io $IO"
DUR=${WRK_DURATION:-5s}
DEBS=$ROOT/build/debs
TMPD=$(mktemp -d /tmp/ngxhello.XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; sleep 0.2; rm -rf "$TMPD"; }
trap cleanup EXIT

# shellcheck source=bench/openresty/conf.sh
source "$ROOT/bench/openresty/conf.sh"
ngx_fetch || { echo "# fetch-debs failed"; exit 1; }

# shellcheck source=bench/cpu_ticks.sh
source "$ROOT/bench/cpu_ticks.sh"

# OpenResty: 2 worker processes.
OPORT=$(port)
mkdir -p "$TMPD/o/tmp"; chmod 755 "$TMPD/o"
{ ngx_conf_head "$TMPD/o" 2 1024; cat <<CONF
  default_type text/plain;
  server {
    listen 127.0.0.1:$OPORT reuseport backlog=4096;
    location / { content_by_lua_block { ngx.say("hello") } }
  }
}
CONF
} >"$TMPD/o/nginx.conf"
ngx_start "$TMPD/o" &
OPID=$!
PIDS="$PIDS $!"

# tycho: the same handler as a content module, 2 workers.
TPORT=$(port)
mkdir -p "$TMPD/t"
echo 'ngx.say("hello")' >"$TMPD/t/hello.lua"
cat >"$TMPD/t/main.lua" <<LUA
package.path = "$TMPD/t/?.lua;" .. package.path


require("tycho.ngx").serve{ port = $TPORT, content = "hello" }
LUA
# shellcheck disable=SC2086
build/bin/tycho --workers 2 $IOARG "$TMPD/t/main.lua" >"$TMPD/t/log" 2>&1 &
TPID=$!
PIDS="$PIDS $!"
BPORT=""
WHO="openresty tycho"
if [ -n "$BASE" ]; then
  BPORT=$(port)
  sed "s/port = $TPORT/port = $BPORT/" "$TMPD/t/main.lua" >"$TMPD/t/base.lua"
  # shellcheck disable=SC2086
  "$BASE/build/bin/tycho" --workers 2 $IOARG "$TMPD/t/base.lua" >"$TMPD/t/base.log" 2>&1 &
  BPID=$!
  PIDS="$PIDS $!"
  WHO="openresty tycho base"
fi

for p in $OPORT $TPORT $BPORT; do
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.05; done
done
[ "$(curl -s "http://127.0.0.1:$OPORT/")" = hello ] || { echo "# openresty did not answer"; cat "$TMPD/o/log"; exit 1; }
[ "$(curl -s "http://127.0.0.1:$TPORT/")" = hello ] || { echo "# tycho did not answer"; cat "$TMPD/t/log"; exit 1; }

# A warm-up for each (JIT, connections, page cache), not counted.
wrk -t2 -c64 -d1s "http://127.0.0.1:$OPORT/" >/dev/null 2>&1
wrk -t2 -c64 -d1s "http://127.0.0.1:$TPORT/" >/dev/null 2>&1
[ -n "$BPORT" ] && wrk -t2 -c64 -d1s "http://127.0.0.1:$BPORT/" >/dev/null 2>&1
echo "# ngx_hello: $(date -u +%FT%TZ) nproc=$(nproc) wrk $WRK io=${IO:-default} base=${BASE:-none} uptime:$(uptime)"
for run in $(seq 1 "$RUNS"); do
  for who in $WHO; do
    p=$OPORT; pid=$OPID
    [ $who = tycho ] && p=$TPORT && pid=$TPID
    [ $who = base ] && p=$BPORT && pid=$BPID
    t0=$(ticks "$pid")
    # shellcheck disable=SC2086
    wrk $WRK -d"$DUR" --latency "http://127.0.0.1:$p/" >"$TMPD/wrk.out" 2>&1
    t1=$(ticks "$pid")
    nreq=$(awk '/requests in/ { print $1 }' "$TMPD/wrk.out")
    rps=$(awk '/Requests\/sec/ { print $2 }' "$TMPD/wrk.out")
    errs=$(grep -E "Socket errors|Non-2xx" "$TMPD/wrk.out" | tr -s " " | tr "\n" " ")
    p99=$(awk '$1 == "99%" { print $2 }' "$TMPD/wrk.out")
    us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="${nreq:-0}" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "?" }')
    echo "RESULT $who run=$run ${rps:-FAILED} req/s cpu_us_per_req=$us p99=${p99:-?} ${errs}" | tee -a "$TMPD/results"
  done
done
echo "# after: uptime:$(uptime)"
# medians and ratios
awk '$1 == "RESULT" { v[$2, ++n[$2]] = $4 + 0; split($6, c, "="); v["cpu" $2, n[$2]] = c[2] + 0; n["cpu" $2] = n[$2] }
  function med(w,   i, j, t, a, k) { k = n[w]; for (i = 1; i <= k; i++) a[i] = v[w, i]
    for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
  END { o = med("openresty"); t = med("tycho"); printf "MEDIAN openresty %.0f tycho %.0f ratio %.2f", o, t, t / o
    if (n["base"]) { b = med("base"); printf " base %.0f tycho/base %.2f", b, t / b }
    oc = med("cpuopenresty"); tc = med("cputycho")
    printf "\nMEDIAN cpu_us_per_req openresty %.2f tycho %.2f (openresty/tycho %.2f)", oc, tc, oc / tc
    if (n["base"]) { bc = med("cpubase"); printf " base %.2f (base/tycho %.2f)", bc, bc / tc }
    printf "\n" }' "$TMPD/results"
