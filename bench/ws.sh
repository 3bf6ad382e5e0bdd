#!/usr/bin/env bash
# bench/ws.sh - WebSocket and pubsub workloads (BENCH=ws; also run alone:
# bench/ws.sh after make bench), each RUNS times, medians:
#   tycho ws_echo / openresty ws_echo   build/wsload (64 connections, 64-byte
#       text messages, one in flight each, WS_SECONDS s) against
#       bench/lua/ws_echo.lua on WORKERS workers, and against Debian's nginx +
#       lua-nginx-module + lua-nginx-websocket (lua-resty-websocket's server),
#       unpacked under build/debs (scripts/fetch-debs.sh), NGINX_WORKERS=2
#   tycho pubsub_fanout   one publish to 10,000 local subscribers (ms)
#   tycho pubsub_nodes    deliveries/s, node a -> 100 subscribers on node b,
#       over one nats-server
# tokio-tungstenite is not packaged by Debian (bookworm): no Tokio row.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-2}
NGINX_WORKERS=${NGINX_WORKERS:-2}
WS_SECONDS=${WS_SECONDS:-5}
BUILD=${BUILD:-build}
TYCHO=$ROOT/$BUILD/bin/tycho
WSLOAD=$ROOT/$BUILD/wsload
TMPD=$(mktemp -d /tmp/wsbench.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  PIDS=()
}
trap 'cleanup; rm -rf "$TMPD"' EXIT

