#!/usr/bin/env bash
# bench/web.sh - the `web` workload (BENCH=web bench/run.sh, or alone):
#   router   wrk -c64 on "/" of a tycho.web router with 50 routes, against
#            the bare handler (bench/lua/web_server.lua) in the same sitting
#   static   wrk -c64 on a 1 MiB file: app:static against nginx's own static
#            serving (Debian's nginx binary unpacked under build/debs by
#            scripts/fetch-debs.sh; sendfile on, as many workers as tycho's)
# RUNS runs each (median), D seconds per run, WORKERS workers. Prints
# "web <row>: <median> req/s (runs: ...)" lines and the ratios.
set -u
cd "$(dirname "$0")/.." || exit 1
RUNS=${RUNS:-3}
D=${D:-10}
WORKERS=${WORKERS:-2}
TYCHO=${TYCHO:-build/bin/tycho}
TMPD=$(mktemp -d /tmp/tychoweb.XXXXXX)
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; rm -rf "$TMPD"; }
trap cleanup EXIT

head -c 1048576 /dev/urandom > "$TMPD/big.bin"
# nginx's workers (as root: user nobody) read it too.
chmod 755 "$TMPD"
chmod 644 "$TMPD/big.bin"

# start_tycho <mode> -> sets PORT
start_tycho() {
  "$TYCHO" --workers "$WORKERS" bench/lua/web_server.lua "$1" 0 "$TMPD" > "$TMPD/$1.out" 2>&1 &
  local pid=$!
  PIDS="$PIDS $pid"
  for _ in $(seq 1 200); do
    PORT=$(awk '/^LISTENING/ {print $2}' "$TMPD/$1.out")
    [ -n "$PORT" ] && break
    sleep 0.05
  done
  SERVER_PID=$pid
}

# Requests/s of wrk against $1; nothing when any answer was not a 2xx (a
# server that is not the one we meant).
rps() {
  wrk -t2 -c64 -d"${D}s" "$1" | awk '/Non-2xx/ {bad = 1} /^Requests\/sec/ {r = $2}
    END { if (!bad) printf "%d", r }'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A R
run_row() { # run_row <row> <url>
  local v; v=$(rps "$2"); R[$1]="${R[$1]:-} $v"
}

start_tycho bare; BARE=$PORT; BARE_PID=$SERVER_PID
start_tycho router; ROUTER=$PORT
start_tycho static; STATIC=$PORT

NGINX=$(scripts/fetch-debs.sh nginx 2>/dev/null | head -1)/usr/sbin/nginx
NG_PORT=""
if [ -x "$NGINX" ]; then
  mkdir -p "$TMPD/ng/tmp" "$TMPD/ng/logs"
  NG_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat > "$TMPD/ng/nginx.conf" <<CONF
daemon off;
worker_processes $WORKERS;
pid $TMPD/ng/nginx.pid;
error_log $TMPD/ng/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path $TMPD/ng/tmp;
  proxy_temp_path $TMPD/ng/tmp;
  fastcgi_temp_path $TMPD/ng/tmp;
  uwsgi_temp_path $TMPD/ng/tmp;
  scgi_temp_path $TMPD/ng/tmp;
  server {
    listen 127.0.0.1:$NG_PORT;
    location /s/ { alias $TMPD/; }
  }
}
CONF
  "$NGINX" -p "$TMPD/ng" -c "$TMPD/ng/nginx.conf" 2>"$TMPD/ng/start.err" &
  PIDS="$PIDS $!"
  for _ in $(seq 1 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NG_PORT/s/big.bin")
    [ "$code" = 200 ] && break
    sleep 0.1
  done
  if [ "$code" != 200 ]; then echo "# nginx did not start: $(cat "$TMPD/ng/start.err")"; NG_PORT=""; fi
fi
for p in "$BARE/" "$ROUTER/" "$STATIC/s/big.bin"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p")
  [ "$code" = 200 ] || { echo "# http://127.0.0.1:$p answers $code"; exit 1; }
done

echo "# web: $(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores, load: $(uptime | sed 's/.*load average: //')"
# The rows alternate run by run, so a change of load hits each alike.
for _ in $(seq 1 "$RUNS"); do
  run_row bare "http://127.0.0.1:$BARE/"
  run_row router "http://127.0.0.1:$ROUTER/"
  run_row static "http://127.0.0.1:$STATIC/s/big.bin"
  [ -n "$NG_PORT" ] && run_row nginx_static "http://127.0.0.1:$NG_PORT/s/big.bin"
done
for row in bare router static nginx_static; do
  [ -n "${R[$row]:-}" ] || continue

  echo "web $row: $(echo "${R[$row]}" | median) req/s (runs:${R[$row]})"
done
b=$(echo "${R[bare]}" | median); r=$(echo "${R[router]}" | median)
awk -v r="$r" -v b="$b" 'BEGIN { printf "web router/bare: %.3f\n", r / b }'
if [ -n "${R[nginx_static]:-}" ]; then
  s=$(echo "${R[static]}" | median); n=$(echo "${R[nginx_static]}" | median)
  awk -v s="$s" -v n="$n" 'BEGIN { printf "web static/nginx: %.3f\n", s / n }'
fi
echo "# load after: $(uptime | sed 's/.*load average: //')"
