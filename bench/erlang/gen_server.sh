# bench/erlang/gen_server.sh - sourced by bench/run.sh: the Erlang/OTP
# counterpart of the tycho.server workloads (SERVER_LUA_WORKLOADS), which the
# shared Erlang peer does not have. bench/erlang/gen_server_bench.erl is
# compiled into $BUILD/erlang/ and each workload runs RUNS times, fresh
# `erl +S 2:2` processes, printed as the peer `erlang`:
#   erlang memory_server: <median> bytes/server
#   erlang server_call: <median> roundtrips/s
# Uses run.sh's bench, out, want and in_list.

run_erlang_server() {
    local w todo="" dir=$ROOT/$BUILD/erlang src=$ROOT/bench/erlang/gen_server_bench.erl
    for w in $SERVER_LUA_WORKLOADS; do want "$w" && todo="$todo $w"; done
    [ -n "$todo" ] || return 0
    if ! command -v erl >/dev/null || ! command -v erlc >/dev/null; then
        out "# erlang gen_server: erl not found, skipped (apt-get install erlang-base)"
        return 0
    fi
    mkdir -p "$dir"
    if [ ! -f "$dir/gen_server_bench.beam" ] || [ "$src" -nt "$dir/gen_server_bench.beam" ]; then
        if ! erlc +warn_all -o "$dir" "$src" 2>"$TMPD/erlc.log"; then
            out "# erlang gen_server: erlc failed: $(tail -c 300 "$TMPD/erlc.log" | tr '\n' ' ')"
            return 0
        fi
    fi
    out "# erlang gen_server suite: $(date -u +%FT%TZ) loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)] flags: +S 2:2"
    for w in $todo; do
        bench erlang "$w" erl +S 2:2 -noshell -pa "$dir" -run gen_server_bench main "$w"
    done
}
