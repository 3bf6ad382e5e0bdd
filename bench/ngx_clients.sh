#!/usr/bin/env bash
# bench/ngx_clients.sh - resty.dns queries/s (against dnsmasq) and
# resty.redis GETs/s (against redis-server) from the same content code
# (bench/lua/ngx_clients.lua, 16 light threads in one request) under
# OpenResty (Debian nginx + lua-nginx-module, 1 worker process) and under
# tycho.ngx.serve (the request's threads are forks on one worker),
# alternated RUNS times. Prints RESULT lines (queries/s, and the server's
# CPU microseconds per query: what a loaded machine distorts less), the
# medians, and the load (uptime). BASE=/path/to/other/checkout: its
# build/bin/tycho runs too, alternated (an A/B against another build).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
RUNS=${RUNS:-5}
BASE=${BASE:-}
N=${N:-20000}
DEBS=$ROOT/build/debs
TMPD=$(mktemp -d /tmp/ngxclients.XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; sleep 0.2; rm -rf "$TMPD"; }
trap cleanup EXIT

# shellcheck source=bench/openresty/conf.sh
source "$ROOT/bench/openresty/conf.sh"
NGX_MORE="lua-nginx-dns lua-nginx-redis" ngx_fetch || { echo "# fetch-debs failed"; exit 1; }
# shellcheck source=bench/cpu_ticks.sh
source "$ROOT/bench/cpu_ticks.sh"
LIBS="$DEBS/lua-nginx-dns/usr/share/lua/5.1/?.lua;$DEBS/lua-nginx-redis/usr/share/lua/5.1/?.lua"

DPORT=$(port)
dnsmasq -k -u root --port="$DPORT" --listen-address=127.0.0.1 --bind-interfaces --no-resolv \
  --no-hosts --conf-file=/dev/null --local=/test/ --host-record=host.test,10.9.8.7 \
  --cache-size=1000 >"$TMPD/dnsmasq.log" 2>&1 &
PIDS="$PIDS $!"
RPORT=$(port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMPD" \
  --loglevel warning >"$TMPD/redis.log" 2>&1 &
PIDS="$PIDS $!"

OPORT=$(port)
mkdir -p "$TMPD/o/tmp"; chmod 755 "$TMPD" "$TMPD/o"
{ ngx_conf_head "$TMPD/o" 1 1024 "$LIBS"; cat <<CONF
  default_type text/plain;
  server {
    listen 127.0.0.1:$OPORT;
    location / { content_by_lua_file $ROOT/bench/lua/ngx_clients.lua; }
  }
}
CONF
} >"$TMPD/o/nginx.conf"
ngx_start "$TMPD/o" &
OPID=$!
PIDS="$PIDS $!"

TPORT=$(port)
cat >"$TMPD/main.lua" <<LUA
package.path = "$LIBS;$ROOT/bench/lua/?.lua;" .. package.path
require("tycho.ngx").serve{ port = $TPORT, content = "ngx_clients" }
LUA
build/bin/tycho --workers 2 "$TMPD/main.lua" >"$TMPD/t.log" 2>&1 &
TPID=$!
PIDS="$PIDS $!"
WHO="openresty tycho"
BPORT=""
if [ -n "$BASE" ]; then
  BPORT=$(port)
  sed "s/port = $TPORT/port = $BPORT/" "$TMPD/main.lua" >"$TMPD/base.lua"
  "$BASE/build/bin/tycho" --workers 2 "$TMPD/base.lua" >"$TMPD/b.log" 2>&1 &
  BPID=$!
  PIDS="$PIDS $!"
  WHO="openresty tycho base"
fi

for p in $OPORT $TPORT $BPORT; do
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$p/?what=none" && break; sleep 0.05; done
done
redis-cli -p "$RPORT" set bench value >/dev/null 2>&1 ||
  printf 'SET bench value\r\n' | timeout 2 bash -c "cat > /dev/tcp/127.0.0.1/$RPORT"

echo "# ngx_clients: $(date -u +%FT%TZ) nproc=$(nproc) n=$N uptime:$(uptime)"
for what in dns redis; do
  port=$DPORT; [ $what = redis ] && port=$RPORT
  # warm-up (JIT, pools), not counted
  for p in $OPORT $TPORT $BPORT; do curl -s "http://127.0.0.1:$p/?what=$what&port=$port&n=2000" >/dev/null; done
  for run in $(seq 1 "$RUNS"); do
    for who in $WHO; do
      p=$OPORT; pid=$OPID
      [ $who = tycho ] && p=$TPORT && pid=$TPID
      [ $who = base ] && p=$BPORT && pid=$BPID
      t0=$(ticks "$pid")
      r=$(curl -s --max-time 120 "http://127.0.0.1:$p/?what=$what&port=$port&n=$N")
      t1=$(ticks "$pid")
      us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$N" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
      echo "RESULT $what $who run=$run ${r:-FAILED} q/s cpu_us_per_query=$us" | tee -a "$TMPD/results"
    done
  done
done
echo "# after: uptime:$(uptime)"
awk '$1 == "RESULT" { k = $2 " " $3; v[k, ++n[k]] = $5 + 0; split($7, c, "="); u[k, n[k]] = c[2] + 0 }
  function med(a, k,   i, j, t, x, m) { m = n[k]; for (i = 1; i <= m; i++) x[i] = a[k, i]
    for (i = 2; i <= m; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
    return m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2 }
  END { split("dns redis", ws, " ")
    for (i = 1; i <= 2; i++) { w = ws[i]; o = w " openresty"; t = w " tycho"; b = w " base"
      if (!n[o]) continue
      printf "MEDIAN %s openresty %.0f q/s %.2f us, tycho %.0f q/s %.2f us: ratio %.2f (cpu %.2f)", w,
        med(v, o), med(u, o), med(v, t), med(u, t), med(v, t) / med(v, o), med(u, o) / med(u, t)
      if (n[b]) printf "; base %.0f q/s %.2f us: tycho/base %.2f (cpu %.2f)", med(v, b), med(u, b),
        med(v, t) / med(v, b), med(u, b) / med(u, t)
      printf "\n" } }' "$TMPD/results"
