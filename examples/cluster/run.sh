#!/usr/bin/env bash
# examples/cluster/run.sh [calls]: a cluster on this machine. Starts a
# nats-server with JetStream on a free port of 127.0.0.1, the service
# "wordcount" on nodes a and b (two members each), a client on node c that
# calls it, then stops everything it started (by pid).
#
#   examples/cluster/run.sh 1000
#
# Needs nats-server (Debian: nats-server) and a built tree (make).
set -euo pipefail
cd "$(dirname "$0")/../.."
TYCHO=${TYCHO:-build/bin/tycho}
calls=${1:-1000}

port=$(luajit -e 'local s = require("socket").bind("127.0.0.1", 0)
  local _, p = s:getsockname() print(p)' 2>/dev/null || echo 24222)
dir=$(mktemp -d "${TMPDIR:-/tmp}/tycho-cluster.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
"$NATS_SERVER" -a 127.0.0.1 -p "$port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "Server is ready" "$dir/nats.log" && break; sleep 0.05; done
url=nats://127.0.0.1:$port

for node in a b; do
  "$TYCHO" --workers 2 --node "$node" --nats "$url" examples/cluster/service.lua 2 &
  pids+=($!)
done
"$TYCHO" --workers 2 --node c --nats "$url" examples/cluster/client.lua 2 "$calls"
wait "${pids[1]}" "${pids[2]}"
