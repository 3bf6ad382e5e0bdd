#!/usr/bin/env bash
# bench/cluster.sh <workload> [N]: one run of a cluster workload, in the
# RESULT/DETAIL/NOTE format of bench/run.sh.
#   cluster_msgs, cluster_call   bench/lua/cluster.lua on two tycho nodes
#   nats_raw                      build/nats_raw: nats.c alone, publisher
#                                 and subscriber processes (the baseline)
#   nats_raw_rtt                  build/nats_raw: request/reply round trips
#                                 between two processes (the call baseline)
# Starts its own nats-server (JetStream, a free port of 127.0.0.1) and stops
# everything it started by pid. WORKERS as in bench/run.sh.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
WORKERS=${WORKERS:-2}
workload=$1
n=${2:-}

port=$(luajit -e 'local s = require("socket").bind("127.0.0.1", 0)
  local _, p = s:getsockname() print(p)')
dir=$(mktemp -d "${TMPDIR:-/tmp}/tycho-bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
"$NATS_SERVER" -a 127.0.0.1 -p "$port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "Server is ready" "$dir/nats.log" && break; sleep 0.02; done
url=nats://127.0.0.1:$port

case $workload in
  cluster_msgs | cluster_call)
    "$BUILD/bin/tycho" --workers "$WORKERS" --node peer --nats "$url" \
      bench/lua/cluster.lua peer >"$dir/peer.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do grep -q READY "$dir/peer.log" && break; sleep 0.02; done
    "$BUILD/bin/tycho" --workers "$WORKERS" --node drv --nats "$url" \
      bench/lua/cluster.lua "${workload#cluster_}" $n
    ;;
  nats_raw)
    "$BUILD/nats_raw" sub "$url" ${n:-2000000} >"$dir/sub.out" 2>&1 &
    sub=$!
    pids+=($sub)
    for _ in $(seq 200); do grep -q READY "$dir/sub.out" && break; sleep 0.02; done
    "$BUILD/nats_raw" pub "$url" ${n:-2000000} >/dev/null
    wait "$sub"
    grep -v READY "$dir/sub.out"
    ;;
  nats_raw_rtt)
    "$BUILD/nats_raw" echo "$url" >"$dir/echo.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do grep -q READY "$dir/echo.out" && break; sleep 0.02; done
    "$BUILD/nats_raw" rtt "$url" ${n:-20000}
    ;;
  *) echo "bench/cluster.sh: unknown workload $workload" >&2; exit 2 ;;
esac