free_port() { python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
wait_port() {
  local i
  for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# runs <name> <unit> <command...>: RUNS times, the median of the RESULT lines
runs() {
  local name=$1 unit=$2 vals="" i out v
  shift 2
  for i in $(seq 1 "$RUNS"); do
    out=$("$@" 2>"$TMPD/err")
    v=$(awk '$1 == "RESULT" { print $2 }' <<<"$out")
    [ -n "$v" ] || echo "# $name run $i failed: $(tail -c 300 "$TMPD/err" | tr '\n' ' ')"
    vals="$vals $v"
    grep '^DETAIL' <<<"$out" | sed "s/^/# $name run $i: /"
  done
  echo "$name: $(tr ' ' '\n' <<<"$vals" | grep . | median) $unit (runs:$vals)"
}

echo "# ws suite: $(date -u +%FT%TZ) host=$(uname -n) nproc=$(nproc) uptime: $(uptime)"

# ---- tycho echo
port=$(free_port)
"$TYCHO" --workers "$WORKERS" bench/lua/ws_echo.lua "$port" >"$TMPD/tycho.log" 2>&1 &
TYCHO_PID=$!
PIDS+=("$TYCHO_PID")
TPORT=""
if wait_port "$port"; then TPORT=$port
else echo "# tycho ws_echo: the server did not start: $(cat "$TMPD/tycho.log")"; fi

# ---- OpenResty echo (lua-resty-websocket's server), started beside tycho's
OPORT=""
DEBS=${DEBS_DIR:-$ROOT/build/debs}
# shellcheck source=bench/openresty/conf.sh
source "$ROOT/bench/openresty/conf.sh"
if NGX_MORE=lua-nginx-websocket ngx_fetch 2>"$TMPD/fetch.log"; then
  d=$TMPD/nginx
  mkdir -p "$d/tmp" && chmod 755 "$d"
  port=$(free_port)
  { ngx_conf_head "$d" "$NGINX_WORKERS" 1024 "$DEBS/lua-nginx-websocket/usr/share/lua/5.1/?.lua"
    cat <<CONF
  server {
    listen 127.0.0.1:$port reuseport backlog=4096;
    location = /ws {
      content_by_lua_block {
        local server = require "nginx.websocket.server"
        local wb = server:new{ timeout = 60000, max_payload_len = 65535 }
        if not wb then return ngx.exit(444) end
        while true do
          local data, typ, err = wb:recv_frame()
          if not data and not (err and err:find("timeout", 1, true)) then return end
          if typ == "close" then wb:send_close() return
          elseif typ == "ping" then wb:send_pong(data)
          elseif typ == "text" then wb:send_text(data)
          elseif typ == "binary" then wb:send_binary(data) end
        end
      }
    }
  }
}
CONF
  } >"$d/nginx.conf"
  ngx_start "$d" "$d/srv.log" &
  PIDS+=($!)
  NGINX_MASTER=$!
  if wait_port "$port"; then
    OPORT=$port
    NGINX_PIDS="$NGINX_MASTER $(pgrep -P "$NGINX_MASTER" | tr '\n' ' ')"
  else echo "# openresty ws_echo: nginx did not start: $(tail -5 "$d/srv.log")"; fi
else
  echo "# openresty ws_echo: fetching the .debs failed: $(tail -3 "$TMPD/fetch.log")"
fi

# The two echo servers idle side by side; their runs alternate (tycho,
# OpenResty, tycho, ...) so that both see the same moments of a shared
# machine.
T_VALS="" O_VALS="" T_CPU="" O_CPU=""
# cpu_ticks pid...: utime + stime of the processes and their children threads
cpu_ticks() {
  local p t=0 v
  for p in "$@"; do
    v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null) || v=0
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
# load <port> <pids...>: one wsload run; prints "<msg/s> <server CPU us per message>"
# (the CPU per message holds up better than the rate on a shared machine)
load() {
  local port=$1 out c0 c1
  shift
  c0=$(cpu_ticks "$@")
  out=$("$WSLOAD" "$port" /ws 64 64 "$WS_SECONDS")
  c1=$(cpu_ticks "$@")
  awk -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" '
    $1 == "RESULT" { r = $2 }
    $1 == "DETAIL" { for (i = 2; i <= NF; i++) if ($i ~ /^total=/) { split($i, kv, "="); n = kv[2] } }
    END { printf "%s %.2f\n", r, n ? c / hz * 1e6 / n : 0 }' <<<"$out"
}
# one discarded run each first: JIT traces, actors and nginx workers warm
[ -n "$TPORT" ] && "$WSLOAD" "$TPORT" /ws 64 64 2 >/dev/null
[ -n "$OPORT" ] && "$WSLOAD" "$OPORT" /ws 64 64 2 >/dev/null
for i in $(seq 1 "$RUNS"); do
  if [ -n "$TPORT" ]; then
    read -r v c <<<"$(load "$TPORT" "$TYCHO_PID")"
    T_VALS="$T_VALS $v" T_CPU="$T_CPU $c"
  fi
  if [ -n "$OPORT" ]; then
    read -r v c <<<"$(load "$OPORT" $NGINX_PIDS)"
    O_VALS="$O_VALS $v" O_CPU="$O_CPU $c"
  fi
done
cleanup
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
if [ -n "$TPORT" ]; then
  echo "tycho ws_echo: $(med "$T_VALS") msg/s (runs:$T_VALS)"
  echo "# tycho ws_echo server CPU per message: $(med "$T_CPU") us (runs:$T_CPU)"
fi
if [ -n "$OPORT" ]; then
  echo "openresty ws_echo: $(med "$O_VALS") msg/s (runs:$O_VALS)"
  echo "# openresty ws_echo server CPU per message: $(med "$O_CPU") us (runs:$O_CPU)"
fi

# ---- pubsub
runs "tycho pubsub_fanout" ms "$TYCHO" --workers "$WORKERS" bench/lua/pubsub_fanout.lua 10000

NATS=$(command -v nats-server || echo /usr/sbin/nats-server)
if [ -x "$NATS" ]; then
  nodes_run() {
    local port js b
    port=$(free_port)
    js=$TMPD/js.$RANDOM
    "$NATS" -a 127.0.0.1 -p "$port" -js -sd "$js" >"$TMPD/nats.log" 2>&1 &
    PIDS+=($!)
    wait_port "$port" || return 1
    "$TYCHO" --workers "$WORKERS" --node b --nats "nats://127.0.0.1:$port" \
      bench/lua/pubsub_nodes.lua sub 100 5000 >"$TMPD/b.log" 2>&1 &
    b=$!
    PIDS+=("$b")
    for _ in $(seq 1 150); do grep -q READY "$TMPD/b.log" && break; sleep 0.1; done
    timeout 120 "$TYCHO" --workers "$WORKERS" --node a --nats "nats://127.0.0.1:$port" \
      bench/lua/pubsub_nodes.lua pub 100 5000
    cleanup
  }
  runs "tycho pubsub_nodes" deliveries/s nodes_run
else
  echo "# tycho pubsub_nodes: nats-server missing (make deps), skipped"
fi
echo "# ws suite done: $(uptime)"
