#!/usr/bin/env bash
# bench/erlang/dist.sh msgs|call [N]: one run of a cluster workload on Erlang
# distribution (bench/erlang/dist_bench.erl): two BEAM nodes on this machine
# (`erl -sname`, epmd started by the first), `+S 2:2` each as tycho's nodes
# run 2 workers. Prints RESULT/DETAIL/NOTE lines for bench/run.sh. Stops the
# peer node by pid; epmd is left as erl leaves it (it serves every node).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
workload=$1
n=${2:-}
dir=$BUILD/erlang
mkdir -p "$dir"
src=bench/erlang/dist_bench.erl
if [ ! -f "$dir/dist_bench.beam" ] || [ "$src" -nt "$dir/dist_bench.beam" ]; then
  erlc +warn_all -o "$dir" "$src" || exit 2
fi
tag=$$
cookie=tychobench$tag
host=$(hostname -s)
log=$(mktemp "${TMPDIR:-/tmp}/tycho-erl.XXXXXX")
erl +S 2:2 -sname "peer$tag" -setcookie "$cookie" -noshell -pa "$dir" \
  -eval 'dist_bench:peer()' >"$log" 2>&1 &
peer=$!
trap 'kill $peer 2>/dev/null; wait $peer 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do grep -q READY "$log" && break; sleep 0.02; done
case $workload in
  msgs) n=${n:-2000000} ;;
  call) n=${n:-20000} ;;
  *) echo "dist.sh: unknown workload $workload" >&2; exit 2 ;;
esac
erl +S 2:2 -sname "drv$tag" -setcookie "$cookie" -noshell -pa "$dir" \
  -run dist_bench main "$workload" "peer$tag@$host" "$n"
