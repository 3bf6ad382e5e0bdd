#!/usr/bin/env bash
# bench/ngx_hello.sh - a content handler ngx.say("hello") on tycho.ngx.serve
# beside OpenResty's content_by_lua_block (Debian's nginx + lua-nginx-module,
# unpacked by scripts/fetch-debs.sh as bench/openresty/run.sh does), both
# with 2 workers, wrk -t2 -c64, alternated RUNS times in one sitting.
# Prints one RESULT line per server and run, and the load (uptime) before
# and after. Usage: bench/ngx_hello.sh   (RUNS=3 WRK_DURATION=5s)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
RUNS=${RUNS:-3}
DUR=${WRK_DURATION:-5s}
DEBS=$ROOT/build/debs
TMPD=$(mktemp -d /tmp/ngxhello.XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; sleep 0.2; rm -rf "$TMPD"; }
trap cleanup EXIT

scripts/fetch-debs.sh nginx libnginx-mod-http-ndk libnginx-mod-http-lua libluajit2-5.1-2 \
  lua-resty-core lua-resty-lrucache >/dev/null || { echo "# fetch-debs failed"; exit 1; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# OpenResty: 2 worker processes.
OPORT=$(port)
mkdir -p "$TMPD/o/tmp"; chmod 755 "$TMPD/o"
cat >"$TMPD/o/nginx.conf" <<CONF
load_module $DEBS/libnginx-mod-http-ndk/usr/lib/nginx/modules/ndk_http_module.so;
load_module $DEBS/libnginx-mod-http-lua/usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 2;
daemon off;
master_process on;
pid $TMPD/o/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
  access_log off;
  server_tokens off;
  keepalive_requests 1000000;
  default_type text/plain;
  client_body_temp_path $TMPD/o/tmp; proxy_temp_path $TMPD/o/tmp; fastcgi_temp_path $TMPD/o/tmp;
  uwsgi_temp_path $TMPD/o/tmp; scgi_temp_path $TMPD/o/tmp;
  lua_package_path "$DEBS/lua-resty-core/usr/share/lua/5.1/?.lua;$DEBS/lua-resty-lrucache/usr/share/lua/5.1/?.lua;;";
  server {
    listen 127.0.0.1:$OPORT reuseport backlog=4096;
    location / { content_by_lua_block { ngx.say("hello") } }
  }
}
CONF
LD_LIBRARY_PATH=$DEBS/libluajit2-5.1-2/usr/lib/x86_64-linux-gnu \
  "$DEBS/nginx/usr/sbin/nginx" -p "$TMPD/o" -c "$TMPD/o/nginx.conf" -e stderr \
  >"$TMPD/o/log" 2>&1 &
PIDS="$PIDS $!"

# tycho: the same handler as a content module, 2 workers.
TPORT=$(port)
mkdir -p "$TMPD/t"
echo 'ngx.say("hello")' >"$TMPD/t/hello.lua"
cat >"$TMPD/t/main.lua" <<LUA
package.path = "$TMPD/t/?.lua;" .. package.path


require("tycho.ngx").serve{ port = $TPORT, content = "hello" }
LUA
build/bin/tycho --workers 2 "$TMPD/t/main.lua" >"$TMPD/t/log" 2>&1 &
PIDS="$PIDS $!"

for p in $OPORT $TPORT; do
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.05; done
done
[ "$(curl -s "http://127.0.0.1:$OPORT/")" = hello ] || { echo "# openresty did not answer"; cat "$TMPD/o/log"; exit 1; }
[ "$(curl -s "http://127.0.0.1:$TPORT/")" = hello ] || { echo "# tycho did not answer"; cat "$TMPD/t/log"; exit 1; }

# A warm-up for each (JIT, connections, page cache), not counted.
wrk -t2 -c64 -d1s "http://127.0.0.1:$OPORT/" >/dev/null 2>&1
wrk -t2 -c64 -d1s "http://127.0.0.1:$TPORT/" >/dev/null 2>&1
echo "# ngx_hello: $(date -u +%FT%TZ) nproc=$(nproc) uptime:$(uptime)"
for run in $(seq 1 "$RUNS"); do
  for who in openresty tycho; do
    p=$OPORT; [ $who = tycho ] && p=$TPORT
    wrk -t2 -c64 -d"$DUR" "http://127.0.0.1:$p/" >"$TMPD/wrk.out" 2>&1
    rps=$(awk '/Requests\/sec/ { print $2 }' "$TMPD/wrk.out")
    errs=$(grep -E "Socket errors|Non-2xx" "$TMPD/wrk.out" | tr -s " " | tr "\n" " ")
    echo "RESULT $who run=$run ${rps:-FAILED} req/s ${errs}"
  done
done
echo "# after: uptime:$(uptime)"
